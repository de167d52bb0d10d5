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
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.plan_file import Plan
from spottrain.sim import vector
from spottrain.sim.job import run_setup
from spottrain.sim.setup import SimParams, SimSetup
from spottrain.sim.montecarlo import make_source, run_seed
from spottrain.sim.sources import NoRevocations

INF = math.inf


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
    switched: np.ndarray | None = None
    """Whether each run's policy switched to on-demand nodes."""

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


def setup_for(plan: Plan, trace: str | None, params: SimParams | None = None) -> SimSetup:
    """A simulation set-up of ``plan`` with its own policy: trace replay when it has spot nodes."""
    params = params or SimParams()
    if any(g.spot for g in plan.groups):
        source = make_source(plan, trace=trace, model=trace is None, params=params)
    else:
        source = NoRevocations()
    return SimSetup(plan=plan, policy_name=plan.policy, source=source, params=params)


_FORKED: list[SimSetup] = []


def _run_one(args: tuple[int, int, int, int]) -> tuple[np.ndarray, ...]:
    k, seed, runs, first = args
    setup = _FORKED[k]
    rs = [run_setup(setup, run_seed(seed, i)) for i in range(first, first + runs)]
    return (np.array([r.cost_usd for r in rs]), np.array([bool(r.deadline_met) for r in rs]),
            np.array([r.makespan_s if r.finished else INF for r in rs]), np.array([r.revocations for r in rs]),
            np.array([bool(r.switched_on_demand) for r in rs]))


def simulate_plans(plans: Sequence[Plan], *, trace_for: Callable[[Plan], str | None] | None = None,
                   source_for: Callable[[Plan], tuple[Any, str]] | None = None, runs: int = 200,
                   seed: int = 0, params: SimParams | None = None, workers: int | None = None,
                   labels: Sequence[str] | None = None,
                   progress: Callable[[int, int], None] | None = None, engine: str = "auto",
                   first_run: int = 0) -> list[PlanOutcome]:
    """Simulate every plan on the same ``runs`` seeds, each under its own policy.

    The revocations of a plan's spot nodes come from ``trace_for(plan)`` (the name of a trace to
    replay; None: lifetimes sampled from the fitted model) or from ``source_for(plan)`` (a
    prepared revocation source and its description, e.g. a pool of traces). Plans without spot
    nodes are never revoked. ``progress(done, total)`` is called as plans finish.

    Plans the array engine covers (:func:`spottrain.sim.vector.unsupported`) run there, all runs
    at once, unless ``engine="event"``; the others run on the event engine. ``first_run``: the
    index of the first run (runs ``first_run .. first_run + runs - 1`` of the seed sequence, so
    that a later batch extends an earlier one)."""
    setups, sources = plan_setups(plans, trace_for=trace_for, source_for=source_for, params=params)
    out = run_setups(setups, runs=runs, seed=seed, workers=workers, progress=progress, engine=engine,
                     first_run=first_run)
    labels = list(labels) if labels is not None else [p.label for p in plans]
    return [PlanOutcome(label=lab, plan=p, source=src, cost_usd=c, met=m, makespan_s=t, revocations=r, switched=sw)
            for lab, p, src, (c, m, t, r, sw) in zip(labels, plans, sources, out)]


def plan_setups(plans: Sequence[Plan], *, trace_for: Callable[[Plan], str | None] | None = None,
                source_for: Callable[[Plan], tuple[Any, str]] | None = None,
                params: SimParams | None = None) -> tuple[list[SimSetup], list[str]]:
    """The set-up of every plan under its own policy and where its revocations come from (see
    :func:`simulate_plans`); prepared once, they can be run in several batches (:func:`run_setups`)."""
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
    return setups, sources


def run_setups(setups: Sequence[SimSetup], *, runs: int, seed: int = 0, workers: int | None = None,
               progress: Callable[[int, int], None] | None = None, engine: str = "auto",
               first_run: int = 0) -> list[tuple[np.ndarray, ...]]:
    """``(cost, deadline met, makespan or inf, revocations, switched to on-demand)`` per run of every setup, runs
    ``first_run .. first_run + runs - 1`` (see :func:`simulate_plans`)."""
    seeds = [run_seed(seed, i) for i in range(first_run, first_run + runs)]
    done: dict[int, tuple] = {}
    for k, st in enumerate(setups):
        if engine != "event" and vector.unsupported(st) is None:
            v = vector.run_vector(st, seeds)
            done[k] = (v.cost_usd, v.deadline_met if v.deadline_met is not None else np.zeros(runs, dtype=bool),
                       np.where(v.finished, v.makespan_s, INF), v.revocations, v.switched_on_demand)
            if progress is not None:
                progress(len(done), len(setups))
    jobs = [(k, seed, runs, first_run) for k in range(len(setups)) if k not in done]
    workers = workers if workers is not None else min(os.cpu_count() or 1, 4)
    _FORKED[:] = list(setups)
    try:
        if workers > 1 and len(jobs) > 1:
            with mp.get_context("fork").Pool(workers) as pool:
                for j, res in zip(jobs, pool.imap(_run_one, jobs, chunksize=1)):
                    done[j[0]] = res
                    if progress is not None:
                        progress(len(done), len(setups))
        else:
            for j in jobs:
                done[j[0]] = _run_one(j)
                if progress is not None:
                    progress(len(done), len(setups))
    finally:
        _FORKED.clear()
    return [done[k] for k in range(len(setups))]


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
