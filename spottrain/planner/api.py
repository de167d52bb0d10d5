"""``plan(...)``: the cheapest cluster that meets a deadline, or the fastest within a budget.

>>> from spottrain.planner import plan                                   # doctest: +SKIP
>>> from spottrain.perf.workload import Workload                         # doctest: +SKIP
>>> r = plan(Workload.from_zoo("resnet50", 64), samples=90 * 1.28e6, deadline_s=8 * 3600)  # doctest: +SKIP
>>> r.best.cluster, r.best.prediction.cost_usd                           # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spottrain.catalog import load_catalog
from spottrain.catalog.offers import without_outlier_spot_prices
from spottrain.errors import InfeasibleError, InputError
from spottrain.plan_file import Plan
from spottrain.perf.throughput import explain_bottleneck
from spottrain.planner.other_systems import run_baselines
from spottrain.planner.engine import (
    ONE_JOB,
    Context,
    capped_plans,
    describe,
    evaluate_picks,
    market_mask,
    objective_of,
    prepare,
    solve,
    subset_columns,
    to_plan,
)
from spottrain.planner.formulation import Outcome, SolveStats, homogeneous_feasible
from spottrain.planner.evidence import has_own_traces
from spottrain.planner.pareto import pareto_points
from spottrain.planner.work import target_loss_work
from spottrain.units import format_count, format_duration, format_probability, format_usd, plural

@dataclass(kw_only=True)
class PlanResult:
    best: Plan
    runners_up: list[Plan]
    pareto: list[dict[str, Any]]
    """Non-dominated (expected time, expected cost) points: ``{label, duration_s, cost_usd}``."""
    baselines: dict[str, Plan | str]
    """Baseline name -> its plan evaluated with our models, or why it has none."""
    explanation: str
    stats: dict[str, Any] = field(default_factory=dict)
    context: Context | None = field(default=None, repr=False, compare=False)
    """The request's prepared context (candidates, columns, limits), for :func:`spottrain.planner.refine.refine`."""

    def to_dict(self) -> dict[str, Any]:
        def point(p: Plan) -> dict[str, Any]:
            return {"label": p.label, "duration_s": p.prediction.duration_s, "cost_usd": p.prediction.cost_usd,
                    "duration_p95_s": p.prediction.duration_p95_s, "cost_p95_usd": p.prediction.cost_p95_usd,
                    "p_meet_deadline": p.prediction.p_meet_deadline}

        baselines = []
        for name, b in self.baselines.items():
            if isinstance(b, Plan):
                baselines.append({"name": name, **point(b), "meets_deadline": _meets(b), "_point": {**point(b), "label": name}})
            else:
                baselines.append({"name": name, "label": None, "reason": b})
        return {
            "label": self.best.label, "chosen": point(self.best), "plan": self.best.to_dict(),
            "samples_total": self.best.workload.samples_total, "deadline_s": self.best.deadline_s,
            "budget_usd": self.best.budget_usd, "runners_up": [point(p) for p in self.runners_up],
            "pareto": self.pareto, "baselines": baselines, "explanation": self.explanation, "stats": self.stats,
        }


def _meets(p: Plan) -> bool | None:
    if p.deadline_s is None or p.prediction.p_meet_deadline is None:
        return None
    return p.prediction.p_meet_deadline >= p.confidence


# --------------------------------------------------------------------------- public entry


