"""Synchronous heterogeneous mixes: offered when cheaper (quota on the cheapest type), never otherwise."""

from __future__ import annotations

import numpy as np

import pytest

from spottrain.perf import predict_throughput
from spottrain.perf.workload import Workload
from spottrain.planner.engine import market_mask, prepare, solve
from spottrain.planner.formulation import SolveStats
from spottrain.types import ClusterGroup, ClusterSpec

from test_planner_solver import SYNTHETIC, WORKLOAD, brute_force, offer, search  # noqa: E402,F401

ONE_GPU = [o for o in SYNTHETIC if o.gpu_count == 1] + [offer("syn.k80", "K80", 1, 0.90, 0.27)]
"""One-GPU nodes: T4 (cheapest per sample), K80 (slower, dearer), V100 (fastest, dearest)."""


def best_single_gpu_model(ctx, mask):
    """Brute force over plans of one GPU model only (any markets / kinds of it)."""
    best = None
    for gpu in {c.gpu for c in ctx.cands}:
        m = mask & np.array([ctx.cands[i].gpu == gpu for i in ctx.cols.cand])
        o = brute_force(ctx, m, "min-cost")
        if o is not None and (best is None or o.cost_usd < best.cost_usd):
            best = o
    return best


@pytest.mark.parametrize("deadline_h", [16, 20, 40])
def test_quota_on_the_cheapest_type_makes_a_sync_gpu_mix_the_optimum(deadline_h, search):
    ctx = prepare(WORKLOAD, samples=20e6, deadline_s=deadline_h * 3600, offers=ONE_GPU, max_nodes=7,
                  quotas={"syn.t4": 2}, sync="sync")
    mask = market_mask(ctx, spot=False, on_demand=True)
    stats = SolveStats()
    got = solve(ctx, mask=mask, stats=stats, time_limit_s=60.0)
    want, single = brute_force(ctx, mask, "min-cost"), best_single_gpu_model(ctx, mask)
    assert want is not None and got is not None and stats.proven_optimal
    assert got.cost_usd == pytest.approx(want.cost_usd, rel=1e-9)
    assert (stats.plans_enumerated > 0, stats.milp_calls > 0) == ((True, False) if search == "enumerated" else (False, True))
    gpus = {ctx.cands[i].gpu for i, _ in got.picks}
    if want.cost_usd < single.cost_usd * (1 - 1e-9):
        assert len(gpus) == 2, "the brute-force optimum mixes GPU models; the planner must find it"
    else:
        assert len(gpus) == 1


def test_some_deadline_makes_the_gpu_mix_strictly_cheaper(search):
    wins = 0
    for deadline_h in (18, 20, 22):
        ctx = prepare(WORKLOAD, samples=20e6, deadline_s=deadline_h * 3600, offers=ONE_GPU, max_nodes=7,
                      quotas={"syn.t4": 2})
        mask = market_mask(ctx, spot=False, on_demand=True)
        got, single = solve(ctx, mask=mask, time_limit_s=60.0), best_single_gpu_model(ctx, mask)
        if got is not None and len({ctx.cands[i].gpu for i, _ in got.picks}) == 2:
            assert single is None or got.cost_usd < single.cost_usd
            wins += 1
    assert wins >= 1


def test_mix_runs_at_the_perf_models_mixed_rate():
    ctx = prepare(WORKLOAD, samples=20e6, deadline_s=10 * 3600, offers=ONE_GPU, max_nodes=6, quotas={"syn.t4": 2})
    t4 = next(i for i, c in enumerate(ctx.cands) if c.gpu == "T4" and c.spot)
    v = next(i for i, c in enumerate(ctx.cands) if c.gpu == "V100" and c.spot)
    o = ctx.evaluate(((t4, 2), (v, 2)))
    spec = ClusterSpec(groups=(ClusterGroup(count=2, gpu="T4", gpus_per_node=1),
                               ClusterGroup(count=2, gpu="V100", gpus_per_node=1)))
    want = predict_throughput(WORKLOAD, spec, sync="sync", network_gbps=10.0).throughput
    assert o.thr == pytest.approx(want, rel=1e-9)
    four_t4 = predict_throughput(WORKLOAD, ClusterSpec(groups=(ClusterGroup(count=4, gpu="T4", gpus_per_node=1),)),
                                 sync="sync", network_gbps=10.0).throughput
    assert o.thr <= four_t4 * 1.001  # every step waits for the slowest GPU


