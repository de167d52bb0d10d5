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

from spottrain.errors import InfeasibleError, InputError, UnknownNameError
from spottrain.plan import Plan, PlanGroup, PlanPrediction, PlanWorkload
from spottrain.planner import _deps, risk
from spottrain.planner.candidates import Candidate, CandidateReport, build_candidates, memory_needed_gib
from spottrain.planner.columns import REGROUP_S, Columns, Job, build_columns, node_counts
from spottrain.planner.formulation import Limits, Outcome, Picks, SolveStats, homogeneous_feasible, solve_mix
from spottrain.units import format_duration

ONE_JOB = 1.0
"""The optimizer counts work in jobs, not samples: a column's rate ``E_j = 1 / E[T_j]`` (jobs per
second), since with a target loss the samples of a job depend on the cluster."""

PS_BANDWIDTH_GBPS = 10.0
"""Network of one parameter server (a 10 Gbps CPU instance, as in CM-DARE's setup)."""


@dataclass(kw_only=True)
class Context:
    """Everything computed once per request; reused by the baselines and the Pareto front."""

    job: Job
    cands: list[Candidate]
    cols: Columns
    limits: Limits
    traffic: np.ndarray | None
    report: CandidateReport
    snapshot: str

    @property
    def work(self) -> float:
        """Samples of a one-GPU cluster (the work of every cluster unless a target loss is set)."""
        return float(self.job.work(1, 1)[0])

    def work_of(self, picks: Picks) -> float:
        """Samples the cluster ``picks`` must train."""
        nodes = sum(n for _, n in picks)
        gpus = sum(n * self.cands[i].gpus_per_node for i, n in picks)
        return float(self.job.work(nodes, gpus)[0])

    def evaluate(self, picks: Picks) -> Outcome:
        """Exact assessment of a plan (perf model's mix rule + risk model of the whole cluster)."""
        return evaluate_picks(self.job, self.cands, picks, self.limits)

    def column_outcome(self, j: int) -> Outcome:
        return self.evaluate(((int(self.cols.cand[j]), int(self.cols.n[j])),))


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
            return {"label": plan_label(p), "duration_s": p.prediction.duration_s, "cost_usd": p.prediction.cost_usd,
                    "duration_p95_s": p.prediction.duration_p95_s, "cost_p95_usd": p.prediction.cost_p95_usd,
                    "p_meet_deadline": p.prediction.p_meet_deadline}

        baselines = []
        for name, b in self.baselines.items():
            if isinstance(b, Plan):
                baselines.append({"name": name, **point(b), "meets_deadline": _meets(b), "_point": {**point(b), "label": name}})
            else:
                baselines.append({"name": name, "label": None, "reason": b})
        return {
            "label": plan_label(self.best), "chosen": point(self.best), "plan": self.best.to_dict(),
            "samples_total": self.best.workload.samples_total, "deadline_s": self.best.deadline_s,
            "budget_usd": self.best.budget_usd, "runners_up": [point(p) for p in self.runners_up],
            "pareto": self.pareto, "baselines": baselines, "explanation": self.explanation, "stats": self.stats,
        }


def _meets(p: Plan) -> bool | None:
    if p.deadline_s is None or p.prediction.p_meet_deadline is None:
        return None
    return p.prediction.p_meet_deadline >= p.confidence


def plan_label(p: Plan) -> str:
    return p.label


# --------------------------------------------------------------------------- evaluation


def evaluate_picks(job: Job, cands: Sequence[Candidate], picks: Picks, limits: Limits) -> Outcome:
    groups = [(cands[i].gpu, cands[i].gpus_per_node, n, cands[i].network_gbps) for i, n in picks]
    thr, lo, hi, bott = _deps.throughput_mix(job.workload, groups, sync=job.sync, ps=job.ps)
    total = sum(n for _, n in picks)
    rate = smean = s2 = 0.0
    for i, n in picks:
        c = cands[i]
        if c.spot:
            rev = _deps.revocation(c.cloud, c.gpu)
            r = n * rev.rate_per_s
            rate += r
            smean += r * (REGROUP_S + rev.restart_mean_s / total)
            s2 += r * (rev.restart_sd_s / total) ** 2
    if rate > 0:
        smean, sd = smean / rate, (s2 / rate) ** 0.5
    else:
        smean, sd = REGROUP_S, 0.0
    nodes = sum(n for _, n in picks)
    gpus = sum(n * cands[i].gpus_per_node for i, n in picks)
    a = risk.assess(job.work(nodes, gpus), np.array([thr]), np.array([lo]), np.array([hi]), np.array([rate]),
                    np.array([smean]), np.array([sd]), job.checkpoint_s, deadline_s=job.deadline_s,
                    confidence=job.confidence, work_log_sd=job.work_log_sd(nodes, gpus))
    price = sum(n * cands[i].price_usd_per_hour for i, n in picks)
    p = None if a.p_deadline is None else float(a.p_deadline[0])
    out = Outcome(picks=tuple(sorted(picks)), time_mean_s=float(a.time_mean_s[0]), time_q_s=float(a.time_q_s[0]),
                  time_p95_s=float(a.time_p95_s[0]), price_rate=price, p_deadline=p, feasible=True, thr=thr, low=lo,
                  high=hi, bottleneck=bott, interval_s=float(a.interval_s[0]), revocations=float(a.revocations[0]))
    why = _violations(out, cands, limits, job)
    return replace(out, feasible=not why, why_not="; ".join(why))


