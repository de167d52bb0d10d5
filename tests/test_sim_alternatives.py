"""Replacement across instance types: markets of other types, live options, determinism."""

import dataclasses

import pytest

from sim_plans import make_plan, write_trace
from spottrain.clouds import VM_STARTUP_S
from spottrain.errors import InputError, UnknownNameError
from spottrain.policies import register_policy, replace_cheapest
from spottrain.sim import markets, sources
from spottrain.sim.job import run_setup
from spottrain.sim.setup import SimParams
from spottrain.sim.montecarlo import make_markets, make_setup, simulate

ALT_PRICE = 0.5
OUTAGE_END_S = 40_000.0


def _outage(tmp_path, *, gpu, instance_type, price, deadline_h, outage_end_s=OUTAGE_END_S, workload=None):
    """4 x p3.2xlarge (4 h of work) whose market is empty from t=2000 s to ``outage_end_s``
    (synthetic trace); a market of ``instance_type`` that always has room (synthetic trace).
    ``workload``: fields of the plan's workload to replace (ResNet-50 at batch 64 by default)."""
    plan = make_plan(nodes=4, hours=4.0, interval_s=1000.0, deadline_h=deadline_h)
    if workload:
        plan = dataclasses.replace(plan, workload=dataclasses.replace(plan.workload, **workload))
    own = write_trace(tmp_path / "synthetic_own.csv",
                      [(0, "z", "available", 4), (2000, "z", "available", 0), (outage_end_s, "z", "available", 4)],
                      duration_s=100_000.0)
    other = write_trace(tmp_path / "synthetic_other.csv", [(0, "z", "available", 4)],
                        duration_s=100_000.0, gpu=gpu, instance_type=instance_type)
    src = sources.from_trace(own, plan, horizon_s=100_000.0)
    src.fixed_offset_s = 0.0
    alts = ({"instance_type": instance_type, "gpu": gpu, "gpus_per_node": 1, "zone": "synthetic-az",
             "price_usd_per_hour": price, "trace": other},)
    return plan, src, SimParams(checkpoint_cost_s=10.0, restart_s=60.0, alternatives=alts)


def _scenario(tmp_path):
    """The V100 outage with a g5.xlarge (A10G) market beside it; 8 h deadline."""
    return _outage(tmp_path, gpu="A10G", instance_type="g5.xlarge", price=ALT_PRICE, deadline_h=8.0)


def _run(plan, src, params, policy, seed=1):
    markets = make_markets(plan, src, params)
    return run_setup(make_setup(plan, policy, src, params, markets), seed, record=True), markets


def test_replace_cheapest_moves_to_the_available_type_and_replace_same_waits(tmp_path):
    plan, src, params = _scenario(tmp_path)
    cheap, markets = _run(plan, src, params, "replace-cheapest")
    same, _ = _run(plan, src, params, "replace-same")
    # replace-same can only buy p3.2xlarge back: it waits for the market to return
    assert same.finished and same.makespan_s > OUTAGE_END_S and same.deadline_met is False
    assert same.other_type_nodes == 0
    # replace-cheapest buys g5.xlarge at once (as many as add throughput at a bearable cost per
    # sample: on a 10 Gbit/s network the performance model decides how many) and meets the deadline
    assert cheap.finished and cheap.deadline_met
    assert cheap.makespan_s < 0.5 * same.makespan_s
    assert 1 <= cheap.other_type_nodes <= 4
    keys = [k for _, k in cheap.timeline["membership_keys"]]
    assert (("A10G", 1, cheap.other_type_nodes),) in keys and all(g != "V100" for g, _, _ in keys[-1])
    assert markets.descriptions == {"g5.xlarge": f"trace {tmp_path / 'synthetic_other.csv'}"}


def test_cost_bills_the_other_types_price(tmp_path):
    plan, src, params = _scenario(tmp_path)
    r, _ = _run(plan, src, params, "replace-cheapest")
    # the V100s bill until their revocation at 2000 s; the A10Gs from their grant (at once) to the end
    assert r.other_type_nodes >= 1
    expected = 4 * 0.918 * 2000.0 / 3600 + r.other_type_nodes * ALT_PRICE * (r.makespan_s - 2000.0) / 3600
    assert r.cost_usd == pytest.approx(expected)


