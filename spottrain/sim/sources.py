"""Where revocations come from: a replayed trace, or lifetimes sampled from a fitted model.

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
of GCP preemptible VMs (independent lifetimes) are replayed this way, by bootstrap.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spottrain.errors import InputError
from spottrain.sim import _deps

INF = math.inf


class RunRevocations:
    """The revocation process of one run (already offset / seeded)."""

    kind = "base"

    def acquire_time(self, t: float, slot: int) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def revoke_time(self, t: float, slot: int) -> float:  # pragma: no cover - interface
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

    def acquire_time(self, t: float, slot: int) -> float:
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

    def revoke_time(self, t: float, slot: int) -> float:
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
    """Lifetimes drawn from a sampler (fitted model or empirical bootstrap)."""

    kind = "model"

    def __init__(self, sample: Callable[[int, np.random.Generator], np.ndarray], description: str,
                 cap_s: float | None) -> None:
        self.sample, self.description, self.cap_s = sample, description, cap_s
        self.name = description

    def for_run(self, rng: np.random.Generator) -> "LifetimeRun":
        return LifetimeRun(self, rng)


class LifetimeRun(RunRevocations):
    kind = "model"

    def __init__(self, src: LifetimeSource, rng: np.random.Generator) -> None:
        self.src, self.rng = src, rng
        self._pool: list[float] = []

    def acquire_time(self, t: float, slot: int) -> float:
        return t

    def revoke_time(self, t: float, slot: int) -> float:
        if not self._pool:
            self._pool = self.src.sample(64, self.rng).tolist()[::-1]
        life = self._pool.pop()
        if self.src.cap_s is not None:
            life = min(life, self.src.cap_s)
        return t + life


# ---------------------------------------------------------------- construction
def _trace_matches(trace, plan) -> bool:
    from spottrain.sim.job import canonical

    for g in plan.groups:
        if not g.spot:
            continue
        if trace.instance_type and trace.instance_type == g.instance_type:
            return True
        if trace.gpu and canonical(trace.gpu) == canonical(g.gpu):
            return True
    return False


def from_trace(name: str, plan, horizon_s: float):
    """Prepare trace ``name`` for replay against ``plan`` (raises InputError when it does not fit)."""
    trace = _deps.load_trace(name)
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
    gcp_cap = _deps.GCP_CAP_S if trace.cloud == "gcp" else None
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
    sample, desc = _deps.lifetime_sampler(g.cloud, g.gpu)
    return LifetimeSource(sample, desc, _deps.GCP_CAP_S if g.cloud == "gcp" else None)


# ---------------------------------------------------------------- markets of other instance types
def resolve_alternatives(plan, alternatives=None, limit: int = 4) -> list[dict]:
    """The alternatives as given (``()``: none), else the first ``limit`` of
    ``plan.extra['alternatives']``, else the ``limit`` best derived from the catalog."""
    if not any(g.spot for g in plan.groups):
        return []
    if alternatives is None:
        alternatives = plan.extra.get("alternatives")
        if alternatives is None:
            alternatives = _deps.alternative_offers(plan, limit)
        else:
            alternatives = list(alternatives)[:max(limit, 0)]
    return list(alternatives)


def alternative_groups(plan, alternatives=None, limit: int = 4) -> list:
    """The spot node types a policy may buy besides the plan's own, as one-type plan groups
    (``count``: the plan's spot nodes, the size of market a trace is mapped onto).

    ``alternatives``: None takes ``plan.extra['alternatives']`` when the plan carries them, else
    derives the ``limit`` best from the catalog (:func:`spottrain.sim._deps.alternative_offers`);
    ``()`` gives none; else a sequence of dicts with at least ``instance_type`` (missing fields
    come from the catalog offer of that instance type in the plan's region, then from the plan;
    an optional ``trace`` names the trace to replay for that type).
    """
    from spottrain.plan import PlanGroup

    spot = [g for g in plan.groups if g.spot]
    alternatives = resolve_alternatives(plan, alternatives, limit)
    if not spot:
        return []
    g0 = spot[0]
    nodes = sum(g.count for g in spot)
    own = {g.instance_type for g in plan.groups}
    out, seen = [], set()
    for i, alt in enumerate(alternatives):
        if not isinstance(alt, dict) or not alt.get("instance_type"):
            raise InputError(f"alternative {i + 1}: expected a mapping with an instance_type, got {alt!r}",
                             column="alternatives")
        itype = str(alt["instance_type"])
        if itype in own or itype in seen:
            continue
        seen.add(itype)
        fill = _offer_fields(g0, itype) if any(
            k not in alt for k in ("gpu", "gpus_per_node", "price_usd_per_hour")) else {}
        fields = dict(cloud=g0.cloud, region=g0.region, zone=None, gpus_per_node=g0.gpus_per_node,
                      network_gbps=g0.network_gbps)
        fields.update(fill)
        fields.update({k: v for k, v in alt.items() if k in _GROUP_FIELDS})
        if "gpu" not in fields or "price_usd_per_hour" not in fields:
            raise InputError(f"alternative {itype}: no spot offer in the catalog for {g0.cloud} {g0.region}; "
                             "give its gpu and price_usd_per_hour", column="alternatives")
        fields.setdefault("on_demand_price_usd_per_hour", fields["price_usd_per_hour"])
        out.append(PlanGroup(count=nodes, spot=True, **fields))
    return out


_GROUP_FIELDS = ("cloud", "instance_type", "gpu", "gpus_per_node", "region", "zone", "price_usd_per_hour",
                 "on_demand_price_usd_per_hour", "network_gbps")


def _offer_fields(g0, itype: str) -> dict:
    from spottrain.catalog import load_catalog

    offers = [o for o in load_catalog().query(cloud=g0.cloud, region=g0.region, spot=True, instance_type=itype)
              if o.spot_price_usd_per_hour]
    if not offers:
        return {}
    o = min(offers, key=lambda x: (x.spot_price_usd_per_hour, x.zone or ""))
    return dict(instance_type=itype, gpu=o.gpu, gpus_per_node=int(o.gpu_count), region=o.region, zone=o.zone,
                price_usd_per_hour=float(o.spot_price_usd_per_hour),
                on_demand_price_usd_per_hour=float(o.price_usd_per_hour), network_gbps=float(o.network_gbps))


class Markets:
    """The spot markets a job may buy from: market 0 is the plan's own (the source the job was
    given, untouched); market ``k >= 1`` is alternative ``k - 1``, prepared on first use.

    An alternative's revocations come from the same kind of source as the plan's: with sampled
    lifetimes (``--model fitted``), the fitted lifetime model of its (cloud, GPU); with a replayed
    trace, the shipped traces of its instance type
    (:func:`spottrain.sim.hindsight.matching_traces`, pooled by length when several), else its
    fitted lifetime model. :attr:`descriptions` says which each one used."""

    def __init__(self, plan, source, groups: list, horizon_s: float, traces: dict[str, str] | None = None) -> None:
        self.plan, self.main, self.groups, self.horizon_s = plan, source, list(groups), horizon_s
        self.traces = dict(traces or {})
        """``instance_type -> trace`` to replay for that alternative (instead of the shipped ones)."""
        self.use_traces = getattr(source, "kind", "model") in ("trace", "pool")
        self._sources: dict[int, object] = {0: source}
        self._desc: dict[int, str] = {}

    def __len__(self) -> int:
        return 1 + len(self.groups)

    def source(self, market: int):
        src = self._sources.get(market)
        if src is None:
            src, self._desc[market] = self._prepare(self.groups[market - 1])
            self._sources[market] = src
        return src

    @classmethod
    def for_plan(cls, plan, source, alternatives=None, limit: int = 4, *, horizon_s: float) -> "Markets":
        """Markets of ``plan``'s alternatives (see :func:`alternative_groups`)."""
        if alternatives == () or (alternatives is None and limit <= 0):
            return cls(plan, source, [], horizon_s)
        alts = resolve_alternatives(plan, alternatives, limit)
        traces = {str(a["instance_type"]): str(a["trace"]) for a in alts if isinstance(a, dict) and a.get("trace")}
        return cls(plan, source, alternative_groups(plan, alts, limit), horizon_s, traces)

    @property
    def descriptions(self) -> dict[str, str]:
        """``instance_type -> where its revocations come from`` (for the alternatives prepared so far)."""
        return {self.groups[m - 1].instance_type: d for m, d in sorted(self._desc.items())}

    def _prepare(self, group):
        import dataclasses

        one = dataclasses.replace(self.plan, groups=(group,))
        own = self.traces.get(group.instance_type)
        if own is not None:
            return from_trace(own, one, self.horizon_s), f"trace {own}"
        if self.use_traces:
            from spottrain.sim.hindsight import TracePool, matching_traces

            names = matching_traces(group)
            if names:
                members = [from_trace(n, one, self.horizon_s) for n in names]
                if len(members) == 1:
                    return members[0], f"trace {names[0]}"
                pool = TracePool(members, [_deps.load_trace(n).duration_s for n in names], names)
                return pool, pool.description
            src = from_model(one)
            return src, f"no trace of {group.instance_type}: {src.description}"
        src = from_model(one)
        return src, src.description
