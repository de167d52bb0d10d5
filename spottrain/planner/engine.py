"""The planner's engine: prepare a request, solve it over a market mask, turn an outcome into a Plan.

:func:`prepare` validates a request and assesses every homogeneous column once (a
:class:`Context`); :func:`solve` finds the best plan among the columns a mask selects;
:func:`market_mask` selects spot and/or on-demand columns; :func:`to_plan` and :func:`describe`
turn an :class:`~spottrain.planner.formulation.Outcome` into a :class:`~spottrain.plan_file.Plan` or a
one-line text. :func:`spottrain.planner.api.plan` (the facade), the baselines and the Pareto
front are built on these.

>>> from spottrain.planner.engine import market_mask, prepare, solve       # doctest: +SKIP
>>> ctx = prepare(workload, samples=1.28e6, deadline_s=7200)               # doctest: +SKIP
>>> best = solve(ctx, mask=market_mask(ctx, on_demand=False))              # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spottrain.catalog import load_catalog
from spottrain.errors import InputError, UnknownNameError
from spottrain.plan_file import Plan, PlanGroup, PlanPrediction, PlanWorkload
from spottrain.planner import risk
from spottrain.planner.candidates import Candidate, CandidateReport, build_candidates, memory_needed_gib
from spottrain.planner.columns import (
    REGROUP_S, Columns, Job, assess_cluster, billed_floor, billed_rate, build_columns, empty_s, fallback_rate, lost_shares,
    node_counts, on_demand_fallback, revocation_stall_s,
    throughput_curve, throughput_mix,
)
from spottrain.planner.formulation import (MILP_WORK_LIMIT, SAFETY_TIME_LIMIT_S, Limits, Outcome, Picks, SolveStats,
                                          homogeneous_feasible, solve_mix, spot_mask)
from spottrain.units import format_usd, plural

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


# --------------------------------------------------------------------------- evaluation


def evaluate_picks(job: Job, cands: Sequence[Candidate], picks: Picks, limits: Limits) -> Outcome:
    groups = [(cands[i].gpu, cands[i].gpus_per_node, n, cands[i].network_gbps) for i, n in picks]
    thr, lo, hi, bott = throughput_mix(job.workload, groups, sync=job.sync, ps=job.ps,
                                       clouds=tuple(cands[i].cloud for i, _n in picks))
    nodes = sum(n for _, n in picks)
    gpus = sum(n * cands[i].gpus_per_node for i, n in picks)
    spot_picks = [(i, n) for i, n in picks if cands[i].spot]
    spot = [(n, risk.revocation(cands[i].cloud, cands[i].gpu)) for i, n in spot_picks]
    lost = lost_shares(job.workload, [(cands[i].gpu, cands[i].gpus_per_node, n, cands[i].network_gbps,
                                       cands[i].cloud, cands[i].spot) for i, n in picks], thr, sync=job.sync, ps=job.ps)
    work = job.work(nodes, gpus)
    a = assess_cluster(spot, nodes, work, thr, lo, hi, job.checkpoint_s, deadline_s=job.deadline_s,
                       confidence=job.confidence, work_log_sd=job.work_log_sd(nodes, gpus), lost=lost,
                       sync=job.sync == "sync")
    price = sum(n * cands[i].price_usd_per_hour for i, n in picks)
    # a mix is billed at least every node over its failure-free run (billed_rate): the mix search's bound
    free = risk.LAUNCH_S + float(work[0]) / max(thr, 1e-300) if len(picks) > 1 else None
    billed = billed_rate(price, a.time_mean_s[0], _empty_parts(spot_picks, spot, nodes, lost, cands, a), free)
    p_on_demand = 0.0
    if job.deadline_s is not None and spot_picks:
        # the deadline policy's fallback to the same nodes on demand (columns.on_demand_fallback)
        fb = on_demand_fallback(a, **job.fallback_terms)
        od_rate = sum(n * cands[i].on_demand_price_usd_per_hour for i, n in picks)
        billed = fallback_rate(billed, od_rate, fb)
        if free is not None:  # the floor again, over the run with its fallback
            billed = billed_floor(billed, price, fb.time_mean_s[0], free)
        a = replace(a, time_mean_s=fb.time_mean_s, time_q_s=fb.time_q_s, time_p95_s=fb.time_p95_s,
                    p_deadline=fb.p_deadline, revocations=fb.revocations)
        p_on_demand = float(fb.p_switch[0])
    p = None if a.p_deadline is None else float(a.p_deadline[0])
    out = Outcome(picks=tuple(sorted(picks)), time_mean_s=float(a.time_mean_s[0]), time_q_s=float(a.time_q_s[0]),
                  time_p95_s=float(a.time_p95_s[0]), price_rate=price, billed_rate=float(np.ravel(billed)[0]), p_deadline=p,
                  feasible=True, thr=thr, low=lo, high=hi, bottleneck=bott, interval_s=float(a.interval_s[0]),
                  revocations=float(a.revocations[0]), p_on_demand=p_on_demand)
    why = _violations(out, cands, limits, job)
    return replace(out, feasible=not why, why_not="; ".join(why))


def _empty_parts(picks, spot, nodes: int, lost, cands: Sequence[Candidate], a) -> list[tuple[float, float, float]]:
    """Per spot part of a cluster: (its expected revocations, $/h of one of its nodes, the time its
    revoked nodes' slots stand empty, :func:`empty_s`), the cluster's revocations split in
    proportion to the parts' rates over the run; ``lost``: :func:`lost_shares` of the spot parts."""
    time = float(a.time_mean_s[0])
    if not spot or not np.isfinite(time):
        return []
    rates = [n * float(rev.rate_over(time)) for n, rev in spot]
    total = sum(rates)
    return [(float(a.revocations[0]) * r / total if total > 0 else 0.0, cands[i].price_usd_per_hour,
             float(empty_s(rev, n, nodes, o, run_s=time)))
            for (i, _), (n, rev), r, (_s, o) in zip(picks, spot, rates, lost)]


def _violations(o: Outcome, cands: Sequence[Candidate], limits: Limits, job: Job) -> list[str]:
    why = []
    if not np.isfinite(o.time_mean_s):
        why.append("revocations arrive faster than the job can recover")
    nodes = sum(n for _, n in o.picks)
    if nodes > limits.max_nodes:
        why.append(f"{plural(nodes, 'node')} > max {limits.max_nodes}")
    for name, q in (limits.quotas or {}).items():
        # the MILP's quota row: every market and region of the instance type (or GPU) named
        used = sum(n for i, n in o.picks if name.lower() in (cands[i].instance_type.lower(), cands[i].gpu.lower()))
        if used > q:
            why.append(f"{plural(used, 'node')} of {name} > quota {q}")
    if limits.deadline_s is not None and (o.p_deadline or 0.0) < limits.confidence:
        why.append(f"P(finish by deadline) = {o.p_deadline or 0:.2f} < {limits.confidence:.2f}")
    od = sum(n for i, n in o.picks if not cands[i].spot)
    if od < limits.anchor_min_on_demand or od < limits.anchor_share * nodes - 1e-9:
        why.append("no on-demand anchor")
    if limits.budget_usd is not None and o.cost_usd > limits.budget_usd:
        why.append(f"expected cost {format_usd(o.cost_usd)} > budget {format_usd(limits.budget_usd)}")
    if limits.hard_cap_usd is not None and o.cost_p95_usd > limits.hard_cap_usd:
        why.append(f"p95 cost {format_usd(o.cost_p95_usd)} > cap {format_usd(limits.hard_cap_usd)}")
    if limits.ps_capacity_bytes_per_s is not None and job.ps > 0:
        # One push and pull per worker node per update (its GPUs' gradients are summed on the node,
        # as the performance model's queue and the MILP's columns count them): a node's update
        # covers batch x its GPUs samples.
        gpus = sum(n * cands[i].gpus_per_node for i, n in o.picks)
        traffic = 2.0 * job.workload.gradient_bytes * o.thr * nodes / (job.workload.batch_size * max(gpus, 1))
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
        catalog = catalog if catalog is not None else load_catalog()
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


CAP_CHECKS = 200
"""Most columns :func:`capped_plans` evaluates exactly in one request."""


def capped_plans(ctx: Context, sub: Columns, limits: Limits, traffic: np.ndarray | None, score: np.ndarray,
                 stats: SolveStats | None = None) -> Iterator[Outcome]:
    """Homogeneous plans under ``--hard-cap`` in order of ``score``, each p95 cost checked exactly.

    The columns' p95 time under the deadline policy's fallback is not the exact one (the spot run's
    lognormal cut at the switch, :func:`risk.on_demand_fallback` with ``quantiles`` False): 2
    p5en.48xlarge spot nodes for ResNet-50 over 8 h read $62 at the 95th percentile as a column and
    $35 exactly, so a column the cap drops may meet it, and one it keeps may not. Every column that
    meets the other constraints is evaluated exactly in order of score (at most :data:`CAP_CHECKS`)
    and yielded when it meets the cap: the best plan is the first, runners-up the next."""
    maybe = homogeneous_feasible(sub, ctx.cands, replace(limits, hard_cap_usd=None), ONE_JOB, traffic)
    for j in np.flatnonzero(maybe)[np.argsort(score[maybe], kind="stable")][:CAP_CHECKS]:
        out = ctx.evaluate(((int(sub.cand[j]), int(sub.n[j])),))
        if stats is not None:
            stats.exact_evaluations += 1
        if out.feasible:
            yield out


def solve(ctx: Context, *, mask: np.ndarray | None = None, max_kinds: int | None = None,
          stats: SolveStats | None = None, work_limit: int | None = MILP_WORK_LIMIT,
          time_limit_s: float = SAFETY_TIME_LIMIT_S) -> Outcome | None:
    """Best plan: exact homogeneous enumeration, then the lazy MILP over mixes."""
    cols, limits = ctx.cols, ctx.limits
    if max_kinds is not None:
        limits = replace(limits, max_kinds=max_kinds)
    sub = subset_columns(cols, mask)
    traffic = ctx.traffic if (mask is None or ctx.traffic is None or mask.all()) else ctx.traffic[mask]
    objective = objective_of(ctx)
    incumbent = None
    score = sub.cost_usd if objective == "min-cost" else sub.time_mean_s
    if limits.hard_cap_usd is not None:
        incumbent = next(capped_plans(ctx, sub, limits, traffic, score, stats), None)
    else:
        ok = homogeneous_feasible(sub, ctx.cands, limits, ONE_JOB, traffic)
        if ok.any():
            idx = np.flatnonzero(ok)
            j = int(idx[np.argmin(score[idx])])
            incumbent = ctx.evaluate(((int(sub.cand[j]), int(sub.n[j])),))
    if limits.max_kinds < 2:
        return incumbent
    job = ctx.job

    def group_cap(members: list[int], m: int) -> np.ndarray:
        """A bound on the effective throughput of any synchronous mix of N = 1..m nodes of the group:
        N nodes of its fastest kind (the mix waits for its slowest GPU) revoked at the least rate of
        its members over runs at least as long as that kind's failure-free run (none when one is on
        demand), under the exact risk model."""
        n = np.arange(1, m + 1)
        revs = [risk.revocation(ctx.cands[i].cloud, ctx.cands[i].gpu) for i in members if ctx.cands[i].spot]
        on_demand = len(revs) < len(members)
        if on_demand:
            sm, sd = np.full(m, REGROUP_S), np.zeros(m)
            lose, notice = np.zeros(m), math.inf
        else:
            # a lower bound: the re-forms alone (the survivors may lose little of the throughput)
            sm = np.min([revocation_stall_s(r, n, n, 0.0, 0.0) for r in revs], axis=0)
            sd = np.zeros(m)
            # the least chance of losing the model and the shortest notice lose the least work
            lose = risk.state_loss_floor(revs, n)
            notice = min(r.notice_s for r in revs)
        out = []
        for shape in sorted({ctx.cands[i].shape for i in members}):
            gpu, g, net = shape
            # The cloud is left unsaid: its interval is then no wider than any member's cloud's, and
            # a narrower interval only raises the bound (a shorter expected time).
            thr, lo, hi, _ = throughput_curve(job.workload, gpu, g, net, m, sync=job.sync, ps=job.ps)
            # A mix runs no faster than N nodes of its fastest kind, so no shorter than their failure-free run.
            shortest = risk.horizon_s(job.work(n, n * g), thr)
            rate = np.zeros(m) if on_demand else n * np.min([r.rate_floor(shortest) for r in revs], axis=0)
            a = risk.assess(job.work(n, n * g), thr, lo, hi, rate, sm, sd, job.checkpoint_s,
                            work_log_sd=job.work_log_sd(n, n * g), state_loss=lose, notice_s=notice)
            time = a.time_mean_s
            if job.deadline_s is not None and not on_demand:
                # the deadline policy's fallback cuts a slow run short (its time grows with the spot run's)
                time = on_demand_fallback(a, quantiles=False, **job.fallback_terms).time_mean_s
            e = np.divide(ONE_JOB, time, out=np.zeros(m), where=np.isfinite(time))
            out.append(({i for i in members if ctx.cands[i].shape == shape}, e * (1 + 1e-9)))
        return out

    return solve_mix(sub, ctx.cands, limits, ONE_JOB, objective, incumbent, ctx.evaluate, stats=stats,
                     group_cap=group_cap, work_limit=work_limit, time_limit_s=time_limit_s)


def subset_columns(cols: Columns, mask: np.ndarray | None) -> Columns:
    """The columns selected by ``mask`` (all of them when ``mask`` is None or all true)."""
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
    if exact_interval and spot_nodes == 1 and sum(g.count for g in groups) == 1:
        # a lone spot node loses the model at every revocation: the exact optimum under its law
        # (with survivors, the model is lost only with every node: the risk model's interval)
        g0 = next(g for g in groups if g.spot)
        rate = o.revocations / max(o.time_mean_s, 1e-9)
        interval = risk.optimal_checkpoint_interval_s(ctx.job.checkpoint_s, g0.cloud, g0.gpu, spot_nodes, rate / spot_nodes)
    elif not spot_nodes:
        interval = risk.CHECKPOINT_MAX_S
    pred = PlanPrediction(
        throughput_samples_per_s=o.thr, throughput_low=o.low, throughput_high=o.high, duration_s=o.time_mean_s,
        duration_p95_s=o.time_p95_s, cost_usd=o.cost_usd, cost_p95_usd=o.cost_p95_usd, p_meet_deadline=o.p_deadline,
        bottleneck=o.bottleneck, expected_revocations=o.revocations,
        p_on_demand=o.p_on_demand if (ctx.limits.deadline_s is not None and spot_nodes) else None,
    )
    pw = PlanWorkload(model=w.model, batch_size=int(w.batch_size), samples_total=ctx.work_of(o.picks),
                      flops_per_sample=float(w.flops_per_sample), param_count=int(w.param_count),
                      gradient_bytes=float(w.gradient_bytes), precision=w.precision)
    policy = "deadline-margin" if (ctx.limits.deadline_s is not None and spot_nodes) else "replace-same"
    return Plan(workload=pw, groups=groups, ps=ctx.job.ps, sync=ctx.job.sync, prediction=pred,
                checkpoint_interval_s=float(interval), deadline_s=ctx.limits.deadline_s,
                budget_usd=ctx.limits.budget_usd, confidence=ctx.limits.confidence,
                objective=objective or objective_of(ctx), policy=policy, explanation=explanation,
                catalog_snapshot=ctx.snapshot, extra=dict(extra or {}))


def describe(ctx: Context, o: Outcome) -> str:
    return " + ".join(f"{n}x {ctx.cands[i].instance_type}" + (" spot" if ctx.cands[i].spot else " on-demand")
                      for i, n in o.picks)
