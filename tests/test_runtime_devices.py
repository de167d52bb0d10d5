"""Which GPU a local worker trains on: one per slot (LOCAL_RANK modulo the machine's GPUs), and
whether the stored measurement rows may say the workers had a GPU each."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from spottrain.runtime import record
from spottrain.runtime.api import Trainer, auto_backend


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> list[int]:
    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H100 80GB HBM3")
    return chosen


@pytest.mark.parametrize(("local_rank", "gpus", "expected"), [("0", 4, 0), ("3", 4, 3), ("5", 4, 1), ("2", 1, 0)])
def test_auto_device_is_the_local_rank_modulo_the_gpus(monkeypatch, local_rank, gpus, expected):
    chosen = _fake_gpus(monkeypatch, gpus)
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    dev = Trainer._pick_device(SimpleNamespace(config=SimpleNamespace(device="auto")))
    assert dev == torch.device("cuda", expected) and chosen == [expected]


def test_auto_device_without_a_gpu_is_the_cpu(monkeypatch):
    _fake_gpus(monkeypatch, 0)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert Trainer._pick_device(SimpleNamespace(config=SimpleNamespace(device="auto"))) == torch.device("cpu")


def test_rows_say_the_gpu_is_shared_only_when_workers_outnumber_the_gpus(monkeypatch):
    _fake_gpus(monkeypatch, 4)
    assert record._worker_device("auto", workers=4) == ("H100", False)
    assert record._worker_device("auto", workers=5) == ("H100", True)
    assert record._worker_device("cuda:1", workers=2) == ("H100", True)  # one named GPU for every worker
    assert record._worker_device("cpu", workers=8) == ("cpu", False)


def test_workers_sharing_a_gpu_all_reduce_through_gloo():
    """NCCL takes one process per GPU ("Duplicate GPU detected" for two ranks on one device): a
    local job of more workers than the machine has GPUs, or of several workers pinned to one named
    GPU, all-reduces through gloo; one worker per GPU keeps NCCL."""
    assert auto_backend("cuda", local_workers=4, gpus=4) == "nccl"
    assert auto_backend("cuda", local_workers=1, gpus=1) == "nccl"
    assert auto_backend("cuda", local_workers=2, gpus=1) == "gloo"
    assert auto_backend("cuda", local_workers=5, gpus=4) == "gloo"
    assert auto_backend("cuda", local_workers=2, gpus=4, device_named=True) == "gloo"
    assert auto_backend("cuda", local_workers=1, gpus=4, device_named=True) == "nccl"  # one node, one worker
    assert auto_backend("cpu", local_workers=1, gpus=0) == "gloo"


def test_the_local_launcher_numbers_its_workers_local_rank(tmp_path):
    """Each worker process is started with LOCAL_RANK = its slot and LOCAL_WORLD_SIZE = the job's
    workers, as torchrun numbers the processes of one node (read from the live processes)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from spottrain.runtime.local import job_pids

    run_dir = tmp_path / "run"
    # A grace far beyond any worker's start-up, however loaded the machine: what is checked is that
    # each worker heard the stop and went by itself, not how fast this machine imports torch.
    grace_s = 120.0
    proc = subprocess.Popen([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--workers", "3",
                             "--example", "mlp", "--steps", "100000", "--run-dir", str(run_dir),
                             "--store", str(tmp_path / "s.db"), "--stop-grace", f"{grace_s:g}s"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    ranks: set[str] = set()
    sizes: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(ranks) < 3:
            for pid in job_pids(run_dir.resolve()):
                try:
                    env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in kv)
                except OSError:
                    continue
                if b"SPOTTRAIN_WORKER_ID" in env:
                    ranks.add(env.get(b"LOCAL_RANK", b"?").decode())
                    sizes.add(env.get(b"LOCAL_WORLD_SIZE", b"?").decode())
            time.sleep(0.2)
    finally:
        t_stop = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        stop_s = time.monotonic() - t_stop
    assert ranks == {"0", "1", "2"} and sizes == {"3"}
    # Stopped while its workers were still starting: each hears the stop when it connects (not
    # only those connected when it was said) and goes at once, none waits out the launcher's
    # grace to be killed.
    from spottrain.runtime.summary import read_worker_events

    stopped = {e["wid"] for e in read_worker_events(run_dir) if e["kind"] == "stopped"}
    assert stopped == {"w0", "w1", "w2"} and stop_s < grace_s, (stopped, stop_s)
    assert job_pids(run_dir.resolve()) == []
