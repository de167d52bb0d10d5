"""The demo's figures agree where they must (one recovery policy throughout) and, where the
analytical model and the simulation legitimately differ, both are shown with their source."""

from demo_once import quick_demo_result
from spottrain.report.demo_report import build_demo_report


def test_one_policy_from_plan_to_local_run():
    result = quick_demo_result()
    stages = result["stages"]
    policy = stages["plan"]["data"]["plan"]["policy"]
    assert stages["simulate"]["data"]["replayed"]["policy"] == policy
    assert stages["simulate"]["data"]["revocations"]["policy"] == policy
    if stages["run"]["status"] == "ok":
        assert f"'{policy}' policy" in stages["run"]["data"]["note"]


def test_revocations_side_by_side_with_their_source(tmp_path):
    result = quick_demo_result()
    sim = result["stages"]["simulate"]["data"]
    revs = sim["revocations"]
    plan = result["stages"]["plan"]["data"]
    assert revs["analytical"] == plan["plan"]["prediction"]["expected_revocations"]
    table = {row["policy"]: row for row in sim["table"]}
    assert revs["simulated_plan_policy"] == table[revs["policy"]]["revocations (mean)"]
    assert revs["simulated_low"] <= revs["simulated_plan_policy"] <= revs["simulated_high"]
    assert "analytical model" in sim["headline"] and "simulated" in sim["headline"]
    page = build_demo_report(result).to_html()
    assert "Revocations: analytical model and simulation side by side" in page
    assert plan["headline"]["evidence"]["headline"].split(" -- ")[0] in page
    import re

    text = re.sub(r'src="data:image/png;base64,[^"]*"', "", page)
    assert not re.search(r"\d\.?\d*e[-+]\d", text), "no scientific notation (1.2e-27) in the report"


def test_analytical_revocations_agree_with_the_simulation_of_the_same_laws():
    """The planner counts revocations over the run from the fitted lifetime laws (renewal function), as
    the simulator draws them: for the demo's short run of young nodes, 1 / mean lifetime counted 0.19
    where the simulation sees ~1."""
    revs = quick_demo_result()["stages"]["simulate"]["data"]["revocations"]
    assert revs["simulated_plan_policy"] > 0.2
    assert 2 / 3 <= revs["analytical"] / revs["simulated_plan_policy"] <= 3 / 2


def test_terminal_table_states_the_deadline(monkeypatch):
    from rich.console import Console

    from spottrain.cli import demo_cmd

    result = quick_demo_result()
    console = Console(record=True, width=200)
    # the summary prints through a Console it creates
    monkeypatch.setattr(demo_cmd, "Console", lambda *a, **k: console)
    demo_cmd._print_summary(result)
    text = console.export_text()
    assert "deadline 30m at 95.0 %" in text
    assert "P(deadline 30m)" in text and "analytical model" in text
