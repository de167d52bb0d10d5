"""Checkpoints: atomic, verified, refuse foreign ones, survive a writer killed mid-write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from spottrain.errors import CheckpointError  # noqa: E402
from spottrain.runtime.checkpoint import Checkpointer, load_checkpoint  # noqa: E402
from spottrain.runtime.sampler import DeterministicSampler, shard  # noqa: E402
from spottrain.runtime.state import flatten, unflatten  # noqa: E402


def _state(step: int) -> dict:
    torch.manual_seed(step)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return {"model": model.state_dict(), "optim": opt.state_dict(), "step": step, "rng": torch.get_rng_state()}


def test_flatten_roundtrip_keeps_int_keys_and_plain_values() -> None:
    state = _state(3)
    tree, tensors = flatten(state)
    json.dumps(tree)  # the plain part is pure JSON
    back = unflatten(json.loads(json.dumps(tree)), tensors)
    assert set(back["optim"]["state"]) == set(state["optim"]["state"])  # int keys survive
    assert back["optim"]["param_groups"][0]["lr"] == 0.1
    opt = torch.optim.SGD(torch.nn.Linear(4, 3).parameters(), lr=0.5, momentum=0.9)
    opt.load_state_dict(back["optim"])
    assert opt.param_groups[0]["lr"] == 0.1


def test_flatten_refuses_arbitrary_objects() -> None:
    with pytest.raises(TypeError):
        flatten({"x": object()})


def test_save_load_keep_last_k(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, job_id="j", keep=2)
    for step in (10, 20, 30):
        ck.save(_state(step), step=step)
    ck.close()
    assert [i.step for i in ck.list()] == [30, 20]
    state, info = ck.load_latest()
    assert info.step == 30 and state["step"] == 30
    ref = _state(30)
    assert torch.equal(state["model"]["weight"], ref["model"]["weight"])
    assert not list(tmp_path.glob(".tmp-*"))


def test_async_save_snapshots_before_training_mutates(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, job_id="j")
    w = torch.zeros(1000)
    ck.save({"w": w, "step": 1}, step=1)
    w += 1.0  # training goes on while the write is in flight
    ck.close()
    assert torch.equal(load_checkpoint(tmp_path / "step-000000001")["w"], torch.zeros(1000))


def test_corrupt_newest_is_skipped(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, job_id="j", keep=5)
    for step in (1, 2):
        ck.save(_state(step), step=step, blocking=True)
    blob = tmp_path / "step-000000002" / "tensors.pt"
    data = bytearray(blob.read_bytes())
    data[-20] ^= 0x55
    blob.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(tmp_path / "step-000000002")
    state, info = ck.load_latest()
    assert info.step == 1 and state["step"] == 1
    # kept, under a name that says what it is: neither deleted nor taken for step 2 by a new save
    aside = tmp_path / "corrupt-step-000000002"
    assert (aside / "tensors.pt").read_bytes() == bytes(data)
    assert [(old.name, new.name) for old, new, _ in ck.set_aside_paths] == [("step-000000002", aside.name)]
    ck.save(_state(2), step=2, blocking=True)
    assert load_checkpoint(tmp_path / "step-000000002", job_id="j")["step"] == 2
    ck.save(_state(3), step=3, blocking=True)
    ck.save(_state(4), step=4, blocking=True)
    assert aside.is_dir()  # pruning keeps the newest complete checkpoints; it never touches this one


def test_no_readable_checkpoint_is_refused_naming_each_file(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, job_id="j", keep=5)
    for step in (1, 2):
        ck.save(_state(step), step=step, blocking=True)
    before = {}
    for name in ("step-000000001/tensors.pt", "step-000000002/state.json"):
        blob = tmp_path / name
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
        before[name] = bytes(data)
    for resume in (ck.load_latest, ck.check_resumable):
        with pytest.raises(CheckpointError) as err:
            resume()
        message = str(err.value)
        assert "\n" not in message and "no checkpoint in" in message
        for name in before:
            assert f"{tmp_path / name}: checksum mismatch" in message
    # nothing deleted, nothing moved: starting over is the user's decision
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001", "step-000000002"]
    assert all((tmp_path / name).read_bytes() == data for name, data in before.items())


def test_truncated_and_manifestless_are_skipped(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, job_id="j", keep=5)
    for step in (1, 2, 3):
        ck.save(_state(step), step=step, blocking=True)
    (tmp_path / "step-000000003" / "MANIFEST.json").unlink()
    blob = tmp_path / "step-000000002" / "state.json"
    blob.write_bytes(blob.read_bytes()[:5])
    assert ck.load_latest()[1].step == 1


def test_other_job_and_other_version_are_refused(tmp_path: Path) -> None:
    Checkpointer(tmp_path, job_id="alpha").save(_state(1), step=1, blocking=True)
    with pytest.raises(CheckpointError, match="belongs to job 'alpha'"):
        Checkpointer(tmp_path, job_id="beta").load_latest()
    man_path = tmp_path / "step-000000001" / "MANIFEST.json"
    man = json.loads(man_path.read_text())
    man["version"] = 99
    man_path.write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="version 99"):
        Checkpointer(tmp_path, job_id="alpha").load_latest()


def test_pickled_payload_is_never_executed(tmp_path: Path) -> None:
    """A tensors.pt that carries a pickled object (with a matching checksum) is rejected."""
    import hashlib

    Checkpointer(tmp_path, job_id="j").save(_state(1), step=1, blocking=True)
    d = tmp_path / "step-000000001"
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"x": Evil()}, d / "tensors.pt")
    data = (d / "tensors.pt").read_bytes()
    man = json.loads((d / "MANIFEST.json").read_text())
    man["files"]["tensors.pt"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (d / "MANIFEST.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError):
        load_checkpoint(d)
    assert not marker.exists()


def test_writer_killed_during_second_write_keeps_first(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path, job_id="j")
    ck.save({"w": torch.full((10,), 1.0), "step": 1}, step=1, blocking=True)
    env = {**os.environ, "SPOTTRAIN_CKPT_WRITE_DELAY_S": "30"}
    code = ("import sys, torch\nfrom spottrain.runtime.checkpoint import Checkpointer\n"
            "Checkpointer(sys.argv[1], job_id='j').save({'w': torch.full((10,), 2.0), 'step': 2}, step=2, blocking=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env)
    try:
        deadline = time.time() + 60
        while not list(tmp_path.glob(".tmp-*/tensors.pt")) and time.time() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.glob(".tmp-*/tensors.pt"))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # The half-written step 2 is visible only under its temporary name and is never loaded.
    assert not (tmp_path / "step-000000002").exists()
    state, info = Checkpointer(tmp_path, job_id="j").load_latest()
    assert info.step == 1 and torch.equal(state["w"], torch.full((10,), 1.0))


def test_sampler_is_keyed_on_position_not_world_size() -> None:
    s = DeterministicSampler(size=100, seed=7)
    batch = s.global_batch(32)
    for world in (1, 2, 3, 4):
        parts = [shard(batch, r, world) for r in range(world)]
        assert sum(parts, []) == batch
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    # Crossing an epoch boundary: every sample exactly once per epoch.
    s2 = DeterministicSampler(size=10, seed=1)
    seen = s2.indices(0, 20)
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert seen[:10] != seen[10:]  # a new permutation per epoch
    assert DeterministicSampler(size=10, seed=1).indices(5, 10) == seen[5:15]
