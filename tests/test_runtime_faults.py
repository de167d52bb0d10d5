"""Real processes, really killed: a 4-worker gloo job of the built-in MLP survives kill -9,
SIGTERM with grace, the chief's death, a kill during a checkpoint write and a corrupted
checkpoint, and ends with the parameters of an uninterrupted run.

Tolerance: survivors train on in a smaller world with the same global batch (gradient
accumulation), so every update is mathematically identical and only the summation order of
the all-reduce differs: parameters agree to 1e-5 (absolute). A restart from a checkpoint in
the same world size replays exactly the same data order; the only difference left is DDP's
bucket layout in the first step after a start (it re-buckets after one iteration), a last-bit
rounding difference: 1e-6.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime_pace import Pace

torch = pytest.importorskip("torch")

from spottrain.runtime.checkpoint import Checkpointer, load_checkpoint  # noqa: E402
from spottrain.runtime.faults import parse_injections  # noqa: E402
from spottrain.runtime.local import LocalJob, run_local  # noqa: E402

STEPS = 50
WORKERS = 4
TOL = 1e-5
pytestmark = pytest.mark.timeout(240)


def _job(tmp: Path, name: str, *, steps: int = STEPS, inject: str = "", job_id: str | None = None,
         extra_env: dict[str, str] | None = None, ckdir: Path | None = None) -> LocalJob:
    ckdir = ckdir or tmp / name / "ck"
    env = {"SPOTTRAIN_STEPS": str(steps), "SPOTTRAIN_CHECKPOINT_DIR": str(ckdir),
           "SPOTTRAIN_CHECKPOINT_EVERY_STEPS": "10", "SPOTTRAIN_PG_TIMEOUT_S": "10", **(extra_env or {})}
    return LocalJob(command=[sys.executable, "-m", "spottrain.runtime.examples", "mlp"], workers=WORKERS,
                    run_dir=tmp / name / "run", job_id=job_id or name, env=env,
                    injections=parse_injections(inject, workers=WORKERS) if inject else [],
                    steps=steps, checkpoint_dir=ckdir, replacement_delay_s=0.5, timeout_s=200)


def _params(path: str | Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["model"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoint directory of a fault-free run (job id ``baseline``; steps 30, 40 and 50 kept)."""
    tmp = tmp_path_factory.mktemp("baseline")
    s = run_local(_job(tmp, "baseline"))
    assert s.ok and s.completed_steps == STEPS and s.revocations == 0
    return Path(s.final_checkpoint).parent


@pytest.fixture(scope="module")
def baseline(baseline_run: Path) -> dict[str, torch.Tensor]:
    return _params(baseline_run / f"step-{STEPS:09d}")


def test_kill9_worker_and_then_the_chief(tmp_path: Path, baseline: dict[str, torch.Tensor]) -> None:
    # Slower steps (a sleep per forward pass; same numerics) until a replacement has joined after
    # both kills (the world is back to 3), then full speed. The slow steps alone left a replacement
    # ~9 s to start and join before the job's last step; on a loaded machine its start-up (Python
    # and torch imports) took longer, the job ended in a world of 2 and no replacement ever joined.
    # So after step 20 (both kills, at steps 4 and 8, and their recoveries are behind) the workers
    # wait for that join instead of racing it.
    pace = Pace(tmp_path, sleep_s=0.2, hold_at_step=20)
    worlds_seen: list[int] = []
    s = run_local(_job(tmp_path, "kill", inject="kill:1@step4,kill:chief@step8", extra_env=pace.env),
                  on_event=pace.fast_after("membership", lambda e: worlds_seen.append(e["world"]) or
                                           len(worlds_seen) > 3 and e["world"] >= 3))
    assert s.ok, s.failure
    assert s.completed_steps == STEPS
    assert s.revocations == 2
    # The survivors kept their state: nothing was redone.
    assert s.lost_steps == 0
    worlds = [m["world"] for m in s.membership]
    assert worlds[:3] == [4, 3, 2]
    # Replacements joined (state handed over by a survivor) and the world grew again.
    assert s.replacements >= 1 and max(worlds[3:], default=0) >= 3
    assert all(r["recovery_s"] is not None and r["recovery_s"] < 10 for r in s.recoveries)
    assert _max_diff(_params(s.final_checkpoint), baseline) <= TOL