def plan(
    workload: Any,
    *,
    samples: float | None = None,
    target_loss: float | None = None,
    critical_batch: float | None = None,
    loss_curves: Sequence[Any] | None = None,
    deadline_s: float | None = None,
    budget_usd: float | None = None,
    confidence: float = 0.95,
    catalog: Any = None,
    spot_only: bool = False,
    allow_on_demand: bool = True,
    clouds: Sequence[str] | None = None,
    regions: Sequence[str] | None = None,
    max_nodes: int = 64,
    baselines: bool = True,
    pareto: bool = True,
    include_outliers: bool = False,
    evidence: str = "any",
    **options: Any,
) -> PlanResult:
    """Choose the cluster. ``deadline_s``: cheapest plan with P(finish by deadline) >=
    ``confidence``; only ``budget_usd``: fastest plan with expected cost <= budget (both: cheapest
    meeting the deadline within the budget). The work is ``samples``, or ``target_loss`` with a
    ``profile=`` that has a loss curve or past runs' ``loss_curves`` (LossCurve objects, which
    take precedence): then the samples depend on the cluster (:mod:`spottrain.planner.work`;
    ``critical_batch`` = gradient noise scale, optional). Raises :class:`InfeasibleError` naming the nearest
    feasible alternative. ``options`` go to :func:`prepare` (zones, gpus, quotas,
    on_demand_anchor, anchor_share, sync, ps, max_kinds, hard_cap_usd, offers, profile).
    Spot prices flagged as implausible by :func:`spottrain.catalog.offers.price_outliers` are left
    out unless ``include_outliers`` (or explicit ``offers`` are given). ``evidence='traced'``: spot
    offers only of (cloud, GPU) pairs with revocation traces of their own
    (:mod:`spottrain.planner.evidence`)."""
    t0 = time.perf_counter()
    on_demand = allow_on_demand and not spot_only
    if (samples is None) == (target_loss is None):
        raise InputError("give exactly one of --samples N (or --epochs E) and --target-loss L")
    if target_loss is not None:
        prof = options.get("profile")
        curve = loss_curves or (getattr(prof, "loss_curve", None) if prof is not None else None)
        rule = target_loss_work(curve, target_loss, int(workload.batch_size), critical_batch=critical_batch)
        options["work_rule"] = rule
        samples = float(rule.samples(1, 1, options.get("sync", "sync"))[0])
    outliers_left_out = 0
    if options.get("offers") is None:
        # implausible single-zone spot prices stay out of plans unless asked for (docs/catalog.md)
        catalog = catalog if catalog is not None else load_catalog()
        flagged = catalog.spot_outliers
        if not include_outliers and flagged:
            options["offers"] = without_outlier_spot_prices(catalog.offers, flagged)
            outliers_left_out = len(flagged)
    if evidence not in ("any", "traced"):
        raise InputError(f"expected 'any' or 'traced', got {evidence!r}", column="--evidence")
    if evidence == "traced":
        # spot offers only where the (cloud, GPU) has revocation traces of its own
        offers = options.get("offers")
        if offers is None:
            catalog = catalog if catalog is not None else load_catalog()
            offers = catalog.offers
        traced: dict[tuple[str, str], bool] = {}
        kept = []
        for o in offers:
            if o.spot_price_usd_per_hour is not None:
                key = (o.cloud, o.gpu)
                if key not in traced:
                    traced[key] = has_own_traces(o.cloud, o.gpu)
                if not traced[key]:
                    o = replace(o, spot_price_usd_per_hour=None)
            kept.append(o)
        options["offers"] = kept
    ctx = prepare(workload, samples=samples, deadline_s=deadline_s, budget_usd=budget_usd, confidence=confidence,
                  catalog=catalog, spot=True, on_demand=True, clouds=clouds, regions=regions, max_nodes=max_nodes,
                  **options)
    if outliers_left_out:
        ctx.report.notes.append(f"{outliers_left_out} implausible single-zone spot prices left out "
                                "(spottrain catalog flags them; --include-outliers to allow)")
    if options.get("on_demand_anchor") and not on_demand:
        raise InputError("--spot-only contradicts --on-demand-anchor (the anchor is an on-demand server)")
    mask = market_mask(ctx, spot=True, on_demand=on_demand)
    stats = SolveStats()
    best = solve(ctx, mask=mask, stats=stats)
    t_solve = time.perf_counter() - t0
    if best is None:
        raise InfeasibleError(infeasible_message(ctx, mask))
    base = run_baselines(ctx) if baselines else {}
    runners = runners_up(ctx, best, mask)
    text = explain(ctx, best, base, runners)
    extra = {"solver": {"columns": stats.columns_total, "columns_after_pruning": stats.columns_after_pruning,
                        "milp_calls": stats.milp_calls, "plans_enumerated": stats.plans_enumerated,
                        "exact_evaluations": stats.exact_evaluations,
                        "proven_optimal": stats.proven_optimal, "notes": list(stats.notes),
                        "seconds": round(t_solve, 4)},
             "candidates": ctx.report.candidates, "checkpoint_cost_s": ctx.job.checkpoint_s,
             "price_outliers_left_out": outliers_left_out, "evidence_required": evidence}
    best_plan = to_plan(ctx, best, explanation=text, extra=extra, exact_interval=True)
    front = pareto_points(ctx, mask, best) if pareto else []
    return PlanResult(best=best_plan, runners_up=[to_plan(ctx, r) for r in runners], pareto=front, baselines=base,
                      explanation=text, stats={**extra["solver"], "total_seconds": round(time.perf_counter() - t0, 4)},
                      context=ctx)


