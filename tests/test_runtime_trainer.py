"""The Trainer API in one process: resume equals straight-through, micro-batching equals one
big batch, scale-lr rescales, user errors are not mistaken for lost peers."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spottrain.runtime.api import Trainer, TrainConfig  # noqa: E402
from spottrain.runtime.checkpoint import load_checkpoint  # noqa: E402
from spottrain.runtime.examples import build_trainer  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_sigterm():
    old = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, old)


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_resume_from_checkpoint_equals_straight_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTTRAIN_RDZV", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    straight = build_trainer("mlp", TrainConfig(steps=12, global_batch_size=32))
    straight.fit()
    cfg = dict(global_batch_size=32, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every_steps=4, job_id="r")
    build_trainer("mlp", TrainConfig(steps=6, **cfg)).fit()
    resumed = build_trainer("mlp", TrainConfig(steps=12, **cfg))
    resumed.fit()
    assert resumed.step == 12
    a, b = _weights(straight), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)  # one process: bit-exact replay
    assert load_checkpoint(tmp_path / "ck" / "step-000000012", job_id="r")["step"] == 12


def test_micro_batches_accumulate_to_the_global_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTTRAIN_RDZV", raising=False)
    whole = build_trainer("mlp", TrainConfig(steps=5, global_batch_size=48))
    whole.fit()
    micro = build_trainer("mlp", TrainConfig(steps=5, global_batch_size=48, micro_batch_size=7))
    micro.fit()
    a, b = _weights(whole), _weights(micro)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def test_scale_lr_scales_with_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTTRAIN_RDZV", raising=False)
    t = build_trainer("mlp", TrainConfig(steps=1, global_batch_size=64, rescale="scale-lr", planned_world_size=4))
    t.fit()
    assert t.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 4)
    # the per-worker batch stays 64 / 4 = 16: one step consumed 16 samples in a world of 1
    assert t.sampler.samples_seen == 16


@pytest.mark.timeout(60)  # a misclassified error re-forms the group and waits for a generation forever
def test_user_error_that_reads_like_a_lost_peer_is_raised_not_retried(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An elastic worker (a real c10d store as its controller's, one member) whose training code
    raises a RuntimeError, the type gloo raises when a peer's connection closes: the controller
    confirms no membership change, so the trainer's classifier fails the job with the error and
    reports it, instead of re-forming the group and retrying the step."""
    import json
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    store.set("gen", "0")
    store.set("gen/0/members", json.dumps(["w0"]))
    monkeypatch.setenv("SPOTTRAIN_RDZV", f"127.0.0.1:{store.port}")
    monkeypatch.setenv("SPOTTRAIN_WORKER_ID", "w0")
    monkeypatch.delenv("SPOTTRAIN_LIVENESS", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    t = build_trainer("mlp", TrainConfig(steps=6, global_batch_size=8, confirm_s=0.5, rejoin_timeout_s=2.0,
                                         run_dir=str(tmp_path)))
    inner, calls = t.loss_fn, []

    def loss_fn(model, batch):
        calls.append(t.step)
        if t.step == 2:
            raise RuntimeError("Connection reset by peer (gloo timed out)")
        return inner(model, batch)

    t.loss_fn = loss_fn
    with pytest.raises(RuntimeError, match="reset by peer"):
        t.fit()
    assert calls == [0, 1, 2]  # step 2 ran once: no re-formed group retried it
    assert json.loads(store.get("error/w0"))["type"] == "builtins.RuntimeError"
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events-w0.jsonl").read_text().splitlines()]
    assert "gen" in kinds and "reform" not in kinds


def test_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTTRAIN_STEPS", "7")
    monkeypatch.setenv("SPOTTRAIN_CHECKPOINT_INTERVAL_S", "2.5")
    monkeypatch.setenv("SPOTTRAIN_RESCALE", "scale-lr")
    cfg = TrainConfig.from_env(steps=100, global_batch_size=16)
    assert (cfg.steps, cfg.checkpoint_interval_s, cfg.rescale, cfg.global_batch_size) == (7, 2.5, "scale-lr", 16)


def test_worker_refuses_another_jobs_checkpoint_with_the_input_exit_code(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process under a controller (a real c10d store; SPOTTRAIN_RDZV set) whose checkpoint
    directory holds another job's checkpoints: it exits with EXIT_INPUT (not as a revocation),
    its last line is the one-line refusal naming the file, and the controller's store holds that
    message, so whatever launched it (the local backend, the fleet) stops with it."""
    import json
    import os
    import subprocess
    import sys
    from datetime import timedelta

    import torch.distributed as dist

    from spottrain.runtime.elastic import EXIT_INPUT

    monkeypatch.delenv("SPOTTRAIN_RDZV", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ck = tmp_path / "ck"
    build_trainer("mlp", TrainConfig(steps=2, global_batch_size=8, checkpoint_dir=str(ck), checkpoint_every_steps=1,
                                     job_id="other")).fit()
    files = {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()}
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    env = {**os.environ, "SPOTTRAIN_RDZV": f"127.0.0.1:{store.port}", "SPOTTRAIN_WORKER_ID": "w0",
           "SPOTTRAIN_JOB_ID": "mine", "SPOTTRAIN_CHECKPOINT_DIR": str(ck), "SPOTTRAIN_STEPS": "4"}
    env.pop("SPOTTRAIN_LIVENESS", None)
    out = subprocess.run([sys.executable, "-m", "spottrain.runtime.examples", "mlp"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == EXIT_INPUT, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"{ck / 'step-000000002'}: checkpoint belongs to job 'other'" in last
    report = json.loads(store.get("error/w0"))
    assert report["input"] is True and report["type"] == "spottrain.errors.CheckpointError"
    assert report["message"] == last[len("error: "):]
    assert {p: p.read_bytes() for p in ck.rglob("*") if p.is_file()} == files  # nothing touched


def test_a_worker_that_restores_the_final_checkpoint_is_done_at_once(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A rerun after the end, or a replacement that starts as the others finish: the newest
    checkpoint is the final step, so the worker trains nothing, joins nothing and reports done."""
    import json

    monkeypatch.delenv("SPOTTRAIN_RDZV", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = dict(global_batch_size=16, checkpoint_dir=str(tmp_path / "ck"), checkpoint_every_steps=3, job_id="r",
               run_dir=str(tmp_path / "run"))
    first = build_trainer("mlp", TrainConfig(steps=6, **cfg))
    first.fit()
    again = build_trainer("mlp", TrainConfig(steps=6, **cfg))
    inner, calls = again.loss_fn, []
    again.loss_fn = lambda model, batch: calls.append(again.step) or inner(model, batch)
    again.fit()
    assert again.step == 6 and calls == []
    a, b = _weights(first), _weights(again)
    assert all(torch.equal(a[k], b[k]) for k in a)
    last = json.loads((tmp_path / "run").glob("events-*.jsonl").__next__().read_text().splitlines()[-1])
    assert last["kind"] == "done" and last["step"] == 6 and last["restored"] is True