def test_sigterm_notice_and_kill_during_checkpoint_write(tmp_path: Path, baseline: dict[str, torch.Tensor]) -> None:
    # The chief (writer) is killed while its first checkpoint is half written (the write is
    # slowed down so that the kill lands inside it); worker 2 gets a SIGTERM notice later.
    job = _job(tmp_path, "term", inject="kill:0@ckpt,sigterm:2@step30",
               extra_env={"SPOTTRAIN_CKPT_WRITE_DELAY_S": "0.4"})
    s = run_local(job)
    assert s.ok, s.failure
    assert s.completed_steps == STEPS
    assert s.notices == 1
    left = [r for r in s.recoveries if r["how"] == "left"]
    assert len(left) == 1 and left[0]["lost_steps"] == 0
    assert any(c.get("emergency") for c in s.checkpoints), "the notice did not trigger an emergency checkpoint"
    assert s.lost_steps == 0
    # Nothing half-written is ever taken for a checkpoint; the survivors' ones load.
    for info in Checkpointer(job.checkpoint_dir, job_id=job.job_id).list():
        assert load_checkpoint(info.path, job_id=job.job_id)["step"] == info.step
    assert _max_diff(_params(s.final_checkpoint), baseline) <= TOL


def test_corrupt_checkpoint_is_skipped_on_restart(tmp_path: Path, baseline_run: Path,
                                                  baseline: dict[str, torch.Tensor]) -> None:
    # The checkpoints a run of job "baseline" stopped after step 40 leaves: the fault-free run's
    # steps 30 and 40 (byte for byte what that run wrote at those steps).
    ck = tmp_path / "ck"
    ck.mkdir()
    for step in (30, 40):
        shutil.copytree(baseline_run / f"step-{step:09d}", ck / f"step-{step:09d}")
    newest = ck / "step-000000040" / "tensors.pt"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # flip one byte in the middle of the tensors
    newest.write_bytes(bytes(data))
    second = run_local(_job(tmp_path, "part2", steps=STEPS, job_id="baseline", ckdir=ck))
    assert second.ok, second.failure
    assert second.completed_steps == STEPS
    restores = [json.loads(line) for p in (tmp_path / "part2" / "run").glob("events-*.jsonl")
                for line in p.read_text().splitlines() if '"restore"' in line]
    assert restores and all(r["step"] == 30 for r in restores), "did not fall back to the previous checkpoint"
    # Same world size, same data order replayed from step 30.
    assert _max_diff(_params(second.final_checkpoint), baseline) <= 1e-6
    # The corrupt one was set aside before any worker started (kept, named), and step 40 written anew.
    assert (ck / "corrupt-step-000000040" / "tensors.pt").read_bytes() == bytes(data)
    assert load_checkpoint(ck / "step-000000040", job_id="baseline")["step"] == 40


def _cli_run(tmp: Path, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--no-record",
                           "--run-dir", str(tmp / "run"), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp)


USER_INPUT_ERROR = r"""
import os
from spottrain.errors import InputError
from spottrain.runtime.examples import build_trainer
t = build_trainer("mlp")
inner = t.loss_fn
def loss_fn(model, batch):
    # the user's own check of its data, failing on one worker in the middle of training
    if os.environ["SPOTTRAIN_WORKER_ID"] == "w1" and t.step == 3:
        raise InputError("expected labels 0-9, got 12", file="labels.csv", line=7)
    return inner(model, batch)
t.loss_fn = loss_fn
t.fit()
"""


def test_an_input_error_in_a_worker_stops_the_launcher_at_once(tmp_path: Path) -> None:
    """Not a revocation: no replacement, no re-formed group; the launcher stops the job and ends
    with the worker's one-line message and exit code 2, no traceback, no process left."""
    from spottrain.runtime.local import job_pids

    (tmp_path / "train.py").write_text(USER_INPUT_ERROR)
    t0 = time.monotonic()
    out = _cli_run(tmp_path, "--workers", "3", "--steps", "40", "--checkpoint-every", "10", "--",
                   sys.executable, "train.py")
    assert out.returncode == 2, out.stderr[-2000:]
    assert time.monotonic() - t0 < 60
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == "error: labels.csv, line 7: expected labels 0-9, got 12"
    logs = sorted(p.name for p in (tmp_path / "run").glob("worker-*.log"))
    assert logs == ["worker-w0.log", "worker-w1.log", "worker-w2.log"]  # nobody was started in w1's place
    assert "input_error" in out.stderr and "membership" in out.stderr
    assert out.stderr.count("membership:") == 1  # the first generation only: no re-formed group
    assert job_pids(tmp_path / "run") == []


