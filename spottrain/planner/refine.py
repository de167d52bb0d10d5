"""Simulation-refined planning: plan, simulate the promising plans on real traces, choose.

The planner's analytical risk model (:mod:`spottrain.planner.risk`) prices revocations as
independent per-node Poisson events, computes P(deadline) for spot-only execution and bills
replacement waits. Real spot markets differ in three ways that move the best choice:

- capacity of an instance type goes and comes back *for all its nodes at once* (correlated
  outages), so a bigger cluster that finishes inside an up window can cost less than a small
  one that waits through several outages;
- the plan runs under a deadline-aware policy (``deadline-margin``) that falls back to
  on-demand, so a plan whose spot-only P(deadline) is low may meet every deadline in practice
  and the risk shows in its cost instead;
- nothing is billed while capacity is gone.

:func:`refine` keeps the analytical planner for what it is good at (a fast search over
thousands of clusters) and lets the simulator settle the choice among a bounded set of
candidates:

1. **Candidates** (:func:`candidate_plans`): the planner's plan, its runners-up, the Pareto
   points that can meet the deadline, and single-type sweeps around the fastest failure-free
   size ``n0`` of each node kind (``n0, n0+1, n0+2``; for spot also ``1.25, 1.5, 2, 3 x n0``).
   A spot plan cannot cost less than its failure-free cost, so candidates whose failure-free
   cost exceeds the cheapest on-demand plan that meets the deadline are dropped; the rest are
   kept in order of origin, then failure-free cost, up to ``max_candidates``.
2. **Availability model**: each candidate's spot nodes are replayed on random windows of the
   real shipped traces of its instance type, pooled over zones and dates
   (:func:`spottrain.sim.sources.matching_traces`, :class:`~spottrain.sim.sources.TracePool`),
   minus ``exclude`` (trace names or zones). Types without a trace fall back to lifetimes sampled
   from the fitted lifetime model, and the result says so.
3. **Simulation**: every candidate under the policy it would run with, on the same ``runs``
   seeds (common random numbers), with :func:`spottrain.sim.hindsight.simulate_plans`.
4. **Choice**: with a deadline, the least mean cost among candidates whose simulated
   deadline-met rate is at least the confidence (and, with a budget too, mean cost within it);
   with only a budget, the least mean makespan among those whose mean cost is within it. When
   no candidate qualifies, the planner's plan stays, with its simulated figures and a note.

Deterministic given ``seed``; about ``max_candidates x runs`` simulated runs.

>>> from spottrain.planner.api import plan                               # doctest: +SKIP
>>> from spottrain.planner.engine import prepare                          # doctest: +SKIP
>>> from spottrain.planner.refine import refine                          # doctest: +SKIP
>>> kw = dict(samples=90 * 1.28e6, deadline_s=16 * 3600, regions=["us-west-2"])
>>> r = refine(plan(w, **kw), prepare(w, **kw), runs=100)                # doctest: +SKIP
>>> r.plan.cluster, r.plan.prediction.cost_usd, r.plan.prediction.p_meet_deadline  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.plan import Plan, PlanPrediction
from spottrain.planner.api import PlanResult
from spottrain.planner.engine import Context, to_plan

SWEEP_SPOT = (1.25, 1.5, 2.0, 3.0)
"""Multiples of the fastest failure-free size ``n0`` tried for spot node kinds (besides n0, n0+1, n0+2)."""
ORIGINS = ("planner", "runner-up", "sweep", "baseline", "pareto")
"""Where a candidate comes from, in the order a node kind's candidates are kept under the candidate cap."""

_LABEL = re.compile(r"^(\d+)x (\S+) (spot|on-demand)$")