def runners_up(ctx: Context, best: Outcome, mask: np.ndarray, k: int = 3) -> list[Outcome]:
    """The best feasible homogeneous plans of other instance types, one each (under ``--hard-cap``,
    each one's p95 cost checked exactly, as the best plan's is)."""
    sub = subset_columns(ctx.cols, mask)
    score = sub.cost_usd if objective_of(ctx) == "min-cost" else sub.time_mean_s
    taken = {ctx.cands[i].instance_type for i, _ in best.picks} if len(best.picks) == 1 else set()
    kind = lambda plan: ctx.cands[plan.picks[0][0]].instance_type  # noqa: E731
    if ctx.limits.hard_cap_usd is not None:
        plans = capped_plans(ctx, sub, ctx.limits, None, score)
    else:
        idx = np.flatnonzero(homogeneous_feasible(sub, ctx.cands, ctx.limits, ONE_JOB, None))
        # one exact evaluation per instance type: the columns are sorted, so its first is its best
        first = {}
        for j in idx[np.argsort(score[idx], kind="stable")]:
            first.setdefault(ctx.cands[int(sub.cand[j])].instance_type, int(j))
        plans = (ctx.evaluate(((int(sub.cand[j]), int(sub.n[j])),)) for t, j in first.items() if t not in taken)
    out = []
    for plan in plans:
        if kind(plan) not in taken:
            taken.add(kind(plan))
            out.append(plan)
            if len(out) >= k:
                break
    return out


def _best_unconstrained(ctx: Context, mask: np.ndarray, key: str) -> Outcome | None:
    """The homogeneous plan with the least ``key`` column, ignoring deadline and budget."""
    sub = subset_columns(ctx.cols, mask)
    lim = replace(ctx.limits, deadline_s=None, budget_usd=None, hard_cap_usd=None)
    ok = homogeneous_feasible(sub, ctx.cands, lim, ONE_JOB, None)
    if not ok.any():
        return None
    idx = np.flatnonzero(ok)
    j = int(idx[np.argmin(getattr(sub, key)[idx])])
    return evaluate_picks(ctx.job, ctx.cands, ((int(sub.cand[j]), int(sub.n[j])),), lim)


def fastest(ctx: Context, mask: np.ndarray) -> Outcome | None:
    """Fastest plan ignoring deadline and budget (for infeasibility messages)."""
    return _best_unconstrained(ctx, mask, "time_q_s")


def cheapest(ctx: Context, mask: np.ndarray) -> Outcome | None:
    """Cheapest plan ignoring deadline and budget (for infeasibility messages)."""
    return _best_unconstrained(ctx, mask, "cost_usd")


