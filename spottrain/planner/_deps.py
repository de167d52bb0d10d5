"""The planner's only doorway to the layers below it (catalog, perf, transience, profiler).

Everything the planner needs from other packages goes through these few functions, so the
planner's own modules never depend on their internals. Each adapter prefers the real module and
only falls back to a small, documented stand-in when that module does not provide the function
(the stand-ins keep the planner importable and testable on its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- workload


@dataclass(frozen=True, kw_only=True)
class _FallbackWorkload:
    model: str
    batch_size: int
    flops_per_sample: float
    param_count: int
    gradient_bytes: float
    step_time_s_ref: float | None = None
    ref_gpu: str | None = None


def workload_class() -> type:
    try:
        from spottrain.perf.workload import Workload  # type: ignore[import-not-found]

        return Workload
    except ImportError:
        return _FallbackWorkload


def workload_from_zoo(name: str, batch_size: int) -> Any:
    """A :class:`spottrain.perf.Workload` for a zoo model name (torch-free)."""
    cls = workload_class()
    if hasattr(cls, "from_zoo"):
        return cls.from_zoo(name, batch_size)
    from spottrain.profiler.zoo_info import zoo_info  # type: ignore[import-not-found]

    info = zoo_info(name)
    return cls(
        model=name,
        batch_size=int(batch_size),
        flops_per_sample=float(info["flops_per_sample"]),
        param_count=int(info["param_count"]),
        gradient_bytes=4.0 * float(info["param_count"]),
    )


def zoo_names() -> list[str]:
    try:
        from spottrain.profiler.zoo_info import zoo_names as _names  # type: ignore[import-not-found]

        return list(_names())
    except (ImportError, AttributeError):
        return []


def load_profile(path: str) -> Any:
    """Load a profile JSON with the torch-free schema module (raises SchemaVersionError)."""
    from spottrain.profiler.schema import load_profile as _load  # type: ignore[import-not-found]

    return _load(path)


def workload_from_profile(profile: Any) -> Any:
    cls = workload_class()
    return cls.from_profile(profile)


# --------------------------------------------------------------------------- catalog


def load_catalog(path: str | None = None) -> Any:
    from spottrain.catalog import load_catalog as _load  # type: ignore[attr-defined]

    return _load(path)


# Published figures, used only when spottrain.catalog.gpu_spec is missing:
# (fp32 TFLOPS per GPU, memory GiB per GPU). Sources: NVIDIA data sheets.
_FALLBACK_GPUS: dict[str, tuple[float, float]] = {
    "K80": (4.37, 12.0),
    "M60": (4.8, 8.0),
    "P4": (5.5, 8.0),
    "P100": (9.3, 16.0),
    "V100": (15.7, 16.0),
    "V100-32GB": (15.7, 32.0),
    "T4": (8.1, 16.0),
    "A10G": (31.2, 24.0),
    "L4": (30.3, 24.0),
    "L40S": (91.6, 48.0),
    "A100": (19.5, 40.0),
    "A100-80GB": (19.5, 80.0),
    "H100": (67.0, 80.0),
    "H200": (67.0, 141.0),
}


@lru_cache(maxsize=512)
def gpu_info(gpu: str) -> tuple[float, float] | None:
    """(fp32 TFLOPS, memory GiB) of one GPU, or None when the GPU is unknown."""
    try:
        from spottrain.catalog import gpu_spec  # type: ignore[attr-defined]
    except ImportError:
        gpu_spec = None
    if gpu_spec is not None:
        try:
            spec = gpu_spec(gpu)
            return float(spec.fp32_tflops), float(spec.memory_gib)
        except Exception:  # unknown name: not a trainable GPU for us (FPGA, Inferentia ...)
            return None
    return _FALLBACK_GPUS.get(gpu)


# --------------------------------------------------------------------------- performance


def _perf_predict():
    try:
        from spottrain.perf import predict_throughput  # type: ignore[attr-defined]

        return predict_throughput
    except ImportError:
        return None


_SIGMA_FALLBACK = 0.10


def _fallback_curve(workload: Any, gpu: str, gpus_per_node: int, network_gbps: float, ns: np.ndarray,
                    sync: str, ps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Analytic stand-in: FLOPs / (40% of peak) compute, ring all-reduce or PS traffic."""
    info = gpu_info(gpu) or (10.0, 16.0)
    b = workload.batch_size
    comp = workload.flops_per_sample * b / (info[0] * 1e12 * 0.4)
    grad = float(workload.gradient_bytes)
    g = gpus_per_node
    intra = 2.0 * (g - 1) / g * grad / 12e9 if g > 1 else 0.0
    net = max(network_gbps, 0.1) * 1e9 / 8.0
    if sync == "sync" and ps == 0:
        inter = np.where(ns > 1, 2.0 * (ns - 1) / ns * grad / net, 0.0)
        step = comp + intra + inter
        thr = ns * g * b / step
        bott = ["network" if i > comp else "compute" for i in inter]
    else:
        ps_bw = max(ps, 1) * 10e9 / 8.0
        per_worker = 2.0 * grad / np.minimum(net, ps_bw / ns)
        step = comp + intra + per_worker
        thr = ns * g * b / step
        bott = ["ps" if w > comp else "compute" for w in per_worker]
    return thr, thr * math.exp(-1.645 * _SIGMA_FALLBACK), thr * math.exp(1.645 * _SIGMA_FALLBACK), bott


