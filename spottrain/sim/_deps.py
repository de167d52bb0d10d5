"""Thin adapters to the parts the simulator uses (performance, transience, catalog).

Everything the simulator needs from other packages goes through here, so that a change of their
API is one small change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spottrain.errors import UnknownNameError
from spottrain.plan import Plan

NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
"""Preemption notice per cloud (AWS two-minute warning, GCP/Azure 30 s)."""

GCP_CAP_S = 24 * 3600.0
"""GCP stops every preemptible VM after 24 h."""

# VM start-up (provisioning + staging + booting) when no fitted replacement-delay model exists.
# GCP: CM-DARE's measured K80/P100 start-up phases (processed_data/startup_time) are 60-110 s;
# AWS: p3/g4dn instances usually reach SSH in 2-3 minutes.
_STARTUP_S = {"aws": 150.0, "gcp": 90.0, "azure": 150.0}


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
    return _STARTUP_S.get(cloud, 150.0)


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