def _violations(o: Outcome, cands: Sequence[Candidate], limits: Limits, job: Job) -> list[str]:
    why = []
    if not np.isfinite(o.time_mean_s):
        why.append("revocations arrive faster than the job can recover")
    nodes = sum(n for _, n in o.picks)
    if nodes > limits.max_nodes:
        why.append(f"{nodes} nodes > max {limits.max_nodes}")
    if limits.deadline_s is not None and (o.p_deadline or 0.0) < limits.confidence:
        why.append(f"P(finish by deadline) = {o.p_deadline or 0:.2f} < {limits.confidence:.2f}")
    od = sum(n for i, n in o.picks if not cands[i].spot)
    if od < limits.anchor_min_on_demand or od < limits.anchor_share * nodes - 1e-9:
        why.append("no on-demand anchor")
    if limits.budget_usd is not None and o.cost_usd > limits.budget_usd:
        why.append(f"expected cost ${o.cost_usd:,.2f} > budget ${limits.budget_usd:,.2f}")
    if limits.hard_cap_usd is not None and o.cost_p95_usd > limits.hard_cap_usd:
        why.append(f"p95 cost ${o.cost_p95_usd:,.2f} > cap ${limits.hard_cap_usd:,.2f}")
    if limits.ps_capacity_bytes_per_s is not None and job.ps > 0:
        traffic = 2.0 * job.workload.gradient_bytes * o.thr / job.workload.batch_size
        if traffic > limits.ps_capacity_bytes_per_s:
            why.append("parameter servers saturated")
    return why


# --------------------------------------------------------------------------- set-up


def prepare(
    workload: Any,
    *,
    samples: float,
    deadline_s: float | None = None,
    budget_usd: float | None = None,
    hard_cap_usd: float | None = None,
    confidence: float = 0.95,
    catalog: Any = None,
    offers: Sequence[Any] | None = None,
    spot: bool = True,
    on_demand: bool = True,
    clouds: Sequence[str] | None = None,
    regions: Sequence[str] | None = None,
    zones: Sequence[str] | None = None,
    gpus: Sequence[str] | None = None,
    instance_types: Sequence[str] | None = None,
    max_nodes: int = 64,
    max_kinds: int = 3,
    quotas: dict[str, int] | None = None,
    on_demand_anchor: bool = False,
    anchor_share: float = 0.0,
    sync: str = "sync",
    ps: int | None = None,
    profile: Any = None,
    work_rule: Any = None,
) -> Context:
    """Validate the request, build candidates and assess every homogeneous column."""
    _validate(samples=samples, deadline_s=deadline_s, budget_usd=budget_usd, confidence=confidence,
              max_nodes=max_nodes, spot=spot, on_demand=on_demand, anchor=on_demand_anchor or anchor_share > 0,
              sync=sync, max_kinds=max_kinds)
    if offers is None:
        catalog = catalog if catalog is not None else _deps.load_catalog()
        offers = catalog.offers
    snapshot = str(getattr(catalog, "snapshot_date", "") or "")
    if ps is None:
        ps = 1 if sync == "async" else 0
    _check_names(offers, zones=zones, quotas=quotas)
    cands, report = build_candidates(offers, clouds=clouds, regions=regions, zones=zones, gpus=gpus,
                                     instance_types=instance_types, spot=spot, on_demand=on_demand,
                                     min_gpu_memory_gib=memory_needed_gib(workload, profile))
    cands = drop_twins(cands, quotas, report)
    anchor = on_demand_anchor or anchor_share > 0
    job = Job(workload=workload, samples=float(samples), sync=sync, ps=ps,
              checkpoint_s=risk.checkpoint_cost_s(workload.gradient_bytes, anchor=anchor), deadline_s=deadline_s,
              confidence=confidence, work_rule=work_rule)
    limits = Limits(max_nodes=max_nodes, max_kinds=max_kinds, quotas=quotas,
                    anchor_min_on_demand=1 if anchor else 0, anchor_share=anchor_share,
                    ps_capacity_bytes_per_s=(ps * PS_BANDWIDTH_GBPS * 1e9 / 8) if ps > 0 else None,
                    deadline_s=deadline_s, confidence=confidence, budget_usd=budget_usd, hard_cap_usd=hard_cap_usd,
                    same_gpu=(sync == "sync"))
    cols = build_columns(job, cands, node_counts(cands, max_nodes, quotas))
    traffic = None
    if ps > 0:
        g = np.array([cands[i].gpus_per_node for i in cols.cand], dtype=float)
        traffic = 2.0 * workload.gradient_bytes * cols.thr / (workload.batch_size * g)
    return Context(job=job, cands=cands, cols=cols, limits=limits, traffic=traffic, report=report, snapshot=snapshot)