_CURVES: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]] = {}

BREAKPOINTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256)
"""Node counts at which the performance model is queried; the planner's throughput curve is
piecewise linear between them (and exact at them). Up to 6 nodes every count is a breakpoint."""


def _breakpoints(max_nodes: int) -> np.ndarray:
    pts = [b for b in BREAKPOINTS if b < max_nodes] + [max_nodes]
    return np.array(sorted(set(pts)))


def throughput_curve(workload: Any, gpu: str, gpus_per_node: int, network_gbps: float, max_nodes: int,
                     *, sync: str = "sync", ps: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Cluster throughput (median, low, high in samples/s) and bottleneck for n = 1..max_nodes
    homogeneous nodes: the perf model at :data:`BREAKPOINTS`, linear in between. Memoized per
    (workload, node shape), since the planner asks for every candidate."""
    key = (workload, gpu, gpus_per_node, round(network_gbps, 3), sync, ps)
    hit = _CURVES.get(key)
    if hit is not None and hit[0].size >= max_nodes:
        return hit[0][:max_nodes], hit[1][:max_nodes], hit[2][:max_nodes], hit[3][:max_nodes]
    m = max(max_nodes, 64)
    ns = np.arange(1, m + 1)
    predict = _perf_predict()
    if predict is None:
        thr, lo, hi, bott = _fallback_curve(workload, gpu, gpus_per_node, network_gbps, ns, sync, ps)
        out = (thr, lo, hi, tuple(bott))
    else:
        from spottrain.types import ClusterGroup, ClusterSpec

        bp = _breakpoints(m)
        t, l, h, b = np.empty(bp.size), np.empty(bp.size), np.empty(bp.size), []
        for k, n in enumerate(bp):
            spec = ClusterSpec(groups=(ClusterGroup(count=int(n), gpu=gpu, gpus_per_node=gpus_per_node),))
            p = predict(workload, spec, ps=ps, sync=sync, network_gbps=network_gbps)
            t[k], l[k], h[k] = p.throughput, p.low, p.high
            b.append(str(p.bottleneck))
        seg = np.searchsorted(bp, ns, side="right") - 1
        out = (np.interp(ns, bp, t), np.interp(ns, bp, l), np.interp(ns, bp, h), tuple(b[s] for s in seg))
    if len(_CURVES) > 20000:
        _CURVES.clear()
    _CURVES[key] = out
    return out[0][:max_nodes], out[1][:max_nodes], out[2][:max_nodes], out[3][:max_nodes]


def throughput_mix(workload: Any, groups: list[tuple[str, int, int, float]], *, sync: str = "sync",
                   ps: int = 0) -> tuple[float, float, float, str]:
    """Throughput of a heterogeneous cluster [(gpu, gpus_per_node, count, network_gbps), ...]."""
    predict = _perf_predict()
    if predict is None or len(groups) == 1:
        if len(groups) == 1:
            gpu, g, n, net = groups[0]
            thr, lo, hi, bott = throughput_curve(workload, gpu, g, net, n, sync=sync, ps=ps)
            return float(thr[-1]), float(lo[-1]), float(hi[-1]), bott[-1]
        return _fallback_mix(workload, groups, sync=sync, ps=ps)
    from spottrain.types import ClusterGroup, ClusterSpec

    spec = ClusterSpec(groups=tuple(ClusterGroup(count=n, gpu=gpu, gpus_per_node=g) for gpu, g, n, _ in groups))
    net = min(net for *_, net in groups)
    p = predict(workload, spec, ps=ps, sync=sync, network_gbps=net)
    return float(p.throughput), float(p.low), float(p.high), str(p.bottleneck)


def _fallback_mix(workload: Any, groups, *, sync: str, ps: int) -> tuple[float, float, float, str]:
    """Sync: every step waits for the slowest node; async: per-node rates add up (spotDNN)."""
    total = sum(n for _, _, n, _ in groups)
    rates, steps = [], []
    for gpu, g, n, net in groups:
        thr, _, _, _ = throughput_curve(workload, gpu, g, net, total, sync=sync, ps=ps)
        per_node = thr[total - 1] / total
        rates.append(per_node * n)
        steps.append(g * workload.batch_size / per_node)
    if sync == "sync" and ps == 0:
        thr = sum(n * g * workload.batch_size for _, g, n, _ in groups) / max(steps)
    else:
        thr = sum(rates)
    f = math.exp(1.645 * _SIGMA_FALLBACK)
    return thr, thr / f, thr * f, "compute"


# --------------------------------------------------------------------------- transience


@dataclass(frozen=True, kw_only=True)
class Revocation:
    """What the risk model needs to know about losing one spot node of a kind."""

    rate_per_s: float
    """Revocations per node-second (1 / mean lifetime)."""
    restart_mean_s: float
    restart_sd_s: float
    source: str


# Stand-in when spottrain.transience is absent: mean lifetime 6 h (GCP preemptible K80/P100/V100
# median lifetimes in the transient-dl traces are a few hours) and a 3 min +- 1 min restart.
_FALLBACK_REVOCATION = Revocation(rate_per_s=1.0 / (6 * 3600.0), restart_mean_s=180.0, restart_sd_s=60.0,
                                  source="fallback: 6 h mean lifetime, 3 min restart")


@lru_cache(maxsize=1024)
def revocation(cloud: str, gpu: str, zone: str | None = None) -> Revocation:
    try:
        from spottrain.transience import lifetime_model  # type: ignore[attr-defined]
        try:
            from spottrain.transience import replacement_delay  # type: ignore[attr-defined]
        except ImportError:
            from spottrain.transience.availability import replacement_delay  # type: ignore[import-not-found]
    except ImportError:
        return _FALLBACK_REVOCATION
    try:
        model = lifetime_model(cloud, gpu, zone)
        mean = float(model.mean_lifetime_s())
        delay = replacement_delay(cloud, gpu)
        mean_d = float(delay.mean_s)
        sd = max((float(getattr(delay, "p95_s", mean_d)) - mean_d) / 1.645, 0.0)
        name = getattr(model, "name", type(model).__name__)
        pooled = getattr(model, "pooled_from", None)
        src = f"{name} lifetime fit" + (f" (pooled from {pooled})" if pooled else "")
        return Revocation(rate_per_s=1.0 / max(mean, 1.0), restart_mean_s=mean_d, restart_sd_s=sd, source=src)
    except Exception:  # the transience models know nothing about this (cloud, gpu)
        return _FALLBACK_REVOCATION


@lru_cache(maxsize=4096)
def optimal_checkpoint_interval_s(checkpoint_cost_s: float, cloud: str, gpu: str, nodes: int,
                                  rate_per_s: float) -> float:
    """Exact optimum under the fitted lifetime model when available, else Young/Daly."""
    try:
        from spottrain.transience import lifetime_model  # type: ignore[attr-defined]
        from spottrain.transience.checkpoint import optimal_checkpoint_interval_s as opt  # type: ignore[import-not-found]

        return float(opt(checkpoint_cost_s, lifetime_model(cloud, gpu), nodes=nodes))
    except Exception:
        return math.sqrt(2.0 * checkpoint_cost_s / max(rate_per_s * nodes, 1e-12))
