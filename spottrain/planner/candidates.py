"""Candidate node kinds: the catalog grouped into what the optimizer can buy.

A :class:`Candidate` is one kind of node on one market in one region: ``(cloud, instance_type,
market, region)`` with the cheapest zone of that region. Zones of the same region are
interchangeable for the throughput and revocation models (both depend on the instance type and
GPU, not on the zone), so a dearer zone is *dominated* by a cheaper one and dropped; this is the
first provable pruning step of the planner (see :mod:`spottrain.planner.formulation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from spottrain.catalog import gpu_spec
from spottrain.errors import UnknownNameError
from spottrain.perf.workload import training_state_gib


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One buyable node kind (a column family of the optimization problem)."""

    cloud: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    spot: bool
    region: str
    zone: str | None
    price_usd_per_hour: float
    """Price of one node on this market (the spot price when ``spot``)."""
    on_demand_price_usd_per_hour: float
    network_gbps: float
    fp32_tflops_per_gpu: float
    memory_gib_per_gpu: float

    @property
    def key(self) -> tuple[str, str, bool, str]:
        return (self.cloud, self.instance_type, self.spot, self.region)

    @property
    def shape(self) -> tuple[str, int, float]:
        """What the performance model sees: GPU, GPUs per node, network."""
        return (self.gpu, self.gpus_per_node, self.network_gbps)

    @property
    def market(self) -> str:
        return "spot" if self.spot else "on-demand"

    @property
    def flopp(self) -> float:
        """DeepVM's FLOPP: peak fp32 TFLOPS of the node per $/h."""
        return self.fp32_tflops_per_gpu * self.gpus_per_node / max(self.price_usd_per_hour, 1e-9)

    def label(self) -> str:
        return f"{self.instance_type}:{self.market}@{self.zone or self.region}"


@dataclass(kw_only=True)
class CandidateReport:
    """How the catalog was narrowed down (shown by ``spottrain plan`` and the benchmark)."""

    offers: int = 0
    not_a_known_gpu: int = 0
    filtered_out: int = 0
    batch_does_not_fit: int = 0
    dominated_zones: int = 0
    candidates: int = 0
    notes: list[str] = field(default_factory=list)


def _offer_price(offer: Any, spot: bool) -> float | None:
    price = offer.spot_price_usd_per_hour if spot else offer.price_usd_per_hour
    if price is None or not (price > 0):
        return None
    return float(price)


_INDEX: dict[int, tuple[Any, list[tuple[Any, tuple[float, float]]]]] = {}


@lru_cache(maxsize=512)
def gpu_info(gpu: str) -> tuple[float, float] | None:
    """(fp32 TFLOPS, memory GiB) of one GPU, or None when the GPU is unknown (FPGA, Inferentia ...)."""
    try:
        spec = gpu_spec(gpu)
    except UnknownNameError:
        return None
    if spec.memory_gib is None:  # a benchmark board without a recorded capacity: cannot check the batch fits
        return None
    return float(spec.fp32_tflops), float(spec.memory_gib)


def _known_gpu_offers(offers: Sequence[Any]) -> tuple[list[tuple[Any, tuple[float, float]]], int]:
    """Offers with a whole number of known GPUs, with (TFLOPS, GiB); cached per offer list."""
    hit = _INDEX.get(id(offers))
    if hit is not None and hit[0] is offers:
        rows = hit[1]
    else:
        rows = []
        for offer in offers:
            count = offer.gpu_count
            if not count or count < 1 or int(count) != count:
                continue
            info = gpu_info(offer.gpu)
            if info is not None:
                rows.append((offer, info))
        if len(_INDEX) > 8:
            _INDEX.clear()
        _INDEX[id(offers)] = (offers, rows)
    return rows, len(offers) - len(rows)


