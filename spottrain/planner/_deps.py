"""The planner's only doorway to the layers below it (catalog, perf, transience, profiler).

Everything the planner needs from other packages goes through these few functions, so the
planner's own modules never depend on their internals, and the per-candidate queries are
memoized in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from spottrain.perf import predict_throughput
from spottrain.transience import lifetime_model, replacement_delay
from spottrain.transience import optimal_checkpoint_interval_s as _optimal_interval
from spottrain.transience import young_daly_interval_s  # the risk model's checkpoint interval
from spottrain.types import ClusterGroup, ClusterSpec

# --------------------------------------------------------------------------- workload


def workload_class() -> type:
    from spottrain.perf import Workload

    return Workload


def workload_from_zoo(name: str, batch_size: int) -> Any:
    """A :class:`spottrain.perf.Workload` for a zoo model name (torch-free)."""
    return workload_class().from_zoo(name, batch_size)


def zoo_names() -> list[str]:
    from spottrain.profiler.zoo_info import zoo_names as _names

    return list(_names())


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


@lru_cache(maxsize=512)
def gpu_info(gpu: str) -> tuple[float, float] | None:
    """(fp32 TFLOPS, memory GiB) of one GPU, or None when the GPU is unknown (FPGA, Inferentia ...)."""
    from spottrain.catalog import gpu_spec
    from spottrain.errors import UnknownNameError

    try:
        spec = gpu_spec(gpu)
    except UnknownNameError:
        return None
    if spec.memory_gib is None:  # a benchmark board without a recorded capacity: cannot check the batch fits
        return None
    return float(spec.fp32_tflops), float(spec.memory_gib)


# --------------------------------------------------------------------------- performance


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
    bp = _breakpoints(m)
    t, l, h, b = np.empty(bp.size), np.empty(bp.size), np.empty(bp.size), []
    for k, n in enumerate(bp):
        spec = ClusterSpec(groups=(ClusterGroup(count=int(n), gpu=gpu, gpus_per_node=gpus_per_node),))
        p = predict_throughput(workload, spec, ps=ps, sync=sync, network_gbps=network_gbps)
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
    if len(groups) == 1:
        gpu, g, n, net = groups[0]
        thr, lo, hi, bott = throughput_curve(workload, gpu, g, net, n, sync=sync, ps=ps)
        return float(thr[-1]), float(lo[-1]), float(hi[-1]), bott[-1]
    spec = ClusterSpec(groups=tuple(ClusterGroup(count=n, gpu=gpu, gpus_per_node=g) for gpu, g, n, _ in groups))
    net = min(net for *_, net in groups)
    p = predict_throughput(workload, spec, ps=ps, sync=sync, network_gbps=net)
    return float(p.throughput), float(p.low), float(p.high), str(p.bottleneck)


# --------------------------------------------------------------------------- transience


@dataclass(frozen=True, kw_only=True)
class Revocation:
    """What the risk model needs to know about losing one spot node of a kind."""

    rate_per_s: float
    """Revocations per node-second (1 / mean lifetime)."""
    restart_mean_s: float
    restart_sd_s: float
    source: str


@lru_cache(maxsize=1024)
def revocation(cloud: str, gpu: str, zone: str | None = None) -> Revocation:
    """Revocation rate and replacement delay of one spot node (the transience models, which fall
    back to a pooled estimate and say so when this (cloud, gpu, zone) has no data of its own)."""
    model = lifetime_model(cloud, gpu, zone)
    mean = float(model.mean_lifetime_s())
    delay = replacement_delay(cloud, gpu)
    mean_d = float(delay.mean_s)
    sd = max((float(delay.p95_s) - mean_d) / 1.645, 0.0)
    src = f"{model.name} lifetime fit" + (f" (pooled from {model.pooled_from})" if model.pooled_from else "")
    return Revocation(rate_per_s=1.0 / max(mean, 1.0), restart_mean_s=mean_d, restart_sd_s=sd, source=src)


@lru_cache(maxsize=4096)
def optimal_checkpoint_interval_s(checkpoint_cost_s: float, cloud: str, gpu: str, nodes: int,
                                  rate_per_s: float) -> float:
    """Exact optimum under the fitted lifetime model (``rate_per_s`` kept for the memo key)."""
    return float(_optimal_interval(checkpoint_cost_s, lifetime_model(cloud, gpu), nodes=nodes))
