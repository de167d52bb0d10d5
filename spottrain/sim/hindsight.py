"""Hindsight: how far a plan is from the best plan one could have picked knowing the traces.

Every plan of a candidate set is simulated on the *same* runs (common random numbers: run ``i``
of every plan uses the same seed, hence the same offset into a trace of the same length), each
with its own policy and its own revocation source (a replayed trace of its instance type; plans
without spot nodes need none). Two references follow:

- **hindsight-optimal plan** (a fixed choice made knowing the traces): the candidate with the
  least mean simulated cost among those whose simulated deadline-met rate over the runs is at
  least the confidence. It is the plan a planner with a perfect revocation model would pick.
- **per-run oracle** (stricter, a lower bound no plan reaches): for each run, the least cost
  among the candidates that met the deadline in that run; the mean over runs. Runs where no
  candidate met the deadline are left out (and counted).

>>> from spottrain.sim.hindsight import simulate_plans, hindsight           # doctest: +SKIP
>>> outcomes = simulate_plans(plans, trace_for=lambda p: "bamboo-aws-p3", runs=200)
>>> h = hindsight(outcomes, confidence=0.95)
>>> h.best.label, h.best.mean_cost_usd, h.oracle_mean_cost_usd
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.plan import Plan
from spottrain.sim.setup import SimParams, SimSetup
from spottrain.sim.montecarlo import make_source, run_seed

INF = math.inf


class NoRevocations:
    """The revocation source of a cluster without spot nodes: nothing is ever revoked."""

    kind = "none"
    description = "no spot nodes: no revocations"
    mean_up_fraction = 1.0

    def for_run(self, rng: np.random.Generator) -> "NoRevocations":
        return self

    def acquire_time(self, t: float, slot: int) -> float:
        return t

    def revoke_time(self, t: float, slot: int) -> float:
        return INF


@dataclass(frozen=True, kw_only=True)
class PlanOutcome:
    """One plan simulated over ``runs`` runs."""

    label: str
    plan: Plan
    source: str
    """Where its revocations came from (trace name, or none)."""
    cost_usd: np.ndarray
    """Cost of each run."""
    met: np.ndarray
    """Whether each run met the deadline."""
    makespan_s: np.ndarray
    """Makespan of each run (``inf``: not finished within the horizon)."""
    revocations: np.ndarray | None = None
    """Revocations seen in each run."""

    @property
    def mean_cost_usd(self) -> float:
        return float(self.cost_usd.mean())

    @property
    def met_rate(self) -> float:
        return float(self.met.mean())


@dataclass(frozen=True, kw_only=True)
class Hindsight:
    best: PlanOutcome | None
    """Cheapest candidate (mean cost) whose deadline-met rate >= confidence; None if none does."""
    oracle_mean_cost_usd: float
    """Mean over runs of the cheapest candidate meeting the deadline in that run."""
    oracle_runs: int
    """Runs in which at least one candidate met the deadline (the oracle's mean is over these)."""
    runs: int
    candidates: int


def plan_label(plan: Plan) -> str:
    return plan.label


def setup_for(plan: Plan, trace: str | None, params: SimParams | None = None) -> SimSetup:
    """A simulation set-up of ``plan`` with its own policy: trace replay when it has spot nodes."""
    params = params or SimParams()
    if any(g.spot for g in plan.groups):
        source = make_source(plan, trace=trace, model=trace is None, params=params)
    else:
        source = NoRevocations()
    return SimSetup(plan=plan, policy_name=plan.policy, source=source, params=params)


_FORKED: list[SimSetup] = []


def _run_one(args: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    k, seed, runs = args
    setup = _FORKED[k]
    rs = [setup.run(run_seed(seed, i)) for i in range(runs)]
    return (np.array([r.cost_usd for r in rs]), np.array([bool(r.deadline_met) for r in rs]),
            np.array([r.makespan_s if r.finished else INF for r in rs]), np.array([r.revocations for r in rs]))


def simulate_plans(plans: Sequence[Plan], *, trace_for: Callable[[Plan], str | None] | None = None,
                   source_for: Callable[[Plan], tuple[Any, str]] | None = None, runs: int = 200,
                   seed: int = 0, params: SimParams | None = None, workers: int | None = None,
                   labels: Sequence[str] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> list[PlanOutcome]:
    """Simulate every plan on the same ``runs`` seeds, each under its own policy.

    The revocations of a plan's spot nodes come from ``trace_for(plan)`` (the name of a trace to
    replay; None: lifetimes sampled from the fitted model) or from ``source_for(plan)`` (a
    prepared revocation source and its description, e.g. a pool of traces). Plans without spot
    nodes are never revoked. ``progress(done, total)`` is called as plans finish."""
    if (trace_for is None) == (source_for is None):
        raise ValueError("give exactly one of trace_for and source_for")
    setups, sources = [], []
    for p in plans:
        has_spot = any(g.spot for g in p.groups)
        if not has_spot:
            setups.append(setup_for(p, None, params))
            sources.append("none (on-demand)")
        elif source_for is not None:
            src, desc = source_for(p)
            setups.append(SimSetup(plan=p, policy_name=p.policy, source=src, params=params or SimParams()))
            sources.append(desc)
        else:
            trace = trace_for(p)
            setups.append(setup_for(p, trace, params))
            sources.append(trace if trace else "fitted lifetime model")
    workers = workers if workers is not None else min(os.cpu_count() or 1, 4)
    jobs = [(k, seed, runs) for k in range(len(setups))]
    _FORKED[:] = setups
    try:
        if workers > 1 and len(jobs) > 1:
            import multiprocessing as mp

            with mp.get_context("fork").Pool(workers) as pool:
                out = []
                for res in pool.imap(_run_one, jobs, chunksize=1):
                    out.append(res)
                    if progress is not None:
                        progress(len(out), len(jobs))
        else:
            out = []
            for j in jobs:
                out.append(_run_one(j))
                if progress is not None:
                    progress(len(out), len(jobs))
    finally:
        _FORKED.clear()
    labels = list(labels) if labels is not None else [plan_label(p) for p in plans]
    return [PlanOutcome(label=lab, plan=p, source=src, cost_usd=c, met=m, makespan_s=t, revocations=r)
            for lab, p, src, (c, m, t, r) in zip(labels, plans, sources, out)]


def hindsight(outcomes: Sequence[PlanOutcome], *, confidence: float) -> Hindsight:
    """The hindsight-optimal plan and the per-run oracle over ``outcomes`` (same runs each)."""
    if not outcomes:
        raise ValueError("no candidates")
    runs = len(outcomes[0].cost_usd)
    ok = [o for o in outcomes if o.met_rate >= confidence - 1e-12]
    best = min(ok, key=lambda o: (o.mean_cost_usd, o.label)) if ok else None
    cost = np.stack([o.cost_usd for o in outcomes])
    met = np.stack([o.met for o in outcomes])
    masked = np.where(met, cost, INF).min(axis=0)
    hit = np.isfinite(masked)
    oracle = float(masked[hit].mean()) if hit.any() else math.nan
    return Hindsight(best=best, oracle_mean_cost_usd=oracle, oracle_runs=int(hit.sum()), runs=runs,
                     candidates=len(outcomes))


# ---------------------------------------------------------------- empirical availability
def matching_traces(group: Any, *, traces: Sequence[str] | None = None,
                    exclude: Sequence[str] = ()) -> list[str]:
    """Traces that describe the spot market of ``group`` (a :class:`~spottrain.plan.PlanGroup`).

    A trace matches by instance type (SkyPilot's ``_v100_8`` is p3.16xlarge); only when no trace
    names the instance type do traces of the same cloud and GPU without an instance type match
    (node traces of spot clusters). Price traces never match. ``exclude`` drops traces by name or
    by zone (a zone drops every trace recorded there, whatever its date), so that a benchmark can
    hold out the trace it scores on. ``traces``: names or user-CSV paths (default: shipped)."""
    from spottrain.sim import _deps

    names = list(traces) if traces is not None else _deps.list_traces()
    drop = {x.lower() for x in exclude}
    by_type, by_gpu = [], []
    for name in names:
        t = _deps.load_trace(name)
        if t.kind == "price" or t.cloud != group.cloud:
            continue
        if name.lower() in drop or (t.zone and t.zone.lower() in drop):
            continue
        if t.instance_type:
            if t.instance_type == group.instance_type:
                by_type.append(name)
        elif t.gpu and _deps.canonical_gpu(t.gpu) == _deps.canonical_gpu(group.gpu):
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
        self.description = (f"{len(names)} pooled traces ({', '.join(names)})" if len(names) <= 3
                            else f"{len(names)} pooled traces ({', '.join(names[:3])}, ...)")
        self.name = self.description

    def for_run(self, rng: np.random.Generator) -> Any:
        k = int(rng.choice(len(self.members), p=self.p)) if len(self.members) > 1 else 0
        return self.members[k].for_run(rng)


def pooled_source(plan: Plan, names: Sequence[str], params: SimParams | None = None) -> TracePool:
    """A :class:`TracePool` of the traces ``names`` prepared for replay against ``plan``."""
    from spottrain.sim import _deps
    from spottrain.sim.sources import from_trace

    params = params or SimParams()
    horizon = params.horizon_s or max(5.0 * plan.prediction.duration_s, 2 * 86400.0)
    members = [from_trace(n, plan, horizon) for n in names]
    return TracePool(members, [_deps.load_trace(n).duration_s for n in names], names)
