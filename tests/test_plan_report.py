"""The plan's headline in the terminal, the JSON and the HTML report comes from one computation,
each figure labelled with its source (analytical model or simulation, how many runs)."""

import html
import re

import pytest

from plan_report_case import expected_cells, refined_plan_with_report


def _cells(page: str) -> dict[str, tuple[str, str]]:
    return {k: (v, html.unescape(t)) for k, v, t in
            re.findall(r'<td data-key="([^"]+)" data-value="([^"]*)">([^<]*)</td>', page)}


def test_headline_figures_have_one_source_each():
    data, _ = refined_plan_with_report()
    hl = data["headline"]
    assert hl["source"] == "simulation" and hl["label"] == data["label"]
    chosen = next(c for c in data["refinement"]["candidates"] if c["label"] == data["label"])
    # analytical column: the planner's assessment of the chosen cluster, not of another one
    assert hl["analytical"]["cost_usd"] == pytest.approx(chosen["predicted_cost_usd"])
    assert hl["analytical"]["p_meet_deadline"] == pytest.approx(chosen["predicted_p_deadline"])
    # simulation column: the same candidate's simulated figures, which the saved plan carries
    assert hl["simulated"]["cost_usd"] == pytest.approx(chosen["mean_cost_usd"]) == pytest.approx(
        data["plan"]["prediction"]["cost_usd"])
    assert hl["simulated"]["mean_revocations"] == pytest.approx(chosen["mean_revocations"])
    assert hl["simulated"]["runs"] == chosen.get("runs", data["refinement"]["runs"]) <= 10
    # the plan carries the policy the simulation ran
    assert hl["simulated"]["policy"] == hl["policy"] == data["plan"]["policy"]
    assert hl["evidence"]["kind"] in ("traced", "elsewhere", "pooled", "on-demand")
    if hl["evidence"]["kind"] in ("elsewhere", "pooled"):
        assert hl["evidence"]["p_deadline_low"] <= hl["evidence"]["p_deadline_model"] <= hl["evidence"]["p_deadline_high"]


def test_report_headline_matches_the_plan_json_without_a_browser():
    data, report = refined_plan_with_report()
    page = report.read_text()
    cells = _cells(page)
    want = expected_cells(data)
    assert set(cells) == set(want)
    for key, (value, text) in want.items():
        assert float(cells[key][0]) == pytest.approx(value), key
        assert cells[key][1] == text, key
    assert "e-" not in " ".join(t for _, t in cells.values())
    assert 'data-source="simulation"' in page
    assert html.escape(data["headline"]["evidence"]["headline"]) in page


def test_report_and_explanation_say_what_the_bottleneck_means():
    from spottrain.perf.throughput import BOTTLENECKS

    data, report = refined_plan_with_report()
    name = data["plan"]["prediction"]["bottleneck"]
    assert name in BOTTLENECKS
    page = html.unescape(report.read_text())
    assert f"{name}: {BOTTLENECKS[name]}" in page
    assert f"Bottleneck: {name}: {BOTTLENECKS[name]}" in data["explanation"]
