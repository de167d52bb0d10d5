"""Markets of other instance types, and the live options they offer a policy.

A policy that may buy instance types other than the plan's (``buys_other_types``, e.g.
replace-cheapest or deadline-cheapest) is offered *alternatives*: spot node types of other
instance types (the plan's ``extra['alternatives']``, else derived from the catalog,
:func:`alternative_groups`). Each alternative is its own spot market (:class:`Markets`): its
revocations and acquisitions come from the same kind of source as the plan's own market, and in
every run from its own generator (:class:`RunMarkets`), so that the plan's own market draws
exactly what it would without alternatives.

At revocations, price changes and ticks such a policy sees *live* options
(:class:`LiveOptions`): the throughput a node would add to the current membership (live and
pending nodes) by the performance model's mixed-cluster prediction (negative when a slower GPU
would pace a synchronous ring), net of periodic checkpoint stalls, and ``p_available`` 0 while
its market would not grant it now (what a spot request or a placement score tells at once),
else its market's long-run up fraction.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.catalog import gpu_label, gpu_spec, load_catalog
from spottrain.clouds import vm_startup_s
from spottrain.errors import InputError, UnknownNameError
from spottrain.perf import Workload, predict_throughput
from spottrain.perf.workload import training_state_gib
from spottrain.plan_file import Plan, PlanGroup
from spottrain.policies import NodeOption
from spottrain.sim.sources import TracePool, from_model, from_trace, matching_traces, replacement_sampler
from spottrain.transience import load_trace

INF = math.inf


@dataclass(frozen=True, kw_only=True)
class NodeType:
    """A kind of node the job may hold, and the market a spot node of it is bought in."""

    cloud: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    spot: bool
    zone: str | None
    price_usd_per_hour: float
    weight: float
    """Relative speed of one node (sum of its GPUs' peak FLOPS)."""
    market: int = 0
    """Whose revocations a spot node of this type follows: 0 the plan's source, k the k-th alternative's."""

    @property
    def group(self) -> tuple[str, str | None]:
        """The group an outage of its market takes at once (sampled lifetimes: sim.sources.LifetimeRun)."""
        return self.instance_type, self.zone


# ---------------------------------------------------------------- which other instance types
def resolve_alternatives(plan, alternatives=None, limit: int = 4) -> list[dict]:
    """The alternatives as given (``()``: none), else the first ``limit`` of
    ``plan.extra['alternatives']``, else the ``limit`` best derived from the catalog; those two
    keep only alternatives at the job's price scale (:func:`within_price_scale`)."""
    if not any(g.spot for g in plan.groups):
        return []
    if alternatives is None:
        alternatives = plan.extra.get("alternatives")
        if alternatives is None:
            # ask for more than ``limit``: some may be beyond the job's price scale
            alternatives = alternative_offers(plan, max(limit, 0) * 4)
        alternatives = [a for a in alternatives if within_price_scale(plan, a)][:max(limit, 0)]
    return list(alternatives)


PRICE_SCALE = 2.0
"""An alternative a policy is offered costs at most this multiple of the dearest spot node of the
plan (per node and hour): replacing a $3/h node by a $98/h one is not a replacement the plan's
budget was sized for (the same factor as the policies' cost-per-sample cap,
:data:`spottrain.policy_base.REPLACE_MAX_COST_RATIO`)."""


def within_price_scale(plan, alternative: dict) -> bool:
    """Whether ``alternative`` (a dict with ``price_usd_per_hour``) is at the job's price scale; one
    named without a price (its price comes from the catalog, :func:`alternative_groups`) is kept."""
    top = max((g.price_usd_per_hour for g in plan.groups if g.spot), default=0.0)
    price = alternative.get("price_usd_per_hour")
    if price is None or not top > 0:
        return True
    return float(price) <= PRICE_SCALE * top


def alternative_groups(plan, alternatives=None, limit: int = 4) -> list:
    """The spot node types a policy may buy besides the plan's own, as one-type plan groups
    (``count``: the plan's spot nodes, the size of market a trace is mapped onto).

    ``alternatives``: None takes ``plan.extra['alternatives']`` when the plan carries them, else
    derives the ``limit`` best from the catalog (:func:`alternative_offers`);
    ``()`` gives none; else a sequence of dicts with at least ``instance_type`` (missing fields
    come from the catalog offer of that instance type in the plan's region, then from the plan;
    an optional ``trace`` names the trace to replay for that type).
    """
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
    (:func:`spottrain.sim.sources.matching_traces`, pooled by length when several), else its
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
        one = dataclasses.replace(self.plan, groups=(group,))
        own = self.traces.get(group.instance_type)
        if own is not None:
            return from_trace(own, one, self.horizon_s), f"trace {own}"
        if self.use_traces:
            names = matching_traces(group)
            if names:
                members = [from_trace(n, one, self.horizon_s) for n in names]
                if len(members) == 1:
                    return members[0], f"trace {names[0]}"
                pool = TracePool(members, [load_trace(n).duration_s for n in names], names)
                return pool, pool.description
            src = from_model(one)
            return src, f"no trace of {group.instance_type}: {src.description}"
        src = from_model(one)
        return src, src.description


def add_alternative_types(types: dict[tuple[str, bool, str | None], NodeType], markets: Markets) -> list[NodeType]:
    """Add a spot :class:`NodeType` per alternative of ``markets`` to ``types`` (keyed
    ``(instance_type, spot, zone)``; a key already there is kept) and return the new ones."""
    added = []
    for k, g in enumerate(markets.groups, start=1):
        key = (g.instance_type, True, g.zone)
        if key in types:
            continue
        types[key] = t = NodeType(
            cloud=g.cloud, instance_type=g.instance_type, gpu=gpu_label(g.gpu),
            gpus_per_node=g.gpus_per_node, spot=True, zone=g.zone, price_usd_per_hour=float(g.price_usd_per_hour),
            weight=gpu_weight(g.gpu) * g.gpus_per_node, market=k)
        added.append(t)
    return added


class LiveOptions:
    """The options of ``types`` valued for a membership (shared by all runs of one setup).

    ``throughput(membership key) -> samples/s`` is the performance model; ``stall_factor`` the
    share of time left by periodic checkpoints; ``restart_s`` the stall of a membership change.
    The throughput each type adds to a membership is cached per membership."""

    CACHE_SIZE = 4096

    def __init__(self, types: list[NodeType], throughput: Callable[[Any], float], stall_factor: float,
                 restart_s: float) -> None:
        self.types = types
        self.throughput = throughput
        self.stall_factor = stall_factor
        self.delay_s = {id(t): vm_startup_s(t.cloud) + restart_s for t in types}
        self.gains: dict[tuple, list[float]] = {}
        """Throughput each option adds to a membership (live + pending nodes), per membership."""

    def gains_for(self, base: dict[tuple[str, int], int]) -> list[float]:
        """What one more node of each type adds to ``base`` (``(gpu, gpus_per_node) -> count``)."""
        base_key = tuple(sorted(base.items()))
        gains = self.gains.get(base_key)
        if gains is None:
            tp0 = self.throughput(membership_key((g, gpn, c) for (g, gpn), c in base_key))
            gains = []
            for t in self.types:
                k = (t.gpu, t.gpus_per_node)
                base[k] = base.get(k, 0) + 1
                gains.append(self.throughput(membership_key((g, gpn, c) for (g, gpn), c in base.items())) - tp0)
                base[k] -= 1
            if len(self.gains) > self.CACHE_SIZE:
                self.gains.clear()
            self.gains[base_key] = gains
        return gains

    def options(self, base: dict[tuple[str, int], int], price_of: Callable[[NodeType], float],
                p_now: Callable[[NodeType], float]) -> tuple[NodeOption, ...]:
        """Every type's option for the membership ``base``, at its current price and availability."""
        out = []
        for t, gain in zip(self.types, self.gains_for(base)):
            out.append(frozen_without_init(
                NodeOption, instance_type=t.instance_type, gpu=t.gpu, spot=t.spot, zone=t.zone,
                price_usd_per_hour=price_of(t), throughput=gain * self.stall_factor,
                delay_s=self.delay_s[id(t)], p_available=p_now(t) if t.spot else 1.0))
        return tuple(out)


class RunMarkets:
    """Every spot market of one run: market 0 is the plan's (``source``'s revocations for this
    run, drawn from the run's generator ``rng``); market ``k >= 1`` is alternative ``k`` of
    ``markets``, drawn from its own generator seeded from ``seed`` and ``k`` on first use.
    Each holds its free slots (the spot slots of the job, mapped onto the market)."""

    def __init__(self, source: Any, markets: Markets, rng: np.random.Generator, seed: int, slots: int) -> None:
        self.main_source, self.markets, self.seed, self.slots = source, markets, seed, slots
        self._m: dict[int, tuple[Any, list[int], np.random.Generator]] = {
            0: (source.for_run(rng), list(range(max(slots, 1))), rng)}
        self._delay_pool: dict[tuple, tuple[Any, list[float]]] = {}

    def market(self, market: int) -> tuple[Any, list[int], np.random.Generator]:
        """``(revocations, free slots, generator)`` of ``market``."""
        got = self._m.get(market)
        if got is None:
            rng = np.random.default_rng([self.seed, market])
            src = self.markets.source(market)
            got = self._m[market] = (src.for_run(rng), list(range(max(self.slots, 1))), rng)
        return got

    def delay_s(self, t: NodeType) -> float:
        """Grant-to-join delay of a spot node of ``t``: the cloud's start-up with a replayed
        trace, else a draw of its fitted replacement-delay model (from its market's generator)."""
        rev, _, rng = self.market(t.market)
        if rev.kind == "trace":
            return vm_startup_s(t.cloud)
        key: tuple = (t.cloud, t.gpu, t.market) if t.market else (t.cloud, t.gpu)
        if key not in self._delay_pool:
            self._delay_pool[key] = (replacement_sampler(t.cloud, t.gpu, True)[0], [])
        fn, pool = self._delay_pool[key]
        if not pool:
            pool.extend(fn(32, rng).tolist())
        return float(pool.pop())

    def p_now(self, t: NodeType, now: float) -> float:
        """0 while ``t``'s market would not grant the next free slot now, else its source's
        long-run up fraction (1 when it has none)."""
        rev, slots, _ = self.market(t.market)
        src = self.markets.source(t.market) if t.market else self.main_source
        slot = slots[0] if slots else self.slots
        if rev.acquire_time(now, slot, group=t.group) > now:
            return 0.0
        return float(getattr(src, "mean_up_fraction", 1.0))


def price_events(name: str, types: dict[tuple[str, bool, str | None], NodeType], keys: list | None = None,
                 required: bool = True) -> list[tuple[float, tuple[str, bool, str | None], float]]:
    """``(time_s, type key, USD/h)`` for the spot types of ``types`` (those of ``keys``, default
    all), from price trace ``name``.

    A source ``zone/instance_type`` (or just ``instance_type``) matches a type by instance type;
    the type's own zone is preferred when the trace has it, else the first such source."""
    trace = load_trace(name)
    events = [e for e in trace.events if e.event == "price" and e.value is not None]
    out = []
    for key in keys if keys is not None else list(types):
        t = types[key]
        if not t.spot:
            continue
        srcs = [src for src in dict.fromkeys(e.source for e in events) if src.split("/")[-1] == t.instance_type]
        if not srcs:
            continue
        src = next((x for x in srcs if t.zone and x.startswith(t.zone)), srcs[0])
        out += [(e.time_s, key, float(e.value)) for e in events if e.source == src]
    if not out and required:
        raise InputError(f"price trace {name} has no prices for the plan's spot instance types "
                         f"({', '.join(sorted({t.instance_type for t in types.values() if t.spot}))})")
    return sorted(out)


# ---------------------------------------------------------------- node weights and cluster throughput
def gpu_weight(gpu: str) -> float:
    """Relative speed of one GPU (peak fp32 TFLOPS), used to split cluster throughput."""
    try:
        return float(gpu_spec(gpu).fp32_tflops)
    except UnknownNameError:
        return 1.0


def throughput_function(plan: Plan) -> tuple[Callable[[tuple[tuple[str, int, int], ...]], float], str]:
    """``f(membership) -> samples/s`` where membership is a sorted tuple of ``(gpu, gpus_per_node, count)``.

    Calibrated so that the plan's own membership gives the plan's predicted throughput: the
    performance model (``spottrain.perf.predict_throughput``) supplies the *ratio* between
    memberships.
    """
    planned = membership_key((g.gpu, g.gpus_per_node, g.count) for g in plan.groups)
    base_tp = plan.prediction.throughput_samples_per_s
    cache: dict[tuple[tuple[str, int, int], ...], float] = {}
    raw = _perf_raw(plan)
    desc = "performance model (spottrain.perf), scaled to the plan's prediction"
    ref = raw(planned) or 1.0

    def f(key: tuple[tuple[str, int, int], ...]) -> float:
        v = cache.get(key)
        if v is None:
            v = 0.0 if not key else base_tp * raw(key) / ref
            cache[key] = v
        return v

    return f, desc


def membership_key(items: Any) -> tuple[tuple[str, int, int], ...]:
    agg: dict[tuple[str, int], int] = {}
    for gpu, gpn, n in items:
        if n > 0:
            agg[(gpu, gpn)] = agg.get((gpu, gpn), 0) + n
    return tuple(sorted((g, gpn, n) for (g, gpn), n in agg.items()))


def _perf_raw(plan: Plan) -> Callable[[tuple[tuple[str, int, int], ...]], float]:
    w = plan.workload
    network_gbps = min(g.network_gbps for g in plan.groups) if plan.groups else None
    workload = Workload(
        model=w.model, batch_size=w.batch_size, flops_per_sample=w.flops_per_sample,
        param_count=w.param_count, gradient_bytes=w.gradient_bytes, step_time_s_ref=None, ref_gpu=None,
        precision=w.precision,
    )

    def raw(key: tuple[tuple[str, int, int], ...]) -> float:
        spec = "+".join(f"{n}x{g}" + (f":{gpn}" if gpn != 1 else "") for g, gpn, n in key)
        with warnings.catch_warnings():
            # memberships beyond the fitted range are expected (replacements overlap); the
            # plan's own prediction already carries the extrapolation flag.
            warnings.simplefilter("ignore")
            return float(predict_throughput(workload, spec, ps=plan.ps, sync=plan.sync,
                                            network_gbps=network_gbps).throughput)

    return raw


# ---------------------------------------------------------------- replacement candidates
def alternative_offers(plan: Plan, limit: int = 4) -> list[dict[str, Any]]:
    """Spot offers of *other* instance types whose nodes could replace the plan's spot nodes.

    Candidates are the catalog's spot offers of the plan's cloud and region (zones limited to
    ``plan.extra['zones']`` when the plan records an allow-list) whose GPU holds the workload
    (the planner's memory rule, or ``plan.extra['memory_needed_gib']``) and, for synchronous all-reduce, with
    as many GPUs per node as the plan's nodes (a ring of mixed node widths is not what the plan
    was sized for; parameter-server training takes any width). One offer per instance type (its
    cheapest allowed zone); ranked by spot price per sample/s of a homogeneous cluster of that
    type as large as the plan's spot part (performance model), one per node shape (GPU, GPUs per
    node); the ``limit`` best are returned as
    dicts with the keys of :class:`spottrain.plan_file.PlanGroup` (less ``count`` and ``spot``).
    """
    spot = [g for g in plan.groups if g.spot]
    if not spot or limit <= 0:
        return []
    key = (_plan_key(plan), limit)
    hit = _ALTS.get(key)
    if hit is not None:
        return [dict(x) for x in hit]
    g0 = spot[0]
    own = {g.instance_type for g in plan.groups}
    zones = {z.lower() for z in plan.extra.get("zones") or ()} or None
    # the planner's GPU-memory rule without a profile (spottrain.planner.candidates.memory_needed_gib)
    need_gib = float(plan.extra.get("memory_needed_gib") or training_state_gib(plan.workload.param_count))
    all_reduce = plan.ps == 0 and plan.sync != "async"
    nodes = sum(g.count for g in spot)
    best: dict[str, Any] = {}
    for o in load_catalog().query(cloud=g0.cloud, region=g0.region, spot=True):
        price = o.spot_price_usd_per_hour
        if o.instance_type in own or price is None or not price > 0 or not o.gpu_count or int(o.gpu_count) != o.gpu_count:
            continue
        if zones is not None and (o.zone or o.region).lower() not in zones:
            continue
        if all_reduce and int(o.gpu_count) != g0.gpus_per_node:
            continue
        try:
            spec = gpu_spec(o.gpu)
        except UnknownNameError:
            continue
        if spec.memory_gib is None or spec.memory_gib < need_gib:  # a board without a recorded capacity
            continue
        old = best.get(o.instance_type)
        if old is None or (price, o.zone or "") < (old.spot_price_usd_per_hour, old.zone or ""):
            best[o.instance_type] = o
    raw = _perf_raw(plan)
    ranked = []
    for o in best.values():
        gpu = gpu_label(o.gpu)
        tp = raw(((gpu, int(o.gpu_count), nodes),)) / nodes
        if tp > 0:
            ranked.append((o.spot_price_usd_per_hour / tp, o.instance_type, o, gpu))
    ranked.sort(key=lambda r: (r[0], r[1]))
    seen: set[tuple[str, int]] = set()
    distinct = []
    for r in ranked:  # one offer per node shape: three sizes of g4dn.* are one alternative
        shape = (r[3], int(r[2].gpu_count))
        if shape not in seen:
            seen.add(shape)
            distinct.append(r)
    out = [dict(cloud=o.cloud, instance_type=o.instance_type, gpu=gpu, gpus_per_node=int(o.gpu_count),
                region=o.region, zone=o.zone, price_usd_per_hour=float(o.spot_price_usd_per_hour),
                on_demand_price_usd_per_hour=float(o.price_usd_per_hour), network_gbps=float(o.network_gbps))
           for _, _, o, gpu in distinct[:limit]]
    if len(_ALTS) > 64:
        _ALTS.clear()
    _ALTS[key] = tuple(out)
    return [dict(x) for x in out]


_ALTS: dict[tuple, tuple[dict[str, Any], ...]] = {}


def _plan_key(plan: Plan) -> tuple:
    return (plan.workload, plan.groups, plan.ps, plan.sync, tuple(sorted(plan.extra.get("zones") or ())),
            plan.extra.get("memory_needed_gib"))


# ---------------------------------------------------------------- speed
def frozen_without_init(cls: type, **fields: Any) -> Any:
    """Build a frozen dataclass instance without running its __init__.

    The generated __init__ of a frozen dataclass sets every field through object.__setattr__;
    filling the instance dict directly gives an identical (equal, hashable, immutable to user
    code) object several times faster. The policy is asked hundreds of times per run. All
    fields must be given.
    """
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj
