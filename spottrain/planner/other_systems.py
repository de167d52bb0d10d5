"""What other systems would choose, each evaluated with *our* performance and risk models.

- ``cheapest-on-demand``: the cheapest on-demand cluster that meets the deadline (or the fastest
  on-demand one within the budget); the reference of spotDNN's "69.9% cheaper" claim.
- ``skypilot``: SkyPilot's optimizer has no speed model: for a fixed GPU count (the chosen
  plan's) it takes the cheapest $/h placement (spot when allowed) and assumes a 1 h job.
- ``deepvm``: DeepVM ranks instance types by FLOPP (peak TFLOPS per $/h), then sizes the
  cluster by a linear program on peak FLOPS (here: required FLOPs / deadline at 40% of peak) with
  one on-demand anchor of the same type for the checkpoints.
- ``spotdnn``: asynchronous PS training (enough PS for the traffic), spot servers only, the 8
  spot types of least cost per sample, mixes of 2 types, with bounds and a sliding window over
  worker counts (our MILP restricted to what spotDNN allows).
- ``cm-dare``: homogeneous clusters of K80, P100 or V100 only (the GPUs CM-DARE measured).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from spottrain.plan_file import Plan
from spottrain.planner.candidates import Candidate
from spottrain.planner.engine import PS_BANDWIDTH_GBPS, market_mask, prepare, solve, to_plan

DEEPVM_UTILIZATION = 0.4
SKYPILOT_ASSUMED_S = 3600.0
SPOTDNN_MAX_KINDS = 2
SPOTDNN_TYPES = 8


def run_baselines(ctx: Any) -> dict[str, Plan | str]:
    out: dict[str, Plan | str] = {}
    for name, fn in (("cheapest-on-demand", cheapest_on_demand), ("skypilot", skypilot_like),
                     ("deepvm", deepvm_like), ("spotdnn", spotdnn_like), ("cm-dare", cmdare_like)):
        try:
            out[name] = fn(ctx)
        except Exception as exc:  # a baseline that cannot answer says why; the plan still stands
            out[name] = f"no answer: {exc}"
    return out


def _plan(ctx: Any, o: Any, name: str, note: str) -> Plan:
    return to_plan(ctx, o, objective=f"baseline:{name}", explanation=note)


def cheapest_on_demand(ctx: Any) -> Plan | str:
    o = solve(ctx, mask=market_mask(ctx, spot=False, on_demand=True), max_kinds=1)
    if o is None:
        return "no on-demand cluster meets the constraints"
    return _plan(ctx, o, "cheapest-on-demand", "cheapest on-demand cluster meeting the constraints")


def _gpu_target(ctx: Any) -> int:
    o = solve(ctx, mask=market_mask(ctx), max_kinds=1)
    if o is None:
        return 8
    return sum(n * ctx.cands[i].gpus_per_node for i, n in o.picks)


def skypilot_like(ctx: Any, gpus: int | None = None) -> Plan | str:
    gpus = gpus or _gpu_target(ctx)
    best = None
    for i, c in enumerate(ctx.cands):
        if not c.spot or gpus % c.gpus_per_node:
            continue
        n = gpus // c.gpus_per_node
        if n > ctx.limits.max_nodes:
            continue
        rate = n * c.price_usd_per_hour
        if best is None or rate < best[0]:
            best = (rate, i, n)
    if best is None:
        return f"no spot placement with {gpus} GPUs"
    o = ctx.evaluate(((best[1], best[2]),))
    return _plan(ctx, o, "skypilot", f"cheapest $/h for {gpus} GPUs; no speed model (assumes "
                 f"{SKYPILOT_ASSUMED_S / 3600:.0f} h)")


def deepvm_like(ctx: Any) -> Plan | str:
    ranked = sorted((c.flopp, i) for i, c in enumerate(ctx.cands) if c.spot)
    if not ranked:
        return "no spot offers"
    _, i = ranked[-1]
    c = ctx.cands[i]
    od = [j for j, d in enumerate(ctx.cands) if not d.spot and d.instance_type == c.instance_type and d.region == c.region]
    horizon = ctx.limits.deadline_s or SKYPILOT_ASSUMED_S * 8
    need_tflops = ctx.work * ctx.job.workload.flops_per_sample / horizon / 1e12 / DEEPVM_UTILIZATION
    per_node = c.fp32_tflops_per_gpu * c.gpus_per_node
    total = max(1, math.ceil(need_tflops / per_node))
    total = min(total, ctx.limits.max_nodes)
    if od and total >= 2:
        picks = ((i, total - 1), (od[0], 1))
    else:
        picks = ((i, total),)
    o = ctx.evaluate(picks)
    return _plan(ctx, o, "deepvm", f"top FLOPP type {c.instance_type}, LP on peak FLOPS, on-demand anchor")


def spotdnn_like(ctx: Any) -> Plan | str:
    spot_offers = None
    if ctx.job.sync == "async":
        sub = ctx
    else:
        sub = _reprepare(ctx, prepare)
    o = solve(sub, mask=market_mask(sub, spot=True, on_demand=False))
    if o is None:
        return "no spot-only ASP cluster meets the constraints"
    del spot_offers
    return _plan(sub, o, "spotdnn", f"ASP with {sub.job.ps} PS, spot only, bounds + window")


def _reprepare(ctx: Any, prepare: Any) -> Any:
    class _Offer:
        def __init__(self, c: Candidate) -> None:
            self.cloud, self.instance_type, self.gpu, self.gpu_count = c.cloud, c.instance_type, c.gpu, c.gpus_per_node
            self.region, self.zone, self.network_gbps = c.region, c.zone, c.network_gbps
            self.price_usd_per_hour = c.on_demand_price_usd_per_hour
            self.spot_price_usd_per_hour = c.price_usd_per_hour

    # spotDNN profiles each instance type it considers (~30 iterations each), so it works with a
    # handful of types: the SPOTDNN_TYPES spot types of least single-node cost per sample.
    cols = ctx.cols
    one = np.flatnonzero((cols.n == 1) & np.isfinite(cols.time_mean_s))
    cost = cols.billed_rate[one] / 3600.0 * cols.time_mean_s[one]  # Columns.cost_usd of these columns only
    per_type: dict[str, float] = {}
    for j, v in zip(one, cost):
        c = ctx.cands[int(cols.cand[j])]
        if c.spot:
            per_type[c.instance_type] = min(float(v), per_type.get(c.instance_type, np.inf))
    keep = set(sorted(per_type, key=per_type.get)[:SPOTDNN_TYPES])
    offers = [_Offer(c) for c in ctx.cands if c.spot and c.instance_type in keep]
    lim = ctx.limits
    # enough parameter servers for the gradient traffic of the throughput the deadline needs
    w = ctx.job.workload
    need = ctx.work / lim.deadline_s if lim.deadline_s else 0.0
    ps = max(1, math.ceil(2.0 * w.gradient_bytes * need / w.batch_size / (PS_BANDWIDTH_GBPS * 1e9 / 8)))
    return prepare(w, samples=ctx.job.samples, deadline_s=lim.deadline_s, budget_usd=lim.budget_usd,
                   confidence=lim.confidence, offers=offers, on_demand=False, max_nodes=lim.max_nodes,
                   sync="async", ps=ps, max_kinds=SPOTDNN_MAX_KINDS, work_rule=ctx.job.work_rule)


def cmdare_like(ctx: Any) -> Plan | str:
    mask = market_mask(ctx) & np.array([ctx.cands[i].gpu in ("K80", "P100", "V100") for i in ctx.cols.cand], dtype=bool)
    if not mask.any():
        return "no K80/P100/V100 offers under the constraints"
    o = solve(ctx, mask=mask, max_kinds=1)
    if o is None:
        return "no homogeneous K80/P100/V100 cluster meets the constraints"
    return _plan(ctx, o, "cm-dare", "homogeneous K80/P100/V100 only")


_ = replace
