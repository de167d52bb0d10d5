"""The cloud path: a plan's groups as nodes of one elastic job, the policy's decisions carried
out through a provider, and the SkyPilot tasks and calls (validated by SkyPilot's own schema).

The controller runs for real here with two providers: :class:`LocalProvider` (nodes are worker
processes) and :class:`SkyPilotProvider` over a stand-in for the ``sky`` module that runs each
task's own ``run`` script with its ``envs`` on this machine, so the task YAML spottrain writes is
what the workers execute.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime_pace import Pace
from spottrain.errors import InputError
from spottrain.plan_file import Plan, PlanGroup, PlanPrediction, PlanWorkload
from spottrain.runtime.cloud import (LOST, RUNNING, STARTING, SUCCEEDED, LocalProvider, NodeGroup, check_launchable,
                                     check_reachable, groups_from_plan)
from spottrain.runtime.cloud_sky import RecordingSky, SkyPilotProvider
from spottrain.runtime.fleet import FleetController, FleetJob
from spottrain.runtime.sky_job import SkyJob, dry_run
from spottrain.runtime.skypilot import SpottrainInstall

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]
MLP = [sys.executable, "-m", "spottrain.runtime.examples", "mlp"]


def _group(**kw: Any) -> PlanGroup:
    base = dict(cloud="aws", instance_type="p3.2xlarge", gpu="V100", gpus_per_node=1, count=2, spot=True,
                region="us-east-1", zone="use1-az1", price_usd_per_hour=0.918, on_demand_price_usd_per_hour=3.06,
                network_gbps=10.0)
    base.update(kw)
    return PlanGroup(**base)


def _plan(*groups: PlanGroup, policy: str = "replace-same", deadline_s: float | None = None) -> Plan:
    pred = PlanPrediction(throughput_samples_per_s=1000, throughput_low=900, throughput_high=1100, duration_s=3600,
                          duration_p95_s=4000, cost_usd=4.0, cost_p95_usd=5.0, p_meet_deadline=0.97,
                          bottleneck="compute", expected_revocations=0.3)
    work = PlanWorkload(model="resnet50", batch_size=64, samples_total=1e6, flops_per_sample=1.2e10,
                        param_count=25_000_000, gradient_bytes=1e8)
    return Plan(workload=work, groups=groups or (_group(),), ps=0, sync="sync", prediction=pred,
                checkpoint_interval_s=900.0, policy=policy, deadline_s=deadline_s)


MIXED = (_group(count=2),
         _group(cloud="gcp", instance_type="g2-standard-12", gpu="L4", count=1, spot=False, region="us-central1",
                zone="us-central1-a", price_usd_per_hour=1.00042, on_demand_price_usd_per_hour=1.00042))


def _sky_validate(config: dict) -> None:
    schemas = pytest.importorskip("sky.utils.schemas")
    from sky.utils import common_utils

    common_utils.validate_schema(config, schemas.get_task_schema(), "Invalid task YAML: ")
    common_utils.validate_schema(config["resources"], schemas.get_resources_schema(), "Invalid resources YAML: ")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


# ---------------------------------------------------------------------------- dry run and task YAMLs
def test_dry_run_prints_one_launch_per_planned_node_with_valid_tasks(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    _plan(*MIXED, policy="deadline-margin", deadline_s=8 * 3600).save(plan_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    out = _cli("--backend", "skypilot", "--plan", str(plan_path), "--dry-run", "--json", "--job-id", "job1",
               "--controller", "203.0.113.7:29400", "--", "python", "train.py", "--lr", "0.1", "; rm -rf /",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    tasks = result["tasks"]
    # one one-node cluster per planned node, each group with its own market
    assert sorted(tasks) == ["job1-g0-n0", "job1-g0-n1", "job1-g1-n0"]
    assert [c.split("cluster_name=")[1].split(",")[0].strip("'") for c in result["calls"]] == sorted(tasks)
    assert all(c.startswith("sky.launch(") and "down=True" in c for c in result["calls"])
    for name, config in tasks.items():
        _sky_validate(config)
        assert config["num_nodes"] == 1 and config["name"] == name
        assert config["workdir"] == str(tmp_path)  # the user's code goes with the task
        assert config["envs"]["SPOTTRAIN_RDZV"] == "203.0.113.7:29400"
        assert config["envs"]["SPOTTRAIN_WORKER_ID"] == name.removeprefix("job1-")
        wheel_mounts = [k for k in config["file_mounts"] if k.endswith(".whl")]
        assert len(wheel_mounts) == 1 and wheel_mounts[0] in config["setup"]
        assert "pip install spottrain" not in config["setup"]  # no such package on the index
        user_line = config["run"].splitlines()[-1]
        assert shlex.split(user_line) == ["python", "train.py", "--lr", "0.1", "; rm -rf /"]
    spot, on_demand = tasks["job1-g0-n0"]["resources"], tasks["job1-g1-n0"]["resources"]
    assert spot["use_spot"] is True and spot["instance_type"] == "p3.2xlarge" and spot["region"] == "us-east-1"
    assert "zone" not in spot  # an AWS zone ID is not a SkyPilot zone name: the region is kept
    assert on_demand == {"use_spot": False, "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a",
                         "instance_type": "g2-standard-12", "accelerators": "L4:1"}
    assert result["validated_by"] is None or result["validated_by"].startswith("0.")
    # it says what it assumes: conda on the image, where spottrain and the code come from
    assert "conda" in result["assumes"] and "built from this checkout" in result["assumes"]
    assert str(tmp_path) in result["assumes"]
    text = _cli("--backend", "skypilot", "--plan", str(plan_path), "--dry-run", "--job-id", "job1", "--",
                "python", "train.py", cwd=tmp_path).stdout
    assert "sky.get(sky.launch(task, cluster_name='job1-g1-n0', down=True))" in text
    assert "placeholder: pass --controller" in text and "# ---- job1-g0-n1.yaml" in text


def test_managed_torchrun_fallback_carries_code_and_installs_from_a_wheel(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    _plan().save(plan_path)
    wheel = tmp_path / "spottrain-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")  # only its name and path go into the YAML
    out = _cli("--backend", "skypilot", "--skypilot-mode", "managed-torchrun", "--plan", str(plan_path), "-o",
               str(tmp_path / "t.yaml"), "--spottrain-wheel", str(wheel), "--json", "--", "python", "train.py",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load((tmp_path / "t.yaml").read_text())
    _sky_validate(config)
    assert config["workdir"] == str(tmp_path)
    assert config["file_mounts"] == {"/spottrain-dist/spottrain-0.1.0-py3-none-any.whl": str(wheel)}
    assert "torchrun" in config["run"] and "conda activate spottrain" in config["run"]
    assert str(wheel) in json.loads(out.stdout)["assumes"]
    src = _cli("--backend", "skypilot", "--skypilot-mode", "managed-torchrun", "--plan", str(plan_path), "-o",
               str(tmp_path / "s.yaml"), "--spottrain-source", "git+https://example.org/spottrain@0123abc", "--json",
               "--example", "mlp", cwd=tmp_path)
    assert src.returncode == 0, src.stderr
    config = yaml.safe_load((tmp_path / "s.yaml").read_text())
    _sky_validate(config)
    assert "workdir" not in config and "file_mounts" not in config  # an example needs no user code
    assert "spottrain[torch] @ git+https://example.org/spottrain@0123abc" in config["setup"]


# ---------------------------------------------------------------------------- bad input, before any node
@pytest.mark.parametrize("group, message, named, mode", [
    (_group(cloud="awz"), "did you mean aws", "awz", "elastic"),
    (_group(instance_type="p3.2xlarg"), "did you mean p3.2xlarge", "p3.2xlarg", "managed-torchrun"),
    (_group(zone="use1-az9"), "zone 'use1-az9' has no p3.2xlarge", "use1-az9", "managed-torchrun"),
    (_group(region="mars-east-1", zone=None), "not offered in region 'mars-east-1'", "mars-east-1", "elastic"),
])
def test_unlaunchable_plan_is_refused_in_one_line(group: PlanGroup, message: str, named: str, mode: str,
                                                  tmp_path: Path) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_launchable(groups_from_plan(_plan(group)))
    plan_path = tmp_path / "plan.json"
    _plan(group).save(plan_path)
    # through the command line, each mode on two kinds of unlaunchable group
    out = _cli("--backend", "skypilot", "--skypilot-mode", mode, "--plan", str(plan_path), "--dry-run"
               if mode == "elastic" else "--json", "--example", "mlp", cwd=tmp_path)
    # (the plan file's own catalog check may refuse it first, with its wording)
    assert out.returncode == 2 and named in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.yaml"))


def test_unreachable_controller_is_refused_before_any_launch(tmp_path: Path) -> None:
    wheel = tmp_path / "spottrain-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    api = RecordingSky()
    job = SkyJob(plan=_plan(), job_id="job1", command=["python", "train.py"], env={}, policy="replace-same",
                 controller="127.0.0.1:29431", controller_port=29433, install=SpottrainInstall(wheel=str(wheel)))
    from spottrain.runtime import sky_job

    with pytest.raises(InputError, match="controller address 127.0.0.1:29431 cannot be reached"):
        sky_job.run(job, api=api)
    assert api.calls == []  # nothing launched, nothing to tear down
    with pytest.raises(InputError, match="HOST:PORT"):
        check_reachable("no-port-here")
    out = _cli("--backend", "skypilot", "--plan", str(_save(_plan(), tmp_path)), "--controller", "127.0.0.1:29432",
               "--controller-port", "29434", "--spottrain-wheel", str(wheel), "--example", "mlp", cwd=tmp_path)
    assert out.returncode == 2 and "cannot be reached" in out.stderr and "Traceback" not in out.stderr


def _save(plan: Plan, tmp: Path) -> Path:
    path = tmp / "plan.json"
    plan.save(path, overwrite=True)
    return path


def test_multi_gpu_nodes_point_to_the_fallback(tmp_path: Path) -> None:
    plan = _plan(_group(instance_type="p3.8xlarge", gpus_per_node=4, zone=None))
    with pytest.raises(InputError, match="managed-torchrun"):
        dry_run(SkyJob(plan=plan, job_id="j", command=["python", "t.py"], env={}, policy="replace-same"))


# ---------------------------------------------------------------------------- the controller, end to end
def _groups(spot: int = 2, on_demand: int = 1) -> tuple[NodeGroup, ...]:
    return (NodeGroup(name="g0", cloud="aws", instance_type="p3.2xlarge", gpu="V100", gpus_per_node=1, spot=True,
                      region="us-east-1", zone=None, price_usd_per_hour=0.9, on_demand_price_usd_per_hour=3.06,
                      count=spot),
            NodeGroup(name="g1", cloud="aws", instance_type="g4dn.xlarge", gpu="T4", gpus_per_node=1, spot=False,
                      region="us-east-1", zone=None, price_usd_per_hour=0.53, on_demand_price_usd_per_hour=0.53,
                      count=on_demand))


def _env(tmp: Path, steps: int, pace: Pace | None = None) -> dict[str, str]:
    env = {"SPOTTRAIN_STEPS": str(steps), "SPOTTRAIN_CHECKPOINT_DIR": str(tmp / "ck"),
           "SPOTTRAIN_CHECKPOINT_EVERY_STEPS": "10", "SPOTTRAIN_EXAMPLE_SLEEP_S": "0.1"}
    return {**env, **pace.env} if pace is not None else env


HOLD_AT_STEP = 30
"""The step after which a test's workers wait (:class:`Pace`'s ``hold_at_step``) for the event it
checks: a node joining, after the fault injected at step 10 and the survivors' recovery. Slow
steps alone (0.1 s each, ~19 s after the fault) were a bet that a new node starts (Python and
torch imports, several times longer on a loaded machine) and joins before the job's last step."""