def test_throughput_after_the_move_is_the_performance_models_for_the_other_gpu(tmp_path):
    plan, src, params = _scenario(tmp_path)
    setup = make_setup(plan, "replace-cheapest", src, params, make_markets(plan, src, params))
    r = run_setup(setup, 1, record=True)
    n = r.other_type_nodes
    v100 = setup.throughput((("V100", 1, n),))
    a10g = setup.throughput((("A10G", 1, n),))
    assert n >= 1 and a10g > 0 and a10g != v100
    # progress is exact: the work done before the loss was rolled back to the last checkpoint,
    # then the A10G cluster trains from its join + restart to the end, with periodic checkpoints
    joined = min(t for t, k in r.timeline["membership_keys"] if k == (("A10G", 1, n),))
    work_s = r.makespan_s - joined - setup.restart_s
    ckpts = sum(1 for t, _ in r.timeline["checkpoints"] if t > joined)
    done_before = max(p for t, p in r.timeline["checkpoints"] if t <= 2000.0)
    assert (work_s - ckpts * 10.0) * a10g == pytest.approx(setup.total - done_before, rel=1e-6)


def test_same_seed_same_result_and_replace_same_ignores_alternatives(tmp_path):
    plan = make_plan(nodes=4, hours=6.0, interval_s=1200.0, deadline_h=10.0)
    a = simulate(plan, model=True, policies=["replace-cheapest", "replace-same"], runs=30, seed=5, workers=1)
    b = simulate(plan, model=True, policies=["replace-cheapest", "replace-same"], runs=30, seed=5, workers=1)
    assert [r.cost_usd for r in a.results["replace-cheapest"]] == [r.cost_usd for r in b.results["replace-cheapest"]]
    assert a.alternatives and all(x["instance_type"] != "p3.2xlarge" for x in a.alternatives)
    off = simulate(plan, model=True, policies=["replace-same"], runs=30, seed=5, workers=1,
                   params=SimParams(alternatives=()))
    # a policy that never buys other types draws exactly the same runs with or without them
    assert [(r.makespan_s, r.cost_usd) for r in a.results["replace-same"]] == \
        [(r.makespan_s, r.cost_usd) for r in off.results["replace-same"]]
    assert sum(r.other_type_nodes for r in a.results["replace-cheapest"]) > 0


def test_no_alternatives_reproduces_the_plan_only_options_exactly(tmp_path):
    register_policy("synthetic-cheapest-plan-types", lambda state: replace_cheapest(state))  # no buys_other_types
    plan, src, params = _scenario(tmp_path)
    for trace_src, runs in ((src, 1), (None, 20)):
        kw = {"trace": None, "model": True} if trace_src is None else {}
        if trace_src is None:
            off = simulate(plan, policies=["replace-cheapest"], runs=runs, seed=3, workers=1,
                           params=SimParams(alternatives=()), **kw)
            plain = simulate(plan, policies=["synthetic-cheapest-plan-types"], runs=runs, seed=3, workers=1, **kw)
            got = [(r.makespan_s, r.cost_usd, r.revocations) for r in off.results["replace-cheapest"]]
            want = [(r.makespan_s, r.cost_usd, r.revocations) for r in plain.results["synthetic-cheapest-plan-types"]]
        else:
            p0 = SimParams(checkpoint_cost_s=10.0, restart_s=60.0, alternatives=())
            got = [run_setup(make_setup(plan, "replace-cheapest", src, p0), s) for s in range(3)]
            want = [run_setup(make_setup(plan, "synthetic-cheapest-plan-types", src, params), s) for s in range(3)]
            got = [(r.makespan_s, r.cost_usd, r.revocations, r.other_type_nodes) for r in got]
            want = [(r.makespan_s, r.cost_usd, r.revocations, r.other_type_nodes) for r in want]
        assert got == want