def drop_twins(cands: list[Candidate], quotas: dict[str, int] | None, report: CandidateReport) -> list[Candidate]:
    """Drop a node kind when a cheaper one has the same cloud, region, GPU, GPUs per node, network
    and market (e.g. ``a3-edgegpu-8g`` vs ``a3-edgegpu-8g-nolssd``): performance and revocation
    models see them as the same node, so the dearer one is dominated. Kinds named in a quota stay."""
    named = {k.lower() for k in (quotas or {})}
    best: dict[tuple, Candidate] = {}
    out = []
    for c in cands:
        if c.instance_type.lower() in named or c.gpu.lower() in named:
            out.append(c)
            continue
        key = (c.cloud, c.region, c.gpu, c.gpus_per_node, c.network_gbps, c.spot)
        old = best.get(key)
        if old is None or (c.price_usd_per_hour, c.instance_type) < (old.price_usd_per_hour, old.instance_type):
            best[key] = c
    kept = out + list(best.values())
    report.notes.append(f"{len(cands) - len(kept)} node kinds dominated by an identical cheaper type")
    return sorted(kept, key=lambda c: (c.cloud, c.instance_type, c.spot, c.region))


def _check_names(offers: Sequence[Any], *, zones: Sequence[str] | None, quotas: dict[str, int] | None) -> None:
    """Zones and quota names must exist in the catalog (a typo would silently change the plan)."""
    if zones:
        known = {o.zone for o in offers if o.zone}
        low = {z.lower() for z in known} | {o.region.lower() for o in offers}
        for z in zones:
            if z.lower() not in low:
                raise UnknownNameError("zone (--zones)", z, known)
    if quotas:
        known = {o.instance_type for o in offers} | {o.gpu for o in offers}
        low = {k.lower() for k in known}
        for name in quotas:
            if name.lower() not in low:
                raise UnknownNameError("instance type or GPU (--quota)", name, known)


def _validate(*, samples, deadline_s, budget_usd, confidence, max_nodes, spot, on_demand, anchor, sync, max_kinds):
    if not (samples and samples > 0):
        raise InputError(f"samples to train must be positive, got {samples!r}", column="--samples")
    if deadline_s is not None and not deadline_s > 0:
        raise InputError(f"must be positive, got {deadline_s!r}", column="--deadline")
    if budget_usd is not None and not budget_usd > 0:
        raise InputError(f"must be positive, got {budget_usd!r}", column="--budget")
    if deadline_s is None and budget_usd is None:
        raise InputError("give a --deadline (cheapest plan that meets it) or a --budget (fastest plan within it)")
    if not 0.5 <= confidence < 1.0:
        raise InputError(f"expected a probability in [0.5, 1), got {confidence!r}", column="--confidence")
    if max_nodes < 1:
        raise InputError(f"must be >= 1, got {max_nodes}", column="--max-nodes")
    if max_kinds < 1:
        raise InputError(f"must be >= 1, got {max_kinds}", column="--max-types")
    if not spot and not on_demand:
        raise InputError("neither spot nor on-demand servers are allowed")
    if anchor and not on_demand:
        raise InputError("--spot-only contradicts --on-demand-anchor (the anchor is an on-demand server)")
    if sync not in ("sync", "async"):
        raise InputError(f"expected sync or async, got {sync!r}", column="--sync")


