"""Checkpoints that never lose what was saved.

Two phases (CheckFreq): ``snapshot`` copies every tensor to CPU memory in the training thread
(the only stall), ``persist`` writes it in a background thread. A checkpoint is a directory::

    <dir>/step-000000120/
        tensors.pt      flat {key: Tensor}, read back with torch.load(weights_only=True)
        state.json      the plain (non-tensor) part of the state: step, sampler, config ...
        MANIFEST.json   job id, format version, step, sha256 and size of the two files above

It is written under a temporary name, every file is fsync'ed, the manifest goes last, and the
directory is renamed into place (then the parent is fsync'ed): a directory named ``step-*``
is complete or absent. Loading verifies the checksums first and then builds the state, so a
corrupt or truncated checkpoint is never half-loaded. At resume, corrupt checkpoints newer than
the newest one that verifies are set aside under ``corrupt-step-*`` (named in a warning; kept,
never deleted, and never mistaken for the step a new save writes) and that one is used. When
no checkpoint verifies at all, or one belongs to another job or format version, resuming is
refused with a :class:`~spottrain.errors.CheckpointError` naming the files: starting over from
step 0 is the user's decision, not a silent one.

torch.distributed.checkpoint's ``async_save`` is not used: its ``.metadata`` file is a pickle,
and this format must load without unpickling anything. Every worker holds a full replica in
data-parallel training, so one writer (rank 0) suffices.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from spottrain.errors import CheckpointError
from spottrain.runtime.state import flatten, snapshot, unflatten

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "spottrain.checkpoint"
CHECKPOINT_VERSION = 1
_PREFIX = "step-"
_TMP = ".tmp-"
_SET_ASIDE = "corrupt-"
# Testing hook: seconds to sleep between writing the tensors and the manifest, so that a test
# can kill the writer in the middle of a checkpoint write.
_WRITE_DELAY_ENV = "SPOTTRAIN_CKPT_WRITE_DELAY_S"


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo:
    """A complete checkpoint on disk."""

    path: Path
    step: int
    job_id: str
    created_s: float
    size_bytes: int


@dataclass(frozen=True, kw_only=True)
class SaveResult:
    """What one save cost."""

    step: int
    path: Path
    stall_s: float
    """Time the training thread was blocked (snapshot + waiting for the previous write)."""
    persist_s: float
    size_bytes: int


class Checkpointer:
    """Save and load checkpoints of one job in one directory.

    >>> ck = Checkpointer("/tmp/ckpts", job_id="demo", keep=3)   # doctest: +SKIP
    >>> ck.save({"model": model.state_dict(), "step": 10}, step=10)  # async
    >>> state = ck.load_latest()                                   # newest complete one
    """

    def __init__(self, directory: str | os.PathLike[str], *, job_id: str, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.job_id = job_id
        self.keep = max(int(keep), 1)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spottrain-ckpt")
        self._pending: Future[SaveResult] | None = None
        self._lock = threading.Lock()
        self.set_aside_paths: list[tuple[Path, Path, str]] = []
        """Corrupt checkpoints this checkpointer set aside: (old path, new path, why)."""

    # ----------------------------------------------------------------------------- save
    def save(self, state: Any, *, step: int, blocking: bool = False) -> Future[SaveResult]:
        """Snapshot ``state`` now and persist it in the background (or now, if ``blocking``).

        Returns a future of :class:`SaveResult`. Only one write is in flight: a new save waits
        for the previous one first (that wait counts as stall).
        """
        t0 = time.perf_counter()
        self.wait()
        cpu_state = snapshot(state)
        stall_s = time.perf_counter() - t0
        fut = self._pool.submit(self._persist, cpu_state, step, stall_s)
        self._pending = fut
        if blocking:
            fut.result()
        return fut

    def wait(self) -> SaveResult | None:
        """Block until the write in flight (if any) is durable; re-raise its error."""
        fut, self._pending = self._pending, None
        return fut.result() if fut is not None else None

    def close(self) -> None:
        self.wait()
        self._pool.shutdown(wait=True)

    def _persist(self, state: Any, step: int, stall_s: float) -> SaveResult:
        t0 = time.perf_counter()
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"{_PREFIX}{step:09d}"
        if final.exists():
            # Same step already durable (e.g. an emergency save right after a periodic one).
            return SaveResult(step=step, path=final, stall_s=stall_s, persist_s=0.0, size_bytes=0)
        tmp = self.directory / f"{_TMP}{_PREFIX}{step:09d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        tree, tensors = flatten(state)
        buf = io.BytesIO()
        torch.save({k: t.contiguous() for k, t in tensors.items()}, buf)
        files = {
            "tensors.pt": buf.getvalue(),
            "state.json": json.dumps({"tree": tree}, allow_nan=True).encode(),
        }
        for name, data in files.items():
            _write_synced(tmp / name, data)
        delay = float(os.environ.get(_WRITE_DELAY_ENV, "0") or 0)
        if delay > 0:
            time.sleep(delay)
        manifest = {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "job_id": self.job_id,
            "step": step,
            "created_s": time.time(),
            "files": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in files.items()},
        }
        _write_synced(tmp / "MANIFEST.json", json.dumps(manifest, indent=1).encode())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(self.directory)
        self._prune()
        size = sum(len(d) for d in files.values())
        return SaveResult(step=step, path=final, stall_s=stall_s, persist_s=time.perf_counter() - t0, size_bytes=size)

    def _prune(self) -> None:
        complete = sorted(self._complete_dirs(), reverse=True)
        for _, path in complete[self.keep:]:
            shutil.rmtree(path, ignore_errors=True)
        # Leftovers of writers that died mid-write (never this process's write in flight:
        # _persist runs on the only writer thread, so none is in flight now).
        for path in self.directory.glob(f"{_TMP}*"):
            shutil.rmtree(path, ignore_errors=True)

    # ----------------------------------------------------------------------------- load
    def _complete_dirs(self) -> list[tuple[int, Path]]:
        out = []
        if not self.directory.is_dir():
            return out
        for path in self.directory.iterdir():
            if path.is_dir() and path.name.startswith(_PREFIX):
                try:
                    out.append((int(path.name[len(_PREFIX):]), path))
                except ValueError:
                    continue
        return out

    def list(self) -> list[CheckpointInfo]:
        """Complete checkpoints (by name), newest first; not verified."""
        infos = []
        for step, path in sorted(self._complete_dirs(), reverse=True):
            try:
                man = json.loads((path / "MANIFEST.json").read_text())
                infos.append(CheckpointInfo(path=path, step=step, job_id=str(man.get("job_id")),
                                            created_s=float(man.get("created_s", 0.0)),
                                            size_bytes=sum(int(f["bytes"]) for f in man["files"].values())))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return infos

    def load_latest(self) -> tuple[Any, CheckpointInfo] | None:
        """The newest checkpoint that verifies and loads, or ``None`` when the directory holds none.

        Corrupt ones newer than it are set aside (:meth:`set_aside`). Raises
        :class:`CheckpointError` when one belongs to another job or format version (a wrong
        directory must not be trained on silently) and when there are checkpoints but none of
        them can be read (the message names each file and what is wrong with it).
        """
        return self._resume(load=True)

    def check_resumable(self) -> CheckpointInfo | None:
        """What :meth:`load_latest` would resume from, verified (manifest, job, version and the
        checksums) without building the state; the same refusals, the same corrupt checkpoints
        set aside. A launcher calls it before any worker starts."""
        found = self._resume(load=False)
        return found[1] if found is not None else None

    def _resume(self, *, load: bool) -> tuple[Any, CheckpointInfo] | None:
        corrupt: list[tuple[Path, str]] = []
        for step, path in sorted(self._complete_dirs(), reverse=True):
            try:
                state = load_checkpoint(path, job_id=self.job_id, verify_only=not load)
                info = self._info(path, step)
            except _Corrupt as exc:
                corrupt.append((path, str(exc)))
                continue
            except FileNotFoundError:  # pruned by a running writer while this one read it
                continue
            for bad, why in corrupt:
                self.set_aside(bad, why)
            return state, info
        if corrupt:
            raise CheckpointError(
                f"no checkpoint in {self.directory} can be read: " + "; ".join(why for _, why in corrupt)
                + ". Nothing was deleted: move them away (or use another checkpoint directory) to start from step 0")
        return None

    def set_aside(self, path: Path, why: str) -> Path | None:
        """Rename the corrupt checkpoint ``path`` to ``corrupt-step-*`` beside it and log a warning
        naming both; the new name, or ``None`` when another process moved or pruned it first."""
        for n in range(100):
            target = path.with_name(f"{_SET_ASIDE}{path.name}" + (f"-{n}" if n else ""))
            if target.exists():
                continue
            try:
                os.rename(path, target)
            except FileNotFoundError:
                return None
            except OSError:
                continue  # taken meanwhile by another worker doing the same
            log.warning("corrupt checkpoint %s (%s): set aside as %s; resuming from an older one", path, why,
                        target.name)
            self.set_aside_paths.append((path, target, why))
            return target
        return None

    def _info(self, path: Path, step: int) -> CheckpointInfo:
        man = json.loads((path / "MANIFEST.json").read_text())
        return CheckpointInfo(path=path, step=step, job_id=self.job_id, created_s=float(man["created_s"]),
                              size_bytes=sum(int(f["bytes"]) for f in man["files"].values()))


class _Corrupt(CheckpointError):
    """Checksum mismatch, missing or unreadable file: skip this checkpoint."""


def load_checkpoint(path: str | os.PathLike[str], *, job_id: str | None = None, verify_only: bool = False) -> Any:
    """Verify and load one checkpoint directory; never unpickles arbitrary objects.

    Raises :class:`CheckpointError` when it belongs to another job (``job_id`` given) or
    another format version, and a subclass of it when it is corrupt. ``verify_only``: check
    the manifest and the checksums, build nothing, return ``None``.
    """
    path = Path(path)
    try:
        man = json.loads((path / "MANIFEST.json").read_text())
    except FileNotFoundError:
        raise _Corrupt(f"{path}: no MANIFEST.json (incomplete checkpoint)") from None
    except (OSError, ValueError) as exc:
        raise _Corrupt(f"{path}: unreadable MANIFEST.json ({exc})") from None
    if not isinstance(man, dict) or man.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a spottrain checkpoint")
    if man.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {man.get('version')!r} is not supported "
            f"(this spottrain reads version {CHECKPOINT_VERSION})")
    if job_id is not None and man.get("job_id") != job_id:
        raise CheckpointError(
            f"{path}: checkpoint belongs to job {man.get('job_id')!r}, not {job_id!r}; "
            "use another --checkpoint-dir or pass the matching --job-id")
    blobs: dict[str, bytes] = {}
    for name in ("tensors.pt", "state.json"):
        entry = man.get("files", {}).get(name)
        if entry is None:
            raise _Corrupt(f"{path}: manifest lists no {name}")
        try:
            data = (path / name).read_bytes()
        except OSError as exc:
            raise _Corrupt(f"{path}/{name}: {exc}") from None
        if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise _Corrupt(f"{path}/{name}: checksum mismatch (file corrupted)")
        blobs[name] = data
    if verify_only:
        return None
    try:
        tensors = torch.load(io.BytesIO(blobs["tensors.pt"]), map_location="cpu", weights_only=True)
        tree = json.loads(blobs["state.json"])["tree"]
    except Exception as exc:  # noqa: BLE001 - any decode failure means a bad file
        raise _Corrupt(f"{path}: cannot decode ({exc})") from None
    if not isinstance(tensors, dict) or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        raise _Corrupt(f"{path}/tensors.pt: not a flat tensor dict")
    return unflatten(tree, tensors)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