def test_derived_alternatives_fit_the_job():
    plan = make_plan(nodes=8)
    alts = markets.alternative_offers(plan, 4)
    assert 1 <= len(alts) <= 4
    from spottrain.catalog import gpu_spec, load_catalog

    shapes = set()
    for a in alts:
        assert a["instance_type"] != "p3.2xlarge" and a["cloud"] == "aws" and a["region"] == "us-west-2"
        assert a["gpus_per_node"] == 1  # all-reduce: the plan's node width
        assert gpu_spec(a["gpu"]).memory_gib >= 16 * plan.workload.param_count / 2**30
        offers = load_catalog().query(cloud="aws", region="us-west-2", spot=True, instance_type=a["instance_type"])
        assert a["price_usd_per_hour"] == min(o.spot_price_usd_per_hour for o in offers)
        shapes.add((a["gpu"], a["gpus_per_node"]))
    assert len(shapes) == len(alts)
    big = make_plan(nodes=8, extra={"memory_needed_gib": 20.0})
    assert all(gpu_spec(a["gpu"]).memory_gib >= 20.0 for a in markets.alternative_offers(big, 4))
    zoned = make_plan(nodes=8, extra={"zones": ["usw2-az1"]})
    assert all(a["zone"] == "usw2-az1" for a in markets.alternative_offers(zoned, 4))


def test_plan_alternatives_params_override_and_disable():
    carried = make_plan(nodes=4, extra={"alternatives": [{"instance_type": "g5.xlarge"}]})
    groups = markets.alternative_groups(carried)
    assert [g.instance_type for g in groups] == ["g5.xlarge"] and groups[0].gpu == "A10G" and groups[0].count == 4
    assert markets.alternative_groups(carried, [{"instance_type": "g6.xlarge"}])[0].gpu == "L4"
    m = make_markets(carried, None, SimParams(alternatives=()))
    assert len(m) == 1 and m.groups == []
    plain = make_plan(nodes=4)
    assert make_markets(plain, None, SimParams(max_alternatives=0)).groups == []
    assert len(make_markets(plain, None, SimParams(max_alternatives=2)).groups) == 2
    with pytest.raises(InputError, match="alternative 1"):
        markets.alternative_groups(plain, [{"gpu": "T4"}])
    with pytest.raises(InputError, match="no spot offer"):
        markets.alternative_groups(plain, [{"instance_type": "Standard_NC12"}])  # Azure's, not AWS us-west-2's
    with pytest.raises(UnknownNameError, match="p3.2xlarg"):
        markets.alternative_groups(plain, [{"instance_type": "p3.2xlarg"}])


def test_trace_mode_uses_the_other_types_traces_or_its_fitted_model():
    plan = make_plan(nodes=4, zone="us-east-1c", hours=6.0, deadline_h=10.0)
    alts = ({"instance_type": "g4dn.xlarge"}, {"instance_type": "g6.xlarge"})
    res = simulate(plan, trace="skypilot-availability-1-node-aws-02-15-2023-us-east-1c_v100_1",
                   policies=["replace-cheapest"], runs=20, workers=1, params=SimParams(alternatives=alts))
    by_type = {a["instance_type"]: a["revocations"] for a in res.alternatives}
    assert "g4dn.xlarge" in by_type["g4dn.xlarge"] or "pooled traces" in by_type["g4dn.xlarge"]
    assert by_type["g6.xlarge"].startswith("no trace of g6.xlarge: fitted lifetime model")
    assert any("other instance types for replace-cheapest" in n for n in res.notes)


# ResNet-18 at batch 128 per GPU: compute-bound across nodes (its 47 MB gradient is small next to a
# step's compute), so 4 V100 nodes train about 2.7x faster than one and the cluster's speed follows
# the GPU (`spottrain predict --model resnet18 --batch-size 128 --cluster 4xV100`). ResNet-50 at
# batch 64 is all-reduce bound across nodes at the measured TCP rate: 4 K80 nodes would train at
# ~70 % of 4 V100 nodes, and the slow alternative would not be slow.
COMPUTE_BOUND = dict(model="resnet18", batch_size=128, flops_per_sample=6 * 1.8e9, param_count=11_700_000,
                     gradient_bytes=4 * 11_700_000.0)


