"""Fault-injection schedules for the local backend.

``--inject kill:1@20s,sigterm:2@40s,kill:chief@1m`` or a JSON trace (``--inject-trace``): a
list of ``{"time_s": 20, "worker": 1, "kind": "kill"}``, as the simulator writes them
(``kind`` may also be ``revoke`` = kill and ``notice`` = sigterm). ``worker`` is a worker slot
(0 .. N-1; a replacement takes over its predecessor's slot) or ``chief`` (whoever is rank 0
at that moment). ``kill:0@ckpt`` kills the worker at the first moment a checkpoint is being
written (a test of atomic checkpoints); ``kill:1@step40`` once 40 steps are complete.

Kinds: ``kill`` (SIGKILL: no notice), ``sigterm`` (a preemption notice), ``stop`` (SIGSTOP: the
process hangs, its connections stay open and silent), and, on hosts in network namespaces
(:mod:`spottrain.runtime.netns`): ``linkdown`` (the worker's host link goes down: silent loss),
``vanish`` (the host disappears: link down, then every process in it killed), ``loss`` and
``delay`` (on the host's link: 5 % random loss, 50 ms +- 10 ms delay with ``tc netem``; where the
kernel has no netem, :meth:`~spottrain.runtime.netns.Network.impair` says what stands in). A
duration after a slash (``stop:1@20s/15s``, ``loss:2@step30/20s``) undoes the fault after that
long (SIGCONT, link up, impairment removed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from spottrain.errors import InputError
from spottrain.units import parse_duration_s

KINDS = {"kill": "kill", "revoke": "kill", "sigkill": "kill", "sigterm": "sigterm", "notice": "sigterm", "term": "sigterm",
         "stop": "stop", "sigstop": "stop", "linkdown": "linkdown", "vanish": "vanish", "loss": "loss", "delay": "delay"}
NETWORK_KINDS = ("linkdown", "vanish", "loss", "delay")
"""Faults that need the workers on hosts in network namespaces."""


@dataclass(frozen=True, kw_only=True)
class Injection:
    """One fault on one worker (or its host)."""

    time_s: float | None
    """Seconds after training starts (the first completed step); ``None`` for step/ckpt triggers."""
    worker: int | str
    """Slot index, or ``"chief"``."""
    kind: str
    """``kill``, ``sigterm``, ``stop``, ``linkdown``, ``vanish``, ``loss`` or ``delay``."""
    on_checkpoint: bool = False
    """Fire when a checkpoint write is in progress instead of at a time."""
    at_step: int | None = None
    """Fire once the job has completed this many steps instead of at a time."""
    duration_s: float | None = None
    """Undo the fault after this long (stop, linkdown, loss, delay); None: never."""


_ITEM = re.compile(r"^\s*(?P<kind>[a-z]+):(?P<worker>chief|\d+)@(?P<when>[^,]+?)\s*$")


def parse_injections(spec: str, *, workers: int | None = None) -> list[Injection]:
    """Parse ``kill:1@20s,sigterm:2@40s``."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        m = _ITEM.match(item)
        if not m or m["kind"] not in KINDS:
            raise InputError(f"bad injection {item!r}: expected KIND:WORKER@TIME[/DURATION] with KIND one of "
                             f"{', '.join(sorted(set(KINDS.values())))}, WORKER a slot number or 'chief', TIME like "
                             "20s, step40 or ckpt", column="--inject")
        worker: int | str = m["worker"] if m["worker"] == "chief" else int(m["worker"])
        _check_worker(worker, workers, "--inject")
        kind = KINDS[m["kind"]]
        when, _, dur = m["when"].partition("/")
        duration = None
        if dur:
            try:
                duration = float(parse_duration_s(dur))
            except Exception:  # noqa: BLE001 - report in our own words
                raise InputError(f"bad duration {dur!r} in {item!r} (expected e.g. 15s)", column="--inject") from None
            if kind in ("kill", "sigterm", "vanish"):
                raise InputError(f"{kind} cannot be undone: no /DURATION in {item!r}", column="--inject")
        step = re.fullmatch(r"step(\d+)", when)
        if step:
            out.append(Injection(time_s=None, worker=worker, kind=kind, at_step=int(step[1]), duration_s=duration))
        elif when == "ckpt":
            out.append(Injection(time_s=None, worker=worker, kind=kind, on_checkpoint=True, duration_s=duration))
        else:
            try:
                t = parse_duration_s(when)
            except Exception:  # noqa: BLE001 - report in our own words
                raise InputError(f"bad time {when!r} in {item!r} (expected e.g. 20s, 1.5m)", column="--inject") from None
            out.append(Injection(time_s=float(t), worker=worker, kind=kind, duration_s=duration))
    return out


def needs_hosts(injections: list[Injection]) -> list[str]:
    """The network faults among ``injections`` (they need workers on namespace hosts)."""
    return sorted({i.kind for i in injections if i.kind in NETWORK_KINDS})


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
