"""Racing refine: a few runs for every candidate, more only for those still in contention."""

from __future__ import annotations

import pytest
from test_planner_refine import _request, write_synthetic

from spottrain.planner.refine import refine


@pytest.fixture(scope="module")
def request16():
    return _request()


@pytest.fixture(scope="module")
def outages(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("race") / "synthetic_outages_2a.csv", up_h=1.0, down_h=8.0,
                           hours=90)


def test_runs_go_to_the_candidates_in_contention(request16, outages):
    result, ctx = request16
    ref = refine(result, ctx, runs=64, first_runs=8, traces=[outages], max_candidates=12, workers=1)
    runs = {c.label: c.runs for c in ref.candidates}
    assert set(runs.values()) <= {8, 16, 32, 64}
    assert ref.chosen.runs == 64 and not ref.chosen.dropped
    dropped = [c for c in ref.candidates if c.dropped]
    assert dropped and all(c.runs < 64 for c in dropped)
    assert ref.total_runs == sum(runs.values()) < 64 * len(ref.candidates)
    assert 0.0 <= ref.confidence_chosen <= 1.0
    assert ref.plan.extra["refined"]["runs_per_candidate"] == runs
    assert any(n.startswith("racing:") for n in ref.notes)
    # racing chooses what simulating every candidate to the end chooses
    full = refine(result, ctx, runs=64, first_runs=64, traces=[outages], max_candidates=12, workers=1)
    assert full.plan.label == ref.plan.label
    assert all(c.runs == 64 for c in full.candidates)
    assert full.chosen.mean_cost_usd == pytest.approx(ref.chosen.mean_cost_usd, rel=1e-9)


def test_a_refine_past_its_time_budget_returns_the_analytical_plan(request16, outages):
    result, ctx = request16
    ref = refine(result, ctx, runs=32, first_runs=8, traces=[outages], max_candidates=6, time_budget_s=1e-6)
    assert ref.timed_out and not ref.changed
    assert ref.plan is result.best  # analytical figures, not simulated ones
    assert any("time budget" in n and "analytical plan" in n for n in ref.notes)
    assert ref.to_dict()["timed_out"] is True


def test_the_engines_choose_the_same_plan(request16, outages):
    result, ctx = request16
    kw = dict(runs=16, first_runs=16, traces=[outages], max_candidates=6, workers=1)
    a = refine(result, ctx, engine="auto", **kw)
    b = refine(result, ctx, engine="event", **kw)
    assert a.plan.label == b.plan.label
    assert [c.mean_cost_usd for c in a.candidates] == pytest.approx([c.mean_cost_usd for c in b.candidates], rel=1e-6)