@dataclass(frozen=True, kw_only=True)
class CandidateFigures:
    """One candidate plan: what the planner predicted and what the simulation gave."""

    label: str
    origin: str
    """planner, runner-up, pareto, baseline or sweep."""
    plan: Plan
    """The candidate as the planner assessed it (analytical prediction)."""
    availability: str
    """What replayed its spot nodes: pooled traces, the fitted lifetime model, or none (on-demand)."""
    failure_free_cost_usd: float
    predicted_cost_usd: float
    predicted_p_deadline: float | None
    mean_cost_usd: float
    p95_cost_usd: float
    mean_duration_s: float
    """Mean makespan over the runs that finished (inf if none did)."""
    p95_duration_s: float
    met_rate: float | None
    """Share of runs that met the deadline (None without a deadline)."""
    finished_rate: float
    mean_revocations: float
    eligible: bool
    """Whether it satisfies the request in simulation (deadline rate, budget)."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "plan"}
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


@dataclass(frozen=True, kw_only=True)
class Refinement:
    """What :func:`refine` chose and why."""

    plan: Plan
    """The chosen plan, its prediction replaced by the simulated figures (see ``plan.extra['refined']``)."""
    analytical: Plan
    """The planner's own choice (unchanged)."""
    changed: bool
    """Whether the simulation chose another cluster than the planner."""
    candidates: tuple[CandidateFigures, ...]
    runs: int
    seed: int
    traces: dict[str, tuple[str, ...]]
    """Instance type -> the traces pooled for it (empty: the fitted lifetime model was used)."""
    model_fallback: tuple[str, ...]
    """Instance types with no matching trace, simulated on the fitted lifetime model instead."""
    excluded: tuple[str, ...]
    notes: tuple[str, ...]
    seconds: float

    @property
    def chosen(self) -> CandidateFigures:
        return next(c for c in self.candidates if c.label == self.plan.label)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.plan.label, "analytical_label": self.analytical.label,
                "changed": self.changed, "plan": self.plan.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates], "runs": self.runs, "seed": self.seed,
                "traces": {k: list(v) for k, v in self.traces.items()}, "model_fallback": list(self.model_fallback),
                "excluded": list(self.excluded), "notes": list(self.notes), "seconds": round(self.seconds, 3)}


# --------------------------------------------------------------------------- candidates


def failure_free_cost_usd(p: Plan) -> float:
    """Cost of ``p`` if nothing were ever revoked: a lower bound on the cost of any run of a
    spot plan (start-up aside), and the cost of an on-demand plan."""
    return p.workload.samples_total / max(p.prediction.throughput_samples_per_s, 1e-12) * p.price_usd_per_hour / 3600


def candidate_plans(ctx: Context, result: PlanResult, *, baselines: bool = False,
                    on_demand: bool = True) -> list[tuple[str, Plan]]:
    """``(origin, plan)`` of every candidate, without duplicates (first origin wins): the
    planner's plan, runners-up, (the baselines' plans when ``baselines``), Pareto points that can
    meet the deadline, and single-type sweeps around the fastest failure-free size of each node
    kind (with only a budget: around the largest size whose failure-free cost fits it).
    ``on_demand=False`` leaves out plans with on-demand nodes (a spot-only request), except the
    planner's own."""
    out: dict[str, tuple[str, Plan]] = {}

    def add(origin: str, p: Plan) -> None:
        if on_demand or origin == "planner" or all(g.spot for g in p.groups):
            out.setdefault(p.label, (origin, p))

    add("planner", result.best)
    for p in result.runners_up:
        add("runner-up", p)
    if baselines:
        for b in result.baselines.values():
            if isinstance(b, Plan):
                add("baseline", b)
    deadline, budget = ctx.limits.deadline_s, ctx.limits.budget_usd
    index = {(c.instance_type, c.spot, c.region, c.zone): i for i, c in enumerate(ctx.cands)}
    cols = ctx.cols
    sizes_of = {i: np.unique(cols.n[cols.cand == i]) for i in range(len(ctx.cands))}
    picks: dict[tuple[int, int], str] = {}
    for pt in result.pareto:
        m = _LABEL.match(pt.get("label", ""))
        kind = (m[2], m[3] == "spot", pt.get("region"), pt.get("zone")) if m else None
        if kind not in index:
            continue
        if deadline is not None and pt["duration_s"] > deadline:
            continue
        picks.setdefault((index[kind], int(m[1])), "pareto")
    for i, c in enumerate(ctx.cands):
        if not c.spot and not on_demand:
            continue
        sel = cols.cand == i
        n, t_free = cols.n[sel], cols.work[sel] / np.maximum(cols.thr[sel], 1e-12)
        if deadline is not None:
            fits = n[t_free <= deadline]
            if fits.size == 0:
                continue
            n0 = int(fits.min())
            sizes = {n0, n0 + 1, n0 + 2} | ({math.ceil(f * n0) for f in SWEEP_SPOT} if c.spot else set())
        elif budget is not None:
            fits = n[t_free * cols.price_rate[sel] / 3600 <= budget]
            if fits.size == 0:
                continue
            top = int(fits.max())
            sizes = {top, top - 1, top - 2} | ({math.ceil(top / f) for f in SWEEP_SPOT} if c.spot else set())
        else:
            continue
        avail = sizes_of[i]
        for s in sizes:
            if s < 1 or s > ctx.limits.max_nodes:
                continue
            k = int(np.searchsorted(avail, s))  # the smallest column size >= s (columns may skip sizes)
            if k < avail.size:
                picks.setdefault((i, int(avail[k])), "sweep")
    for (i, s), origin in sorted(picks.items()):
        add(origin, to_plan(ctx, ctx.evaluate(((i, s),)), exact_interval=True))
    return list(out.values())


