"""Sampled lifetimes with the group outages a market's traces show (spottrain.sim.sources).

A node's fitted hazard is split between its own revocation and its group's outage: its lifetime
still follows the fitted law, a share w of its revocations take every node of its group at once,
and after an outage the group waits once, together, for capacity.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sim_plans import make_plan

from spottrain.clouds import vm_startup_s
from spottrain.sim.sources import LifetimeSource, from_model, lifetime_sampler, replacement_wait
from spottrain.transience import group_outage, lifetime_model, replacement_delay

V100 = dict(cloud="aws", gpu="V100", instance_type="p3.2xlarge", zone="us-west-2b")


def _group(src: LifetimeSource, runs: int, nodes: int):
    """(revocation times, whether each came in the group's outage) of ``nodes`` nodes granted at 0."""
    rv, outage = np.zeros((runs, nodes)), np.zeros((runs, nodes), bool)
    for k in range(runs):
        run = src.for_run(np.random.default_rng(k))
        rv[k] = [run.revoke_time(0.0, j, group="g") for j in range(nodes)]
        # the market grants nothing right after an outage: a revocation it ended is one
        outage[k] = [run.acquire_time(t, 0, group="g") > t for t in rv[k]]
    return rv, outage


def test_a_node_keeps_its_fitted_lifetime_and_a_share_of_its_revocations_takes_the_group():
    src = from_model(make_plan(nodes=4, hours=8, **V100))
    w = group_outage("aws", "V100").share
    assert 0.5 < w < 0.9 and src.outage_share == pytest.approx(w)
    assert f"{w:.0%} of revocations take the node's whole group" in src.description
    assert "whole group" not in from_model(make_plan(nodes=1, hours=8, **V100)).description  # a lone node
    rv, outage = _group(src, 6000, 4)
    law = lifetime_model("aws", "V100").sample(200_000, np.random.default_rng(1))
    se = rv.std() / np.sqrt(rv.size / 4)  # the group's four lives are not independent
    assert abs(rv.mean() - law.mean()) < 4 * se
    assert abs(np.median(rv) - np.median(law)) < 0.05 * np.median(law)
    assert abs(outage.mean() - w) < 4 * np.sqrt(w * (1 - w) / (rv.size / 4))
    # every node up when the outage strikes goes with it, at one instant
    hit = outage.any(axis=1)
    strike = np.where(outage, rv, np.nan)[hit]
    assert np.all(np.nanmax(strike, axis=1) == np.nanmin(strike, axis=1))


def test_without_an_outage_share_nodes_fall_one_at_a_time():
    sample, desc = lifetime_sampler("gcp", "V100")
    src = LifetimeSource(sample, desc, None)
    rv, outage = _group(src, 300, 4)
    early = rv[rv < rv.max()]  # GCP's law ends at the 24 h cap, which many reach together
    assert not outage.any() and early.size > 100 and len(np.unique(early)) == early.size


def test_after_an_outage_the_group_waits_once_for_capacity():
    """Every node requested while the market is out is granted when it is back; the waits follow the
    replacement delay's waits (its start-up comes after, as for a single node)."""
    src = from_model(make_plan(nodes=4, hours=8, **V100))
    backs = []
    for k in range(3000):
        run = src.for_run(np.random.default_rng(k))
        strike = min(run.revoke_time(0.0, j, group="g") for j in range(4))
        if run.acquire_time(strike, 0, group="g") == strike:
            continue  # a node's own revocation came first
        back = run.acquire_time(strike, 0, group="g")
        assert {run.acquire_time(strike + 0.5 * (back - strike), j, group="g") for j in range(4)} == {back}
        assert run.acquire_time(back, 1, group="g") == back  # capacity is back
        assert run.acquire_time(strike, 0, group="other") == strike  # another group's market is not out
        backs.append(back - strike)
    delays = replacement_delay("aws", "V100").sample(100_000, np.random.default_rng(2))
    waits = replacement_wait(delays, vm_startup_s("aws"))[0]
    backs = np.asarray(backs)
    assert backs.size > 1000
    assert abs(backs.mean() - waits.mean()) < 4 * backs.std() / np.sqrt(backs.size) + 0.1 * waits.mean()


def test_the_planner_and_the_simulator_lose_the_same_work_to_outages():
    """4 AWS V100 spot nodes (two thirds of revocations take the whole group), survivors keeping the
    model, 8 h of training: the work the planner expects lost to outages is what the simulator's
    sampled lifetimes lose, in both engines. Drawn one node at a time, the simulator lost a tenth of it."""
    from spottrain.planner import risk
    from spottrain.planner.columns import assess_cluster, lost_share
    from spottrain.sim.markets import membership_key, throughput_function
    from spottrain.sim.montecarlo import make_setup, make_source, run_seed, simulate
    from spottrain.sim.setup import SimParams
    from spottrain.sim.vector import run_vector

    n = 4
    plan = make_plan(nodes=n, hours=8.0, deadline_h=None, **V100)
    rev = risk.revocation("aws", "V100")
    f, _ = throughput_function(plan)
    single = float(lost_share(f(membership_key([("V100", 1, n - 1)])), f(membership_key([("V100", 1, n)]))))
    p = plan.prediction
    a = assess_cluster([(n, rev)], n, plan.workload.samples_total, p.throughput_samples_per_s, p.throughput_low,
                       p.throughput_high, 20.0, state_loss=risk.state_loss([(n, rev)], n), lost=[(single, 1.0)])
    plan = dataclasses.replace(plan, checkpoint_interval_s=float(a.interval_s[0]))
    params = SimParams(checkpoint_cost_s=20.0, horizon_s=30 * 86400.0)
    res = simulate(plan, model=True, policies=["replace-same"], runs=400, seed=0, params=params)
    lost = np.array([r.lost_work_s for r in res.results["replace-same"]])
    expected = float(a.lost_work_s[0])
    assert abs(expected - lost.mean()) < 3 * lost.std() / np.sqrt(lost.size) + 0.15 * expected
    # the event engine draws the same laws
    setup = make_setup(plan, "replace-same", make_source(plan, trace=None, model=True), params)
    from spottrain.sim.job import run_setup
    ev = np.array([run_setup(setup, run_seed(5, i)).lost_work_s for i in range(300)])
    assert abs(expected - ev.mean()) < 3 * ev.std() / np.sqrt(ev.size) + 0.15 * expected
    vec = run_vector(setup, [run_seed(6, i) for i in range(300)]).lost_work_s
    assert abs(ev.mean() - vec.mean()) < 4 * np.sqrt(ev.var() / ev.size + vec.var() / vec.size)
