"""The evidence behind a plan, implausible spot prices, and a headline whose figures say their source."""

import dataclasses
import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from spottrain.catalog import load_catalog
from spottrain.catalog.offers import Offer, offer_key, price_outliers, without_outlier_spot_prices
from spottrain.perf.workload import Workload
from spottrain.planner import plan
from spottrain.planner.evidence import group_evidence, has_own_traces, headline, headline_lines, plan_evidence


def _offer(zone, spot, od=20.0, region="r1", itype="x8"):
    return Offer(cloud="aws", instance_type=itype, gpu="A100", gpu_count=8, vcpus=96, memory_gib=1152, region=region,
                 zone=zone, price_usd_per_hour=od, spot_price_usd_per_hour=spot, network_gbps=400,
                 network_estimated=False, source="synthetic test offers")


# --------------------------------------------------------------------------- outliers


def test_a_zone_far_below_its_region_and_on_demand_is_flagged():
    offers = [_offer("a", 2.4), _offer("b", 7.9), _offer("c", 8.1), _offer("d", 8.2)]
    out = price_outliers(offers)
    assert set(out) == {offer_key(offers[0])}
    f = out[offer_key(offers[0])]
    assert f.low and f.z < -3.5 and f.peers == 3
    assert f.peer_low_usd_per_hour == 7.9 and f.peer_high_usd_per_hour == 8.2


def test_ordinary_spread_and_too_few_peers_are_not_flagged():
    # 30 % apart is ordinary between zones
    assert price_outliers([_offer("a", 5.6), _offer("b", 7.9), _offer("c", 8.1), _offer("d", 8.2)]) == {}
    # one peer: nothing to compare with robustly
    assert price_outliers([_offer("a", 1.0), _offer("b", 8.0)]) == {}
    # a low price whose discount is ordinary for the type (its on-demand is low too) is not flagged
    offers = [_offer("a", 2.4, od=3.0), _offer("b", 7.9), _offer("c", 8.1), _offer("d", 8.2),
              _offer("e", 2.5, od=7.0, region="r2"), _offer("f", 2.6, od=7.0, region="r2")]
    assert offer_key(offers[0]) not in price_outliers(offers)


def test_shipped_p4d_zone_is_flagged_and_removed_from_spot_only():
    cat = load_catalog()
    flagged = cat.spot_outliers
    p4d = [o for o in cat.offers if o.instance_type == "p4d.24xlarge" and o.region == "us-east-1"]
    bad = [o for o in p4d if offer_key(o) in flagged]
    assert [o.zone for o in bad] == ["use1-az1"] and bad[0].spot_price_usd_per_hour < 3
    cleaned = without_outlier_spot_prices(p4d, flagged)
    fixed = next(o for o in cleaned if o.zone == "use1-az1")
    assert fixed.spot_price_usd_per_hour is None and fixed.price_usd_per_hour == bad[0].price_usd_per_hour


def test_plans_leave_outliers_out_unless_included():
    w = Workload.from_zoo("resnet50", 64)
    kw = dict(samples=90 * 1.28e6, deadline_s=24 * 3600, regions=["us-east-1"], instance_types=["p4d.24xlarge"],
              spot_only=True, baselines=False, pareto=False)
    default = plan(w, **kw)
    assert all(g.zone != "use1-az1" for g in default.best.groups)
    assert default.best.extra["price_outliers_left_out"] > 0
    included = plan(w, include_outliers=True, **kw)
    assert [g.zone for g in included.best.groups] == ["use1-az1"]
    assert included.best.prediction.cost_usd < default.best.prediction.cost_usd


def test_catalog_shows_the_flag():
    import os

    r = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "catalog", "--cloud", "aws", "--gpu", "A100",
                        "--spot", "--region", "us-east-1"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "use1-az1" in x and x.strip().startswith("aws"))
    assert "!" in line
    assert "implausible spot price" in r.stdout and "--include-outliers" in r.stdout
    r = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "catalog", "--cloud", "aws", "--gpu", "A100",
                        "--spot", "--region", "us-east-1", "--json"], capture_output=True, text=True)
    rows = json.loads(r.stdout)
    assert [x["zone"] for x in rows if x["spot_price_outlier"]] == ["use1-az1"]