# --------------------------------------------------------------------------- solve


def objective_of(ctx: Context) -> str:
    return "min-cost" if ctx.limits.deadline_s is not None else "max-throughput"


def solve(ctx: Context, *, mask: np.ndarray | None = None, max_kinds: int | None = None,
          stats: SolveStats | None = None, time_limit_s: float = 1.0) -> Outcome | None:
    """Best plan: exact homogeneous enumeration, then the lazy MILP over mixes."""
    cols, limits = ctx.cols, ctx.limits
    if max_kinds is not None:
        limits = replace(limits, max_kinds=max_kinds)
    sub = _subset(cols, mask)
    traffic = ctx.traffic if (mask is None or ctx.traffic is None or mask.all()) else ctx.traffic[mask]
    objective = objective_of(ctx)
    ok = homogeneous_feasible(sub, ctx.cands, limits, ONE_JOB, traffic)
    incumbent = None
    if ok.any():
        idx = np.flatnonzero(ok)
        score = sub.cost_usd[idx] if objective == "min-cost" else sub.time_mean_s[idx]
        j = int(idx[np.argmin(score)])
        incumbent = ctx.evaluate(((int(sub.cand[j]), int(sub.n[j])),))
    if limits.max_kinds < 2:
        return incumbent
    job = ctx.job

    def group_cap(members: list[int], m: int) -> np.ndarray:
        """A bound on the effective throughput of any synchronous mix of N = 1..m nodes of the group:
        N nodes of its fastest kind (the mix waits for its slowest GPU) revoked at the least rate of
        its members (none when one is on demand), under the exact risk model."""
        n = np.arange(1, m + 1)
        revs = [_deps.revocation(ctx.cands[i].cloud, ctx.cands[i].gpu) for i in members if ctx.cands[i].spot]
        if len(revs) < len(members):
            rate, sm, sd = np.zeros(m), np.full(m, REGROUP_S), np.zeros(m)
        else:
            r_min = min(r.rate_per_s for r in revs)
            rate = n * r_min
            sm = REGROUP_S + min(r.restart_mean_s for r in revs) / n
            sd = min(r.restart_sd_s for r in revs) / n
        out = []
        for shape in sorted({ctx.cands[i].shape for i in members}):
            gpu, g, net = shape
            thr, lo, hi, _ = _deps.throughput_curve(job.workload, gpu, g, net, m, sync=job.sync, ps=job.ps)
            a = risk.assess(job.work(n, n * g), thr, lo, hi, rate, sm, sd, job.checkpoint_s,
                            work_log_sd=job.work_log_sd(n, n * g))
            e = np.divide(ONE_JOB, a.time_mean_s, out=np.zeros(m), where=np.isfinite(a.time_mean_s))
            out.append(({i for i in members if ctx.cands[i].shape == shape}, e * (1 + 1e-9)))
        return out

    return solve_mix(sub, ctx.cands, limits, ONE_JOB, objective, incumbent, ctx.evaluate, traffic, stats=stats,
                     group_cap=group_cap, time_limit_s=time_limit_s)


def _subset(cols: Columns, mask: np.ndarray | None) -> Columns:
    if mask is None or mask.all():
        return cols
    kw = {}
    for name in Columns.__dataclass_fields__:
        v = getattr(cols, name)
        if isinstance(v, np.ndarray):
            kw[name] = v[mask]
        else:
            kw[name] = v
    return Columns(**kw)


def market_mask(ctx: Context, *, spot: bool = True, on_demand: bool = True) -> np.ndarray:
    from spottrain.planner.formulation import spot_mask

    s = spot_mask(ctx.cands)[ctx.cols.cand]
    return (s & spot) | (~s & on_demand)


# --------------------------------------------------------------------------- to a Plan


