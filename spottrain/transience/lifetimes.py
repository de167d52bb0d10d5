"""Node lifetimes (duration, revoked-or-censored) derived from traces.

- ``nodes`` traces pair each ``start`` with the node's ``revoke`` (an observed lifetime) or
  ``end`` (censored: job completed, stopped by hand, GCP's 24 h cap); nodes still running at
  the end of the trace are censored there.
- ``alive`` traces only count live instances. A drop by d revokes d of the live nodes; the
  traces do not say which, so we pick them uniformly at random with a fixed seed (unbiased when
  nodes of one zone share a lifetime law). A rise starts new nodes.
- ``availability`` traces record launch attempts, not lifetimes: they feed
  :mod:`spottrain.transience.availability` instead.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from spottrain.errors import InputError
from spottrain.transience.events import Trace

MIN_DURATION_S = 1.0  # zero-length lifetimes (add and remove in the same tick) break log-likelihoods


@dataclass(frozen=True, kw_only=True)
class Lifetimes:
    """Per-node lifetimes of one or more traces."""

    start_s: np.ndarray
    """Start of each node, seconds since its trace began."""
    end_s: np.ndarray
    """Revocation or censoring time of each node (same clock as ``start_s``)."""
    observed: np.ndarray
    """True = revoked at ``end_s``; False = censored (still alive / stopped for another reason)."""
    zone: np.ndarray
    """Zone of each node (``""`` when unknown)."""
    node: np.ndarray
    """Node id."""
    trace: np.ndarray
    """Trace name of each node."""

    @property
    def durations_s(self) -> np.ndarray:
        return np.maximum(self.end_s - self.start_s, MIN_DURATION_S)

    def __len__(self) -> int:
        return len(self.start_s)

    def select(self, mask: np.ndarray) -> Lifetimes:
        """The nodes where ``mask`` is true."""
        return Lifetimes(start_s=self.start_s[mask], end_s=self.end_s[mask],
                         observed=self.observed[mask], zone=self.zone[mask],
                         node=self.node[mask], trace=self.trace[mask])

    def window(self, begin_s: float, end_s: float) -> Lifetimes:
        """Nodes that started in ``[begin_s, end_s)``, censored at ``end_s`` (time hold-out)."""
        keep = (self.start_s >= begin_s) & (self.start_s < end_s)
        sub = self.select(keep)
        cut = sub.end_s > end_s
        return Lifetimes(start_s=sub.start_s, end_s=np.minimum(sub.end_s, end_s),
                         observed=sub.observed & ~cut, zone=sub.zone, node=sub.node, trace=sub.trace)

    @staticmethod
    def concat(parts: list[Lifetimes]) -> Lifetimes:
        """All nodes of ``parts`` (their clocks stay separate; use per trace for windows)."""
        if not parts:
            return Lifetimes(start_s=np.zeros(0), end_s=np.zeros(0), observed=np.zeros(0, bool),
                             zone=np.zeros(0, str), node=np.zeros(0, str), trace=np.zeros(0, str))
        return Lifetimes(**{f: np.concatenate([getattr(p, f) for p in parts])
                            for f in ("start_s", "end_s", "observed", "zone", "node", "trace")})


def node_lifetimes(trace: Trace) -> Lifetimes:
    """Lifetimes of every node seen in ``trace`` (see the module docstring)."""
    if trace.kind == "nodes":
        return _from_nodes(trace)
    if trace.kind == "alive":
        return _from_counts(trace)
    raise InputError(
        f"trace {trace.name!r} is of kind {trace.kind!r}: lifetimes need a 'nodes' or 'alive' "
        "trace (availability traces record launch attempts, price traces prices)"
    )


def _from_nodes(trace: Trace) -> Lifetimes:
    zones = trace.meta.get("node_zone", {})
    open_: dict[str, float] = {}
    rows: list[tuple[float, float, bool, str]] = []
    for e in trace.events:
        if e.event == "start":
            open_[e.source] = e.time_s
        elif e.event in ("revoke", "end") and e.source in open_:
            rows.append((open_.pop(e.source), e.time_s, e.event == "revoke", e.source))
    rows += [(s, trace.duration_s, False, n) for n, s in open_.items()]
    return _pack(rows, [zones.get(r[3], trace.zone or "") for r in rows], trace.name)


def _from_counts(trace: Trace) -> Lifetimes:
    rng = np.random.default_rng(zlib.crc32(trace.name.encode()))
    alive: list[tuple[int, float]] = []  # (node id, start)
    rows: list[tuple[float, float, bool, str]] = []
    next_id = 0
    for e in trace.events:
        if e.event != "available" or e.value is None:
            continue
        target = int(round(e.value))
        while len(alive) > target:
            node, start = alive.pop(int(rng.integers(len(alive))))
            rows.append((start, e.time_s, True, f"{trace.zone}-n{node}"))
        while len(alive) < target:
            alive.append((next_id, e.time_s))
            next_id += 1
    rows += [(s, trace.duration_s, False, f"{trace.zone}-n{n}") for n, s in alive]
    return _pack(rows, [trace.zone or ""] * len(rows), trace.name)


def _pack(rows: list[tuple[float, float, bool, str]], zones: list[str], name: str) -> Lifetimes:
    n = len(rows)
    return Lifetimes(
        start_s=np.array([r[0] for r in rows], float), end_s=np.array([r[1] for r in rows], float),
        observed=np.array([r[2] for r in rows], bool), zone=np.array(zones, dtype=object).astype(str)
        if n else np.zeros(0, str), node=np.array([r[3] for r in rows], dtype=str),
        trace=np.array([name] * n, dtype=str),
    )
