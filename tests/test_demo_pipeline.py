"""`spottrain demo` end to end on quick settings: every stage runs the real library."""

from __future__ import annotations

import json
import re

import pytest

from demo_once import quick_demo_result
from spottrain.report.demo_report import SECTION_TITLES, build_demo_report


@pytest.fixture(scope="module")
def demo_result():
    return quick_demo_result()


def test_every_stage_reports_a_status(demo_result):
    stages = demo_result["stages"]
    assert list(stages) == ["profile", "predict", "transience", "plan", "simulate", "run"]
    for key, st in stages.items():
        assert st["status"] in ("ok", "not available", "failed"), st
        if st["status"] != "ok":
            assert st["reason"], f"{key} is {st['status']} without a reason"
        # A failure of a part that exists is a bug in the pipeline, not something to hide.
        assert st["status"] != "failed", f"{key} failed: {st['reason']}\n{st['data'].get('traceback', '')}"
    json.dumps(demo_result)  # plain data all the way down


def test_profile_and_transience_use_real_measurements(demo_result):
    prof = demo_result["stages"]["profile"]
    assert prof["status"] == "ok"
    s = prof["data"]["summary"]
    assert s["model"] == "resnet32" and s["param_count"] == 464154
    assert s["samples_per_s"] > 0 and s["step_time_s"] > 0
    tr = demo_result["stages"]["transience"]
    assert tr["status"] == "ok"
    for curve in tr["data"]["curves"]:
        surv = curve["survival"]
        assert surv[0] == pytest.approx(1.0, abs=1e-6)
        assert all(a >= b - 1e-9 for a, b in zip(surv, surv[1:])), "survival must not increase"


def test_report_has_every_section(demo_result, tmp_path):
    path = build_demo_report(demo_result).save(tmp_path / "demo.html")
    text = path.read_text()
    for title in SECTION_TITLES.values():
        assert f"<h2>{title}</h2>" in text
    # A section is marked unavailable exactly when its stage did not run.
    for key in ("profile", "predict", "transience", "plan", "simulate", "run"):
        st = demo_result["stages"][key]
        title = SECTION_TITLES[key]
        m = re.search(rf'<section class="section" id="[^"]+" data-status="([^"]+)"><h2>{re.escape(title)}</h2>', text)
        assert m, title
        assert (m.group(1) == "ok") == (st["status"] == "ok"), (key, st["status"], st["reason"])


def test_local_run_replays_the_simulated_schedule(demo_result):
    run = demo_result["stages"]["run"]
    assert run["status"] == "ok", run["reason"]
    data = run["data"]
    compare = {row["quantity"]: row for row in data["compare"]}
    assert compare["completed steps"]["actual"] == data["steps"]
    skipped = compare["injections skipped (no live worker in the slot)"]["actual"]
    assert compare["revocations"]["actual"] == len(data["schedule"]) - skipped
    # The schedule comes from a real simulated run of the plan.
    replayed = demo_result["stages"]["simulate"]["data"]["replayed"]
    assert len(data["schedule"]) <= replayed["revocations"]
    assert {e["sim_node"] for e in data["schedule"]} <= {str(n) for _, n in replayed["timeline"]["revocations"]}
    tl = data["timeline"]
    assert tl["membership"][0][1] == data["workers"]
    assert min(w for _, w in tl["membership"]) < data["workers"] or not data["schedule"]


def test_plan_meets_the_deadline_beside_its_baselines(demo_result):
    plan = demo_result["stages"]["plan"]["data"]
    assert plan["chosen"]["p_meet_deadline"] >= plan["confidence"]
    assert plan["baselines"], "the planner's baselines are shown"
    sim = demo_result["stages"]["simulate"]["data"]
    assert set(sim["per_policy"]) >= {"replace-same", "on-demand"}
    for dist in sim["per_policy"].values():
        assert dist["cost_usd"] and all(c >= 0 for c in dist["cost_usd"])
