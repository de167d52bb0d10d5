"""Behaviour of the simulated training job on synthetic traces with known answers."""

import math

import numpy as np
import pytest

from sim_plans import make_plan, write_trace
from spottrain.clouds import REGROUP_S, VM_STARTUP_S
from spottrain.errors import InputError
from spottrain.sim import sources
from spottrain.sim.job import run_setup
from spottrain.sim.setup import SimParams, SimSetup
from spottrain.sim.montecarlo import make_setup, simulate


def _setup(tmp_path, plan, rows, policy, *, offset=0.0, params=None, duration=100_000.0):
    path = write_trace(tmp_path / "synthetic_trace.csv", rows, duration_s=duration)
    src = sources.from_trace(path, plan, horizon_s=duration)
    src.fixed_offset_s = offset
    return make_setup(plan, policy, src, params or SimParams(checkpoint_cost_s=10.0, restart_s=60.0))


def test_no_revocation_makespan_and_cost_are_exact(tmp_path):
    plan = make_plan(nodes=4, hours=1.0, interval_s=1000.0, deadline_h=2.0)
    setup = _setup(tmp_path, plan, [(0, "z", "available", 4)], "replace-same")
    r = run_setup(setup, 1)
    work = 3600.0
    checkpoints = math.floor(work / 1000.0)  # one every 1000 s of training, none at the end
    assert r.revocations == 0 and r.finished and r.deadline_met
    assert r.checkpoints == checkpoints
    assert r.makespan_s == pytest.approx(VM_STARTUP_S + work + checkpoints * 10.0)
    assert r.cost_usd == pytest.approx(4 * 0.918 * r.makespan_s / 3600)


def _one_loss_rows():
    # 4 nodes alive, one lost at t=2000 s, capacity back at t=5000 s
    return [(0, "z", "available", 4), (2000, "z", "available", 3), (5000, "z", "available", 4)]


def test_emergency_checkpoint_on_notice_bounds_lost_work(tmp_path):
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    # training starts when the nodes have booted (VM_STARTUP_S); a periodic checkpoint 1000 s later
    # (10 s); the revocation at 2000 s gives notice at 1880 s (AWS 120 s). Here every lost node
    # rolls back (a checkpoint-restart runtime), so only the checkpoint bounds the loss.
    restart = SimParams(checkpoint_cost_s=10.0, restart_s=60.0, keep_state=False)
    with_notice = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "replace-same", params=restart), 1)
    without = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "checkpoint-restart"), 1)
    assert with_notice.revocations == without.revocations == 1
    # with the notice the checkpoint taken at 1880-1890 s survives: 110 s of work lost
    assert with_notice.lost_work_s == pytest.approx(110.0)
    # without it, everything since the periodic checkpoint is lost
    assert without.lost_work_s == pytest.approx(2000.0 - (VM_STARTUP_S + 1000.0 + 10.0))


def test_survivors_keep_the_model_only_an_empty_cluster_rolls_back(tmp_path):
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    # spottrain's runtime (the default): three of four nodes survive the loss at 2000 s and hold the
    # model, so nothing rolls back; the group only stalls to re-form (REGROUP_S)
    kept = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "replace-same"), 1)
    restart = SimParams(checkpoint_cost_s=10.0, restart_s=60.0, keep_state=False)
    rolled = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "replace-same", params=restart), 1)
    assert kept.revocations == rolled.revocations == 1
    assert kept.lost_work_s == 0.0 and rolled.lost_work_s == pytest.approx(110.0)
    assert kept.makespan_s < rolled.makespan_s
    # every node lost at once: no survivor holds the model, back to the notice's checkpoint
    # (a trace file of its own: traces are cached by path)
    (tmp_path / "all").mkdir()
    rows = [(0, "z", "available", 4), (2000, "z", "available", 0), (5000, "z", "available", 4)]
    emptied = run_setup(_setup(tmp_path / "all", plan, rows, "replace-same"), 1)
    assert emptied.revocations == 4 and emptied.lost_work_s == pytest.approx(110.0)