def infeasible_message(ctx: Context, mask: np.ndarray) -> str:
    if not ctx.cands or not mask.any():
        return ("no GPU offer matches the request (clouds/regions/markets/GPU memory); "
                f"{ctx.report.filtered_out} offers filtered out, {ctx.report.batch_does_not_fit} too small for the batch")
    lim = ctx.limits
    if lim.deadline_s is not None:
        f = fastest(ctx, mask)
        if f is None:
            return "no candidate cluster can finish the job at all under the constraints (revocations too frequent)"
        if f.time_q_s > lim.deadline_s:
            od_offered = any(not ctx.cands[int(i)].spot for i in np.unique(ctx.cols.cand[mask]))
            return (f"deadline {format_duration(lim.deadline_s)} is shorter than the fastest plan: "
                    f"{format_duration(f.time_q_s)} at {lim.confidence:.0%} confidence on {describe(ctx, f)}; "
                    "relax --deadline, lower --confidence"
                    + (" or raise --max-nodes" if od_offered else ", raise --max-nodes or allow on-demand"))
    if lim.budget_usd is not None:
        c = cheapest(ctx, mask)
        if c is not None:
            if lim.deadline_s is not None:
                return (f"no plan meets the deadline within budget ${lim.budget_usd:,.2f}; raise --budget "
                        f"or relax --deadline (cheapest plan overall: ${c.cost_usd:,.2f} on {describe(ctx, c)}, "
                        f"{format_duration(c.time_mean_s)})")
            return (f"budget ${lim.budget_usd:,.2f} is below the cheapest plan: ${c.cost_usd:,.2f} on "
                    f"{describe(ctx, c)} ({format_duration(c.time_mean_s)}); raise --budget")
    if lim.hard_cap_usd is not None:
        c = _best_unconstrained(ctx, mask, "cost_p95_usd")
        if c is not None and c.cost_p95_usd > lim.hard_cap_usd:
            return (f"--hard-cap ${lim.hard_cap_usd:,.2f} is below the lowest p95 cost of any plan: "
                    f"${c.cost_p95_usd:,.2f} on {describe(ctx, c)}; raise --hard-cap")
        if c is not None and lim.deadline_s is not None:
            return (f"no plan meets the deadline with a p95 cost within --hard-cap ${lim.hard_cap_usd:,.2f}; raise "
                    f"--hard-cap or relax --deadline (lowest p95 cost overall: ${c.cost_p95_usd:,.2f} on "
                    f"{describe(ctx, c)}, {format_duration(c.time_mean_s)})")
    return "no plan satisfies the constraints (on-demand anchor, quotas, PS capacity, hard cap); relax them"


def explain(ctx: Context, best: Outcome, base: dict[str, Any], runners: list[Outcome]) -> str:
    """The analytical model's account of its choice; every figure says it is the model's."""
    lim = ctx.limits
    parts = []
    if lim.deadline_s is not None:
        parts.append(f"Analytical model: cheapest plan expected to finish within {format_duration(lim.deadline_s)} "
                     f"with probability {format_probability(best.p_deadline)} (required "
                     f"{format_probability(lim.confidence)}): {describe(ctx, best)}, expected "
                     f"{format_duration(best.time_mean_s)} and {format_usd(best.cost_usd)}.")
    else:
        parts.append(f"Analytical model: fastest plan with expected cost within {format_usd(lim.budget_usd)}: "
                     f"{describe(ctx, best)}, expected {format_duration(best.time_mean_s)} and "
                     f"{format_usd(best.cost_usd)}.")
    revs = plural(best.revocations, "revocation", show=False)
    parts.append(f"Bottleneck: {explain_bottleneck(best.bottleneck)}; {format_count(best.revocations)} {revs} "
                 "expected.")
    od = base.get("cheapest-on-demand")
    if od is not None and not isinstance(od, str) and lim.deadline_s is not None and od.prediction.cost_usd > 0:
        saving = 1.0 - best.cost_usd / od.prediction.cost_usd
        parts.append(f"{saving:.0%} cheaper than the cheapest on-demand plan ({format_usd(od.prediction.cost_usd)}).")
    if runners:
        r = runners[0]
        parts.append(f"Runner-up: {describe(ctx, r)} ({format_usd(r.cost_usd)}, {format_duration(r.time_mean_s)}).")
    return " ".join(parts)
