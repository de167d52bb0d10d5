"""The column table: every (candidate, node count) pair, assessed exactly as a homogeneous cluster.

Column ``j = (i, n)`` is ``n`` nodes of candidate ``i``. For each column we hold the throughput
(performance model, median / low / high), the price rate, the revocation rate, and the risk
model's expected time, time at the confidence level, P(deadline) and expected cost
(:mod:`spottrain.planner.risk`). All arrays are flat numpy arrays with one entry per column, so
enumerating every homogeneous cluster of the catalog is a handful of vectorized operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.planner import _deps, risk
from spottrain.planner.candidates import Candidate

REGROUP_S = 30.0
"""Stall to detect a lost node and re-form the group (spotDNN: 29.6 s throughput dip)."""


@dataclass(frozen=True, kw_only=True)
class Job:
    """What is being planned: the workload, its size and how it is trained."""

    workload: Any
    samples: float
    sync: str = "sync"
    ps: int = 0
    checkpoint_s: float = 10.0
    deadline_s: float | None = None
    confidence: float = 0.95


@dataclass(frozen=True, kw_only=True)
class Columns:
    cand: np.ndarray
    """Candidate index of each column."""
    n: np.ndarray
    thr: np.ndarray
    low: np.ndarray
    high: np.ndarray
    bottleneck: tuple[str, ...]
    price_rate: np.ndarray
    """$/h of the whole column."""
    rate: np.ndarray
    """Revocations per second of the column (0 for on-demand)."""
    stall_mean_s: np.ndarray
    stall_sd_s: np.ndarray
    time_mean_s: np.ndarray
    time_q_s: np.ndarray
    time_p95_s: np.ndarray
    p_deadline: np.ndarray | None
    interval_s: np.ndarray
    revocations: np.ndarray

    @property
    def size(self) -> int:
        return int(self.cand.size)

    @property
    def cost_usd(self) -> np.ndarray:
        return self.price_rate / 3600.0 * self.time_mean_s

    @property
    def cost_p95_usd(self) -> np.ndarray:
        return self.price_rate / 3600.0 * self.time_p95_s


def node_counts(cands: Sequence[Candidate], max_nodes: int, quotas: dict[str, int] | None) -> np.ndarray:
    limits = np.full(len(cands), max_nodes, dtype=int)
    if quotas:
        q = {k.lower(): v for k, v in quotas.items()}
        for i, c in enumerate(cands):
            limits[i] = min(limits[i], q.get(c.instance_type.lower(), max_nodes), q.get(c.gpu.lower(), max_nodes))
    return limits


def build_columns(job: Job, cands: Sequence[Candidate], limits: np.ndarray) -> Columns:
    """Assess every (candidate, 1..limit) column."""
    idx, ns, thr, lo, hi, bott, price, rate, smean, ssd = [], [], [], [], [], [], [], [], [], []
    for i, c in enumerate(cands):
        m = int(limits[i])
        if m < 1:
            continue
        t, l, h, b = _deps.throughput_curve(job.workload, c.gpu, c.gpus_per_node, c.network_gbps, m,
                                            sync=job.sync, ps=job.ps)
        n = np.arange(1, m + 1)
        idx.append(np.full(m, i))
        ns.append(n)
        thr.append(t[:m])
        lo.append(l[:m])
        hi.append(h[:m])
        bott.extend(b[:m])
        price.append(n * c.price_usd_per_hour)
        if c.spot:
            rev = _deps.revocation(c.cloud, c.gpu)
            rate.append(n * rev.rate_per_s)
            smean.append(REGROUP_S + rev.restart_mean_s / n)
            ssd.append(rev.restart_sd_s / n)
        else:
            rate.append(np.zeros(m))
            smean.append(np.full(m, REGROUP_S))
            ssd.append(np.zeros(m))
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
    thr_a, rate_a, sm, sd = cat(thr), cat(rate), cat(smean), cat(ssd)
    a = risk.assess(job.samples, thr_a, cat(lo), cat(hi), rate_a, sm, sd, job.checkpoint_s,
                    deadline_s=job.deadline_s, confidence=job.confidence)
    return Columns(cand=cat(idx).astype(int), n=cat(ns).astype(int), thr=thr_a, low=cat(lo), high=cat(hi),
                   bottleneck=tuple(bott), price_rate=cat(price), rate=rate_a, stall_mean_s=sm, stall_sd_s=sd,
                   time_mean_s=a.time_mean_s, time_q_s=a.time_q_s, time_p95_s=a.time_p95_s, p_deadline=a.p_deadline,
                   interval_s=a.interval_s, revocations=a.revocations)