def to_plan(ctx: Context, o: Outcome, *, objective: str | None = None, explanation: str = "",
            extra: dict[str, Any] | None = None, exact_interval: bool = False) -> Plan:
    w = ctx.job.workload
    groups = tuple(
        PlanGroup(cloud=c.cloud, instance_type=c.instance_type, gpu=c.gpu, gpus_per_node=c.gpus_per_node, count=n,
                  spot=c.spot, region=c.region, zone=c.zone, price_usd_per_hour=c.price_usd_per_hour,
                  on_demand_price_usd_per_hour=c.on_demand_price_usd_per_hour, network_gbps=c.network_gbps)
        for c, n in ((ctx.cands[i], n) for i, n in o.picks)
    )
    spot_nodes = sum(g.count for g in groups if g.spot)
    interval = o.interval_s
    if spot_nodes and groups and exact_interval:
        g0 = next(g for g in groups if g.spot)
        rate = o.revocations / max(o.time_mean_s, 1e-9)
        interval = _deps.optimal_checkpoint_interval_s(ctx.job.checkpoint_s, g0.cloud, g0.gpu, spot_nodes, rate / spot_nodes)
    elif not spot_nodes:
        interval = 3600.0
    pred = PlanPrediction(
        throughput_samples_per_s=o.thr, throughput_low=o.low, throughput_high=o.high, duration_s=o.time_mean_s,
        duration_p95_s=o.time_p95_s, cost_usd=o.cost_usd, cost_p95_usd=o.cost_p95_usd, p_meet_deadline=o.p_deadline,
        bottleneck=o.bottleneck, expected_revocations=o.revocations,
    )
    pw = PlanWorkload(model=w.model, batch_size=int(w.batch_size), samples_total=ctx.work_of(o.picks),
                      flops_per_sample=float(w.flops_per_sample), param_count=int(w.param_count),
                      gradient_bytes=float(w.gradient_bytes))
    policy = "deadline-margin" if (ctx.limits.deadline_s is not None and spot_nodes) else "replace-same"
    return Plan(workload=pw, groups=groups, ps=ctx.job.ps, sync=ctx.job.sync, prediction=pred,
                checkpoint_interval_s=float(interval), deadline_s=ctx.limits.deadline_s,
                budget_usd=ctx.limits.budget_usd, confidence=ctx.limits.confidence,
                objective=objective or objective_of(ctx), policy=policy, explanation=explanation,
                catalog_snapshot=ctx.snapshot, extra=dict(extra or {}))


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
    **options: Any,
) -> PlanResult:
    """Choose the cluster. ``deadline_s``: cheapest plan with P(finish by deadline) >=
    ``confidence``; only ``budget_usd``: fastest plan with expected cost <= budget (both: cheapest
    meeting the deadline within the budget). The work is ``samples``, or ``target_loss`` with a
    ``profile=`` that has a loss curve or past runs' ``loss_curves`` (LossCurve objects, which
    take precedence): then the samples depend on the cluster (:mod:`spottrain.planner.work`;
    ``critical_batch`` = gradient noise scale, optional). Raises :class:`InfeasibleError` naming the nearest
    feasible alternative. ``options`` go to :func:`prepare` (zones, gpus, quotas,
    on_demand_anchor, anchor_share, sync, ps, max_kinds, hard_cap_usd, offers, profile)."""
    t0 = time.perf_counter()
    on_demand = allow_on_demand and not spot_only
    if (samples is None) == (target_loss is None):
        raise InputError("give exactly one of --samples N (or --epochs E) and --target-loss L")
    if target_loss is not None:
        from spottrain.planner.work import target_loss_work

        prof = options.get("profile")
        curve = loss_curves or (getattr(prof, "loss_curve", None) if prof is not None else None)
        rule = target_loss_work(curve, target_loss, int(workload.batch_size), critical_batch=critical_batch)
        options["work_rule"] = rule
        samples = float(rule.samples(1, 1, options.get("sync", "sync"))[0])
    ctx = prepare(workload, samples=samples, deadline_s=deadline_s, budget_usd=budget_usd, confidence=confidence,
                  catalog=catalog, spot=True, on_demand=True, clouds=clouds, regions=regions, max_nodes=max_nodes,
                  **options)
    if options.get("on_demand_anchor") and not on_demand:
        raise InputError("--spot-only contradicts --on-demand-anchor (the anchor is an on-demand server)")
    mask = market_mask(ctx, spot=True, on_demand=on_demand)
    stats = SolveStats()
    best = solve(ctx, mask=mask, stats=stats)
    t_solve = time.perf_counter() - t0
    if best is None:
        raise InfeasibleError(infeasible_message(ctx, mask))
    from spottrain.planner.baselines import run_baselines
    from spottrain.planner.pareto import pareto_points

    base = run_baselines(ctx) if baselines else {}
    runners = runners_up(ctx, best, mask)
    text = explain(ctx, best, base, runners)
    extra = {"solver": {"columns": stats.columns_total, "columns_after_pruning": stats.columns_after_pruning,
                        "milp_calls": stats.milp_calls, "exact_evaluations": stats.exact_evaluations,
                        "proven_optimal": stats.proven_optimal, "seconds": round(t_solve, 4)},
             "candidates": ctx.report.candidates, "checkpoint_cost_s": ctx.job.checkpoint_s}
    best_plan = to_plan(ctx, best, explanation=text, extra=extra, exact_interval=True)
    front = pareto_points(ctx, mask, best) if pareto else []
    return PlanResult(best=best_plan, runners_up=[to_plan(ctx, r) for r in runners], pareto=front, baselines=base,
                      explanation=text, stats={**extra["solver"], "total_seconds": round(time.perf_counter() - t0, 4)},
                      context=ctx)


