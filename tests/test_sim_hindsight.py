"""Hindsight-optimal plan and per-run oracle over simulated candidates (synthetic trace)."""

import dataclasses

import numpy as np
import pytest

from sim_plans import make_plan, write_trace
from spottrain.sim.hindsight import PlanOutcome, hindsight, simulate_plans


def _outcome(label, costs, met):
    return PlanOutcome(label=label, plan=make_plan(), source="synthetic", cost_usd=np.asarray(costs, float),
                       met=np.asarray(met, bool), makespan_s=np.zeros(len(costs)))


def test_hindsight_picks_the_cheapest_plan_meeting_the_confidence():
    a = _outcome("cheap but late", [1, 1, 1, 1], [True, False, True, True])  # 75% met
    b = _outcome("safe", [5, 5, 5, 5], [True] * 4)
    c = _outcome("dear", [9, 9, 9, 9], [True] * 4)
    h = hindsight([a, b, c], confidence=0.95)
    assert h.best is b
    # per run: the cheapest candidate that met the deadline in that run
    assert h.oracle_mean_cost_usd == pytest.approx((1 + 5 + 1 + 1) / 4)
    assert h.oracle_runs == 4 and h.candidates == 3
    assert hindsight([a], confidence=0.7).best is a
    assert hindsight([a], confidence=0.95).best is None


def test_oracle_skips_runs_nobody_met():
    a = _outcome("a", [2, 3], [False, True])
    h = hindsight([a], confidence=0.5)
    assert h.oracle_runs == 1 and h.oracle_mean_cost_usd == 3


def test_simulated_candidates_share_runs_and_on_demand_needs_no_trace(tmp_path):
    # synthetic: spot capacity for 4 nodes, gone between 2 h and 5 h of every 10 h
    rows = [(0, "z", "available", 4), (7200, "z", "available", 0), (18000, "z", "available", 4)]
    trace = write_trace(tmp_path / "synthetic_outage.csv", rows, duration_s=36000.0)
    spot = make_plan(nodes=4, hours=3.0, deadline_h=6.0, policy="deadline-margin")
    od = dataclasses.replace(spot, groups=tuple(dataclasses.replace(g, spot=False, price_usd_per_hour=g.on_demand_price_usd_per_hour)
                                                for g in spot.groups))
    asked = []

    def trace_for(p):
        asked.append(p.label)
        return trace

    outs = simulate_plans([spot, od], trace_for=trace_for, runs=12, workers=1)
    assert asked == [spot.label]  # the on-demand plan is not replayed on a trace
    s, o = outs
    assert o.source.startswith("none") and o.met.all()
    # on-demand: no revocations, every run costs the same (4 nodes x $3.06/h x makespan)
    assert np.allclose(o.cost_usd, o.cost_usd[0]) and o.cost_usd[0] >= 4 * 3.06 * 3.0
    assert s.mean_cost_usd < o.mean_cost_usd
    again = simulate_plans([spot], trace_for=lambda p: trace, runs=12, workers=2)[0]
    assert np.array_equal(again.cost_usd, s.cost_usd)  # same seeds, same runs, also across processes
    h = hindsight(outs, confidence=0.95)
    assert h.best is not None and h.best.met_rate >= 0.95
    assert h.oracle_mean_cost_usd <= h.best.mean_cost_usd + 1e-9


def test_trace_pool_draws_windows_of_every_trace_by_length(tmp_path):
    from spottrain.sim.sources import TracePool, pooled_source

    # synthetic: trace a is always up, trace b (three times as long) always down
    a = write_trace(tmp_path / "synthetic_up.csv", [(0, "z", "available", 1)], duration_s=10000.0, kind="availability")
    b = write_trace(tmp_path / "synthetic_down.csv", [(0, "z", "available", 0)], duration_s=30000.0,
                    kind="availability")
    spot = make_plan(nodes=2, hours=1.0, deadline_h=None)
    pool = pooled_source(spot, [a, b])
    assert isinstance(pool, TracePool) and pool.mean_up_fraction == pytest.approx(0.25)
    up = [pool.for_run(np.random.default_rng(s)).acquire_time(0.0, 0) == 0.0 for s in range(400)]
    assert 0.18 < np.mean(up) < 0.32  # a quarter of the windows come from the up trace
    again = [pool.for_run(np.random.default_rng(s)).acquire_time(0.0, 0) == 0.0 for s in range(400)]
    assert up == again  # deterministic given the run's seed


def test_simulate_plans_with_prepared_sources_and_progress(tmp_path):
    from spottrain.sim.sources import pooled_source

    rows = [(0, "z", "available", 4), (7200, "z", "available", 0), (18000, "z", "available", 4)]
    trace = write_trace(tmp_path / "synthetic_outage.csv", rows, duration_s=36000.0)
    spot = make_plan(nodes=4, hours=3.0, deadline_h=6.0, policy="deadline-margin")
    seen = []
    by_pool = simulate_plans([spot], source_for=lambda p: (pooled_source(p, [trace]), "pool"), runs=10, workers=1,
                             progress=lambda d, n: seen.append((d, n)))[0]
    by_name = simulate_plans([spot], trace_for=lambda p: trace, runs=10, workers=1)[0]
    assert by_pool.source == "pool" and seen == [(1, 1)]
    assert by_pool.revocations is not None and by_pool.revocations.shape == (10,)
    # a pool of one trace replays that trace: same runs as naming it
    assert np.array_equal(by_pool.cost_usd, by_name.cost_usd)
    with pytest.raises(ValueError):
        simulate_plans([spot], runs=1)
