"""The cost-vs-time Pareto front of the candidate clusters.

Every homogeneous column is assessed exactly (expected time, expected cost), so the front of the
homogeneous clusters is exact; the chosen plan (possibly a mix) is added and the set filtered
again. A point is kept when no other point is both faster and cheaper.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spottrain.planner.formulation import Outcome, homogeneous_feasible


def front_indices(time_s: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (minimize both), ordered by time."""
    order = np.lexsort((cost, time_s))
    keep, best = [], np.inf
    for j in order:
        if np.isfinite(time_s[j]) and cost[j] < best:
            keep.append(j)
            best = cost[j]
    return np.array(keep, dtype=int)


def pareto_points(ctx: Any, mask: np.ndarray, chosen: Outcome | None = None) -> list[dict[str, Any]]:
    from dataclasses import replace

    from spottrain.planner.api import _subset, describe

    sub = _subset(ctx.cols, mask)
    lim = replace(ctx.limits, deadline_s=None, budget_usd=None, hard_cap_usd=None)
    ok = homogeneous_feasible(sub, ctx.cands, lim, 1.0, None)
    idx = np.flatnonzero(ok)
    t = sub.time_mean_s[idx]
    c = sub.cost_usd[idx]
    pts = [{"label": f"{int(sub.n[j])}x {ctx.cands[int(sub.cand[j])].instance_type}"
                     f"{' spot' if ctx.cands[int(sub.cand[j])].spot else ' on-demand'}",
            "duration_s": float(sub.time_mean_s[j]), "cost_usd": float(sub.cost_usd[j])}
           for j in idx[front_indices(t, c)]]
    if chosen is not None:
        pts.append({"label": describe(ctx, chosen), "duration_s": chosen.time_mean_s, "cost_usd": chosen.cost_usd})
    ts = np.array([p["duration_s"] for p in pts])
    cs = np.array([p["cost_usd"] for p in pts])
    return [pts[j] for j in front_indices(ts, cs)]