def runners_up(ctx: Context, best: Outcome, mask: np.ndarray, k: int = 3) -> list[Outcome]:
    """The best feasible homogeneous plans of other instance types."""
    sub = _subset(ctx.cols, mask)
    ok = homogeneous_feasible(sub, ctx.cands, ctx.limits, ONE_JOB, None)
    idx = np.flatnonzero(ok)
    key = sub.cost_usd[idx] if objective_of(ctx) == "min-cost" else sub.time_mean_s[idx]
    taken = {ctx.cands[i].instance_type for i, _ in best.picks} if len(best.picks) == 1 else set()
    out = []
    for j in idx[np.argsort(key, kind="stable")]:
        c = ctx.cands[int(sub.cand[j])]
        if c.instance_type in taken:
            continue
        taken.add(c.instance_type)
        out.append(ctx.evaluate(((int(sub.cand[j]), int(sub.n[j])),)))
        if len(out) >= k:
            break
    return out


def _best_unconstrained(ctx: Context, mask: np.ndarray, key: str) -> Outcome | None:
    """The homogeneous plan with the least ``key`` column, ignoring deadline and budget."""
    sub = _subset(ctx.cols, mask)
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


def describe(ctx: Context, o: Outcome) -> str:
    return " + ".join(f"{n}x {ctx.cands[i].instance_type}" + (" spot" if ctx.cands[i].spot else " on-demand")
                      for i, n in o.picks)


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
            return (f"deadline {format_duration(lim.deadline_s)} is shorter than the fastest plan: "
                    f"{format_duration(f.time_q_s)} at {lim.confidence:.0%} confidence on {describe(ctx, f)}; "
                    "relax --deadline, lower --confidence, raise --max-nodes or allow on-demand")
    if lim.budget_usd is not None:
        c = cheapest(ctx, mask)
        if c is not None:
            if lim.deadline_s is not None:
                return (f"no plan meets the deadline within budget ${lim.budget_usd:,.2f}; raise --budget "
                        f"or relax --deadline (cheapest plan overall: ${c.cost_usd:,.2f} on {describe(ctx, c)}, "
                        f"{format_duration(c.time_mean_s)})")
            return (f"budget ${lim.budget_usd:,.2f} is below the cheapest plan: ${c.cost_usd:,.2f} on "
                    f"{describe(ctx, c)} ({format_duration(c.time_mean_s)}); raise --budget")
    return "no plan satisfies the constraints (on-demand anchor, quotas, PS capacity); relax them"


def explain(ctx: Context, best: Outcome, base: dict[str, Any], runners: list[Outcome]) -> str:
    lim = ctx.limits
    parts = []
    if lim.deadline_s is not None:
        parts.append(f"Cheapest plan expected to finish within {format_duration(lim.deadline_s)} with probability "
                     f"{best.p_deadline:.2f} (>= {lim.confidence:.2f}): {describe(ctx, best)}, expected "
                     f"{format_duration(best.time_mean_s)} and ${best.cost_usd:,.2f}.")
    else:
        parts.append(f"Fastest plan with expected cost within ${lim.budget_usd:,.2f}: {describe(ctx, best)}, "
                     f"expected {format_duration(best.time_mean_s)} and ${best.cost_usd:,.2f}.")
    parts.append(f"Bottleneck: {best.bottleneck}; {best.revocations:.1f} revocations expected.")
    od = base.get("cheapest-on-demand")
    if od is not None and not isinstance(od, str) and lim.deadline_s is not None and od.prediction.cost_usd > 0:
        saving = 1.0 - best.cost_usd / od.prediction.cost_usd
        parts.append(f"{saving:.0%} cheaper than the cheapest on-demand plan (${od.prediction.cost_usd:,.2f}).")
    if runners:
        r = runners[0]
        parts.append(f"Runner-up: {describe(ctx, r)} (${r.cost_usd:,.2f}, {format_duration(r.time_mean_s)}).")
    return " ".join(parts)