def _select(cands: list[tuple[str, Plan]], ctx: Context, cap: int) -> tuple[list[tuple[str, Plan]], int]:
    """Drop candidates that cannot beat the cheapest deadline-feasible on-demand plan (or fit the
    budget) even without a revocation, then keep at most ``cap``: the planner's plan, the cheapest on-demand
    plan that meets the deadline (the safe choice), then round-robin over node kinds (each kind's
    candidates by origin, then failure-free cost), so that every kind gets its sweep before any
    kind gets its long tail of Pareto points. Returns the kept candidates and how many were
    dropped as dominated."""
    deadline = ctx.limits.deadline_s

    def on_demand_ok(p: Plan) -> bool:
        return not any(g.spot for g in p.groups) and (deadline is None or p.prediction.duration_s <= deadline)

    od = [failure_free_cost_usd(p) for _, p in cands if on_demand_ok(p)]
    bound = min(od) if od and deadline is not None else math.inf
    if ctx.limits.budget_usd is not None:  # no run of a plan costs less than its failure-free cost
        bound = min(bound, ctx.limits.budget_usd)
    kept = [(o, p) for o, p in cands if o == "planner" or failure_free_cost_usd(p) <= bound * (1 + 1e-9)]
    dominated = len(cands) - len(kept)
    if len(kept) <= cap:
        return kept, dominated
    rank = {o: k for k, o in enumerate(ORIGINS)}
    first = [kept[0]]  # the planner's plan
    safe = min((op for op in kept[1:] if on_demand_ok(op[1])), key=lambda op: failure_free_cost_usd(op[1]),
               default=None)
    if safe is not None:
        first.append(safe)
    kinds: dict[tuple, list[tuple[str, Plan]]] = {}
    for op in kept:
        if op not in first:
            kinds.setdefault(tuple((g.instance_type, g.spot) for g in op[1].groups), []).append(op)
    queues = sorted((sorted(q, key=lambda op: (rank[op[0]], failure_free_cost_usd(op[1]))) for q in kinds.values()),
                    key=lambda q: min(failure_free_cost_usd(p) for _, p in q))
    out = list(first)
    while len(out) < cap and any(queues):
        for q in queues:
            if q and len(out) < cap:
                out.append(q.pop(0))
    return out, dominated


# --------------------------------------------------------------------------- availability


def replay_group(p: Plan) -> Any:
    """The group whose market replays the plan's spot nodes (the largest spot group)."""
    spot = [g for g in p.groups if g.spot]
    return max(spot, key=lambda g: g.count * g.gpus_per_node) if spot else None


class _Availability:
    """Revocation sources per candidate: a pool of matching traces, else the fitted model."""

    def __init__(self, traces: Sequence[str] | None, exclude: Sequence[str], params: Any) -> None:
        self.traces, self.exclude, self.params = traces, tuple(exclude), params
        self.pools: dict[str, tuple[str, ...]] = {}

    def names_for(self, group: Any) -> tuple[str, ...]:
        from spottrain.sim.sources import matching_traces

        key = group.instance_type
        if key not in self.pools:
            self.pools[key] = tuple(matching_traces(group, traces=self.traces, exclude=self.exclude))
        return self.pools[key]

    def __call__(self, p: Plan) -> tuple[Any, str]:
        from spottrain.sim import sources
        from spottrain.sim.sources import pooled_source

        g = replay_group(p)
        names = self.names_for(g)
        mixed = len({x.instance_type for x in p.groups if x.spot}) > 1
        suffix = f" (the spot groups of this mix replay the market of {g.instance_type})" if mixed else ""
        if names:
            src = pooled_source(p, names, self.params)
            return src, src.description + suffix
        src = sources.from_model(p)
        return src, f"no trace of {g.instance_type}: {src.description}" + suffix


