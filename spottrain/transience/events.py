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

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from spottrain.catalog import canonical_gpu, load_catalog
from spottrain.errors import InputError, UnknownNameError

if TYPE_CHECKING:  # the reader of CSV files is loaded only when a user trace is read
    from spottrain.files import CsvTable

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
    # lazy: spottrain.files only when a user trace is read
    from spottrain.files import parse_csv, read_text

    path = Path(path)
    name = str(path)
    text = read_text(path, what="trace")
    table = parse_csv(text, file=name, required=("time_s", "source", "event"), known=USER_COLUMNS, what="trace",
                      pad=True)
    meta = _read_metadata(table, name)
    if not len(table):
        raise InputError(
            "empty trace: expected a header 'time_s,source,event,value' and at least one event",
            file=name, line=max(text.count("\n"), 1),
        )
    events = _read_events(table)
    kind = _trace_kind(meta, events, name)
    duration = _trace_duration(meta, events, name)
    cloud = meta.get("cloud", "unknown").lower()
    if cloud not in ("aws", "gcp", "azure", "unknown"):
        raise InputError(str(UnknownNameError("cloud", cloud, ("aws", "gcp", "azure"))), file=name, column="cloud")
    gpu = meta.get("gpu") or None
    if gpu:
        gpu = _canonical_gpu(gpu)
    _check_instance_gpu(meta.get("instance_type") or None, gpu, cloud, file=name)
    return Trace(
        name=meta.get("name", path.stem), cloud=cloud,
        gpu=gpu, instance_type=meta.get("instance_type") or None,
        zone=meta.get("zone") or None, kind=kind, events=tuple(events),
        duration_s=duration, provenance=meta.get("provenance", f"user trace {name}"),
        meta={"header_line": table.header_line},
    )


def _read_metadata(table: CsvTable, name: str) -> dict[str, str]:
    """The ``# key: value`` comments above the header, keys checked against ``_META_KEYS``."""
    meta: dict[str, str] = {}
    for lineno, raw in table.comments:
        body = raw.strip().lstrip("#").strip()
        if ":" in body and lineno < table.header_line:
            key, _, val = body.partition(":")
            key = key.strip().lower()
            if key not in _META_KEYS:
                raise InputError(
                    f"unknown metadata key {key!r} (known: {', '.join(_META_KEYS)})",
                    file=name, line=lineno,
                )
            meta[key] = val.strip()
    return meta


def _read_events(table: CsvTable) -> list[TraceEvent]:
    """The rows as events: times >= 0 and sorted, known events, each node started before it is
    revoked or ended, a value for ``available`` and ``price``."""
    times = table.numbers("time_s", low=0.0, low_open=False)
    order = np.flatnonzero(np.diff(times) < 0)
    if len(order):
        i = int(order[0]) + 1
        raise table.error(f"events out of order: time {times[i]:g} s comes after {times[i - 1]:g} s; sort by time_s",
                          row=i, column="time_s")
    sources = table.texts("source")
    raw_events = table.texts("event")
    values_text = table.texts("value")
    evs = [e.lower() for e in raw_events]
    events: list[TraceEvent] = []
    running: set[str] = set()
    for i, (t, source, ev) in enumerate(zip(times.tolist(), sources, evs)):
        if not source:
            raise table.error("empty source", row=i, column="source")
        if ev not in EVENTS:
            raise table.error(f"unknown event {raw_events[i]!r}; expected one of {', '.join(EVENTS)}", row=i,
                              column="event")
        value: float | None = None
        if ev in ("available", "price"):
            value = _event_value(table, i, ev, values_text[i])
        elif ev == "start":
            if source in running:
                raise table.error(f"node {source!r} started twice without revoke/end", row=i, column="source")
            running.add(source)
        else:
            if source not in running:
                raise table.error(f"{ev} of node {source!r} that is not running (no start before)", row=i,
                                  column="source")
            running.discard(source)
        events.append(TraceEvent(time_s=t, source=source, event=ev, value=value))
    return events


def _event_value(table: CsvTable, i: int, ev: str, v_text: str) -> float:
    """The value of an ``available`` (a whole count) or ``price`` (USD/h) event in row ``i``."""
    try:
        value = float(v_text)
    except ValueError:
        raise table.error(f"event {ev!r} needs a numeric value, got {v_text!r}", row=i,
                          column="value") from None
    if not math.isfinite(value) or value < 0:
        raise table.error(f"value must be a finite number >= 0, got {v_text!r}", row=i, column="value")
    if ev == "available" and value != int(value):
        raise table.error(f"an 'available' value counts instances: expected a whole number, got {v_text!r}",
                          row=i, column="value")
    return value


def _trace_kind(meta: dict[str, str], events: list[TraceEvent], name: str) -> str:
    """The ``kind`` metadata, else what the events imply."""
    kinds_seen = {e.event for e in events}
    default_kind = ("price" if kinds_seen == {"price"}
                    else "alive" if "available" in kinds_seen else "nodes")
    kind = meta.get("kind", default_kind)
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}",
                         file=name, line=1)
    return kind


def _trace_duration(meta: dict[str, str], events: list[TraceEvent], name: str) -> float:
    """The ``duration_s`` metadata (not before the last event), else the last event's time."""
    duration = events[-1].time_s
    if "duration_s" in meta:
        try:
            duration = float(meta["duration_s"])
        except ValueError:
            raise InputError(f"duration_s must be a number, got {meta['duration_s']!r}",
                             file=name) from None
        if not math.isfinite(duration) or duration <= 0:
            raise InputError(f"duration_s must be a finite number of seconds > 0, got {meta['duration_s']!r}",
                             file=name)
        if duration < events[-1].time_s:
            raise InputError(f"duration_s {duration:g} is before the last event "
                             f"({events[-1].time_s:g} s)", file=name)
    return duration


def _check_instance_gpu(instance_type: str | None, gpu: str | None, cloud: str, *, file: str) -> None:
    """A trace naming both an instance type the catalog knows and a GPU: they must agree."""
    if not instance_type or not gpu:
        return
    offers = [o for o in load_catalog().offers if o.instance_type == instance_type
              and (cloud == "unknown" or o.cloud == cloud)]
    if offers and offers[0].gpu != gpu:
        raise InputError(f"instance type {instance_type} has {offers[0].gpu} GPUs, the trace says gpu {gpu}",
                         file=file, column="gpu")


def _canonical_gpu(name: str) -> str:
    """Canonical GPU name via the catalog, else upper-cased."""
    try:
        return canonical_gpu(name)
    except Exception:  # an unknown GPU in a user trace is still usable as a label
        return name.strip().upper()