def build_candidates(
    offers: Sequence[Any],
    *,
    clouds: Sequence[str] | None = None,
    regions: Sequence[str] | None = None,
    zones: Sequence[str] | None = None,
    gpus: Sequence[str] | None = None,
    instance_types: Sequence[str] | None = None,
    spot: bool = True,
    on_demand: bool = True,
    min_gpu_memory_gib: float = 0.0,
) -> tuple[list[Candidate], CandidateReport]:
    """Group catalog offers into candidates, applying allow-lists and the GPU-memory rule.

    Memoized per (offer list, filters): the grouping is a pure function of them.

    ``min_gpu_memory_gib``: the per-GPU memory the workload needs (batch must fit); GPUs with
    less are dropped here, which is the GPU-memory constraint of the formulation.
    """
    if not isinstance(offers, (list, tuple)):
        offers = list(offers)
    key = (id(offers), len(offers), _t(clouds), _t(regions), _t(zones), _t(gpus), _t(instance_types), spot,
           on_demand, round(min_gpu_memory_gib, 6))
    hit = _BUILT.get(key)
    if hit is not None and hit[0] is offers:
        return list(hit[1]), replace(hit[2], notes=list(hit[2].notes))
    cands, report = _build(offers, clouds, regions, zones, gpus, instance_types, spot, on_demand, min_gpu_memory_gib)
    if len(_BUILT) > 64:
        _BUILT.clear()
    _BUILT[key] = (offers, tuple(cands), report)
    return list(cands), replace(report, notes=list(report.notes))


_BUILT: dict[tuple, tuple[Any, tuple[Candidate, ...], CandidateReport]] = {}


def _t(x: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if x is None else tuple(sorted(v.lower() for v in x))


def _build(offers, clouds, regions, zones, gpus, instance_types, spot, on_demand, min_gpu_memory_gib):
    report = CandidateReport()
    clouds_l = {c.lower() for c in clouds} if clouds else None
    regions_l = {r.lower() for r in regions} if regions else None
    zones_l = {z.lower() for z in zones} if zones else None
    gpus_l = {g.lower() for g in gpus} if gpus else None
    types_l = {t.lower() for t in instance_types} if instance_types else None
    best: dict[tuple[str, str, bool, str], Candidate] = {}
    rows, unknown = _known_gpu_offers(offers)
    report.offers = len(offers)
    report.not_a_known_gpu = unknown
    for offer, info in rows:
        count = offer.gpu_count
        if (
            (clouds_l and offer.cloud.lower() not in clouds_l)
            or (regions_l and offer.region.lower() not in regions_l)
            or (zones_l and (offer.zone or offer.region).lower() not in zones_l)
            or (gpus_l and offer.gpu.lower() not in gpus_l)
            or (types_l and offer.instance_type.lower() not in types_l)
        ):
            report.filtered_out += 1
            continue
        if info[1] < min_gpu_memory_gib:
            report.batch_does_not_fit += 1
            continue
        od_price = _offer_price(offer, False)
        for market_spot in (True, False):
            if (market_spot and not spot) or (not market_spot and not on_demand):
                continue
            price = _offer_price(offer, market_spot)
            if price is None:
                continue
            cand = Candidate(
                cloud=offer.cloud, instance_type=offer.instance_type, gpu=offer.gpu, gpus_per_node=int(count),
                spot=market_spot, region=offer.region, zone=offer.zone, price_usd_per_hour=price,
                on_demand_price_usd_per_hour=od_price if od_price is not None else price,
                network_gbps=float(offer.network_gbps), fp32_tflops_per_gpu=info[0], memory_gib_per_gpu=info[1],
            )
            old = best.get(cand.key)
            if old is None:
                best[cand.key] = cand
            else:
                report.dominated_zones += 1
                if (cand.price_usd_per_hour, cand.zone or "") < (old.price_usd_per_hour, old.zone or ""):
                    best[cand.key] = cand
    out = sorted(best.values(), key=lambda c: (c.cloud, c.instance_type, c.spot, c.region))
    report.candidates = len(out)
    return out, report


def memory_needed_gib(workload: Any, profile: Any | None = None) -> float:
    """Per-GPU memory a data-parallel worker needs for the workload's per-GPU batch.

    From the profile's measured peak memory when it has one (scaled to the batch), else weights,
    gradients and Adam state (16 bytes per parameter) -- activations are then not counted, so
    this is a lower bound and only rules out GPUs that certainly cannot hold the model.
    """
    if profile is not None:
        for name in ("peak_memory_bytes", "memory_bytes_peak", "peak_memory"):
            peak = getattr(profile, name, None)
            if peak:
                per_sample = getattr(profile, "memory_bytes_per_sample", None)
                base = float(peak)
                if per_sample:
                    pb = getattr(profile, "batch_size", workload.batch_size)
                    base += float(per_sample) * (workload.batch_size - pb)
                return base / 2**30
    return training_state_gib(workload.param_count)
