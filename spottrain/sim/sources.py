"""Where revocations come from: a replayed trace, a pool of traces of one market, lifetimes sampled
from a fitted model, or nothing (:class:`NoRevocations`, a cluster without spot nodes).

Both answer two questions for a spot node that holds *slot* ``j`` of the job's spot nodes:

- ``acquire_time(t, j)``: the earliest time >= ``t`` at which the cloud grants such a node;
- ``revoke_time(t, j)``: when a node granted at ``t`` is revoked (``inf``: never, within the trace).

**Trace replay (capacity mapping).** A trace is turned into a step function ``c(tau)``: the
number of spot instances available or alive in a zone (availability / alive traces), or the
number of nodes running (node traces of spot clusters). With ``K`` the trace's capacity and
``N`` the job's spot nodes, slot ``j`` is up while ``c(tau) * N / K > j`` - so a 1-node trace
revokes and grants the whole job at once (the "Can't Be Late" convention), and a 16-node trace
maps node for node. Every run starts at a random offset into the trace (the trace is tiled so
that a run may wrap around its end); revocations stay correlated across nodes as in reality.

**Lifetime sampling.** Each node granted at ``t`` lives ``L ~ model.sample`` seconds (GCP: at
most 24 h); replacements are granted at once (their delay is sampled by the job). Node traces
of GCP preemptible VMs (independent lifetimes) are replayed this way, by bootstrap. Where a
market's traces show revocations that take a whole group at once (a share ``w`` of a node's
revocations, :func:`spottrain.transience.group_outage`), a node's fitted hazard is split between
two competing causes: its own revocation (hazard ``(1 - w) h``) and its group's outage (hazard
``w h``, one clock per group, started by the first node granted while the group stands empty and
striking every node of the group then up). A node's lifetime still follows the fitted law, and
a share ``w`` of its revocations come in outages, as the planner counts them
(:class:`spottrain.planner.risk.Revocation`). After an outage the market has no capacity for one
wait, shared by the group (drawn from the replacement delay's waits): every node requested before
it ends is granted when it ends. In the AWS V100 traces of 4 and 16 nodes the first node is back
2.2 h after an outage on average, against 2.3 h for a single node's wait: the waits after an outage
are one wait, not one each (which would bring the first node back within the shortest of them).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.catalog import gpu_label
from spottrain.clouds import GCP_PREEMPTIBLE_CAP_S, vm_startup_s
from spottrain.errors import InputError
from spottrain.transience import group_outage, lifetime_model, list_traces, load_trace, replacement_delay
from spottrain.units import plural

INF = math.inf


class NoRevocations:
    """The revocation source of a cluster without spot nodes: nothing is ever revoked."""

    kind = "none"
    description = "no spot nodes: no revocations"
    mean_up_fraction = 1.0

    def for_run(self, rng: np.random.Generator) -> "NoRevocations":
        return self

    def acquire_time(self, t: float, slot: int, group: Any = None) -> float:
        return t

    def revoke_time(self, t: float, slot: int, group: Any = None) -> float:
        return INF


class RunRevocations:
    """The revocation process of one run (already offset / seeded)."""

    kind = "base"

    def acquire_time(self, t: float, slot: int, group: Any = None) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def revoke_time(self, t: float, slot: int, group: Any = None) -> float:  # pragma: no cover - interface
        """``group``: which of the job's node groups the node belongs to (only sampled lifetimes,
        whose outages strike one group, tell groups apart)."""
        raise NotImplementedError


# ---------------------------------------------------------------- trace capacity
@dataclass
class _Levels:
    times: list[float]
    down: list[int]
    """down[i]: first index >= i whose capacity is at or below this level (len = never)."""
    up: list[int]
    """up[i]: first index >= i whose capacity is above this level."""


class CapacityTrace:
    """A trace prepared for fast replay (precomputed once, shared by all runs)."""

    kind = "trace"

    def __init__(self, name: str, times: np.ndarray, values: np.ndarray, capacity: float,
                 duration_s: float, nodes: int, horizon_s: float, description: str) -> None:
        if duration_s <= 0 or len(times) == 0:
            raise InputError(f"trace {name} has no events to replay")
        self.name, self.duration_s, self.nodes, self.capacity = name, float(duration_s), max(nodes, 1), float(capacity)
        self.description = description
        tiles = int(math.ceil((duration_s + horizon_s) / duration_s)) + 1
        t = np.concatenate([times + k * duration_s for k in range(tiles)])
        v = np.tile(values, tiles)
        self._times = t.tolist()
        n = len(t)
        idx = np.arange(n)
        self._levels: dict[int, _Levels] = {}
        self._slot_level: list[int] = []
        for j in range(self.nodes):
            # slot j is up while c * N / K > j  <=>  c > j * K / N
            thr = j * self.capacity / self.nodes
            key = int(math.floor(thr * 1000 + 1e-9))
            self._slot_level.append(key)
            if key in self._levels:
                continue
            below = v <= thr + 1e-12
            self._levels[key] = _Levels(
                times=self._times,
                down=_next_true(below, idx, n),
                up=_next_true(~below, idx, n),
            )
        self.mean_up_fraction = float(np.mean(values > 0))
        self.fixed_offset_s: float | None = None
        """Replay from this offset in every run (tests, what-if replays) instead of a random one."""

    def for_run(self, rng: np.random.Generator) -> "TraceRun":
        offset = rng.uniform(0.0, self.duration_s)
        return TraceRun(self, float(offset if self.fixed_offset_s is None else self.fixed_offset_s))


def _next_true(mask: np.ndarray, idx: np.ndarray, n: int) -> list[int]:
    pos = np.where(mask, idx, n)
    return np.minimum.accumulate(pos[::-1])[::-1].tolist()


class TraceRun(RunRevocations):
    kind = "trace"

    def __init__(self, trace: CapacityTrace, offset_s: float) -> None:
        self.trace, self.offset_s = trace, offset_s
        # A trace grants and revokes many nodes at the same instant: remember the last answers.
        self._memo: dict[tuple[bool, float, int], float] = {}

    def _lv(self, slot: int) -> tuple[int, _Levels]:
        tr = self.trace
        key = tr._slot_level[min(slot, tr.nodes - 1)]
        return key, tr._levels[key]

    def _index(self, t: float) -> int:
        return max(bisect.bisect_right(self.trace._times, t + self.offset_s) - 1, 0)

    def acquire_time(self, t: float, slot: int, group: Any = None) -> float:
        key, lv = self._lv(slot)
        memo = (True, t, key)
        hit = self._memo.get(memo)
        if hit is not None:
            return hit
        k = lv.up[self._index(t)]
        out = INF if k >= len(lv.times) else max(t, lv.times[k] - self.offset_s)
        if len(self._memo) > 64:
            self._memo.clear()
        self._memo[memo] = out
        return out

    def revoke_time(self, t: float, slot: int, group: Any = None) -> float:
        key, lv = self._lv(slot)
        memo = (False, t, key)
        hit = self._memo.get(memo)
        if hit is not None:
            return hit
        i = self._index(t)
        k = lv.down[i]
        if k == i:  # already down at t (granted at a boundary): the next one
            k = lv.down[min(i + 1, len(lv.down) - 1)] if i + 1 < len(lv.down) else len(lv.times)
        out = INF if k >= len(lv.times) else max(t, lv.times[k] - self.offset_s)
        if len(self._memo) > 64:
            self._memo.clear()
        self._memo[memo] = out
        return out


# ---------------------------------------------------------------- lifetime sampling
class LifetimeSource:
    """Lifetimes drawn from a sampler (fitted model or empirical bootstrap).

    ``sample(n, rng)`` draws lifetimes; with ``outage_share`` w > 0 it must also take a third
    argument, the share of the hazard to draw under (``sample(n, rng, s)``: survival S^s), and
    a node's own lifetime is drawn under 1 - w of it, its group's outages under w (module docstring)."""

    kind = "model"

    def __init__(self, sample: Callable[..., np.ndarray], description: str, cap_s: float | None,
                 outage_share: float = 0.0, outage_wait: Callable[[int, np.random.Generator], np.ndarray] | None = None
                 ) -> None:
        self.sample, self.description, self.cap_s = sample, description, cap_s
        self.outage_share = min(max(float(outage_share), 0.0), 1.0)
        self.outage_wait = outage_wait
        """``outage_wait(n, rng)``: how long the market has no capacity after an outage (None: no wait)."""
        self.name = description

    def own(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lifetimes of nodes to their own revocation (an outage may come first)."""
        w = self.outage_share
        if w == 0.0:
            return np.asarray(self.sample(n, rng), float)
        return np.asarray(self.sample(n, rng, 1.0 - w), float) if w < 1.0 else np.full(n, INF)

    def outages(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` times from a group's first grant to its outage (inf without outages)."""
        w = self.outage_share
        return np.asarray(self.sample(n, rng, w), float) if w > 0.0 else np.full(n, INF)

    def waits(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` waits for capacity after an outage (s)."""
        return np.zeros(n) if self.outage_wait is None else np.asarray(self.outage_wait(n, rng), float)

    def for_run(self, rng: np.random.Generator) -> "LifetimeRun":
        return LifetimeRun(self, rng)


@dataclass
class _Generation:
    """A group's nodes since it last stood empty: when its outage strikes, when capacity is back
    after it, the last revocation handed to its nodes so far, and whether the outage struck any."""

    strike: float
    back: float
    last: float = -INF
    struck: bool = False


class LifetimeRun(RunRevocations):
    kind = "model"

    def __init__(self, src: LifetimeSource, rng: np.random.Generator) -> None:
        self.src, self.rng = src, rng
        self._pool: list[float] = []
        self._groups: dict[Any, _Generation] = {}

    def acquire_time(self, t: float, slot: int, group: Any = None) -> float:
        g = self._groups.get(group)
        return g.back if g is not None and g.struck and g.strike <= t < g.back else t

    def revoke_time(self, t: float, slot: int, group: Any = None) -> float:
        if not self._pool:
            self._pool = self.src.own(64, self.rng).tolist()[::-1]
        life = self._pool.pop()
        if self.src.cap_s is not None:
            life = min(life, self.src.cap_s)
        if self.src.outage_share == 0.0:
            return t + life
        g = self._groups.get(group)
        if g is None or t >= g.last:  # every node of the group is gone: a fresh outage clock
            strike = t + float(self.src.outages(1, self.rng)[0])
            g = self._groups[group] = _Generation(strike, strike + float(self.src.waits(1, self.rng)[0]))
        rv = min(t + life, g.strike)
        g.last, g.struck = max(g.last, rv), g.struck or rv == g.strike
        return rv


# ---------------------------------------------------------------- construction
def run_horizon_s(plan, params: Any = None) -> float:
    """Simulated time after which a run of ``plan`` gives up: ``params.horizon_s`` (a
    :class:`~spottrain.sim.setup.SimParams`) when set, else 5x the plan's predicted duration and at
    least 2 days (long enough for a run that loses most of its nodes to finish); 2 days when the
    analytical model says the plan never finishes (revocations faster than it recovers)."""
    given = params.horizon_s if params is not None else None
    predicted = plan.prediction.duration_s
    return float(given or max(5.0 * predicted if math.isfinite(predicted) else 0.0, 2 * 86400.0))


def _trace_matches(trace, plan) -> bool:
    for g in plan.groups:
        if not g.spot:
            continue
        if trace.instance_type and trace.instance_type == g.instance_type:
            return True
        if trace.gpu and gpu_label(trace.gpu) == gpu_label(g.gpu):
            return True
    return False


def from_trace(name: str, plan, horizon_s: float):
    """Prepare trace ``name`` for replay against ``plan`` (raises InputError when it does not fit)."""
    trace = load_trace(name)
    spot_nodes = sum(g.count for g in plan.groups if g.spot)
    if spot_nodes == 0:
        raise InputError(f"the plan has no spot nodes: trace {name} has nothing to revoke")
    if trace.kind == "price" or not any(e.event in ("start", "revoke", "available") for e in trace.events):
        raise InputError(f"trace {name} holds no availability or revocation events (kind {trace.kind})")
    if not _trace_matches(trace, plan):
        types = ", ".join(sorted({f'{g.gpu} ({g.instance_type})' for g in plan.groups if g.spot}))
        about = trace.instance_type or trace.gpu or "unknown instances"
        raise InputError(
            f"trace {name} has no events for the plan's spot instance types {types}: it is about "
            f"{trace.gpu or '?'} ({about}); pick a matching trace (spottrain transience --list) or use --model fitted"
        )
    gcp_cap = GCP_PREEMPTIBLE_CAP_S if trace.cloud == "gcp" else None
    if trace.kind == "nodes" and (trace.cloud == "gcp" or "max_lifetime_s" in trace.meta):
        lives, started = [], {}
        for e in trace.events:
            if e.event == "start":
                started[e.source] = e.time_s
            elif e.source in started:
                life = e.time_s - started.pop(e.source)
                lives.append(life if e.event == "revoke" else INF)
        if not lives:
            raise InputError(f"trace {name} has no node lifetimes")
        arr = np.asarray(lives, dtype=float)
        return LifetimeSource(lambda n, rng: arr[rng.integers(0, len(arr), n)],
                              f"bootstrap of {len(arr)} node lifetimes from {name}", gcp_cap)
    if trace.kind == "nodes":
        times, values, running = [], [], 0
        for e in trace.events:
            if e.event == "start":
                running += 1
            elif e.event in ("revoke", "end"):
                running = max(running - 1, 0)
            else:
                continue
            if times and times[-1] == e.time_s:
                values[-1] = running
            else:
                times.append(e.time_s)
                values.append(running)
        capacity = max(values)
        return CapacityTrace(name, np.asarray(times), np.asarray(values, float), capacity, trace.duration_s,
                             spot_nodes, horizon_s, f"{name}: running nodes of a spot cluster (max {capacity})")
    # availability / alive: one step function per zone; prefer the plan's zone.
    zones = [g.zone for g in plan.groups if g.spot and g.zone]
    sources = list(dict.fromkeys(e.source for e in trace.events if e.event == "available"))
    source = next((s for s in sources if s in zones), sources[0])
    ev = [e for e in trace.events if e.event == "available" and e.source == source]
    times = np.asarray([e.time_s for e in ev])
    values = np.asarray([e.value for e in ev], float)
    capacity = float(trace.capacity or max(values.max(), 1.0))
    return CapacityTrace(name, times, values, capacity, trace.duration_s, spot_nodes, horizon_s,
                         f"{name}: {trace.kind} of {int(capacity)} {trace.instance_type or trace.gpu} in {source}")


def from_model(plan):
    """Lifetimes sampled from the fitted model of the plan's (first) spot group."""
    spot = [g for g in plan.groups if g.spot]
    if not spot:
        raise InputError("the plan has no spot nodes: nothing to revoke")
    g = spot[0]
    sample, desc = lifetime_sampler(g.cloud, g.gpu)
    delay, _ = replacement_sampler(g.cloud, g.gpu, True)
    boot = vm_startup_s(g.cloud)
    share = group_outage(g.cloud, g.gpu).share
    if share > 0.0 and sum(x.count for x in spot) > 1:  # a lone node's every revocation takes its group
        desc += f"; {share:.0%} of revocations take the node's whole group"
    return LifetimeSource(sample, desc, GCP_PREEMPTIBLE_CAP_S if g.cloud == "gcp" else None, outage_share=share,
                          outage_wait=lambda n, rng: replacement_wait(delay(n, rng), boot)[0])


# ---------------------------------------------------------------- empirical availability
def matching_traces(group: Any, *, traces: Sequence[str] | None = None,
                    exclude: Sequence[str] = ()) -> list[str]:
    """Traces that describe the spot market of ``group`` (a :class:`~spottrain.plan_file.PlanGroup`).

    A trace matches by instance type (SkyPilot's ``_v100_8`` is p3.16xlarge); only when no trace
    names the instance type do traces of the same cloud and GPU without an instance type match
    (node traces of spot clusters). Price traces never match. ``exclude`` drops traces by name or
    by zone (a zone drops every trace recorded there, whatever its date), so that a benchmark can
    hold out the trace it scores on. ``traces``: names or user-CSV paths (default: shipped)."""
    names = list(traces) if traces is not None else list_traces()
    drop = {x.lower() for x in exclude}
    by_type, by_gpu = [], []
    for name in names:
        t = load_trace(name)
        if t.kind == "price" or t.cloud != group.cloud:
            continue
        if name.lower() in drop or (t.zone and t.zone.lower() in drop):
            continue
        if t.instance_type:
            if t.instance_type == group.instance_type:
                by_type.append(name)
        elif t.gpu and gpu_label(t.gpu) == gpu_label(group.gpu):
            by_gpu.append(name)
    return by_type or by_gpu


class TracePool:
    """Revocations replayed from a random window of one of several traces of the same market.

    Each run picks a trace with probability proportional to its length (a random window of the
    pooled record, over zones and dates), then a random offset into it, from the run's own
    generator: deterministic given the run's seed, and the same pick for every plan on the same
    pool (common random numbers)."""

    kind = "pool"

    def __init__(self, members: Sequence[Any], weights: Sequence[float], names: Sequence[str]) -> None:
        if not members:
            raise ValueError("an empty trace pool")
        w = np.asarray(weights, dtype=float)
        self.members, self.names = list(members), list(names)
        self.p = w / w.sum()
        self.mean_up_fraction = float(sum(pi * getattr(m, "mean_up_fraction", 1.0) for pi, m in zip(self.p, members)))
        self.description = (f"{plural(len(names), 'pooled trace')} ({', '.join(names)})" if len(names) <= 3
                            else f"{plural(len(names), 'pooled trace')} ({', '.join(names[:3])}, ...)")
        self.name = self.description

    def for_run(self, rng: np.random.Generator) -> Any:
        k = int(rng.choice(len(self.members), p=self.p)) if len(self.members) > 1 else 0
        return self.members[k].for_run(rng)


def pooled_source(plan, names: Sequence[str], params: Any = None) -> TracePool:
    """A :class:`TracePool` of the traces ``names`` prepared for replay against ``plan``
    (``params``: the run's :class:`~spottrain.sim.setup.SimParams`, for its ``horizon_s``)."""
    horizon = run_horizon_s(plan, params)
    members = [from_trace(n, plan, horizon) for n in names]
    return TracePool(members, [load_trace(n).duration_s for n in names], names)


def lifetime_sampler(cloud: str, gpu: str) -> tuple[Callable[..., Any], str]:
    """``(sample(n, rng, hazard_share=1) -> array of lifetimes in s, description)`` for spot nodes
    of ``gpu``: the best fit by AIC of :func:`spottrain.transience.lifetime_model` (pooled, and
    saying so, where this cloud and GPU have no data of their own)."""
    model = lifetime_model(cloud, gpu)
    desc = f"fitted lifetime model {model.name} for {cloud} {gpu}" + (
        f" (pooled from {model.pooled_from})" if model.pooled_from else "")
    return (lambda n, rng, share=1.0: np.asarray(model.sample(n, rng, share), dtype=float)), desc


def replacement_wait(delay_s, startup_s):
    """(wait for capacity, start-up) of a sampled replacement delay: the wait comes first (no node
    yet: nothing billed, nothing to revoke), then the start-up, at most ``startup_s`` of the delay.
    Both engines split it so (:mod:`spottrain.sim.job`, :mod:`spottrain.sim.vector`)."""
    boot = np.minimum(startup_s, delay_s)
    return delay_s - boot, boot


def replacement_sampler(cloud: str, gpu: str, spot: bool) -> tuple[Callable[[int, Any], Any], str]:
    """``(sample(n, rng) -> delays in s, description)``: time from request to a booted node."""
    if spot:
        model = replacement_delay(cloud, gpu)
        return (lambda n, rng: np.asarray(model.sample(n, rng), dtype=float)), f"fitted replacement delay ({cloud} {gpu})"
    base = vm_startup_s(cloud)
    return (lambda n, rng: np.full(n, base)), f"constant start-up {base:.0f} s"