def test_a_join_re_forms_around_the_model_without_a_checkpoint(tmp_path):
    """spottrain's runtime: the loss and the replacement's join each stall the group REGROUP_S, and
    the joiner takes the model from a peer (no checkpoint); a checkpoint-restart runtime restarts
    (60 s) at the loss and checkpoints, then restarts, at the join."""
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    runs = {}
    for name, params in {"kept": SimParams(checkpoint_cost_s=10.0, restart_s=60.0),
                         "free": SimParams(checkpoint_cost_s=10.0, restart_s=60.0, regroup_s=0.0),
                         "restart": SimParams(checkpoint_cost_s=10.0, restart_s=60.0, keep_state=False)}.items():
        (tmp_path / name).mkdir()
        runs[name] = run_setup(_setup(tmp_path / name, plan, _one_loss_rows(), "replace-same", params=params), 1)
    kept, free, restart = runs["kept"], runs["free"], runs["restart"]
    assert kept.revocations == 1 and kept.replacements == 1 and kept.finished
    assert kept.checkpoints == free.checkpoints
    assert kept.stall_s - free.stall_s == pytest.approx(2 * REGROUP_S)
    # the other runtime: the join's checkpoint, and a longer stall at each change
    assert restart.checkpoints == kept.checkpoints + 1
    assert restart.stall_s - kept.stall_s == pytest.approx(2 * (60.0 - REGROUP_S) + 10.0)


def test_the_cluster_starts_without_a_node_revoked_while_booting(tmp_path):
    """One of four nodes is revoked while it boots and capacity returns only at 5000 s: the other
    three start training when they are up (the runtime is elastic) instead of idling, billed, until
    the replacement boots; the replacement joins on its own. Both engines agree."""
    from spottrain.sim.vector import run_vector

    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    rows = [(0, "z", "available", 4), (30, "z", "available", 3), (5000, "z", "available", 4)]
    setup = _setup(tmp_path, plan, rows, "replace-same")
    r = run_setup(setup, 1)
    assert r.revocations == 1 and r.replacements == 1 and r.finished
    assert r.started_s == pytest.approx(VM_STARTUP_S)
    assert r.lost_work_s == 0.0
    vec = run_vector(setup, [1])
    assert vec.makespan_s[0] == pytest.approx(r.makespan_s) and vec.cost_usd[0] == pytest.approx(r.cost_usd)


@pytest.mark.parametrize("policy,keeps", [("replace-same", True), ("deadline-margin", True),
                                           ("checkpoint-restart", False), ("skypilot-managed", False),
                                           ("deepvm-anchor", False)])
def test_literature_systems_restart_from_their_checkpoint(tmp_path, policy, keeps):
    """Policies that stand for checkpoint-restart systems (torchrun, SkyPilot's managed jobs, DeepVM)
    roll back at every loss; the others run on spottrain's runtime, whose survivors keep the model."""
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    setup = _setup(tmp_path, plan, _one_loss_rows(), policy)
    assert setup.keep_state is keeps
    if policy == "deepvm-anchor":  # one lost worker of four: back to DeepVM's last checkpoint
        assert run_setup(setup, 1).lost_work_s > 0.0


def test_replacement_joins_when_capacity_returns(tmp_path):
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0)
    same = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "replace-same"), 1)
    none = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "no-replace"), 1)
    assert same.replacements == 1 and none.replacements == 0
    assert same.makespan_s < none.makespan_s  # a fourth node from 5000 s + start-up finishes sooner


def test_async_worker_loss_loses_no_work(tmp_path):
    plan = make_plan(nodes=4, hours=2.0, interval_s=1000.0, sync="async", ps=1)
    r = run_setup(_setup(tmp_path, plan, _one_loss_rows(), "checkpoint-restart"), 3)
    assert r.revocations == 1
    # the last slot is revoked; the chief is the first node to join and survives
    assert r.lost_work_s == 0.0


def test_gcp_preemptible_nodes_die_at_24h(tmp_path):
    plan = make_plan(nodes=2, hours=30.0, cloud="gcp", zone="us-east1-c", instance_type="n1-standard-8+V100",
                     deadline_h=None)
    never = sources.LifetimeSource(lambda n, rng: np.full(n, np.inf), "synthetic: never revoked", 24 * 3600.0)
    r = run_setup(SimSetup(plan=plan, policy_name="replace-same", source=never), 0, record=True)
    times = [t for t, _ in r.timeline["revocations"]]
    assert r.revocations == 2 and r.finished
    assert times == [pytest.approx(24 * 3600.0)] * 2  # both granted at t=0


