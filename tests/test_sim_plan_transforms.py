"""The baseline policies registered by the simulator, as pure functions and in runs."""

import pytest

from sim_plans import make_plan, write_trace
from spottrain.policies import POLICIES, JobState, NodeOption, NodeView
from spottrain.sim import plan_transforms, sources
from spottrain.sim.job import run_setup
from spottrain.sim.setup import SimParams
from spottrain.sim.montecarlo import make_setup


def _node(i, spot=True):
    return NodeView(node_id=f"n{i}", instance_type="p3.2xlarge", gpu="V100", spot=spot, zone="z",
                    price_usd_per_hour=0.9, throughput=400.0)


def _state(event, **kw):
    opt = NodeOption(instance_type="p3.2xlarge", gpu="V100", spot=True, zone="z", price_usd_per_hour=0.9,
                     throughput=400.0, delay_s=200.0)
    base = dict(now_s=100.0, event=event, subject="n3", nodes=(_node(0), _node(1)),
                planned=tuple(_node(f"p{i}") for i in range(3)) + (_node(3),), pending=0, samples_done=0.0,
                samples_total=1e6, deadline_s=None, restart_overhead_s=60.0, options=(opt,))
    base.update(kw)
    return JobState(**base)


def test_baselines_are_registered():
    for name in plan_transforms.BASELINES + ("deadline-margin",):
        assert name in POLICIES


def test_skypilot_managed_releases_everyone_and_relaunches_the_plan():
    d = plan_transforms.skypilot_managed(_state("revoked"))
    assert set(d.release) == {"n0", "n1"}
    assert len(d.request) == 4  # the plan's four nodes (the revoked one stands in for one of them)
    assert plan_transforms.skypilot_managed(_state("revoked", pending=4)).request == ()
    assert plan_transforms.skypilot_managed(_state("notice")).checkpoint_now is False


def test_checkpoint_restart_does_nothing_on_notice_or_revocation():
    for ev in ("notice", "revoked"):
        d = plan_transforms.checkpoint_restart(_state(ev))
        assert not d.checkpoint_now and not d.request


def test_on_demand_and_anchor_transforms():
    plan = make_plan(nodes=4)
    od, _ = plan_transforms.to_on_demand(plan)
    assert all(not g.spot and g.price_usd_per_hour == g.on_demand_price_usd_per_hour for g in od.groups)
    assert [(g.instance_type, g.count) for g in od.groups] == [(g.instance_type, g.count) for g in plan.groups]
    anchored, over = plan_transforms.with_anchor(plan)
    assert anchored.nodes == 5 and sum(1 for g in anchored.groups if not g.spot) == 1
    (anchor,) = [g for g in anchored.groups if not g.spot]
    assert anchor.count == 1 and anchor.instance_type == plan.groups[0].instance_type
    assert anchor.price_usd_per_hour == plan.groups[0].on_demand_price_usd_per_hour
    # the anchor trains too: five nodes' throughput where the plan had four
    assert anchored.prediction.throughput_samples_per_s == pytest.approx(plan.prediction.throughput_samples_per_s * 5 / 4)
    assert 0 < over["checkpoint_factor"] < 1


def test_skypilot_managed_stalls_everyone_in_a_run(tmp_path):
    # one of four nodes lost at 2000 s, capacity back at 5000 s
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    rows = [(0, "z", "available", 4), (2000, "z", "available", 3), (5000, "z", "available", 4)]
    path = write_trace(tmp_path / "synthetic_one_loss.csv", rows, duration_s=100_000.0)
    src = sources.from_trace(path, plan, horizon_s=100_000.0)
    src.fixed_offset_s = 0.0
    params = SimParams(checkpoint_cost_s=10.0, restart_s=60.0)
    sky = run_setup(make_setup(plan, "skypilot-managed", src, params), 0, record=True)
    same = run_setup(make_setup(plan, "replace-same", src, params), 0, record=True)
    # managed spot waits with the whole cluster down until all four nodes are back (after 5000 s)
    members = sky.timeline["membership"]
    assert (2000.0, 0) in members  # everyone released at the revocation
    back = next(t for t, n in members if t > 2000.0 and n > 0)
    assert back >= 5000.0 and dict(members)[back] == 4
    assert min(n for t, n in same.timeline["membership"] if t > 0) == 3  # replace-same keeps the survivors
    assert sky.makespan_s > same.makespan_s
