"""The array engine (spottrain.sim.vector) against the event engine (the reference).

Trace replays share their draws (each run's trace and offset come from its seed in both
engines), so runs are compared one by one. Sampled lifetimes and delays are drawn differently
by the two engines, so those are compared as distributions: a two-sample Kolmogorov-Smirnov
test and the difference of means within 4 standard errors.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.stats import ks_2samp
from sim_plans import make_plan

from spottrain.errors import InputError
from spottrain.plan_file import PlanGroup
from spottrain.sim.job import run_setup
from spottrain.sim.montecarlo import make_setup, make_source, run_seed, simulate
from spottrain.sim.sources import pooled_source
from spottrain.sim.vector import run_vector, unsupported

SKY = "skypilot-availability-1-node-aws-02-15-2023-us-east-1f_v100_1"
SKY16 = "skypilot-availability-16-node-aws-08-27-2023-us-west-2a_v100_1"
PRE4 = "skypilot-preemption-4-node-aws-08-03-2023-us-west-2c_v100_1"


def _both(setup, runs: int, seed: int = 0):
    seeds = [run_seed(seed, i) for i in range(runs)]
    ev = [run_setup(setup, s) for s in seeds]
    return ev, run_vector(setup, seeds)


def _same_runs(ev, vec, *, share: float = 0.98) -> None:
    cost = np.array([r.cost_usd for r in ev])
    span = np.array([r.makespan_s for r in ev])
    same = (np.abs(cost - vec.cost_usd) <= 1e-6 * np.maximum(cost, 1.0)) & (
        np.abs(span - vec.makespan_s) <= 1e-6 * span)
    # runs may differ only where two events fall on the same instant (order of ties)
    assert same.mean() >= share, f"{(~same).sum()} of {len(ev)} runs differ"
    assert np.array_equal(np.array([r.finished for r in ev]), vec.finished)
    assert np.abs(np.array([r.revocations for r in ev]) - vec.revocations).sum() <= (1 - share) * len(ev) * 50
    assert vec.cost_usd.mean() == pytest.approx(cost.mean(), rel=5e-3)
    assert vec.makespan_s.mean() == pytest.approx(span.mean(), rel=5e-3)


@pytest.mark.parametrize("trace, policy, nodes", [
    (SKY, "replace-same", 16), (SKY, "deadline-margin", 16), (SKY, "checkpoint-restart", 8),
    ("bamboo-aws-p3", "replace-same", 16), ("bamboo-aws-p3", "deadline-margin", 16), ("bamboo-aws-p3", "no-replace", 8),
    (SKY16, "uniform-progress", 16), (PRE4, "deadline-margin", 4),
])
def test_trace_replay_matches_the_event_engine_run_for_run(trace, policy, nodes):
    plan = make_plan(nodes=nodes, hours=12, deadline_h=16, policy=policy, zone="us-west-2a")
    setup = make_setup(plan, policy, make_source(plan, trace=trace, model=False))
    assert unsupported(setup) is None
    ev, vec = _both(setup, 60)
    _same_runs(ev, vec)
    if policy == "deadline-margin":  # the deadline logic really acted in some runs
        assert vec.switched_on_demand.any() or vec.deadline_met.all()


def test_a_pool_of_traces_picks_the_same_trace_per_run():
    plan = make_plan(nodes=8, hours=12, deadline_h=18, policy="deadline-margin", zone="us-west-2a")
    names = [SKY, SKY16, PRE4]
    setup = make_setup(plan, "deadline-margin", pooled_source(plan, names))
    ev, vec = _both(setup, 60, seed=3)
    _same_runs(ev, vec)


def test_on_demand_plan_is_deterministic_and_equal():
    plan = make_plan(nodes=4, hours=6, spot=False, deadline_h=8)
    from spottrain.sim.sources import NoRevocations

    setup = make_setup(plan, "replace-same", NoRevocations())
    ev, vec = _both(setup, 5)
    _same_runs(ev, vec, share=1.0)
    assert (vec.revocations == 0).all() and vec.deadline_met.all()


@pytest.mark.parametrize("policy, gpu, itype, nodes", [
    ("replace-same", "V100", "p3.2xlarge", 4), ("deadline-margin", "V100", "p3.2xlarge", 4),
    # AWS T4's fitted law revokes many nodes while they boot: their batches start without them
    ("replace-same", "T4", "g4dn.xlarge", 16)])
def test_sampled_lifetimes_give_the_same_distributions(policy, gpu, itype, nodes):
    plan = make_plan(nodes=nodes, hours=10, deadline_h=14, policy=policy, zone="us-west-2a", gpu=gpu,
                     instance_type=itype)
    setup = make_setup(plan, policy, make_source(plan, trace=None, model=True))
    ev, vec = _both(setup, 400, seed=11)
    for name, a, b in (("cost", np.array([r.cost_usd for r in ev]), vec.cost_usd),
                       ("makespan", np.array([r.makespan_s for r in ev]), vec.makespan_s),
                       ("revocations", np.array([r.revocations for r in ev], float), vec.revocations.astype(float))):
        assert ks_2samp(a, b).pvalue > 1e-3, name
        se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        assert abs(a.mean() - b.mean()) <= 4 * se + 1e-9, name


def test_what_the_array_engine_leaves_to_the_event_engine():
    plan = make_plan(nodes=4, hours=6)
    src = make_source(plan, trace=SKY, model=False)
    assert "per event" in unsupported(make_setup(plan, "deadline-return", src))
    assert "parameter-server" in unsupported(make_setup(make_plan(nodes=4, hours=6, sync="async", ps=1), "replace-same",
                                                         make_source(plan, trace=SKY, model=False)))
    g = plan.groups[0]
    mix = dataclasses.replace(plan, groups=(g, PlanGroup(**{**dataclasses.asdict(g), "count": 1, "spot": False})))
    assert "mix" in unsupported(make_setup(mix, "replace-same", src))
    with pytest.raises(ValueError, match="does not cover"):
        run_vector(make_setup(plan, "deadline-return", src), [1, 2])


def test_simulate_says_which_engine_ran_each_policy():
    plan = make_plan(nodes=4, hours=6, deadline_h=9, policy="deadline-margin")
    res = simulate(plan, trace=SKY, policies=["deadline-margin", "deadline-return"], runs=20, workers=1)
    note = next(n for n in res.notes if n.startswith("engines:"))
    assert "array engine for deadline-margin" in note and "event engine for deadline-return" in note
    ref = simulate(plan, trace=SKY, policies=["deadline-margin"], runs=20, workers=1, engine="event")
    assert res.summaries[0].cost_usd.mean == pytest.approx(ref.summaries[0].cost_usd.mean, rel=1e-6)
    with pytest.raises(InputError, match="does not cover"):
        simulate(plan, trace=SKY, policies=["deadline-return"], runs=5, engine="vector")


@pytest.mark.parametrize("policy", ["deadline-margin", "replace-same", "checkpoint-restart"])
def test_whole_checkpoint_cycles_applied_at_once_give_the_steps_state(policy, monkeypatch):
    # the engine applies uneventful checkpoint cycles in one go; stepping through each of them
    # must give bit for bit the same runs (same clock, progress and cost arithmetic)
    import spottrain.sim.vector as vector

    plan = make_plan(nodes=8, hours=12, deadline_h=16, policy=policy, zone="us-west-2a")
    setup = make_setup(plan, policy, make_source(plan, trace=SKY, model=False))
    seeds = [run_seed(5, i) for i in range(80)]
    fast = run_vector(setup, seeds)
    monkeypatch.setattr(vector._Batch, "_whole_cycles", lambda *a, **k: None)
    slow = run_vector(setup, seeds)
    for f in ("makespan_s", "cost_usd", "finished", "revocations", "checkpoints", "stall_s", "lost_work_s",
              "replacements", "switched_on_demand", "started_s"):
        assert np.array_equal(getattr(fast, f), getattr(slow, f)), f
    assert fast.checkpoints.sum() > 5 * len(seeds)  # cycles were there to skip
