"""Simulation-refined planning on synthetic traces (behaviour, not figures)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from spottrain.perf import Workload
from spottrain.planner import plan
from spottrain.planner.engine import market_mask, prepare
from spottrain.planner.refine import candidate_plans, failure_free_cost_usd, refine
from spottrain.sim.sources import matching_traces

P3_16 = "p3.16xlarge"


def write_synthetic(path, *, up_h: float, down_h: float, hours: float = 60.0, zone: str = "us-west-2a",
                    instance_type: str = P3_16, gpu: str = "V100") -> str:
    """A periodic availability trace: capacity for the whole cluster for ``up_h``, none for ``down_h``."""
    rows, t = [], 0.0
    while t < hours * 3600:
        rows.append(f"{t:.0f},{zone},available,1")
        rows.append(f"{t + up_h * 3600:.0f},{zone},available,0")
        t += (up_h + down_h) * 3600
    head = ["# cloud: aws", f"# gpu: {gpu}", "# kind: availability", f"# instance_type: {instance_type}",
            f"# zone: {zone}", f"# duration_s: {t:.0f}", "time_s,source,event,value"]
    path.write_text("\n".join(head + rows) + "\n")
    return str(path)


def _request(deadline_h: float = 16.0, *, model: str = "resnet50", batch_size: int = 64, **over):
    w = Workload.from_zoo(model, batch_size)
    kw = dict(samples=90 * 1.28e6, deadline_s=deadline_h * 3600, confidence=0.95, clouds=["aws"],
              regions=["us-west-2"], instance_types=[P3_16], max_nodes=24)
    kw.update(over)
    return plan(w, **kw), prepare(w, **kw)


@pytest.fixture(scope="module")
def request16():
    return _request()


@pytest.fixture(scope="module")
def request16_compute_bound():
    # ResNet-18 at batch 128 per GPU: its 47 MB gradient is small next to a step's compute, so it
    # keeps scaling across p3.16xlarge nodes at the measured TCP all-reduce rate (`spottrain predict
    # --model resnet18 --batch-size 128 --cluster 8xp3.16xlarge`: ~4.6x one node's speed), while
    # ResNet-50 at batch 64 is all-reduce bound there (2 nodes train slower than 1), so no bigger
    # cluster of it could finish inside one availability window.
    return _request(model="resnet18", batch_size=128)


@pytest.fixture()
def synthetic_outages(tmp_path):
    # The market of p3.16xlarge is there for 1 h, then gone for 8 h, for all nodes at once: a
    # cluster that finishes inside one window pays little, a small one runs out of slack and
    # finishes on on-demand nodes.
    return write_synthetic(tmp_path / "synthetic_outages_2a.csv", up_h=1.0, down_h=8.0, hours=90)


def test_a_bigger_cluster_that_dodges_correlated_outages_wins(request16_compute_bound, synthetic_outages):
    result, ctx = request16_compute_bound
    ref = refine(result, ctx, runs=20, traces=[synthetic_outages], max_candidates=16)
    chosen, analytical = ref.plan, result.best
    assert ref.analytical.label == analytical.label
    # the analytical model (independent revocations) prefers the small cluster ...
    assert ref.changed and chosen.nodes > analytical.nodes
    by = {c.label: c for c in ref.candidates}
    # ... which, replayed on the outages, costs more than the refined choice
    assert by[chosen.label].mean_cost_usd < by[analytical.label].mean_cost_usd
    # the chosen plan meets the deadline at the requested rate in simulation, and says so
    assert chosen.prediction.p_meet_deadline >= 0.95
    assert chosen.prediction.cost_usd == pytest.approx(by[chosen.label].mean_cost_usd)
    assert chosen.extra["refined"]["runs"] == 20 and "synthetic_outages" in chosen.extra["refined"]["availability"]
    # it is the cheapest of the candidates that met the rate
    ok = [c for c in ref.candidates if c.met_rate >= 0.95]
    assert by[chosen.label].mean_cost_usd == min(c.mean_cost_usd for c in ok)
    assert ref.traces[P3_16] == (synthetic_outages,) and not ref.model_fallback
    assert ref.seconds > 0 and len(ref.candidates) <= 16
    # the premise of the candidate pruning: no run costs less than the plan's failure-free cost, so
    # spot plans dearer than the cheapest on-demand plan even without revocations are not simulated
    for c in ref.candidates:
        assert c.mean_cost_usd >= 0.98 * failure_free_cost_usd(c.plan)
    od = min(c.failure_free_cost_usd for c in ref.candidates if not c.plan.groups[0].spot)
    assert all(c.failure_free_cost_usd <= od * (1 + 1e-9) for c in ref.candidates if c.origin != "planner")


def test_exclude_drops_traces_by_zone_and_by_name(request16, tmp_path):
    a = write_synthetic(tmp_path / "synthetic_a.csv", up_h=2, down_h=1, zone="us-west-2a")
    b = write_synthetic(tmp_path / "synthetic_b.csv", up_h=3, down_h=1, zone="us-west-2b")
    g = request16[0].best.groups[0]
    assert matching_traces(g, traces=[a, b]) == [a, b]
    assert matching_traces(g, traces=[a, b], exclude=["us-west-2a"]) == [b]
    assert matching_traces(g, traces=[a, b], exclude=[b]) == [a]
    result, ctx = request16
    ref = refine(result, ctx, runs=5, traces=[a, b], exclude=["US-WEST-2B"], max_candidates=3)
    assert ref.traces[P3_16] == (a,)
    assert all(b not in c.availability for c in ref.candidates)


def test_shipped_traces_match_by_instance_type():
    result, _ = _request(deadline_h=16)
    g = result.best.groups[0]
    names = matching_traces(g)
    assert names and all(n.endswith("_v100_8") for n in names)  # p3.16xlarge = 8 V100, not p3.2xlarge's _v100_1
    held = matching_traces(g, exclude=["us-west-2a"])
    assert held and all("us-west-2a" not in n for n in held) and len(held) < len(names)


def test_types_without_a_trace_fall_back_to_the_fitted_model(request16, tmp_path):
    other = write_synthetic(tmp_path / "synthetic_k80.csv", up_h=2, down_h=1, instance_type="p2.xlarge", gpu="K80")
    result, ctx = request16
    ref = refine(result, ctx, runs=5, traces=[other], max_candidates=3)
    assert ref.model_fallback == (P3_16,) and ref.traces[P3_16] == ()
    assert any("fitted lifetime model" in n for n in ref.notes)
    spot = [c for c in ref.candidates if any(g.spot for g in c.plan.groups)]
    assert spot and all(c.availability.startswith(f"no trace of {P3_16}") for c in spot)


def test_deterministic_given_a_seed(request16, synthetic_outages):
    result, ctx = request16
    kw = dict(runs=8, traces=[synthetic_outages], max_candidates=4)
    r1 = refine(result, ctx, seed=3, workers=1, **kw)
    r2 = refine(result, ctx, seed=3, workers=2, **kw)
    assert [c.to_dict() for c in r1.candidates] == [c.to_dict() for c in r2.candidates]
    assert r1.plan.label == r2.plan.label
    r3 = refine(result, ctx, seed=4, workers=1, **kw)
    assert [c.mean_cost_usd for c in r3.candidates] != [c.mean_cost_usd for c in r1.candidates]


def test_candidates_sweep_around_the_fastest_failure_free_size(request16):
    result, ctx = request16
    cands = candidate_plans(ctx, result)
    labels = [p.label for _, p in cands]
    assert len(labels) == len(set(labels)) and cands[0] == ("planner", result.best)
    spot_sizes = {p.nodes for _, p in cands if p.groups[0].spot}
    deadline = ctx.limits.deadline_s
    spot = next(i for i, c in enumerate(ctx.cands) if c.spot)
    sel = ctx.cols.cand == spot
    t_free = dict(zip(ctx.cols.n[sel].tolist(), (ctx.cols.work[sel] / ctx.cols.thr[sel]).tolist()))
    n0 = min(n for n, t in t_free.items() if t <= deadline)
    # The sizes next to it that finish by the deadline too: more nodes are not always faster (two
    # p3.16xlarge nodes train ResNet-50 at batch 64 slower than one, all-reduce bound).
    near = {n for n in (n0, n0 + 1, n0 + 2, 2 * n0, 3 * n0) if t_free.get(n, math.inf) <= deadline}
    assert len(near) >= 2 and near <= spot_sizes
    assert not any(t_free.get(n, math.inf) > deadline for n in spot_sizes)
    assert any(not p.groups[0].spot for _, p in cands)  # on-demand sizes too
    spot_only = candidate_plans(ctx, result, on_demand=False)
    assert all(p.groups[0].spot for o, p in spot_only if o == "sweep")
    assert all(p.workload.samples_total / p.prediction.throughput_samples_per_s <= deadline
               for o, p in cands if o == "sweep")


def test_progress_is_reported_and_the_cap_holds(request16, synthetic_outages):
    result, ctx = request16
    seen = []
    ref = refine(result, ctx, runs=3, traces=[synthetic_outages], max_candidates=5, workers=1,
                 progress=lambda done, total: seen.append((done, total)))
    assert len(ref.candidates) == 5 and seen[-1] == (5, 5) and [d for d, _ in seen] == [1, 2, 3, 4, 5]
    assert ref.candidates[0].origin == "planner"
    # the safe choice (cheapest on-demand plan that meets the deadline) is always among them
    assert any(not any(g.spot for g in c.plan.groups) for c in ref.candidates)
    assert any("beyond the cap" in n for n in ref.notes)


def test_budget_request_picks_the_fastest_within_budget(tmp_path):
    trace = write_synthetic(tmp_path / "synthetic_budget.csv", up_h=3, down_h=0.5)
    result, ctx = _request(deadline_s=None, budget_usd=150.0)
    ref = refine(result, ctx, runs=10, traces=[trace], max_candidates=8)
    ok = [c for c in ref.candidates if c.mean_cost_usd <= 150.0]
    assert ok and all(c.eligible == (c.mean_cost_usd <= 150.0) for c in ref.candidates)
    chosen = next(c for c in ref.candidates if c.label == ref.plan.label)
    assert chosen.eligible and chosen.mean_duration_s == min(c.mean_duration_s for c in ok)
    assert chosen.met_rate is None and ref.plan.prediction.p_meet_deadline is None


def test_bad_arguments_are_user_errors(request16):
    from spottrain.errors import InputError

    result, ctx = request16
    with pytest.raises(InputError):
        refine(result, ctx, runs=0)
    with pytest.raises(InputError):
        refine(result, ctx, max_candidates=1)


def test_no_candidate_qualifies_keeps_the_planner_plan(tmp_path):
    # spot capacity is never there and on-demand is not allowed: no plan finishes
    never = tmp_path / "synthetic_never.csv"
    never.write_text("# cloud: aws\n# gpu: V100\n# kind: availability\n# instance_type: p3.16xlarge\n"
                     "# duration_s: 86400\ntime_s,source,event,value\n0,us-west-2a,available,0\n")
    result, ctx = _request(deadline_s=None, budget_usd=150.0)
    ref = refine(result, ctx, runs=3, traces=[str(never)], max_candidates=3, on_demand=False)
    assert not any(c.eligible for c in ref.candidates) and all(c.finished_rate == 0 for c in ref.candidates)
    assert ref.plan.label == result.best.label and not ref.changed
    assert any("keeping the planner's plan" in n for n in ref.notes)


def test_plan_refined_runs_the_planner_and_refines_the_same_request(synthetic_outages):
    from spottrain.planner.refine import plan_refined

    w = Workload.from_zoo("resnet50", 64)
    result, ref = plan_refined(w, samples=90 * 1.28e6, deadline_s=16 * 3600, clouds=["aws"], regions=["us-west-2"],
                               instance_types=[P3_16], max_nodes=24, spot_only=True, runs=4,
                               traces=[synthetic_outages], max_candidates=4)
    assert ref.analytical.label == result.best.label
    assert all(g.spot for c in ref.candidates for g in c.plan.groups)  # spot only: no on-demand candidates
    assert ref.plan.deadline_s == 16 * 3600 and "refined" in ref.plan.extra


def test_pareto_candidates_keep_the_region_of_their_front_point():
    # p3.16xlarge in two regions: a front point must become a plan in its own region (its price),
    # not the same instance type's plan in the other region.
    from spottrain.planner.pareto import pareto_points

    result, ctx = _request(regions=["us-west-2", "us-east-1"], deadline_h=36.0)
    # the homogeneous front (the plan's front may replace some of its points by mixes that beat them)
    front = {(pt["label"], pt["region"]): pt for pt in pareto_points(ctx, market_mask(ctx), sweep=False)}
    assert front
    cands = [(o, p) for o, p in candidate_plans(ctx, result) if o == "pareto"]
    assert cands
    for _, p in cands:
        pt = front.get((p.label, p.groups[0].region))
        assert pt is not None, p.label
        assert p.prediction.cost_usd == pytest.approx(pt["cost_usd"], rel=1e-9)


def test_front_candidates_do_not_depend_on_the_swept_pareto_front():
    # refine reads the homogeneous front of the request's markets itself: a result planned without
    # the (MILP-swept, time-limited) Pareto front gives the same candidates, and every front
    # candidate is a homogeneous column no other column beats on both expected time and cost
    result, ctx = _request(regions=["us-west-2", "us-east-1"], deadline_h=36.0,
                           instance_types=[P3_16, "p3.2xlarge", "g4dn.12xlarge"])
    bare = dataclasses.replace(result, pareto=[])
    with_front = [(o, p.label, p.groups[0].region) for o, p in candidate_plans(ctx, result)]
    without = [(o, p.label, p.groups[0].region) for o, p in candidate_plans(ctx, bare)]
    assert with_front == without
    front = [p for o, p in candidate_plans(ctx, result) if o == "pareto"]
    assert front
    cols = ctx.cols
    cost = cols.cost_usd
    for p in front:
        t, c = p.prediction.duration_s, p.prediction.cost_usd
        assert not ((cols.time_mean_s < t * (1 - 1e-9)) & (cost < c * (1 - 1e-9))).any(), p.label


def test_a_type_without_traces_is_simulated_with_its_cloud_s_outages():
    """A spot type no trace replays is simulated on its fitted lifetimes, whose outages take its whole
    group as often as the cloud's traces of several nodes show (AWS: most revocations), and the
    candidate's availability says so."""
    from sim_plans import make_plan
    from spottrain.planner.refine import _Availability
    from spottrain.sim.setup import SimParams
    from spottrain.transience import group_outage

    two = make_plan(nodes=2, cloud="aws", gpu="H200", instance_type="p5en.48xlarge", zone="use1-az1",
                    region="us-east-1")
    share = group_outage("aws", "H200").share
    assert share > 0.5
    src, desc = _Availability(None, (), SimParams())(two)
    assert src.outage_share == pytest.approx(share)
    assert desc.startswith("no trace of p5en.48xlarge") and f"{share:.0%} of revocations take the node's whole group" in desc