def _when_step(ctl: FleetController, step: int, action: Any) -> threading.Thread:
    def go() -> None:
        while True:
            time.sleep(0.1)
            try:
                if ctl.formed and ctl.progress() >= step:
                    break
            except Exception:  # noqa: BLE001 - the store is not up yet
                pass
        action()

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_a_revoked_spot_node_is_replaced_on_its_own_market_and_the_job_completes(tmp_path: Path) -> None:
    provider = LocalProvider(command=MLP, run_dir=tmp_path)
    pace = Pace(tmp_path, hold_at_step=HOLD_AT_STEP)
    job = FleetJob(groups=_groups(), job_id="j1", steps=200, env=_env(tmp_path, 200, pace), policy="replace-same",
                   replacement_delay_s=0.5, tick_s=3600, timeout_s=240)
    ctl = FleetController(job, provider, on_event=pace.fast_after("joined"))
    _when_step(ctl, 10, lambda: provider.revoke("g0-n1", "kill"))
    result = ctl.run()
    assert result.ok and result.steps_done == 200, (result.failure, result.events[-5:])
    revoked = [d for d in result.decisions if d["event"] == "revoked"]
    assert len(revoked) == 1 and revoked[0]["subject"] == "g0-n1"
    assert revoked[0]["request"] == ["p3.2xlarge:spot"]
    # the replacement is a node of the revoked node's group (same market), and it joined the job
    assert [n for n, _ in provider.launched] == ["g0-n0", "g0-n1", "g1-n0", "g0-n2"]
    members = [e["members"] for e in result.events if e["kind"] == "membership"]
    assert members[0] == ["g0-n0", "g0-n1", "g1-n0"] and "g0-n2" in members[-1] and "g0-n1" not in members[-1]
    assert all(provider.nodes[n].proc.poll() is not None for n in provider.nodes)  # no process left
    # The chief's window reports came back through the controller's store (the nodes' event files
    # stay on the nodes on a cloud), through the revocation and the re-formations.
    steps = [r["step"] for r in result.reports]
    assert steps[-1] == 200 and len(set(steps)) >= 15 and all(s % 10 == 0 for s in steps)
    assert {r["world"] for r in result.reports} >= {2, 3} and all(r["loss"] >= 0 for r in result.reports)
    from spottrain.runtime.record import RunSetup, record_fleet_run
    from spottrain.store import Store

    path = record_fleet_run("j1", result, plan=None, setup=RunSetup(model="example-mlp", global_batch_size=64,
                                                                    gpu="cpu"), store_path=str(tmp_path / "s.db"))
    with Store(path) as store:
        assert store.get_run("j1").status == "completed"
        points = store.loss_points(run_id="j1")
        rows = store.measurements(run_id="j1")
    assert [p["step"] for p in points] == sorted(set(steps))
    assert {r["workers"] for r in rows} <= {2, 3} and rows and all(r["cluster"] == f"{r['workers']}xcpu" for r in rows)
    # every forward pass sleeps 0.1 s (the pace): no steady step is shorter
    # per world size: the median step time of its windows, each generation's first window left out
    for row in rows:
        gens = sorted({r["gen"] for r in result.reports if r["world"] == row["workers"]})
        windows = [r["window_s"] / r["window_steps"] for g in gens
                   for r in [x for x in result.reports if x["gen"] == g][1:]]
        import statistics

        kept = [w for w in windows if w <= 3.0 * statistics.median(windows)]  # a stall is not a step
        assert row["step_time_s"] == pytest.approx(statistics.median(kept))
        assert row["throughput"] == pytest.approx(64 / row["step_time_s"])