# --------------------------------------------------------------------------- refine


def refine(
    result: PlanResult,
    ctx: Context,
    *,
    runs: int = 100,
    seed: int = 0,
    confidence: float | None = None,
    traces: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    max_candidates: int = 20,
    on_demand: bool = True,
    baselines: bool = False,
    params: Any = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Refinement:
    """Re-choose the plan of ``result`` by simulating its candidates on real traces.

    ``ctx``: the planner's context of the same request (:func:`spottrain.planner.engine.prepare`
    with the arguments given to ``plan``). ``runs`` simulated runs per candidate on common seeds
    derived from ``seed``; ``confidence`` defaults to the request's. ``traces``: trace names or
    user-CSV paths to draw availability from (default: every shipped trace); ``exclude``: trace
    names or zones left out. At most ``max_candidates`` candidates (>= 2); ``on_demand=False``
    for spot-only requests; ``baselines`` adds the planner's baseline plans as candidates.
    ``params``: :class:`spottrain.sim.setup.SimParams`. ``progress(done, total)`` is called as
    candidates finish (for a progress bar). See the module docstring for the procedure.
    """
    from spottrain.errors import InputError
    from spottrain.sim.hindsight import simulate_plans

    if runs < 1:
        raise InputError(f"expected a run count >= 1, got {runs}", column="--runs")
    if max_candidates < 2:
        raise InputError(f"expected at least 2 candidates, got {max_candidates}", column="--max-candidates")
    t0 = time.perf_counter()
    conf = float(confidence if confidence is not None else ctx.limits.confidence)
    deadline, budget = ctx.limits.deadline_s, ctx.limits.budget_usd
    every = candidate_plans(ctx, result, baselines=baselines, on_demand=on_demand)
    kept, dominated = _select(every, ctx, max_candidates)
    avail = _Availability(traces, exclude, params)
    outs = simulate_plans([p for _, p in kept], source_for=avail, runs=runs, seed=seed, params=params,
                          workers=workers, labels=[p.label for _, p in kept], progress=progress)
    figures = []
    for (origin, p), o in zip(kept, outs):
        fin = o.makespan_s[np.isfinite(o.makespan_s)]
        met = float(o.met.mean()) if deadline is not None else None
        mean_cost = float(o.cost_usd.mean())
        finished = fin.size / len(o.makespan_s)
        # without a deadline the plan must at least finish (at the requested rate) to qualify
        ok = ((met >= conf - 1e-12) if met is not None else finished >= conf - 1e-12) and (
            budget is None or mean_cost <= budget)
        figures.append(CandidateFigures(
            label=o.label, origin=origin, plan=p, availability=o.source,
            failure_free_cost_usd=failure_free_cost_usd(p), predicted_cost_usd=p.prediction.cost_usd,
            predicted_p_deadline=p.prediction.p_meet_deadline, mean_cost_usd=mean_cost,
            p95_cost_usd=float(np.percentile(o.cost_usd, 95)),
            mean_duration_s=float(fin.mean()) if fin.size else math.inf,
            p95_duration_s=float(np.percentile(fin, 95)) if fin.size else math.inf,
            met_rate=met, finished_rate=float(finished),
            mean_revocations=float(o.revocations.mean()) if o.revocations is not None else math.nan,
            eligible=ok))
    notes = []
    ok = [f for f in figures if f.eligible]
    if ok:
        key = (lambda f: (f.mean_cost_usd, f.label)) if deadline is not None else (lambda f: (f.mean_duration_s, f.label))
        best = min(ok, key=key)
    else:
        best = figures[0]  # the planner's plan (kept first)
        what = f"{'met the deadline' if deadline is not None else 'finished'} in >= {conf:.0%} of runs"
        if budget is not None:
            what += (" and " if what else "") + f"stayed within ${budget:,.2f} on average"
        notes.append(f"no candidate {what} in simulation; keeping the planner's plan")
    fallback = tuple(sorted(k for k, v in avail.pools.items() if not v))
    if fallback:
        notes.append("no trace of " + ", ".join(fallback) + ": simulated on the fitted lifetime model")
    if dominated:
        notes.append(f"{dominated} spot candidates dropped: even without revocations they cost more than "
                     "the cheapest on-demand plan that meets the deadline")
    if len(every) - dominated > len(kept):
        notes.append(f"{len(every) - dominated - len(kept)} candidates beyond the cap of {max_candidates} not simulated")
    seconds = time.perf_counter() - t0
    chosen = _with_simulated(best, figures, runs=runs, seed=seed, seconds=seconds, notes=notes,
                             analytical=result.best, excluded=tuple(exclude))
    return Refinement(plan=chosen, analytical=result.best, changed=best.label != result.best.label,
                      candidates=tuple(figures), runs=runs, seed=seed,
                      traces={k: v for k, v in avail.pools.items()}, model_fallback=fallback,
                      excluded=tuple(exclude), notes=tuple(notes), seconds=seconds)


def _with_simulated(best: CandidateFigures, figures: list[CandidateFigures], *, runs: int, seed: int,
                    seconds: float, notes: list[str], analytical: Plan, excluded: tuple[str, ...]) -> Plan:
    """``best.plan`` with its prediction replaced by the simulated figures, and a record of what was simulated."""
    p = best.plan
    pred = dataclasses.replace(
        p.prediction, cost_usd=best.mean_cost_usd, cost_p95_usd=best.p95_cost_usd, p_meet_deadline=best.met_rate,
        expected_revocations=best.mean_revocations if math.isfinite(best.mean_revocations)
        else p.prediction.expected_revocations)
    if math.isfinite(best.p95_duration_s):  # else no run finished: the analytical durations stay
        pred = dataclasses.replace(pred, duration_s=best.mean_duration_s, duration_p95_s=best.p95_duration_s)
    record = {
        "runs": runs, "seed": seed, "candidates": len(figures), "availability": best.availability,
        "excluded": list(excluded), "seconds": round(seconds, 3), "notes": list(notes),
        "analytical": {"label": p.label, **_pred_dict(p.prediction)},
        "finished_rate": best.finished_rate,
        "planner_choice": analytical.label,
    }
    met = "" if best.met_rate is None else f", deadline met in {best.met_rate:.0%} of runs"
    text = (f"Refined by simulation: {best.label} chosen among {len(figures)} candidates, {runs} runs each on "
            f"{best.availability}: mean ${best.mean_cost_usd:,.2f}{met}.")
    if analytical.label != best.label:
        a = next((f for f in figures if f.label == analytical.label), None)
        if a is not None:
            text += (f" The analytical choice {a.label} simulated at mean ${a.mean_cost_usd:,.2f}"
                     + ("" if a.met_rate is None else f", {a.met_rate:.0%} met") + ".")
    explanation = (p.explanation + " " if p.explanation else "") + text
    return dataclasses.replace(p, prediction=pred, explanation=explanation,
                               extra={**p.extra, "refined": record})


def _pred_dict(pred: PlanPrediction) -> dict[str, Any]:
    return {"duration_s": pred.duration_s, "duration_p95_s": pred.duration_p95_s, "cost_usd": pred.cost_usd,
            "cost_p95_usd": pred.cost_p95_usd, "p_meet_deadline": pred.p_meet_deadline}


def plan_refined(workload: Any, *, runs: int = 100, seed: int = 0, traces: Sequence[str] | None = None,
                 exclude: Sequence[str] = (), max_candidates: int = 20, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 **plan_kwargs: Any) -> tuple[PlanResult, Refinement]:
    """:func:`spottrain.planner.plan` with ``plan_kwargs``, then :func:`refine` on the same
    request (with the context the planner prepared for it).

    >>> result, ref = plan_refined(w, samples=90 * 1.28e6, deadline_s=16 * 3600, runs=100)  # doctest: +SKIP
    >>> ref.plan.cluster, ref.changed, ref.notes                                             # doctest: +SKIP
    """
    from spottrain.planner.api import plan

    result = plan(workload, **plan_kwargs)
    on_demand = bool(plan_kwargs.get("allow_on_demand", True)) and not plan_kwargs.get("spot_only", False)
    ref = refine(result, result.context, runs=runs, seed=seed, traces=traces, exclude=exclude,
                 max_candidates=max_candidates, on_demand=on_demand, workers=workers, progress=progress)
    return result, ref