def _corrupt(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return bytes(data)


def test_unusable_checkpoints_are_refused_before_any_worker_starts(tmp_path: Path, baseline_run: Path) -> None:
    # every checkpoint corrupt: refused (naming each file), nothing deleted, no worker started
    ck = tmp_path / "ck"
    shutil.copytree(baseline_run, ck)
    corrupted = {p: _corrupt(p) for p in sorted(ck.glob("step-*/tensors.pt"))}
    assert len(corrupted) == 3
    out = _cli_run(tmp_path, "--workers", "2", "--example", "mlp", "--steps", "60", "--job-id", "baseline",
                   "--checkpoint-dir", str(ck))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: no checkpoint in {ck} can be read")
    assert all(f"{p}: checksum mismatch" in last for p in corrupted)
    assert all(p.read_bytes() == data for p, data in corrupted.items())
    assert sorted(p.name for p in ck.iterdir()) == sorted(p.name for p in baseline_run.iterdir())
    assert not list((tmp_path / "run").glob("worker-*.log"))
    # another job's checkpoints, no --job-id (a new job): refused, the file named, nothing started
    other = tmp_path / "other"
    shutil.copytree(baseline_run, other)
    out = _cli_run(tmp_path, "--workers", "2", "--example", "mlp", "--steps", "60", "--checkpoint-dir", str(other))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {other / 'step-000000050'}: checkpoint belongs to job 'baseline', not 'run-")
    assert not list((tmp_path / "run").glob("worker-*.log"))
    assert sorted(p.name for p in other.iterdir()) == sorted(p.name for p in baseline_run.iterdir())
    # every manifest unreadable: refused by the command line before the launcher, one line, no
    # warning that the run would start from step 0, the files kept as they were
    garbled = tmp_path / "garbled"
    shutil.copytree(baseline_run, garbled)
    for man in garbled.glob("step-*/MANIFEST.json"):
        man.write_text("{not json")
    out = _cli_run(tmp_path, "--workers", "2", "--example", "mlp", "--steps", "60", "--job-id", "baseline",
                   "--checkpoint-dir", str(garbled))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: none of the 3 checkpoint(s) in {garbled} is readable")
    assert all(man.read_text() == "{not json" for man in garbled.glob("step-*/MANIFEST.json"))
    assert not list((tmp_path / "run").glob("worker-*.log"))


def test_cli_run_json_summary(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--workers", "2", "--example", "mlp",
         "--steps", "20", "--checkpoint-every", "5", "--inject", "kill:1@step8", "--replacement-delay", "0.2s",
         "--run-dir", str(tmp_path / "run"), "--store", str(tmp_path / "s.db"), "--json"],
        capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout)
    for key in ("completed_steps", "revocations", "lost_steps", "max_stall_s", "membership", "checkpoints"):
        assert key in summary
    assert summary["completed_steps"] == 20 and summary["revocations"] == 1
    from spottrain.store import Store

    with Store(tmp_path / "s.db") as store:
        run = store.get_run(summary["job_id"])
        assert run.status == "completed"
        assert [e.event for e in store.events(summary["job_id"], event="exit")]


@pytest.mark.slow
def test_torchrun_restart_resumes_from_checkpoint(tmp_path: Path, baseline: dict[str, torch.Tensor]) -> None:
    """The SkyPilot path: torchrun with a fresh rendezvous store per restart
    (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1) restarts every worker after a kill -9 and the job
    resumes from the newest checkpoint to the same parameters."""
    import os
    import signal
    import time

    ck = tmp_path / "ck"
    pace = Pace(tmp_path, sleep_s=0.1)  # slow until the kill, then full speed
    env = {**os.environ, **pace.env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "SPOTTRAIN_STEPS": str(STEPS),
           "SPOTTRAIN_CHECKPOINT_DIR": str(ck), "SPOTTRAIN_CHECKPOINT_EVERY_STEPS": "10", "SPOTTRAIN_JOB_ID": "tr",
           "OMP_NUM_THREADS": "1", "SPOTTRAIN_EXAMPLE_SLEEP_S": "0.1", "SPOTTRAIN_RUN_DIR": str(tmp_path / "run"),
           "SPOTTRAIN_PG_TIMEOUT_S": "3"}  # a survivor blocked on the killed peer gives up soon
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.Popen([str(torchrun), "--standalone", f"--nproc-per-node={WORKERS}", "--max-restarts=2",
                             "-m", "spottrain.runtime.examples", "mlp"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 150
        while not (ck / "step-000000010").exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert children, "no torchrun workers found"
        os.kill(int(children[-1]), signal.SIGKILL)
        pace.fast()
        assert proc.wait(timeout=180) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    restores = [json.loads(line) for p in (tmp_path / "run").glob("events-*.jsonl")
                for line in p.read_text().splitlines() if '"restore"' in line]
    assert restores and min(r["step"] for r in restores) >= 10, "the restarted workers did not resume"
    final = ck / f"step-{STEPS:09d}"
    assert load_checkpoint(final, job_id="tr")["step"] == STEPS
    assert _max_diff(_params(final), baseline) <= 1e-6
