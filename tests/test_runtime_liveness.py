"""Liveness and the controller's own death, with real processes on this machine.

- A worker that stops answering (SIGSTOP: its connections stay open and silent) is declared
  lost after the liveness timeout, the survivors abandon the hung collective and go on: the
  job finishes with no lost step and the parameters of a fault-free run (1e-5).
- The launcher killed with SIGKILL or SIGTERM leaves no worker behind (within 30 s), and
  running the same command again resumes from the newest checkpoint to the exact step count.
- An exception in the training code fails the job at once, however its message reads.
- The policy sees the simulator's state (deadline, samples, prices, ticks) and its decisions
  (switch to on-demand, release, checkpoint now) are carried out, or refused loudly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime_pace import Pace

torch = pytest.importorskip("torch")

from spottrain.policies import Decision, JobState, NodeOption, register_policy  # noqa: E402
from spottrain.runtime.checkpoint import load_checkpoint  # noqa: E402
from spottrain.runtime.faults import parse_injections  # noqa: E402
from spottrain.runtime.local import LocalJob, job_pids, run_local  # noqa: E402

STEPS = 40
WORKERS = 3
TOL = 1e-5
pytestmark = pytest.mark.timeout(240)


def _job(tmp: Path, name: str, *, steps: int = STEPS, inject: str = "", sleep_s: float = 0.05,
         command: list[str] | None = None, pace: Pace | None = None, **kw) -> LocalJob:
    ckdir = tmp / name / "ck"
    env = {"SPOTTRAIN_STEPS": str(steps), "SPOTTRAIN_CHECKPOINT_DIR": str(ckdir),
           "SPOTTRAIN_CHECKPOINT_EVERY_STEPS": "10", "SPOTTRAIN_EXAMPLE_SLEEP_S": str(sleep_s),
           **(pace.env if pace is not None else {})}
    return LocalJob(command=command or [sys.executable, "-m", "spottrain.runtime.examples", "mlp"],
                    workers=kw.pop("workers", WORKERS), run_dir=tmp / name / "run", job_id=name, env=env,
                    injections=parse_injections(inject, workers=WORKERS) if inject else [],
                    steps=steps, checkpoint_dir=ckdir, replacement_delay_s=0.5, timeout_s=200, **kw)


def _params(path: str | Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_heartbeat_closed_silent_fenced_and_controller_lost() -> None:
    from spottrain.runtime.liveness import Heartbeat, LivenessServer

    server = LivenessServer(interval_s=0.1)
    got: list[dict] = []
    lost: list[float] = []
    hb = Heartbeat(server.endpoint, "w0", on_message=got.append, on_lost=lambda: lost.append(time.monotonic()),
                   interval_s=0.1, grace_s=1.0, refused_s=0.5).start()
    try:
        deadline = time.monotonic() + 5
        while server.status("w0") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        state, silent = server.status("w0")
        assert state == "open" and silent < 0.5
        server.broadcast({"gen": 3, "abort": True})
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
        assert got == [{"gen": 3, "abort": True}]
        hb.bye("done")
        time.sleep(0.3)
        assert server.status("w0")[0] == "bye"
    finally:
        server.close()
    # a second worker that goes silent (its thread no longer beats) is seen as silent
    server = LivenessServer(interval_s=0.1)
    try:
        import socket as _s

        sock = _s.create_connection(("127.0.0.1", server.port))
        sock.sendall(b'{"hello": "w1", "pid": 1}\n')
        time.sleep(0.8)
        state, silent = server.status("w1")
        assert state == "open" and silent > 0.5
        server.fence("w1", "declared lost")
        assert b"fence" in sock.recv(4096)
        sock.close()
        # a fenced worker that reconnects is told again and cannot come back
        sock = _s.create_connection(("127.0.0.1", server.port))
        sock.sendall(b'{"hello": "w1", "pid": 1}\n')
        assert b"fence" in sock.recv(4096)
        sock.close()
    finally:
        server.close()
    # the controller is gone: reconnects are refused, the worker gives up within refused_s
    server = LivenessServer(interval_s=0.1)
    Heartbeat(server.endpoint, "w2", on_message=got.append, on_lost=lambda: lost.append(time.monotonic()),
              interval_s=0.1, grace_s=10.0, refused_s=0.5).start()
    time.sleep(0.3)
    server.close()
    t0 = time.monotonic()
    while not lost and time.monotonic() - t0 < 5:
        time.sleep(0.02)
    assert lost and lost[0] - t0 < 2.0


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    s = run_local(_job(tmp_path_factory.mktemp("baseline"), "baseline", sleep_s=0.0))
    assert s.ok and s.completed_steps == STEPS and s.revocations == 0
    return _params(s.final_checkpoint)


def test_sigstop_worker_is_declared_lost_and_the_job_goes_on(tmp_path: Path, baseline) -> None:
    job = _job(tmp_path, "stop", inject="stop:1@step12", liveness_timeout_s=2.0)
    s = run_local(job)
    assert s.ok, s.failure
    assert s.completed_steps == STEPS
    lost = [r for r in s.recoveries if r["how"] == "lost"]
    assert len(lost) == 1, s.recoveries
    # fault -> next completed step: the 2 s liveness timeout plus re-forming, not gloo's 10 s timeout
    assert lost[0]["recovery_s"] is not None and lost[0]["recovery_s"] < 6.0, lost
    assert s.lost_steps == 0
    assert _max_diff(_params(s.final_checkpoint), baseline) <= TOL
    # the survivors abandoned the hung collective themselves (connections shut down)
    aborts = [line for p in job.run_dir.glob("events-*.jsonl") for line in p.read_text().splitlines()
              if '"abort"' in line]
    assert aborts
    assert job_pids(job.run_dir) == []


def _cli(tmp: Path, job_id: str, steps: int) -> list[str]:
    return [sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--workers", str(WORKERS),
            "--example", "mlp", "--steps", str(steps), "--job-id", job_id, "--run-dir", str(tmp / "run"),
            "--checkpoint-every", "10", "--no-record", "--json"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_launcher_death_leaves_no_worker_and_rerun_resumes(tmp_path: Path, baseline, sig: int) -> None:
    env = {**os.environ, "SPOTTRAIN_EXAMPLE_SLEEP_S": "0.1"}
    cmd = _cli(tmp_path, "ctl", STEPS)
    launcher = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    events = tmp_path / "run" / "events-w0.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until training is under way (past a checkpoint)
        if events.exists() and sum('"step"' in ln for ln in events.read_text().splitlines()) >= 12:
            break
        time.sleep(0.2)
    else:
        launcher.kill()
        pytest.fail("training did not start")
    # A stopped worker too: it must not outlive its controller either.
    pids = job_pids(tmp_path / "run")
    assert len(pids) == WORKERS
    os.kill(pids[-1], signal.SIGSTOP)
    launcher.send_signal(sig)
    launcher.communicate(timeout=60)
    t0 = time.monotonic()
    while job_pids(tmp_path / "run") and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    left = job_pids(tmp_path / "run")
    for pid in left:  # never leave them behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"workers still alive 30 s after the launcher's {signal.Signals(sig).name}"
    if sig == signal.SIGTERM:
        # stopped in order: rank 0 wrote a checkpoint at its current step before exiting
        stopped = [json.loads(ln) for p in (tmp_path / "run").glob("events-*.jsonl")
                   for ln in p.read_text().splitlines() if '"stopped"' in ln]
        assert stopped
        return
    # Same command again: resumes from the newest complete checkpoint, ends at exactly STEPS.
    out = subprocess.run(cmd, env={**os.environ}, capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    assert summary["ok"] and summary["completed_steps"] == STEPS
    restores = [json.loads(ln) for p in (tmp_path / "run").glob("events-*.jsonl")
                for ln in p.read_text().splitlines() if '"restore"' in ln]
    assert restores and min(r["step"] for r in restores) >= 10
    assert _max_diff(_params(summary["final_checkpoint"]), baseline) <= 1e-6


BUGGY = r"""
import os, sys
from spottrain.runtime.examples import build_trainer
t = build_trainer("mlp")
inner = t.loss_fn
def loss_fn(model, batch):
    # a bug in user code whose message reads like a lost peer
    if os.environ["SPOTTRAIN_WORKER_ID"] == "w1" and t.step == 5:
        raise RuntimeError("Connection reset by peer (gloo timed out)")
    return inner(model, batch)
t.loss_fn = loss_fn
t.fit()
"""


def test_error_in_training_code_fails_the_job_whatever_its_message(tmp_path: Path) -> None:
    script = tmp_path / "buggy.py"
    script.write_text(BUGGY)
    job = _job(tmp_path, "bug", command=[sys.executable, str(script)], sleep_s=0.0)
    # the raising worker waits this long for the controller to confirm a membership change
    # (none comes) before it treats the error as its own: 1 s instead of the default 5 s
    job.env["SPOTTRAIN_CONFIRM_S"] = "1"
    t0 = time.monotonic()
    s = run_local(job)
    assert not s.ok
    assert "RuntimeError" in s.failure and "w1" in s.failure
    assert s.replacements == 0
    assert time.monotonic() - t0 < 120
    assert job_pids(job.run_dir) == []


def test_policy_sees_the_simulator_state_and_its_decisions_are_carried_out(tmp_path: Path) -> None:
    seen: list[JobState] = []
    switched: list[float] = []
    # Slow steps until the policy sees the on-demand nodes only, then full speed. The slow steps
    # alone are a bet that three on-demand workers start (Python and torch imports, several times
    # longer on a loaded machine) and join before the last step. So after step 30 (the switch is
    # at the first tick, 1 s into training) the workers wait for the last of them to join (the
    # deferred release is sent then); then slow steps again, not a hold: the spot workers leave
    # at a step boundary.
    pace = Pace(tmp_path / "policy", sleep_s=0.1, hold_at_step=30)
    od = NodeOption(instance_type="local-od", gpu="cpu", spot=False, zone=None, price_usd_per_hour=3.0,
                    throughput=1.0, delay_s=0.2)

    def scripted(state: JobState) -> Decision:
        seen.append(state)
        spot = [n.node_id for n in state.nodes if n.spot]
        if switched and state.nodes and not spot:
            pace.fast()  # what is checked has happened: the policy sees the on-demand nodes only
        if state.event == "tick" and spot and not state.pending_on_demand and not switched:
            switched.append(state.now_s)
            return Decision(switch_to_on_demand=True, request=state.on_demand_fallback, release=(*spot, "nosuch"),
                            checkpoint_now=True, reason="scripted switch")
        return Decision()

    register_policy("test-scripted-switch", scripted)
    spot = NodeOption(instance_type="local-spot", gpu="cpu", spot=True, zone=None, price_usd_per_hour=1.0,
                      throughput=1.0, delay_s=0.2)
    job = _job(tmp_path, "policy", steps=200, pace=pace, policy="test-scripted-switch", planned=(spot,) * WORKERS,
               options=(spot, od), on_demand_fallback=(od,) * WORKERS, samples_per_step=64, deadline_s=3600.0,
               tick_s=1.0)
    events: list[dict] = []

    def on_event(kind: str, data: dict) -> None:
        if kind == "release":
            pace.unhold()
        if kind != "progress":
            events.append(data)

    s = run_local(job, on_event=on_event)
    assert s.ok, s.failure
    assert s.completed_steps == 200
    ticks = [x for x in seen if x.event == "tick"]
    assert ticks, "no tick reached the policy"
    t = ticks[0]
    assert t.deadline_s == 3600.0 and t.samples_total == 200 * 64
    assert 0 < t.samples_done < t.samples_total and t.samples_done % 64 == 0
    assert {o.price_usd_per_hour for o in t.options} == {1.0, 3.0}
    assert all(n.price_usd_per_hour == 1.0 and n.spot for n in t.nodes)
    assert t.restart_overhead_s > 0
    # Carried out, make before break: the on-demand nodes are requested at once, the spot nodes
    # are released only once all of them have joined (if that happens before the end: start-up
    # takes seconds on a loaded machine), the unknown id is refused loudly, nothing is lost.
    assert [e["worker"] for e in events if e["kind"] == "refused"] == ["nosuch"]
    kinds = [e["kind"] for e in events]
    assert "release_deferred" in kinds
    od_spawns = [e for e in events if e["kind"] == "spawn" and e["spot"] is False]
    assert len(od_spawns) == WORKERS
    joins = [i for i, k in enumerate(kinds) if k == "joined"]
    releases = [i for i, k in enumerate(kinds) if k == "release"]
    assert joins, "no on-demand node joined"
    if releases:
        assert len(joins) == WORKERS and max(joins) < min(releases) and len(releases) == WORKERS
        assert all(not m.startswith(("w0", "w1", "w2")) for m in s.membership[-1]["members"])
    else:
        assert len(joins) < WORKERS or kinds.index("finished") < max(joins) + 3
    assert s.lost_steps == 0 and s.revocations == 0
    later = [x for x in seen if x.event != "tick" or x.now_s > t.now_s]
    assert any(n and all(not v.spot for v in n) for n in (x.nodes for x in later))
    assert job_pids(job.run_dir) == []
