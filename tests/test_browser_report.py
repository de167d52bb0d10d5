"""Open reports in headless Chromium: every section and plot renders, no console errors."""

from __future__ import annotations

import pytest

from browser import check_rendered, headline_cells, open_browser, require_chromium, screenshot
from demo_once import quick_demo_result
from report_synthetic import SYNTHETIC_SECTIONS, build_synthetic_report
from spottrain.report.demo_report import SECTION_TITLES, build_demo_report


@pytest.fixture
def driver(tmp_path):
    require_chromium()
    d = open_browser(tmp_path / "chromium-profile")
    try:
        yield d
    finally:
        d.quit()


def test_synthetic_report_renders_in_chromium(driver, tmp_path):
    path = build_synthetic_report().save(tmp_path / "synthetic-report.html")
    facts = check_rendered(driver, path, SYNTHETIC_SECTIONS, min_images=5)
    assert len(facts["images"]) == 5
    shot = screenshot(driver, "report-synthetic.png", tmp_path)
    assert shot.exists()


def test_console_errors_are_detected(driver, tmp_path):
    """The check is not vacuous: a page with a broken image logs a SEVERE entry and fails it."""
    bad = tmp_path / "broken.html"
    bad.write_text('<html><body><section class="section"><h2>X</h2>'
                   '<img src="data:image/png;base64,AAAA" alt="broken"></section></body></html>')
    with pytest.raises(AssertionError):
        check_rendered(driver, bad, ["X"], min_images=1)


def test_demo_report_renders_in_chromium(driver, tmp_path):
    """The real (quick) demo's report: every section present, every plot decoded and sized."""
    result = quick_demo_result()
    path = build_demo_report(result).save(tmp_path / "demo-report.html")
    ok = [k for k in ("predict", "transience", "run") if result["stages"][k]["status"] == "ok"]
    check_rendered(driver, path, list(SECTION_TITLES.values()), min_images=len(ok))
    screenshot(driver, "report-demo.png", tmp_path)


def test_plan_report_headline_matches_the_plan_json(driver):
    """The plan report's headline, as Chromium shows it, carries the plan JSON's figures: the chosen
    plan's simulated figures equal the chosen plan's, the analytical ones the planner's assessment of
    the same cluster, each shown with the one formatting rule."""
    from plan_report_case import expected_cells, refined_plan_with_report

    data, report = refined_plan_with_report()
    shown = headline_cells(driver, report)
    hl = data["headline"]
    assert shown["source"] == hl["source"] == "simulation"
    assert shown["label"] == data["label"] == hl["label"]
    assert shown["evidence_kind"] == hl["evidence"]["kind"]
    assert shown["evidence_text"] == hl["evidence"]["headline"]
    # the simulated column is the saved plan's prediction (the plan JSON's chosen figures)
    assert hl["simulated"]["cost_usd"] == pytest.approx(data["chosen"]["cost_usd"])
    assert hl["simulated"]["deadline_met_rate"] == pytest.approx(data["chosen"]["p_meet_deadline"])
    want = expected_cells(data)
    assert set(shown["cells"]) == set(want)
    for key, (value, text) in want.items():
        raw, seen = shown["cells"][key]
        assert float(raw) == pytest.approx(value), key
        assert seen == text, key
