"""Fault-injection schedules for the local backend.

``--inject kill:1@20s,sigterm:2@40s,kill:chief@1m`` or a JSON trace (``--inject-trace``): a
list of ``{"time_s": 20, "worker": 1, "kind": "kill"}``, as the simulator writes them
(``kind`` may also be ``revoke`` = kill and ``notice`` = sigterm). ``worker`` is a worker slot
(0 .. N-1; a replacement takes over its predecessor's slot) or ``chief`` (whoever is rank 0
at that moment). ``kill:0@ckpt`` kills the worker at the first moment a checkpoint is being
written (a test of atomic checkpoints); ``kill:1@step40`` once 40 steps are complete.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from spottrain.errors import InputError
from spottrain.units import parse_duration_s

KINDS = {"kill": "kill", "revoke": "kill", "sigkill": "kill", "sigterm": "sigterm", "notice": "sigterm", "term": "sigterm"}


@dataclass(frozen=True, kw_only=True)
class Injection:
    """Kill (SIGKILL, no notice) or notify (SIGTERM) one worker at a time."""

    time_s: float | None
    """Seconds after training starts (the first completed step); ``None`` for step/ckpt triggers."""
    worker: int | str
    """Slot index, or ``"chief"``."""
    kind: str
    """``kill`` or ``sigterm``."""
    on_checkpoint: bool = False
    """Fire when a checkpoint write is in progress instead of at a time."""
    at_step: int | None = None
    """Fire once the job has completed this many steps instead of at a time."""


_ITEM = re.compile(r"^\s*(?P<kind>[a-z]+):(?P<worker>chief|\d+)@(?P<when>[^,]+?)\s*$")


def parse_injections(spec: str, *, workers: int | None = None) -> list[Injection]:
    """Parse ``kill:1@20s,sigterm:2@40s``."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        m = _ITEM.match(item)
        if not m or m["kind"] not in KINDS:
            raise InputError(f"bad injection {item!r}: expected KIND:WORKER@TIME with KIND kill or sigterm, "
                             "WORKER a slot number or 'chief', TIME like 20s, step40 or ckpt", column="--inject")
        worker: int | str = m["worker"] if m["worker"] == "chief" else int(m["worker"])
        _check_worker(worker, workers, "--inject")
        step = re.fullmatch(r"step(\d+)", m["when"])
        if step:
            out.append(Injection(time_s=None, worker=worker, kind=KINDS[m["kind"]], at_step=int(step[1])))
        elif m["when"] == "ckpt":
            out.append(Injection(time_s=None, worker=worker, kind=KINDS[m["kind"]], on_checkpoint=True))
        else:
            try:
                t = parse_duration_s(m["when"])
            except Exception:  # noqa: BLE001 - report in our own words
                raise InputError(f"bad time {m['when']!r} in {item!r} (expected e.g. 20s, 1.5m)", column="--inject") from None
            out.append(Injection(time_s=float(t), worker=worker, kind=KINDS[m["kind"]]))
    return out


def load_injection_trace(path: str | Path, *, workers: int | None = None) -> list[Injection]:
    """Read a JSON list of ``{time_s, worker, kind}``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", file=str(path), line=exc.lineno) from None
    if isinstance(data, dict):
        data = data.get("events", data.get("schedule"))
    if not isinstance(data, list):
        raise InputError("expected a JSON list of {time_s, worker, kind}", file=str(path))
    out = []
    for i, ev in enumerate(data):
        try:
            kind = KINDS[str(ev["kind"]).lower()]
            worker = ev["worker"] if ev["worker"] == "chief" else int(ev["worker"])
            t = float(ev["time_s"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"entry {i}: expected {{time_s: number, worker: slot or 'chief', kind: kill|sigterm}}, "
                             f"got {ev!r}", file=str(path)) from None
        if t < 0:
            raise InputError(f"entry {i}: time_s must be >= 0", file=str(path))
        _check_worker(worker, workers, str(path))
        out.append(Injection(time_s=t, worker=worker, kind=kind))
    return sorted(out, key=lambda i: i.time_s or 0.0)


def _check_worker(worker: int | str, workers: int | None, where: str) -> None:
    if isinstance(worker, int) and workers is not None and not 0 <= worker < workers:
        raise InputError(f"worker {worker} does not exist (slots 0..{workers - 1})", column=where)