# --------------------------------------------------------------------------- evidence


def test_group_evidence_kinds():
    assert has_own_traces("gcp", "V100") and not has_own_traces("azure", "A100")
    traced = group_evidence("gcp", "V100", "n1-highmem-8", True)
    assert traced.kind == "traced" and traced.plausible == ()
    elsewhere = group_evidence("azure", "A100", "Standard_ND96asr_v4", True)
    assert elsewhere.kind == "elsewhere" and any(x.label.startswith("gcp/A100") for x in elsewhere.plausible)
    pooled = group_evidence("azure", "A100-80GB", "Standard_ND96amsr_A100_v4", True)
    assert pooled.kind == "pooled" and len(pooled.plausible) >= 2
    assert group_evidence("aws", "V100", "p3.2xlarge", False).kind == "on-demand"


def test_pooled_plan_carries_a_range_that_holds_the_model_value():
    w = Workload.from_zoo("resnet50", 64)
    r = plan(w, samples=90 * 1.28e6, deadline_s=8 * 3600, clouds=["azure"], spot_only=True, baselines=False,
             pareto=False)
    ev = plan_evidence(r.best, job=r.context.job)
    assert ev.kind in ("pooled", "elsewhere")
    assert ev.p_deadline_model == pytest.approx(r.best.prediction.p_meet_deadline, rel=1e-6)
    assert ev.p_deadline_low <= ev.p_deadline_model <= ev.p_deadline_high
    assert ev.p_deadline_low < ev.p_deadline_high, "the plausible laws differ, so must P(deadline)"
    assert "plausible lifetime law" in ev.headline() and ev.worst_law


def test_evidence_traced_plans_only_on_traced_types():
    w = Workload.from_zoo("resnet50", 64)
    r = plan(w, samples=90 * 1.28e6, deadline_s=8 * 3600, spot_only=True, evidence="traced", baselines=False,
             pareto=False)
    assert r.best.groups and all(has_own_traces(g.cloud, g.gpu) for g in r.best.groups)
    assert plan_evidence(r.best).kind == "traced"
    assert plan_evidence(r.best).p_deadline_low is None


def test_evidence_flag_is_checked():
    r = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "plan", "--no-refine", "--model", "resnet50",
                        "--samples", "1M", "--deadline", "8h", "--evidence", "some"], capture_output=True, text=True)
    assert r.returncode == 2 and "--evidence: expected 'any' or 'traced'" in r.stderr


# --------------------------------------------------------------------------- headline


def test_analytical_headline_reads_the_plan_and_names_its_source():
    w = Workload.from_zoo("resnet50", 64)
    r = plan(w, samples=90 * 1.28e6, deadline_s=8 * 3600, baselines=False, pareto=False)
    hl = headline(r)
    p = r.best.prediction
    assert hl["source"] == "analytical model" and hl["simulated"] is None
    assert hl["analytical"]["cost_usd"] == p.cost_usd and hl["analytical"]["p_meet_deadline"] == p.p_meet_deadline
    assert hl["analytical"]["expected_revocations"] == p.expected_revocations
    text = "\n".join(headline_lines(hl))
    assert "chosen on the analytical model (not refined by simulation)" in text and "evidence:" in text
    assert r.explanation.startswith("Analytical model:")


def _pred(t, c):
    return SimpleNamespace(duration_s=t, cost_usd=c)


def test_a_much_faster_runner_up_for_a_little_more_is_pointed_out():
    from spottrain.planner.evidence import _faster

    best = SimpleNamespace(prediction=_pred(7.4 * 3600, 22.0))
    half = SimpleNamespace(label="2x fast", prediction=_pred(3.7 * 3600, 22.4))
    dear = SimpleNamespace(label="4x dear", prediction=_pred(1.9 * 3600, 40.0))
    f = _faster(SimpleNamespace(best=best, runners_up=[dear, half]), None)
    assert f["label"] == "2x fast" and f["time_share"] == pytest.approx(0.5)
    assert f["extra_cost_share"] == pytest.approx(0.4 / 22.0)
    # nothing worth pointing out: slower, or much dearer
    assert _faster(SimpleNamespace(best=best, runners_up=[dear]), None) is None
