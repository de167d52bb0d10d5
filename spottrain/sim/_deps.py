"""Thin adapters to the parts the simulator uses (performance, transience, catalog).

Everything the simulator needs from other packages goes through here, so that a change of their
API is one small change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spottrain.catalog import gpu_label
from spottrain.clouds import GCP_PREEMPTIBLE_CAP_S, VM_STARTUP_S
from spottrain.errors import UnknownNameError
from spottrain.plan import Plan

NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
"""Preemption notice per cloud (AWS two-minute warning, GCP/Azure 30 s)."""

GCP_CAP_S = GCP_PREEMPTIBLE_CAP_S
"""GCP stops every preemptible VM after 24 h (:data:`spottrain.clouds.GCP_PREEMPTIBLE_CAP_S`)."""


# ---------------------------------------------------------------- traces
def list_traces() -> list[str]:
    from spottrain.transience.traces import list_traces as _list

    return _list()


def load_trace(name: str) -> Any:
    """A :class:`spottrain.transience.events.Trace` by name or user-CSV path."""
    from spottrain.transience import load_trace as _load

    return _load(name)


# ---------------------------------------------------------------- lifetimes / delays
def lifetime_sampler(cloud: str, gpu: str) -> tuple[Callable[[int, Any], Any], str]:
    """``(sample(n, rng) -> array of lifetimes in s, description)`` for spot nodes of ``gpu``:
    the best fit by AIC of :func:`spottrain.transience.lifetime_model` (pooled, and saying so,
    where this cloud and GPU have no data of their own)."""
    import numpy as np

    from spottrain.transience import lifetime_model

    model = lifetime_model(cloud, gpu)
    desc = f"fitted lifetime model {model.name} for {cloud} {gpu}" + (
        f" (pooled from {model.pooled_from})" if model.pooled_from else "")
    return (lambda n, rng: np.asarray(model.sample(n, rng), dtype=float)), desc


def replacement_sampler(cloud: str, gpu: str, spot: bool) -> tuple[Callable[[int, Any], Any], str]:
    """``(sample(n, rng) -> delays in s, description)``: time from request to a booted node."""
    import numpy as np

    if spot:
        from spottrain.transience import replacement_delay

        model = replacement_delay(cloud, gpu)
        return (lambda n, rng: np.asarray(model.sample(n, rng), dtype=float)), f"fitted replacement delay ({cloud} {gpu})"
    base = startup_s(cloud)
    return (lambda n, rng: np.full(n, base)), f"constant start-up {base:.0f} s"


def startup_s(cloud: str) -> float:
    """VM start-up (s) on ``cloud`` when no fitted replacement delay is asked for: the measured
    :data:`spottrain.clouds.VM_STARTUP_S`, the same on every cloud (the only start-up times shipped)."""
    return VM_STARTUP_S


# ---------------------------------------------------------------- throughput
def gpu_weight(gpu: str) -> float:
    """Relative speed of one GPU (peak fp32 TFLOPS), used to split cluster throughput."""
    from spottrain.catalog import gpu_spec

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
    from spottrain.perf import Workload, predict_throughput

    w = plan.workload
    network_gbps = min(g.network_gbps for g in plan.groups) if plan.groups else None
    workload = Workload(
        model=w.model, batch_size=w.batch_size, flops_per_sample=w.flops_per_sample,
        param_count=w.param_count, gradient_bytes=w.gradient_bytes, step_time_s_ref=None, ref_gpu=None,
    )

    import warnings

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
    dicts with the keys of :class:`spottrain.plan.PlanGroup` (less ``count`` and ``spot``).
    """
    spot = [g for g in plan.groups if g.spot]
    if not spot or limit <= 0:
        return []
    key = (_plan_key(plan), limit)
    hit = _ALTS.get(key)
    if hit is not None:
        return [dict(x) for x in hit]
    from spottrain.catalog import gpu_spec, load_catalog
    from spottrain.perf.workload import training_state_gib

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