def test_a_node_released_before_the_last_step_is_given_back_when_it_leaves_after_it() -> None:
    """The release reaches a spot node at a step boundary; under load the job's last step can come
    first. The node then leaves after the job finished: it is still terminated, as asked, not left
    running until the controller shuts down."""
    from spottrain.runtime.fleet import _Node

    class Recording:
        def __init__(self) -> None:
            self.terminated: list[str] = []

        def terminate(self, node_id: str) -> None:
            self.terminated.append(node_id)

    provider = Recording()
    job = FleetJob(groups=_groups(spot=2, on_demand=0), job_id="j", steps=10, env={}, policy="deadline-margin")
    ctl = FleetController(job, provider)  # type: ignore[arg-type]
    released = _Node(node_id="g0-n1", group=job.groups[0], slot=1, ready=True, released=True)
    kept = _Node(node_id="g0-n0", group=job.groups[0], slot=0, ready=True)
    ctl.nodes = {n.node_id: n for n in (kept, released)}
    ctl.finished = True
    ctl._lost(released, "left")
    ctl._lost(kept, "left")  # a member that finished and left is not the controller's to terminate
    assert provider.terminated == ["g0-n1"]
    assert released.gone and kept.gone


def test_deadline_policy_switches_to_on_demand_without_losing_the_state(tmp_path: Path) -> None:
    """deadline-margin with a deadline the spot nodes cannot meet: at a tick (once a step rate
    is measured) it asks for the on-demand fallback and releases the spot nodes; the release
    waits until an on-demand node has joined, so the state passes from memory to memory."""
    provider = LocalProvider(command=MLP, run_dir=tmp_path)
    # Slow steps until the spot nodes have left (the switch and the hand-over are done), then full
    # speed. The slow steps alone are a bet that an on-demand node starts (Python and torch
    # imports, several times longer on a loaded machine) and joins before the last step; if not,
    # nothing is handed over. So after step HOLD_AT_STEP the workers wait for the first on-demand
    # node to join; then slow steps again, not a hold: the release comes two steps after the join
    # and the spot nodes leave at a step boundary.
    pace = Pace(tmp_path, hold_at_step=HOLD_AT_STEP)
    job = FleetJob(groups=_groups(spot=2, on_demand=0), job_id="j2", steps=200, env=_env(tmp_path, 200, pace),
                   policy="deadline-margin", deadline_s=6.0, replacement_delay_s=0.5, restart_overhead_s=0.5,
                   tick_s=1.0, timeout_s=240)

    def unhold(kind: str, data: dict[str, Any]) -> None:
        if kind == "joined":
            pace.unhold()

    result = FleetController(job, provider, on_event=pace.fast_after("release", then=unhold)).run()
    assert result.ok and result.steps_done == 200, (result.failure, result.events[-5:])
    switch = [d for d in result.decisions if d["switch_to_on_demand"]]
    assert len(switch) == 1 and sorted(switch[0]["release"]) == ["g0-n0", "g0-n1"]
    assert switch[0]["request"] == ["p3.2xlarge:on-demand", "p3.2xlarge:on-demand"]
    on_demand = [n for n, label in provider.launched if "on-demand" in label]
    assert len(on_demand) == 2
    assert sorted(provider.terminated) == ["g0-n0", "g0-n1"]
    kinds = [e["kind"] for e in result.events]
    assert kinds.index("release_held") < kinds.index("joined") < kinds.index("release")
    release = next(e for e in result.events if e["kind"] == "release")
    assert sorted(release["graceful"]) == ["g0-n0", "g0-n1"]  # they left at a step boundary, as asked
    from spottrain.runtime.summary import read_worker_events

    first_gen = {}
    for e in read_worker_events(tmp_path):
        if e.get("kind") == "gen" and e.get("wid") in on_demand:
            first_gen.setdefault(e["wid"], e)
    # the on-demand nodes got the state from a live peer, not from a checkpoint
    assert first_gen and all(e["source"] in ("peer", "memory") for e in first_gen.values()), first_gen
    gens = [e for e in result.events if e["kind"] == "membership"]
    # never an empty generation: the spot nodes leave in the generation the on-demand node joins
    assert all(g["world"] >= 1 for g in gens)
    assert set(gens[-1]["members"]) <= set(on_demand)
    # no step was lost: the steps after the switch continue from the survivors' state, not a checkpoint
    assert not any(e["kind"] == "lost" and e["how"] == "lost" for e in result.events)


