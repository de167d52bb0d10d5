"""`spottrain plan` constraint flags: each changes the plan as asked, bad values are one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spottrain.plan_file import Plan

BASE = ("--model", "resnet50", "--batch-size", "64", "--samples", "115M", "--deadline", "8h", "--no-baselines", "--json")


def run(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "plan", "--no-refine", *args], capture_output=True, text=True)


def run_here(capsys, *args) -> tuple[int, str, str]:
    """The CLI in this process (no interpreter start-up): exit code, stdout, stderr."""
    from spottrain.cli.main import main

    code = 0
    try:
        main(["plan", "--no-refine", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def plan_of(capsys):
    def go(*args) -> Plan:
        code, out, err = run_here(capsys, *BASE, *args)
        assert code == 0, err
        return Plan.from_dict(json.loads(out)["plan"])
    return go


@pytest.fixture
def free(plan_of):
    return plan_of()


def test_quota_on_the_chosen_type_moves_the_plan(free, plan_of):
    g = max(free.groups, key=lambda g: g.count)
    capped = plan_of("--quota", f"{g.instance_type}=0")
    assert all(x.instance_type != g.instance_type for x in capped.groups)
    assert capped.prediction.cost_usd >= free.prediction.cost_usd * (1 - 1e-9)  # a constraint never helps


def test_zones_allow_list(plan_of):
    from collections import Counter

    from spottrain.catalog import load_catalog

    z = Counter(o.zone for o in load_catalog().offers if o.zone and o.spot_price_usd_per_hour).most_common(1)[0][0]
    p = plan_of("--zones", z)
    assert all((g.zone or g.region) == z for g in p.groups)


def test_parameter_servers_with_async(plan_of):
    p = plan_of("--sync", "async", "--ps", "2")
    assert p.sync == "async" and p.ps == 2


def test_hard_cap_bounds_the_p95_cost(free, plan_of, capsys):
    # a cap the cheapest plan meets keeps it
    roomy = plan_of("--hard-cap", f"{free.prediction.cost_p95_usd * 1.001:.4f}")
    assert roomy.label == free.label and roomy.prediction.cost_p95_usd <= free.prediction.cost_p95_usd * 1.001
    # a cap just below the cheapest plan's p95 cost: another plan under it (never cheaper in
    # expectation: a constraint never helps), or none
    cap = free.prediction.cost_p95_usd * 0.999
    code, out, err = run_here(capsys, *BASE, "--hard-cap", f"{cap:.4f}")
    if code == 0:
        capped = Plan.from_dict(json.loads(out)["plan"])
        assert capped.prediction.cost_p95_usd <= cap and capped.prediction.cost_usd >= free.prediction.cost_usd * (1 - 1e-9)
    # a cap no plan meets (a tenth of the cheapest p95) leaves none: the one-line error (exit 2) names the flag
    code, out, err = run_here(capsys, *BASE, "--hard-cap", f"{free.prediction.cost_p95_usd * 0.1:.4f}")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--hard-cap" in err and "lowest p95 cost" in err


def test_on_demand_share(plan_of):
    p = plan_of("--on-demand-share", "0.5")
    nodes = sum(g.count for g in p.groups)
    od = sum(g.count for g in p.groups if not g.spot)
    assert od >= 1 and od >= 0.5 * nodes


@pytest.mark.parametrize("args,opt", [
    (["--quota", "p3.2xlarge"], "--quota"),
    (["--quota", "p3.2xlarge=two"], "--quota"),
    (["--quota", "p3.2xlarge=-1"], "--quota"),
    (["--quota", "p3.2xlarg=2"], "--quota"),
    (["--zones", "us-east-1z"], "--zones"),
    (["--hard-cap", "0"], "--hard-cap"),
    (["--hard-cap", "lots"], "--hard-cap"),
    (["--ps", "-1"], "--ps"),
    (["--sync", "async", "--ps", "0"], "--ps"),
    (["--on-demand-share", "1.5"], "--on-demand-share"),
    (["--precision", "fp8"], "--precision"),
    (["--spot-only", "--on-demand-share", "0.3"], "--on-demand-share"),
])
def test_bad_values_are_one_line_errors_naming_the_option(args, opt, capsys):
    code, out, err = run_here(capsys, *BASE, *args)
    assert code == 2, out
    assert opt in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def _per_gpu(plan: Plan) -> float:
    return plan.prediction.throughput_samples_per_s / sum(g.count * g.gpus_per_node for g in plan.groups)


def test_mixed_precision_plans_on_the_tensor_cores_speed_and_says_so_in_the_plan(plan_of, capsys):
    # One V100 node meets this deadline at either precision: the plan's speed per GPU is the
    # fp16 path's (tensor cores) with --precision fp16, and the plan file carries the precision.
    small = ("--samples", "5M", "--gpus", "V100", "--max-nodes", "1")
    fp32, fp16 = plan_of(*small), plan_of(*small, "--precision", "fp16")
    assert fp32.workload.precision == "fp32" and fp16.workload.precision == "fp16"
    assert _per_gpu(fp16) > 1.5 * _per_gpu(fp32)
    assert Plan.from_dict(fp16.to_dict()).workload.precision == "fp16"
    code, out, err = run_here(capsys, *BASE[:-1], *small, "--precision", "fp16")  # the tables, not --json
    assert code == 0 and "performance model, mixed precision)" in out
    # The simulator replays the plan at its precision's speed.
    from spottrain.sim.markets import _perf_raw

    key = (("V100", 4, 1),)
    assert _perf_raw(fp16)(key) > 1.5 * _perf_raw(fp32)(key)


def test_precision_with_a_profile_is_refused_naming_the_flag(tmp_path, capsys):
    prof = tmp_path / "p.json"
    prof.write_text("{}")
    code, out, err = run_here(capsys, "--profile", str(prof), "--precision", "fp16", "--samples", "1M",
                              "--deadline", "8h")
    assert code == 2 and out == "" and "--precision" in err and "profile" in err
    assert len(err.strip().splitlines()) == 1


def test_one_subprocess_error_has_no_traceback():
    r = run(*BASE, "--quota", "p3.2xlarge=two")
    assert r.returncode == 2 and "--quota" in r.stderr and len(r.stderr.strip().splitlines()) == 1
