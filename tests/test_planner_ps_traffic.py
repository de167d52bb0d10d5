"""Parameter-server traffic: one update per worker node (its GPUs' gradients summed on the node, as
the performance model's PS queue counts them), the same in the MILP's columns and the exact check."""

from __future__ import annotations

import numpy as np

from spottrain.planner.engine import prepare

from test_planner_solver import SYNTHETIC, WORKLOAD  # noqa: E402


def test_the_exact_check_counts_ps_traffic_per_node_as_the_columns_do():
    ctx = prepare(WORKLOAD, samples=20e6, deadline_s=400 * 3600, offers=SYNTHETIC, max_nodes=8, ps=1, sync="async")
    cap = ctx.limits.ps_capacity_bytes_per_s
    gpn = np.array([ctx.cands[i].gpus_per_node for i in ctx.cols.cand], dtype=float)
    # 4-GPU nodes whose per-node traffic fits the server but whose per-GPU count would not
    tight = np.flatnonzero((gpn > 1) & (ctx.traffic <= cap) & (ctx.traffic * gpn > cap))
    assert tight.size, "no column between the two counts: the test would prove nothing"
    for col in tight:
        picks = ((int(ctx.cols.cand[col]), int(ctx.cols.n[col])),)
        out = ctx.evaluate(picks)
        assert "parameter servers saturated" not in out.why_not, (picks, out.why_not)
    # and a column over the server's capacity per node is refused by both
    over = np.flatnonzero(ctx.traffic > cap * 1.05)
    if over.size:
        col = over[0]
        out = ctx.evaluate(((int(ctx.cols.cand[col]), int(ctx.cols.n[col])),))
        assert "parameter servers saturated" in out.why_not
