"""One normalized event model for spot traces, and the user trace CSV format.

A trace is a time-ordered sequence of :class:`TraceEvent` with provenance. Four event kinds:

- ``start``: node ``source`` started (is running) at ``time_s``;
- ``revoke``: node ``source`` was revoked (preempted) by the cloud at ``time_s``;
- ``end``: node ``source`` stopped for another reason (job finished, stopped by hand, 24 h cap
  of GCP preemptible VMs): a censored lifetime, not a revocation;
- ``available``: ``value`` = number of spot instances available (``kind="availability"``:
  launch attempts) or alive (``kind="alive"``: instances kept running and relaunched) in zone
  ``source`` from ``time_s`` until the next ``available`` event of that source (a step function);
- ``price``: ``value`` = spot price in USD/h of ``source`` from ``time_s`` on.

User CSV format (documented in ``docs/transience.md``)::

    # cloud: aws
    # gpu: V100
    # zone: us-east-1a
    # kind: nodes
    # duration_s: 86400
    time_s,source,event,value
    0,node1,start,
    3600,node1,revoke,
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from spottrain.errors import InputError

EVENTS = ("start", "revoke", "end", "available", "price")
KINDS = ("nodes", "alive", "availability", "price")
USER_COLUMNS = ("time_s", "source", "event", "value")
_META_KEYS = ("name", "cloud", "gpu", "instance_type", "zone", "kind", "duration_s", "provenance")


@dataclass(frozen=True, kw_only=True)
class TraceEvent:
    """One event of a trace (see the module docstring for the meaning of ``event``)."""

    time_s: float
    """Seconds since the start of the trace (>= 0)."""
    source: str
    """Node id (start/revoke/end), zone (available) or zone/instance (price)."""
    event: str
    """One of ``start``, ``revoke``, ``end``, ``available``, ``price``."""
    value: float | None = None
    """Count (available) or USD/h (price); ``None`` for node events."""


@dataclass(frozen=True, kw_only=True)
class Trace:
    """A normalized spot trace: sorted events plus what it is about and where it came from."""

    name: str
    cloud: str
    """``aws`` or ``gcp`` (or what a user trace says)."""
    gpu: str | None
    """Canonical GPU name (``V100``), ``None`` for CPU traces."""
    instance_type: str | None
    zone: str | None
    """Zone when the whole trace is in one zone, else ``None`` (see event sources)."""
    kind: str
    """``nodes`` (start/revoke/end), ``alive``, ``availability`` or ``price``."""
    events: tuple[TraceEvent, ...]
    duration_s: float
    """Observation window: nodes still alive at ``duration_s`` are censored."""
    provenance: str
    """File(s) and paper/repository the events come from."""
    capacity: int | None = None
    """Number of instances requested (multi-node availability / alive traces)."""
    start_unix_s: float | None = None
    """Wall-clock time of ``time_s == 0`` when known."""
    meta: dict = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.events)

    def sources(self) -> list[str]:
        """Distinct event sources in order of first appearance."""
        return list(dict.fromkeys(e.source for e in self.events))


def check_sorted(events: list[TraceEvent]) -> None:
    """Internal invariant: events are sorted by time (loaders sort before building a Trace)."""
    assert all(a.time_s <= b.time_s for a, b in zip(events, events[1:])), "events not sorted"


def load_user_trace(path: str | Path) -> Trace:
    """Read a trace CSV in the documented format (``docs/transience.md``).

    Raises :class:`~spottrain.errors.InputError` naming the file and line for an empty file,
    unknown or missing columns, unknown events, non-numeric, negative or decreasing times, a
    revoke/end of a node that is not running, and a missing ``value`` for available/price.

    >>> t = load_user_trace("my_trace.csv")  # doctest: +SKIP
    """
    path = Path(path)
    name = str(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError("file not found", file=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", file=name) from None

    meta: dict[str, str] = {}
    header: list[str] | None = None
    header_line = 0
    rows: list[tuple[int, list[str]]] = []
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        if text.startswith("#"):
            body = text.lstrip("#").strip()
            if ":" in body and header is None:
                key, _, val = body.partition(":")
                key = key.strip().lower()
                if key not in _META_KEYS:
                    raise InputError(
                        f"unknown metadata key {key!r} (known: {', '.join(_META_KEYS)})",
                        file=name, line=lineno,
                    )
                meta[key] = val.strip()
            continue
        cells = next(csv.reader([raw]))
        if header is None:
            header = [c.strip() for c in cells]
            header_line = lineno
            for col in header:
                if col not in USER_COLUMNS:
                    raise InputError(
                        f"unknown column {col!r}; expected columns {', '.join(USER_COLUMNS)}",
                        file=name, line=lineno, column=col,
                    )
            for col in ("time_s", "source", "event"):
                if col not in header:
                    raise InputError(f"missing column {col!r}", file=name, line=lineno)
            continue
        if len(cells) > len(header):
            raise InputError(
                f"{len(cells)} fields but the header has {len(header)}", file=name, line=lineno
            )
        rows.append((lineno, cells + [""] * (len(header) - len(cells))))

    if header is None or not rows:
        raise InputError(
            "empty trace: expected a header 'time_s,source,event,value' and at least one event",
            file=name, line=max(len(lines), 1),
        )

    col = {c: i for i, c in enumerate(header)}
    events: list[TraceEvent] = []
    running: set[str] = set()
    last_t = -math.inf
    for lineno, cells in rows:
        t_text = cells[col["time_s"]].strip()
        try:
            t = float(t_text)
        except ValueError:
            raise InputError(f"expected a number of seconds, got {t_text!r}",
                             file=name, line=lineno, column="time_s") from None
        if not math.isfinite(t) or t < 0:
            raise InputError(f"time must be >= 0 seconds, got {t_text!r}",
                             file=name, line=lineno, column="time_s")
        if t < last_t:
            raise InputError(
                f"events out of order: time {t:g} s comes after {last_t:g} s; sort by time_s",
                file=name, line=lineno, column="time_s",
            )
        last_t = t
        source = cells[col["source"]].strip()
        if not source:
            raise InputError("empty source", file=name, line=lineno, column="source")
        ev = cells[col["event"]].strip().lower()
        if ev not in EVENTS:
            raise InputError(f"unknown event {ev!r}; expected one of {', '.join(EVENTS)}",
                             file=name, line=lineno, column="event")
        value: float | None = None
        v_text = cells[col["value"]].strip() if "value" in col else ""
        if ev in ("available", "price"):
            try:
                value = float(v_text)
            except ValueError:
                raise InputError(f"event {ev!r} needs a numeric value, got {v_text!r}",
                                 file=name, line=lineno, column="value") from None
            if not math.isfinite(value) or value < 0:
                raise InputError(f"value must be >= 0, got {v_text!r}",
                                 file=name, line=lineno, column="value")
        elif ev == "start":
            if source in running:
                raise InputError(f"node {source!r} started twice without revoke/end",
                                 file=name, line=lineno, column="source")
            running.add(source)
        else:
            if source not in running:
                raise InputError(f"{ev} of node {source!r} that is not running (no start before)",
                                 file=name, line=lineno, column="source")
            running.discard(source)
        events.append(TraceEvent(time_s=t, source=source, event=ev, value=value))

    kinds_seen = {e.event for e in events}
    default_kind = ("price" if kinds_seen == {"price"}
                    else "alive" if "available" in kinds_seen else "nodes")
    kind = meta.get("kind", default_kind)
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}",
                         file=name, line=1)
    duration = events[-1].time_s
    if "duration_s" in meta:
        try:
            duration = float(meta["duration_s"])
        except ValueError:
            raise InputError(f"duration_s must be a number, got {meta['duration_s']!r}",
                             file=name) from None
        if duration < events[-1].time_s:
            raise InputError(f"duration_s {duration:g} is before the last event "
                             f"({events[-1].time_s:g} s)", file=name)
    gpu = meta.get("gpu") or None
    if gpu:
        gpu = _canonical_gpu(gpu)
    return Trace(
        name=meta.get("name", path.stem), cloud=meta.get("cloud", "unknown").lower(),
        gpu=gpu, instance_type=meta.get("instance_type") or None,
        zone=meta.get("zone") or None, kind=kind, events=tuple(events),
        duration_s=duration, provenance=meta.get("provenance", f"user trace {name}"),
        meta={"header_line": header_line},
    )


def _canonical_gpu(name: str) -> str:
    """Canonical GPU name via the catalog when it is available, else upper-cased."""
    try:
        from spottrain.catalog import canonical_gpu  # type: ignore[attr-defined]
    except ImportError:
        return name.strip().upper()
    try:
        return canonical_gpu(name)
    except Exception:  # an unknown GPU in a user trace is still usable as a label
        return name.strip().upper()