def test_same_seed_same_result_and_offsets_vary(tmp_path):
    plan = make_plan(nodes=4, hours=3.0)
    rows = [(t, "z", "available", 4 - (t // 1000) % 2) for t in range(0, 40_000, 1000)]
    path = write_trace(tmp_path / "synthetic_flapping.csv", rows, duration_s=40_000.0)
    src = sources.from_trace(path, plan, horizon_s=5 * 86400)
    setup = make_setup(plan, "replace-same", src)
    a, b = run_setup(setup, 7), run_setup(setup, 7)
    assert a == b
    makespans = {run_setup(setup, s).makespan_s for s in range(10)}
    assert len(makespans) > 1


def test_trace_for_other_instance_types_is_refused(tmp_path):
    plan = make_plan(nodes=2)
    path = write_trace(tmp_path / "synthetic_k80.csv", [(0, "z", "available", 1)], gpu="K80",
                       instance_type="p2.xlarge")
    with pytest.raises(InputError, match="no events for the plan's spot instance types"):
        sources.from_trace(path, plan, horizon_s=86400)


def test_zero_runs_is_an_error():
    with pytest.raises(InputError, match="run count"):
        simulate(make_plan(), trace="bamboo-aws-p3", runs=0)


def test_uniform_progress_meets_deadline_on_a_dead_market(tmp_path):
    # spot capacity disappears after one hour and never comes back
    plan = make_plan(nodes=4, hours=4.0, deadline_h=6.0)
    rows = [(0, "z", "available", 4), (3600, "z", "available", 0)]
    up = run_setup(_setup(tmp_path, plan, rows, "uniform-progress"), 0)
    margin = run_setup(_setup(tmp_path, plan, rows, "deadline-margin"), 0)
    same = run_setup(_setup(tmp_path, plan, rows, "replace-same"), 0)
    # uniform progress goes on-demand at the first tick without slack: at most one tick late
    # (spottrain.policies.deadline_margin's docstring); the margin absorbs that tick
    assert up.switched_on_demand and up.finished
    assert up.makespan_s <= plan.deadline_s + SimParams().tick_s
    assert margin.switched_on_demand and margin.deadline_met
    assert not same.deadline_met


def test_price_changes_are_billed_and_reach_the_policy(tmp_path):
    plan = make_plan(nodes=2, hours=2.0, deadline_h=None)
    prices = write_trace(tmp_path / "synthetic_prices.csv",
                         [(0, "us-west-2b/p3.2xlarge", "price", 1.0), (3750, "us-west-2b/p3.2xlarge", "price", 3.0)],
                         kind="price")
    params = SimParams(checkpoint_cost_s=10.0, restart_s=60.0, price_trace=prices)
    r = run_setup(_setup(tmp_path, plan, [(0, "z", "available", 2)], "replan-on-price", params=params), 0, record=True)
    # billed from t=0: 2 nodes at $1/h until 3750 s, then $3/h until the end
    expected = 2 * (1.0 * 3750 + 3.0 * (r.makespan_s - 3750)) / 3600
    assert r.cost_usd == pytest.approx(expected)
    # the only option is the same type at the new price: no re-plan is worth it
    assert r.replacements == 0


def test_the_summary_names_both_stalls():
    """The simulation's notes give the restart from a checkpoint and, when a policy runs on
    spottrain's runtime, the re-form around the nodes that hold the model."""
    plan = make_plan(nodes=4, hours=2.0)
    both = simulate(plan, model=True, policies=["replace-same"], runs=4, seed=0,
                    params=SimParams(checkpoint_cost_s=10.0, restart_s=60.0, regroup_s=25.0))
    note = next(n for n in both.notes if n.startswith("checkpoint cost"))
    assert "restart from a checkpoint 60 s" in note and "hold the model 25 s" in note
    restart_only = simulate(plan, model=True, policies=["checkpoint-restart"], runs=4, seed=0)
    assert not any("hold the model" in n for n in restart_only.notes)