@pytest.mark.parametrize("deadline_h", [6, 12, 30])
def test_without_quota_a_homogeneous_plan_wins_and_no_mix_is_offered(deadline_h):
    ctx = prepare(WORKLOAD, samples=20e6, deadline_s=deadline_h * 3600, offers=ONE_GPU, max_nodes=6)
    mask = market_mask(ctx)
    got = solve(ctx, mask=mask, time_limit_s=60.0)
    want, single = brute_force(ctx, mask, "min-cost"), best_single_gpu_model(ctx, mask)
    assert (got is None) == (want is None)
    if want is None:
        return
    assert got.cost_usd == pytest.approx(want.cost_usd, rel=1e-9)
    if single is not None and single.cost_usd <= want.cost_usd * (1 + 1e-9):
        assert len({ctx.cands[i].gpu for i, _ in got.picks}) == 1


def test_pareto_front_spans_markets_and_mixes_and_is_not_dominated_by_any_column():
    from dataclasses import replace

    from spottrain.planner import plan
    from spottrain.planner.formulation import homogeneous_feasible

    r = plan(WORKLOAD, samples=20e6, deadline_s=20 * 3600, offers=SYNTHETIC, max_nodes=6, baselines=False)
    pts = sorted(r.pareto, key=lambda p: p["duration_s"])
    assert all(a["cost_usd"] > b["cost_usd"] for a, b in zip(pts, pts[1:]))  # non-dominated, ordered
    ctx = prepare(WORKLOAD, samples=20e6, deadline_s=20 * 3600, offers=SYNTHETIC, max_nodes=6)
    lim = replace(ctx.limits, deadline_s=None)
    ok = homogeneous_feasible(ctx.cols, ctx.cands, lim, 1.0, None)
    for j in np.flatnonzero(ok):  # every homogeneous cluster is matched or beaten by a front point
        t, c = ctx.cols.time_mean_s[j], ctx.cols.cost_usd[j]
        assert any(p["duration_s"] <= t * (1 + 1e-9) and p["cost_usd"] <= c * (1 + 1e-9) for p in pts)
    labels = " | ".join(p["label"] for p in pts)
    assert "spot" in labels and "on-demand" in labels
    assert any(" + " in p["label"] for p in pts), "mixes (spot + on-demand, several types) join the front"


def test_front_indices_keeps_exactly_the_non_dominated_points():
    from spottrain.planner.pareto import front_indices

    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 200))
        t = rng.integers(0, 15, n).astype(float)
        c = rng.integers(0, 15, n).astype(float)
        t[rng.random(n) < 0.2] = np.inf  # clusters that never finish
        keep = front_indices(t, c)
        assert list(keep) == sorted(keep, key=lambda j: (t[j], c[j]))  # ordered by time
        kept = {(t[j], c[j]) for j in keep}
        assert len(kept) == len(keep)  # one point per (time, cost)
        for j in range(n):
            dominated = np.any((t <= t[j]) & (c <= c[j]) & ((t < t[j]) | (c < c[j])))
            assert ((t[j], c[j]) in kept) == (np.isfinite(t[j]) and not dominated)


def test_a_cloud_whose_network_no_row_measured_is_planned_with_its_wider_interval():
    """The same 4-GPU nodes on AWS (whose achieved all-reduce rate the calibration fits) and on
    GCP: the same throughput estimate, a wider interval on GCP, so a lower P(deadline) there; the
    columns the solver reads carry the same widths as the exact evaluation."""
    import dataclasses

    # BERT-sized gradients at a small batch: the all-reduce across nodes is most of the step.
    bert = Workload(model="synthetic-bert", batch_size=8, flops_per_sample=67e9, param_count=110_000_000,
                    gradient_bytes=440e6)
    aws = [offer("syn.t4x4", "T4", 4, 3.91, 1.17, net=50.0)]
    gcp = [dataclasses.replace(o, cloud="gcp") for o in aws]
    outcomes = {}
    for name, offers in (("aws", aws), ("gcp", gcp)):
        ctx = prepare(bert, samples=5e6, deadline_s=20 * 3600, offers=offers, max_nodes=6, sync="sync")
        i = next(k for k, c in enumerate(ctx.cands) if not c.spot)
        assert ctx.cands[i].cloud == name
        outcomes[name] = ctx.evaluate(((i, 4),))
        col = next(k for k in range(ctx.cols.size) if ctx.cols.cand[k] == i and ctx.cols.n[k] == 4)
        assert ctx.cols.low[col] == pytest.approx(outcomes[name].low, rel=1e-9)
        assert ctx.cols.high[col] == pytest.approx(outcomes[name].high, rel=1e-9)
    a, g = outcomes["aws"], outcomes["gcp"]
    assert g.thr == pytest.approx(a.thr) and g.low < 0.8 * a.low and g.high > 1.2 * a.high
    assert g.p_deadline <= a.p_deadline