def _slow_alternative(tmp_path, outage_end_s=OUTAGE_END_S):
    """The V100 outage with a K80 market beside it (p2.xlarge at a synthetic $0.2/h: cheap per
    sample, but 4 of them train at well under half the V100 cluster's speed, the workload being
    compute-bound): 8 h deadline."""
    return _outage(tmp_path, gpu="K80", instance_type="p2.xlarge", price=0.2, deadline_h=8.0,
                   outage_end_s=outage_end_s, workload=COMPUTE_BOUND)


def test_deadline_cheapest_meets_the_deadline_replace_cheapest_misses_for_less_than_deadline_margin(tmp_path):
    plan, src, params = _slow_alternative(tmp_path)
    markets = make_markets(plan, src, params)
    setup = make_setup(plan, "deadline-cheapest", src, params, markets)
    assert setup.throughput((("K80", 1, 4),)) < 0.5 * setup.throughput((("V100", 1, 4),))
    ours = run_setup(setup, 1, record=True)
    cheap = run_setup(make_setup(plan, "replace-cheapest", src, params, markets), 1)
    margin = run_setup(make_setup(plan, "deadline-margin", src, params, markets), 1)
    # replace-cheapest trains on the slow K80s to the end and is late
    assert cheap.finished and not cheap.deadline_met and cheap.other_type_nodes == 4
    # deadline-margin waits for V100 spot, then pays on-demand for nearly all the work
    assert margin.deadline_met and margin.switched_on_demand and margin.other_type_nodes == 0
    # ours trains on K80 while the slack lasts, then falls back once: on time, cheaper
    assert ours.deadline_met and ours.switched_on_demand and ours.other_type_nodes == 4
    assert ours.cost_usd < 0.8 * margin.cost_usd
    keys = [k for _, k in ours.timeline["membership_keys"]]
    assert (("K80", 1, 4),) in keys and keys[-1] == (("V100", 1, 4),)
    switches = [r for _, r in ours.timeline["decisions"] if "switch to on-demand" in r]
    assert len(switches) == 1  # no second fallback while the first boots
    assert ours.replacements == 8  # 4 x K80, then the 4 on-demand V100


def test_deadline_cheapest_moves_back_to_v100_when_its_market_returns(tmp_path):
    plan, src, params = _slow_alternative(tmp_path, outage_end_s=5000.0)
    markets = make_markets(plan, src, params)
    ours = run_setup(make_setup(plan, "deadline-cheapest", src, params, markets), 1, record=True)
    margin = run_setup(make_setup(plan, "deadline-margin", src, params, markets), 1)
    assert ours.deadline_met and not ours.switched_on_demand and ours.other_type_nodes == 4
    keys = [(t, k) for t, k in ours.timeline["membership_keys"]]
    assert (("K80", 1, 4),) in [k for _, k in keys] and keys[-1][1] == (("V100", 1, 4),)
    back = min(t for t, k in keys if k == (("V100", 1, 4),) and t > 2000.0)
    assert 5000.0 <= back <= 5000.0 + 300.0 + VM_STARTUP_S + 70.0  # next tick, start-up, restart
    # the K80s bridged the outage: no on-demand, sooner and cheaper than waiting for V100
    assert ours.makespan_s < margin.makespan_s and ours.cost_usd < margin.cost_usd


def test_deadline_cheapest_meets_deadlines_at_least_as_often_as_deadline_margin():
    plan = make_plan(nodes=4, hours=6.0, interval_s=1200.0, deadline_h=8.0)
    res = simulate(plan, model=True, policies=["deadline-cheapest", "deadline-margin", "replace-cheapest"],
                   runs=40, seed=2, workers=1)
    by = {s.policy: s for s in res.summaries}
    assert by["deadline-cheapest"].deadline_met_rate >= by["deadline-margin"].deadline_met_rate
    assert by["deadline-cheapest"].deadline_met_rate >= by["replace-cheapest"].deadline_met_rate
    assert sum(r.other_type_nodes for r in res.results["deadline-cheapest"]) > 0
