"""Fit every lifetime model to the traces of a (cloud, GPU, zone) and keep the best by AIC.

:func:`lifetime_model` is what the planner and simulator call. It pools the shipped traces of
the cloud and GPU (all zones, or one zone when it has enough revocations), fits exponential,
Weibull and bathtub laws plus Kaplan-Meier, and returns the lowest-AIC parametric law wrapped
in :class:`FittedLifetime`. With too little data it falls back to the nearest pooled estimate
(same cloud and GPU in all zones, then the same cloud with all GPUs, then every trace) and says
so in ``pooled_from``. Fits are cached in-process.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from spottrain.transience.lifetimes import Lifetimes, node_lifetimes
from spottrain.transience.models import (
    BathtubLifetime,
    ExponentialLifetime,
    KaplanMeier,
    LifetimeModel,
    WeibullLifetime,
)
from spottrain.transience.traces import GCP_PREEMPTIBLE_CAP_S, list_traces, load_trace

MIN_EVENTS_ZONE = 5
"""A zone needs this many observed revocations to get its own fit."""
MIN_EVENTS = 3
"""A (cloud, GPU) pool needs this many observed revocations."""
PARAMETRIC = ("exponential", "weibull", "bathtub")


def default_cap_s(cloud: str) -> float | None:
    """Hard lifetime cap of spot servers on ``cloud`` (GCP preemptible: 24 h)."""
    return GCP_PREEMPTIBLE_CAP_S if cloud == "gcp" else None


def fit_models(durations_s, observed, *, max_lifetime_s: float | None = None,
               models: tuple[str, ...] = PARAMETRIC) -> dict[str, LifetimeModel]:
    """Kaplan-Meier plus each parametric model in ``models``, all fitted on the same data."""
    out: dict[str, LifetimeModel] = {
        "kaplan-meier": KaplanMeier(max_lifetime_s=max_lifetime_s).fit(durations_s, observed)
    }
    classes = {"exponential": ExponentialLifetime, "weibull": WeibullLifetime, "bathtub": BathtubLifetime}
    n_events = int(np.asarray(observed, bool).sum())
    for name in models:
        # 4 parameters need some revocations. The wear-out ramp is only meaningful before a
        # hard cap (GCP's 24 h); without one it extrapolates past the data (the held-out
        # log-likelihood collapses on AWS traces, bench/transience_accuracy.py).
        if name == "bathtub" and (n_events < 5 or max_lifetime_s is None):
            continue
        out[name] = classes[name](max_lifetime_s=max_lifetime_s).fit(durations_s, observed)
    return out


def best_by_aic(fits: dict[str, LifetimeModel]) -> str:
    """Name of the parametric model with the lowest AIC."""
    cands = {k: m.aic_ for k, m in fits.items() if k in PARAMETRIC and math.isfinite(m.aic_)}
    return min(cands, key=cands.get)


@dataclass(frozen=True, kw_only=True, eq=False)
class FittedLifetime:
    """The chosen lifetime law of a (cloud, GPU, zone), with the alternatives and provenance.

    Behaves like a fitted :class:`~spottrain.transience.models.LifetimeModel` (``survival``,
    ``cdf``, ``hazard``, ``mean_lifetime_s``, ``sample`` ...).
    """

    name: str
    """Chosen model: ``exponential``, ``weibull`` or ``bathtub``."""
    model: LifetimeModel
    candidates: dict[str, LifetimeModel]
    """Every fitted model by name, Kaplan-Meier included."""
    cloud: str
    gpu: str
    zone: str | None
    pooled_from: str | None
    """``None`` when the data matched the query; else which pool was used and why."""
    sources: tuple[str, ...]
    """Trace names the lifetimes came from."""
    n_nodes: int
    n_revocations: int
    data: Lifetimes = field(repr=False)

    @property
    def kaplan_meier(self) -> KaplanMeier:
        return self.candidates["kaplan-meier"]  # type: ignore[return-value]

    @property
    def max_lifetime_s(self) -> float | None:
        return self.model.max_lifetime_s

    def survival(self, t):
        """P(node alive at age t seconds)."""
        return self.model.survival(t)

    def cdf(self, t):
        """P(node revoked or stopped within t seconds)."""
        return self.model.cdf(t)

    def hazard(self, t):
        """Revocation rate (1/s) at age t seconds."""
        return self.model.hazard(t)

    def pdf(self, t):
        return self.model.pdf(t)

    def cumulative_hazard(self, t):
        return self.model.cumulative_hazard(t)

    def conditional_survival(self, dt_s, age_s: float):
        return self.model.conditional_survival(dt_s, age_s)

    def mean_lifetime_s(self) -> float:
        """Expected lifetime of a fresh node (s), cap included."""
        return self.model.mean_lifetime_s()

    def sample(self, n: int, rng=None) -> np.ndarray:
        """``n`` lifetimes in seconds."""
        return self.model.sample(n, rng)

    def table(self) -> list[dict]:
        """One row per model: loglik, AIC, parameters, whether it was chosen."""
        rows = []
        for name, m in self.candidates.items():
            params = {k: float(v) for k, v in vars(m).items()
                      if k.endswith("_") and k not in ("loglik_", "aic_", "n_", "n_events_",
                                                       "exposure_s_", "tail_rate_", "last_time_s_")
                      and isinstance(v, float)}
            rows.append({"model": name, "loglik": m.loglik_, "aic": m.aic_,
                         "mean_lifetime_s": m.mean_lifetime_s(), "params": params,
                         "chosen": name == self.name})
        return rows


# ---------------------------------------------------------------- data pools
@functools.cache
def _pool_index() -> dict[tuple[str, str], tuple[str, ...]]:
    """(cloud, GPU) -> names of the shipped traces with node lifetimes of that GPU."""
    idx: dict[tuple[str, str], list[str]] = {}
    for name in list_traces():
        tr = load_trace(name)
        if tr.kind in ("nodes", "alive") and tr.gpu:
            idx.setdefault((tr.cloud, tr.gpu), []).append(name)
    return {k: tuple(v) for k, v in idx.items()}


@functools.cache
def _lifetimes_of(names: tuple[str, ...]) -> Lifetimes:
    return Lifetimes.concat([node_lifetimes(load_trace(n)) for n in names])


def known_pools() -> list[tuple[str, str]]:
    """(cloud, GPU) pairs that have lifetime data."""
    return sorted(_pool_index())


def _canonical(gpu: str) -> str:
    try:
        from spottrain.catalog import canonical_gpu  # type: ignore[attr-defined]

        return canonical_gpu(gpu)
    except Exception:  # catalog missing or the name is an instance type / unknown
        pass
    try:
        from spottrain.catalog import load_catalog  # type: ignore[attr-defined]

        offers = load_catalog().instance(gpu)
        if offers:
            return offers[0].gpu
    except Exception:
        pass
    g = gpu.strip().upper()
    return {"A100-40GB": "A100", "TESLA V100": "V100", "TESLA K80": "K80", "TESLA T4": "T4",
            "TESLA P100": "P100"}.get(g, g)


def lifetime_model(cloud: str, gpu: str, zone: str | None = None) -> FittedLifetime:
    """Best-by-AIC lifetime law of spot ``gpu`` servers on ``cloud`` (in ``zone`` if given).

    Falls back to the nearest pooled estimate (the GPU in all zones of the cloud, then all GPUs
    of the cloud, then all traces) when the query has too little data, and says so in
    ``.pooled_from``.

    >>> m = lifetime_model("gcp", "V100")
    >>> round(m.survival(3600.0), 2) > 0.5
    True
    """
    return _lifetime_model(cloud.strip().lower(), _canonical(gpu), zone.strip() if zone else None)


@functools.cache
def _lifetime_model(cloud: str, gpu: str, zone: str | None) -> FittedLifetime:
    idx = _pool_index()
    cap = default_cap_s(cloud)
    pooled_from: str | None = None
    names = idx.get((cloud, gpu), ())
    data = _lifetimes_of(names) if names else None
    if data is not None and zone is not None:
        in_zone = data.select(data.zone == zone)
        if int(in_zone.observed.sum()) >= MIN_EVENTS_ZONE:
            data = in_zone
            names = tuple(sorted(set(in_zone.trace.tolist())))
        else:
            pooled_from = (f"{cloud}/{gpu} in all zones ({zone}: {len(in_zone)} nodes, "
                           f"{int(in_zone.observed.sum())} revocations < {MIN_EVENTS_ZONE})")
    if data is None or int(data.observed.sum()) < MIN_EVENTS:
        same_cloud = tuple(n for (c, _), ns in idx.items() if c == cloud for n in ns)
        if same_cloud:
            names, pooled_from = same_cloud, f"{cloud} all GPUs (no {cloud}/{gpu} lifetime data)"
        else:
            names = tuple(n for ns in idx.values() for n in ns)
            pooled_from = f"all clouds and GPUs (no {cloud} lifetime data)"
        data = _lifetimes_of(names)
    fits = fit_models(data.durations_s, data.observed, max_lifetime_s=cap)
    best = best_by_aic(fits)
    return FittedLifetime(
        name=best, model=fits[best], candidates=fits, cloud=cloud, gpu=gpu, zone=zone,
        pooled_from=pooled_from, sources=tuple(names), n_nodes=len(data),
        n_revocations=int(data.observed.sum()), data=data,
    )
