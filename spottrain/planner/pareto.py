"""The cost-vs-time Pareto front of the whole search space.

Every homogeneous column (each instance type, spot or on-demand, 1..max nodes) is assessed
exactly (expected time, expected cost), so the front of the homogeneous clusters is exact. Mixes
(spot + on-demand, several types) are added by sweeping a budget over the front's cost range and
solving the max-throughput MILP at each budget (the fastest plan within it, mixes included), plus
the chosen plan; the union is filtered again. A point is kept when no other point is both faster
and cheaper. ``SWEEP_POINTS`` budgets bound the front's own latency.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from spottrain.planner.engine import describe, solve, subset_columns
from spottrain.planner.formulation import Outcome, homogeneous_feasible

SWEEP_POINTS = 4
"""Budgets at which the MILP is solved to add mixes to the front."""
SWEEP_WORK_LIMIT = 600
"""MILP variables summed over the solves of one budget of the sweep (see
:data:`spottrain.planner.formulation.MILP_WORK_LIMIT`): a count, so the front does not depend on
the machine's load."""


def front_indices(time_s: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (minimize both), ordered by time."""
    order = np.lexsort((cost, time_s))
    finite = np.isfinite(np.asarray(time_s, float)[order])
    c = np.where(finite, np.asarray(cost, float)[order], np.inf)
    best_before = np.minimum.accumulate(np.concatenate(([np.inf], c[:-1])))  # cheapest faster-or-equal point
    return order[finite & (c < best_before)].astype(int)


def homogeneous_front(ctx: Any, mask: np.ndarray | None) -> np.ndarray:
    """Indices into ``ctx.cols`` of the non-dominated homogeneous columns among those ``mask``
    selects (every column that can run at all, deadline and budget aside), ordered by time."""
    cols = ctx.cols
    sel = np.arange(cols.size) if mask is None else np.flatnonzero(mask)
    sub = subset_columns(cols, mask)
    lim = replace(ctx.limits, deadline_s=None, budget_usd=None, hard_cap_usd=None)
    idx = np.flatnonzero(homogeneous_feasible(sub, ctx.cands, lim, 1.0, None))
    t = sub.time_mean_s[idx]
    c = sub.cost_usd[idx]
    return sel[idx[front_indices(t, c)]]


def pareto_points(ctx: Any, mask: np.ndarray, chosen: Outcome | None = None, *,
                  sweep: bool = True) -> list[dict[str, Any]]:
    """Non-dominated ``{label, duration_s, cost_usd}`` points, ordered by time (module docstring)."""
    cols = ctx.cols
    front = homogeneous_front(ctx, mask)
    cost = cols.cost_usd[front]
    pts = [_point(ctx.cands[int(cols.cand[j])], int(cols.n[j]), float(cols.time_mean_s[j]), float(c))
           for j, c in zip(front, cost)]
    if chosen is not None:
        pts.append({"label": describe(ctx, chosen), "duration_s": chosen.time_mean_s, "cost_usd": chosen.cost_usd})
    if sweep and len(pts) >= 2 and ctx.limits.max_kinds >= 2:
        on_front = {int(cols.cand[j]) for j in front}
        pts.extend(_mix_points(ctx, mask, on_front, pts, describe))
    ts = np.array([p["duration_s"] for p in pts])
    cs = np.array([p["cost_usd"] for p in pts])
    return [pts[j] for j in front_indices(ts, cs)]


def _point(cand: Any, n: int, duration_s: float, cost_usd: float) -> dict[str, Any]:
    """A homogeneous point; ``region`` and ``zone`` tell apart the same instance type in several places."""
    return {"label": f"{n}x {cand.instance_type} {'spot' if cand.spot else 'on-demand'}", "duration_s": duration_s,
            "cost_usd": cost_usd, "region": cand.region, "zone": cand.zone}


def _mix_points(ctx: Any, mask: np.ndarray, on_front: set[int], pts: list[dict[str, Any]],
                describe: Any) -> list[dict[str, Any]]:
    """The fastest plan (mixes included) within budgets spread over the front's cost range.

    The MILP sees the node kinds of the homogeneous front and their other-market twins (same
    instance type and region, spot <-> on-demand) and every node kind of the same placement group
    as the chosen plan: mixes of what is already efficient, which keeps each solve small."""
    keys = {(ctx.cands[i].cloud, ctx.cands[i].instance_type, ctx.cands[i].region) for i in on_front}
    kinds = np.array([(c.cloud, c.instance_type, c.region) in keys for c in ctx.cands], dtype=bool)
    mask = mask & kinds[ctx.cols.cand]

    costs = np.array([p["cost_usd"] for p in pts])
    lo, hi = float(costs.min()), float(costs.max())
    if not hi > lo:
        return []
    out = []
    for budget in np.geomspace(lo, hi, SWEEP_POINTS + 2)[1:-1]:
        lim = replace(ctx.limits, deadline_s=None, budget_usd=float(budget), hard_cap_usd=None)
        o = solve(replace(ctx, limits=lim), mask=mask, work_limit=SWEEP_WORK_LIMIT)
        if o is not None and len(o.picks) > 1:
            out.append({"label": describe(ctx, o), "duration_s": o.time_mean_s, "cost_usd": o.cost_usd})
    return out
