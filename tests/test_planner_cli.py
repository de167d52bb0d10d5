"""`spottrain plan` end to end on the shipped catalog, and its one-line errors."""

import json
import subprocess
import sys

import pytest

from spottrain.plan_file import Plan


def run(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "plan", "--no-refine", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    out, report = d / "plan.json", d / "plan.html"
    r = run("--model", "resnet50", "--batch-size", "64", "--epochs", "90", "--dataset-size", "1.28M",
            "--deadline", "8h", "--out", str(out), "--report", str(report), "--json")
    return r, out, report


def test_plan_json_saved_plan_and_report(planned):
    r, out, report = planned
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    plan = Plan.load(out)
    assert plan.deadline_s == 8 * 3600 and plan.workload.samples_total == pytest.approx(90 * 1.28e6)
    assert plan.prediction.p_meet_deadline >= 0.95
    assert data["chosen"]["cost_usd"] == pytest.approx(plan.prediction.cost_usd)
    names = {b["name"] for b in data["baselines"]}
    assert {"cheapest-on-demand", "skypilot", "deepvm", "spotdnn", "cm-dare"} <= names
    od = next(b for b in data["baselines"] if b["name"] == "cheapest-on-demand")
    assert od["cost_usd"] > plan.prediction.cost_usd, "spot planning must beat the cheapest on-demand cluster"
    # the Pareto front is non-dominated
    pts = sorted(data["pareto"], key=lambda p: p["duration_s"])
    assert all(a["cost_usd"] > b["cost_usd"] for a, b in zip(pts, pts[1:]))
    html = report.read_text()
    assert "data:image/png;base64," in html and "Chosen plan" in html


def test_refuses_to_overwrite_plan(planned):
    _, out, _ = planned
    r = run("--model", "resnet50", "--samples", "1M", "--deadline", "8h", "--out", str(out), "--no-baselines")
    assert r.returncode == 2 and "exists" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args,msg", [
    (["--model", "resnet50", "--samples", "1M", "--deadline", "0h"], "positive"),
    (["--model", "resnet50", "--samples", "1M", "--budget", "-3"], "expected a number"),
    (["--model", "resnt50", "--samples", "1M", "--deadline", "8h"], "did you mean"),
    (["--model", "resnet50", "--samples", "1M", "--deadline", "8h", "--spot-only", "--on-demand-anchor"], "contradicts"),
    (["--model", "resnet50", "--samples", "1M"], "--deadline"),
    (["--model", "resnet50", "--samples", "5G", "--deadline", "1h", "--no-baselines"], "shorter than the fastest plan"),
])
def test_one_line_errors(args, msg):
    r = run(*args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert msg in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_too_short_deadline_suggests_on_demand_only_when_it_is_not_allowed():
    base = ["--model", "resnet50", "--samples", "115M", "--deadline", "3h", "--max-nodes", "1", "--gpus", "V100",
            "--regions", "us-west-2", "--clouds", "aws", "--no-refine", "--no-baselines"]
    allowed, spot_only = run(*base), run(*base, "--spot-only")
    for r in (allowed, spot_only):
        assert r.returncode == 2 and "shorter than the fastest plan" in r.stderr and "Traceback" not in r.stderr
    assert "allow on-demand" not in allowed.stderr and "raise --max-nodes" in allowed.stderr
    assert "allow on-demand" in spot_only.stderr


def test_profile_from_another_schema_version(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"kind": "spottrain.profile", "schema_version": 99, "model": "x"}))
    r = run("--profile", str(p), "--samples", "1M", "--deadline", "8h")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "version" in r.stderr