class FakeSky:
    """The part of SkyPilot's Python API the provider uses, on this machine: ``launch`` runs the
    task's ``run`` script with its ``envs`` (``conda`` is a no-op, ``python`` is this
    interpreter), ``down`` kills it, ``status`` / ``job_status`` report what is running."""

    class StatusRefreshMode:
        AUTO = "AUTO"

    class Task:
        def __init__(self, config: dict[str, Any]) -> None:
            self.config = config

        @classmethod
        def from_yaml_config(cls, config: dict[str, Any]) -> "FakeSky.Task":
            return cls(config)

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        (tmp / "bin").mkdir()
        (tmp / "bin" / "python").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
        (tmp / "bin" / "python").chmod(0o755)

    def get(self, value: Any) -> Any:
        return value

    def launch(self, task: "FakeSky.Task", *, cluster_name: str, down: bool) -> tuple[int, None]:
        assert down is True
        _sky_validate(task.config)
        self.calls.append(("launch", cluster_name))
        shim = self.tmp / "bin"
        env = {**os.environ, **task.config["envs"], "PATH": f"{shim}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}
        script = "conda() { :; }\n" + task.config["run"]
        log = open(self.tmp / f"{cluster_name}.log", "ab")
        with self.lock:
            self.procs[cluster_name] = subprocess.Popen(["bash", "-c", script], env=env, stdout=log,
                                                        stderr=subprocess.STDOUT, start_new_session=True,
                                                        cwd=task.config.get("workdir") or self.tmp)
        return 1, None

    def down(self, cluster: str) -> str:
        self.calls.append(("down", cluster))
        with self.lock:
            proc = self.procs.pop(cluster, None)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return cluster

    def status(self, *, cluster_names: list[str], refresh: str) -> list[dict[str, str]]:
        with self.lock:
            return [{"name": c, "status": "ClusterStatus.UP"} for c in cluster_names if c in self.procs]

    def job_status(self, cluster: str, jobs: list[int]) -> dict[int, str]:
        with self.lock:
            proc = self.procs.get(cluster)
        code = None if proc is None else proc.poll()
        return {jobs[0]: "JobStatus.RUNNING" if code is None else
                ("JobStatus.SUCCEEDED" if code == 0 else "JobStatus.FAILED")}

    def preempt(self, cluster: str) -> None:
        """What a cloud does to a spot VM: everything on it is gone, the cluster with it."""
        with self.lock:
            proc = self.procs.pop(cluster)
        os.killpg(proc.pid, signal.SIGKILL)


def test_skypilot_provider_runs_the_generated_tasks_and_replaces_a_preempted_cluster(tmp_path: Path) -> None:
    plan = _plan(*MIXED)
    api = FakeSky(tmp_path)
    wheel = tmp_path / "spottrain-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    pace = Pace(tmp_path, hold_at_step=HOLD_AT_STEP)
    sky_job = SkyJob(plan=plan, job_id="job9", command=["python", "-m", "spottrain.runtime.examples", "mlp"],
                     env=_env(tmp_path, 200, pace), policy="replace-same", steps=200, install=SpottrainInstall(wheel=str(wheel)))
    groups = sky_job.groups()
    provider = SkyPilotProvider(job_id="job9", task_for=sky_job.task_for, api=api, status_every_s=0.2)
    job = FleetJob(groups=groups, job_id="job9", steps=200, env=dict(sky_job.env), policy="replace-same",
                   replacement_delay_s=0.5, tick_s=3600, timeout_s=240)
    ctl = FleetController(job, provider, on_event=pace.fast_after("joined"))
    _when_step(ctl, 10, lambda: api.preempt("job9-g0-n0"))
    result = ctl.run()
    assert result.ok and result.steps_done == 200, (result.failure, result.events[-6:])
    launched = [c for kind, c in api.calls if kind == "launch"]
    assert launched == ["job9-g0-n0", "job9-g0-n1", "job9-g1-n0", "job9-g0-n2"] or \
        sorted(launched[:3]) == ["job9-g0-n0", "job9-g0-n1", "job9-g1-n0"] and launched[3] == "job9-g0-n2"
    revoked = [d for d in result.decisions if d["event"] == "revoked"]
    assert [d["subject"] for d in revoked] == ["g0-n0"] and revoked[0]["request"] == ["p3.2xlarge:spot"]
    # every cluster is given back at the end (the preempted one is gone already)
    downed = {c for kind, c in api.calls if kind == "down"}
    assert downed >= {"job9-g0-n1", "job9-g1-n0", "job9-g0-n2"}
    assert not any(p.poll() is None for p in api.procs.values())
    assert provider.poll()["g0-n0"] == LOST


def test_nodes_on_namespace_hosts_a_silent_node_is_declared_lost_and_replaced(tmp_path: Path) -> None:
    """Each node on a host of its own (a network namespace on a bridge); one spot node's link goes
    down (no FIN, no RST: what a vanished VM looks like). Its heartbeats stop, the controller
    declares it lost, terminates it, and the replacement joins on a new host."""
    from spottrain.runtime import netns

    ok, why = netns.available()
    if not ok:
        pytest.skip(why)
    with netns.Network() as net:
        provider = LocalProvider(command=MLP, run_dir=tmp_path, host_for=lambda node_id: net.add_host())
        pace = Pace(tmp_path, hold_at_step=HOLD_AT_STEP)
        job = FleetJob(groups=_groups(spot=2, on_demand=1), job_id="j3", steps=200, env=_env(tmp_path, 200, pace),
                       policy="replace-same", store_bind="0.0.0.0:0", advertise=f"{net.address}:0",
                       replacement_delay_s=0.5, tick_s=3600, timeout_s=240)
        ctl = FleetController(job, provider, on_event=pace.fast_after("joined"))
        _when_step(ctl, 10, lambda: net.link_down(provider.hosts["g0-n1"]))
        result = ctl.run()
        hosts = {n: h.address for n, h in provider.hosts.items()}
    assert result.ok and result.steps_done == 200, (result.failure, result.events[-6:])
    lost = [e for e in result.events if e["kind"] == "lost"]
    assert [e["node"] for e in lost] == ["g0-n1"] and lost[0]["how"].startswith("silent")
    revoked = [d for d in result.decisions if d["event"] == "revoked"]
    assert [d["subject"] for d in revoked] == ["g0-n1"] and revoked[0]["request"] == ["p3.2xlarge:spot"]
    assert "g0-n1" in provider.terminated  # the controller gave the silent node's machine back
    assert len(set(hosts.values())) == 4  # four nodes, four hosts
    joined = [e["node"] for e in result.events if e["kind"] == "joined"]
    assert joined == ["g0-n2"]


def test_a_controller_that_stops_early_lets_the_workers_checkpoint_and_exit(tmp_path: Path) -> None:
    """The controller gives up (here: its timeout, reached once training is under way; likewise
    Ctrl-C or SIGTERM): it tells every worker to stop, rank 0 writes a checkpoint, every worker
    exits by itself, then every node is given back. No process is left."""
    from spottrain.runtime.elastic import EXIT_STOPPED

    provider = LocalProvider(command=MLP, run_dir=tmp_path)
    job = FleetJob(groups=_groups(spot=2, on_demand=0), job_id="j4", steps=5000, env=_env(tmp_path, 5000),
                   policy="replace-same", tick_s=3600, timeout_s=240, join_timeout_s=60)
    ctl = FleetController(job, provider)
    # past step 3 (no checkpoint is due before step 10): the timeout runs out now
    _when_step(ctl, 3, lambda: setattr(job, "timeout_s", ctl.now()))
    result = ctl.run()
    assert not result.ok and "timed out" in (result.failure or "")
    kinds = [e["kind"] for e in result.events]
    assert "stopping" in kinds
    codes = {n: node.proc.returncode for n, node in provider.nodes.items()}
    assert codes == {"g0-n0": EXIT_STOPPED, "g0-n1": EXIT_STOPPED}, codes  # they exited, not killed
    assert provider.terminated == []  # nothing was left to kill
    # the stop checkpoint: rank 0 saved the last step it completed (no periodic one is due at step 3-9)
    assert (tmp_path / "ck" / f"step-{result.steps_done:09d}" / "MANIFEST.json").is_file(), result.steps_done


class _ScriptedSky(RecordingSky):
    """SkyPilot's answers scripted: launches that fail (no capacity), cluster and job states."""

    class StatusRefreshMode:
        AUTO = "AUTO"

    def __init__(self, fail: set[str]) -> None:
        super().__init__()
        self.fail = fail
        self.cluster_status: dict[str, str] = {}
        self.job: dict[str, str] = {}

    def launch(self, task: Any, *, cluster_name: str, down: bool = False, **kw: Any) -> Any:
        super().launch(task, cluster_name=cluster_name, down=down)
        if cluster_name in self.fail:
            raise RuntimeError("ResourcesUnavailableError: no capacity for p3.2xlarge in us-east-1")
        self.cluster_status[cluster_name] = "UP"
        self.job[cluster_name] = "RUNNING"
        return (1, None)

    def get(self, value: Any) -> Any:
        return value

    def status(self, *, cluster_names: list[str], refresh: str) -> list[dict[str, str]]:
        return [{"name": c, "status": f"ClusterStatus.{self.cluster_status[c]}"} for c in cluster_names
                if c in self.cluster_status]

    def job_status(self, cluster: str, jobs: list[int]) -> dict[int, str]:
        return {jobs[0]: f"JobStatus.{self.job[cluster]}"}


def test_skypilot_provider_maps_launch_failures_and_cluster_states_to_node_states() -> None:
    api = _ScriptedSky(fail={"j-g0-n1"})
    group = _groups()[0]
    provider = SkyPilotProvider(job_id="j", task_for=lambda g, n, c, env: {"name": c, "envs": dict(env)}, api=api,
                                status_every_s=0.0)
    provider.launch(group, ["g0-n0", "g0-n1", "g0-n2"], {"SPOTTRAIN_RDZV": "h:1"})
    deadline = time.monotonic() + 10
    while STARTING in provider.poll().values() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert provider.poll() == {"g0-n0": RUNNING, "g0-n1": LOST, "g0-n2": RUNNING}
    assert "no capacity" in provider.errors["g0-n1"]
    api.cluster_status["j-g0-n0"] = "INIT"  # a preempted node leaves its cluster INIT
    api.job["j-g0-n2"] = "SUCCEEDED"
    assert provider.poll() == {"g0-n0": LOST, "g0-n1": LOST, "g0-n2": SUCCEEDED}
    provider.shutdown()
    # every cluster that was launched is downed at the end, the failed launch included (SkyPilot
    # may have left a partial cluster behind)
    assert sorted(c for c in api.calls if c.startswith("sky.down")) == [
        "sky.down('j-g0-n0')", "sky.down('j-g0-n1')", "sky.down('j-g0-n2')"]


def test_a_node_that_never_joins_is_given_up_and_replaced(tmp_path: Path) -> None:
    """A node whose worker runs but never joins (a setup that hangs, a firewall between it and
    the controller) is terminated after ready_timeout_s and reported to the policy as lost."""
    provider = LocalProvider(command=["sleep", "120"], run_dir=tmp_path)
    job = FleetJob(groups=_groups(spot=1, on_demand=0), job_id="j5", steps=10, policy="replace-same",
                   ready_timeout_s=1.0, max_launches=1, timeout_s=4.0, poll_s=0.05)
    result = FleetController(job, provider).run()
    assert not result.ok and "timed out" in (result.failure or "")
    lost = [e for e in result.events if e["kind"] == "lost"]
    assert [e["node"] for e in lost] == ["g0-n0", "g0-n1"] and all(e["how"].startswith("never joined") for e in lost)
    assert [n for n, _ in provider.launched] == ["g0-n0", "g0-n1"]  # one replacement, then max_launches
    assert any(e["kind"] == "refused" for e in result.events)
    assert sorted(provider.terminated) == ["g0-n0", "g0-n1"]
    assert all(node.proc.poll() is not None for node in provider.nodes.values())


def test_a_node_failing_on_the_users_input_stops_the_fleet_without_a_replacement(tmp_path: Path) -> None:
    """The user's script refuses its configuration (a SpottrainError before training starts): the
    worker exits with the input code after posting its one-line message; the controller stops
    the job with that message instead of taking the node for revoked and buying another."""
    from spottrain.runtime.elastic import EXIT_INPUT

    script = tmp_path / "train.py"
    script.write_text("import spottrain.runtime.api\nfrom spottrain.errors import InputError\n"
                      "raise InputError('expected lr > 0, got -0.1', file='config.yaml', line=2)\n")
    provider = LocalProvider(command=[sys.executable, str(script)], run_dir=tmp_path)
    job = FleetJob(groups=_groups(spot=2, on_demand=0), job_id="j6", steps=10, policy="replace-same", timeout_s=120,
                   poll_s=0.05)
    result = FleetController(job, provider).run()
    assert not result.ok
    assert result.input_error == "config.yaml, line 2: expected lr > 0, got -0.1"
    assert result.input_error in (result.failure or "") and "not retried" in (result.failure or "")
    assert [n for n, _ in provider.launched] == ["g0-n0", "g0-n1"]  # nothing bought in its place
    assert not [d for d in result.decisions if d["event"] == "revoked"]
    assert any(node.proc.returncode == EXIT_INPUT for node in provider.nodes.values())
    assert all(node.proc.poll() is not None for node in provider.nodes.values())


@pytest.mark.parametrize("groups, cluster", [((_group(count=2),), "2xV100"), (MIXED, None)])
def test_a_cloud_run_is_recorded_from_the_reports_its_controller_gathered(tmp_path: Path, monkeypatch, capsys,
                                                                           groups, cluster) -> None:
    """`spottrain run --backend skypilot` (elastic) stores what the chief reported through the
    controller: the run, its loss curve, and a measured row on the plan's GPU (none when the plan
    mixes GPU types: the reports do not say which node trained when). SkyPilot itself is replaced
    by a stand-in that returns the fleet's result with synthetic reports."""
    from spottrain.cli.main import main
    from spottrain.runtime import sky_job
    from spottrain.runtime.fleet import FleetResult
    from spottrain.store import Store

    reports = [{"kind": "step", "t": 100.0 + k, "step": 10 * k, "gen": 0, "world": 2, "loss": 2.0 / k, "batch": 128,
                "window_steps": 10, "window_s": 2.0 if k == 1 else 0.5, "grad_sqr": 1.0, "grad_var": 64.0}
               for k in range(1, 9)]
    monkeypatch.setattr(sky_job, "run", lambda job, on_event=None: FleetResult(
        ok=True, steps_done=80, events=[{"time_s": 0.0, "kind": "start"}], decisions=[], reports=reports))
    monkeypatch.setenv("SPOTTRAIN_STORE", str(tmp_path / "s.db"))
    try:
        main(["run", "--backend", "skypilot", "--plan", str(_save(_plan(*groups), tmp_path)), "--controller",
              "127.0.0.1:29431", "--example", "mlp", "--global-batch", "128", "--job-id", "cloud-1"])
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    err = capsys.readouterr().err
    assert code == 0, err
    with Store(tmp_path / "s.db") as store:
        assert store.get_run("cloud-1").status == "completed"
        points = store.loss_points(run_id="cloud-1")
        rows = store.measurements(run_id="cloud-1")
    assert [p["step"] for p in points] == [10 * k for k in range(1, 9)] and points[0]["grad_var"] == 64.0
    if cluster is None:
        assert rows == [] and "a training-loss curve of 8 points with the gradient noise scale" in err
    else:
        (row,) = rows  # the first window (2 s: warm-up) left out; 7 windows of 0.05 s a step
        assert (row["cluster"], row["batch_size"], row["steps"]) == (cluster, 64, 70)
        assert row["throughput"] == pytest.approx(128 / 0.05) and row["network_gbps"] == 10.0
        assert row["flops_per_sample"] > 0 and row["source"] == "spottrain run --backend skypilot"
        assert f"recorded in {tmp_path / 's.db'}: 1 measured row ({cluster}) and a training-loss curve" in err
