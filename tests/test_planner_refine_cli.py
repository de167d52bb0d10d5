"""`spottrain plan --refine`: the plan it prints and saves is the one the simulation chose."""

from __future__ import annotations

import json

from spottrain.plan_file import Plan

# p3 instances in us-west-2 have real SkyPilot availability traces, so the candidates are replayed
# on real traces; --exclude-traces leaves out one zone's traces.
REQUEST = ("--model", "resnet50", "--batch-size", "64", "--samples", "20M", "--deadline", "8h", "--clouds", "aws",
           "--regions", "us-west-2", "--gpus", "V100", "--max-nodes", "8", "--no-baselines")


def run_here(capsys, *args) -> tuple[int, str, str]:
    from spottrain.cli.main import main

    code = 0
    try:
        main(["plan", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_refined_plan_is_printed_saved_and_met_the_deadline_in_simulation(capsys, tmp_path) -> None:
    out = tmp_path / "plan.json"
    code, stdout, err = run_here(capsys, *REQUEST, "--refine", "--refine-runs", "20", "--exclude-traces", "us-west-2c",
                                 "--json", "--out", str(out))
    assert code == 0, err
    d = json.loads(stdout)
    ref = d["refinement"]
    assert d["plan"] == ref["plan"]
    assert Plan.load(out).to_dict() == ref["plan"]
    chosen = next(c for c in ref["candidates"] if c["label"] == ref["label"])
    assert chosen["eligible"] and chosen["met_rate"] >= 0.95
    # the chosen plan is the cheapest candidate that met the request in simulation among those the
    # race kept to the end (the others were dropped as costlier, on fewer runs)
    eligible = [c["mean_cost_usd"] for c in ref["candidates"] if c["eligible"] and not c["dropped"]]
    assert chosen["mean_cost_usd"] == min(eligible) and chosen["runs"] == 20
    assert all(c["runs"] <= 20 for c in ref["candidates"]) and ref["total_runs"] == sum(
        c["runs"] for c in ref["candidates"])
    # its prediction is the simulated one, not the analytical one
    assert d["plan"]["prediction"]["p_meet_deadline"] == chosen["met_rate"]
    assert ref["excluded"] == ["us-west-2c"]
    assert not any("us-west-2c" in t for names in ref["traces"].values() for t in names)
    assert any(ref["traces"].values()), "p3 candidates must be replayed on real traces"


def test_deadline_requests_are_refined_by_default(capsys) -> None:
    code, stdout, err = run_here(capsys, *REQUEST, "--refine-runs", "10")
    assert code == 0, err
    assert "Simulated candidates" in stdout and "(chosen)" in stdout
    code, stdout, err = run_here(capsys, *REQUEST, "--refine-runs", "10", "--no-refine", "--json")
    assert code == 0, err
    assert "refinement" not in json.loads(stdout)


def test_refine_bad_input_is_one_line(capsys) -> None:
    code, _, err = run_here(capsys, *REQUEST, "--refine", "--refine-runs", "0")
    assert code == 2 and "--refine-runs" in err and "Traceback" not in err
    code, _, err = run_here(capsys, *REQUEST, "--no-refine", "--exclude-traces", "us-west-2a")
    assert code == 2 and "--exclude-traces only applies when refining" in err
    code, _, err = run_here(capsys, *REQUEST, "--refine", "--refine-budget", "0")
    assert code == 2 and "--refine-budget" in err and "Traceback" not in err


def test_a_refine_past_its_budget_prints_the_analytical_plan_and_says_so(capsys) -> None:
    code, stdout, err = run_here(capsys, *REQUEST, "--refine-budget", "0.000001", "--json")
    assert code == 0, err
    d = json.loads(stdout)
    assert d["refinement"]["timed_out"] and d["refinement"]["label"] == d["refinement"]["analytical_label"]
    assert any("time budget" in n for n in d["refinement"]["notes"])
    assert "refined" not in d["plan"]["extra"]  # the analytical plan, not simulated figures
    code, stdout, err = run_here(capsys, *REQUEST, "--refine-budget", "0.000001")
    assert code == 0, err
    assert "ran out of its time budget" in stdout
