"""The planner's search is bounded by counts, not by the clock: the same request gives the same plan
however loaded the machine is."""

import itertools
from types import SimpleNamespace

from spottrain.perf.workload import Workload
from spottrain.planner import formulation, plan

# bench/plan_quality.py's ResNet-50 request with a 4 h deadline: its mix search runs dozens of MILP
# solves, the case where a wall-clock limit used to change the plan with the machine's load.
REQUEST = dict(samples=90 * 1.28e6, deadline_s=4 * 3600, confidence=0.95, clouds=["aws"], regions=["us-west-2"],
               instance_types=["p3.2xlarge", "p3.16xlarge", "p2.xlarge", "p2.16xlarge"], max_nodes=32,
               pareto=False, baselines=False)


def _chosen(r):
    return (r.best.label, r.best.groups, r.best.prediction, r.stats["milp_calls"], r.stats["exact_evaluations"],
            r.stats["proven_optimal"])


def test_same_request_twice_same_plan_even_on_a_slow_machine(monkeypatch):
    monkeypatch.setattr(formulation, "ENUMERATE_MAX_PLANS", 0)  # the lazy MILP, as larger problems get it
    w = Workload.from_zoo("resnet50", 64)
    first = plan(w, **REQUEST)
    assert first.stats["milp_calls"] > 3  # the search really iterates

    # a machine ~300x slower: every clock reading 0.5 s after the last one
    ticks = itertools.count()
    monkeypatch.setattr(formulation, "time", SimpleNamespace(perf_counter=lambda: 0.5 * next(ticks)))
    second = plan(w, **REQUEST)
    assert next(ticks) > first.stats["exact_evaluations"]  # the search read the slow clock at every step
    assert _chosen(second) == _chosen(first)


def test_the_enumerated_search_proves_a_plan_at_least_as_cheap_as_the_lazy_milps(monkeypatch):
    # the same request's mixes are few enough to enumerate: checked against the MILP's own rows and
    # evaluated best-first, they give a proven optimum, with no MILP solve; the lazy MILP stops at
    # its count limits and says so
    w = Workload.from_zoo("resnet50", 64)
    enumerated = plan(w, **REQUEST)
    assert enumerated.stats["milp_calls"] == 0 and enumerated.stats["plans_enumerated"] > 1000
    assert enumerated.stats["proven_optimal"]
    monkeypatch.setattr(formulation, "ENUMERATE_MAX_PLANS", 0)
    milp = plan(w, **REQUEST)
    assert milp.stats["milp_calls"] > 3
    assert enumerated.best.prediction.cost_usd <= milp.best.prediction.cost_usd * (1 + 1e-12)
    if milp.best.groups != enumerated.best.groups:
        assert not milp.stats["proven_optimal"]
