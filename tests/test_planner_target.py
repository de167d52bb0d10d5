"""Planning to a target loss: the samples depend on the cluster (convergence model), end to end."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from spottrain.perf import Workload
from spottrain.perf.convergence import curves_from_rows, load_accuracy_curves
from spottrain.plan_file import Plan
from spottrain.planner.engine import prepare
from spottrain.planner.work import target_loss_work
from spottrain.profiler.schema import Profile
from spottrain.profiler.zoo_info import zoo_info

TARGET = 0.2
"""Test error of ResNet-32 on CIFAR-10 (the transient-dl curves measure accuracy)."""


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """ResNet-32 (published size and FLOPs) with the real 1-worker transient-dl error curve."""
    curve = curves_from_rows(load_accuracy_curves())[1]
    info = zoo_info("resnet32")
    prof = Profile(model="resnet32", batch_size=128, param_count=info["param_count"],
                   gradient_bytes=info["gradient_bytes"], flops_per_sample_forward=info["flops_per_sample_forward"],
                   flops_per_sample_backward=info["flops_per_sample_backward"], step_time_s=0.5, samples_per_s=256.0,
                   device={"kind": "cpu", "name": "x", "peak_tflops": None},
                   loss_curve=[[s, v] for s, v in zip(curve.steps, curve.losses)])
    path = tmp_path_factory.mktemp("prof") / "resnet32.json"
    prof.save(path)
    return prof, path


def run(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "plan", "--no-refine", *args], capture_output=True, text=True)


def test_column_samples_follow_the_convergence_model(profile):
    prof, _ = profile
    rule = target_loss_work(prof.loss_curve, TARGET, 128)
    m = rule.model
    ctx = prepare(Workload.from_profile(prof), samples=1.0, deadline_s=3600.0, gpus=["V100"], max_nodes=8,
                  work_rule=rule)
    cols = ctx.cols
    for j in range(cols.size):
        c = ctx.cands[int(cols.cand[j])]
        big = 128 * int(cols.n[j]) * c.gpus_per_node
        want = m.steps_to_target(TARGET, batch_size_global=big, workers=1, staleness=0.0) * big
        assert cols.work[j] == pytest.approx(want, rel=1e-12)
    # more GPUs, more samples (a step of a bigger global batch is not worth more steps)
    for i in set(cols.cand.tolist()):
        w = cols.work[cols.cand == i]
        assert (np.diff(w) > 0).all()


def test_async_samples_grow_with_workers_through_staleness(profile):
    prof, _ = profile
    rule = target_loss_work(prof.loss_curve, TARGET, 128)
    n = np.arange(1, 9)
    s = rule.samples(n, n, "async")
    # staler updates are worth less; past 4 workers the first LR phase levels off above the target,
    # so the target is reached at the LR drop (a fixed global step) and the samples stop growing
    assert (np.diff(s) >= 0).all() and s[-1] > 3 * s[0]
    assert s[0] == pytest.approx(rule.model.steps_to_target(TARGET, batch_size_global=128, workers=1) * 128)


def test_critical_batch_rule(profile):
    prof, _ = profile
    rule = target_loss_work(prof.loss_curve, TARGET, 128, critical_batch=4096)
    g = np.array([1, 4, 32, 256])
    e = rule.samples(g, g, "sync")
    e_min = e[0] / (1 + 128 / 4096)
    assert e == pytest.approx(e_min * (1 + 128 * g / 4096))  # E(B) = E_min (1 + B / B_noise)


def test_cli_plan_to_target_meets_it_and_grows_the_samples(profile):
    prof, path = profile
    rule = target_loss_work(prof.loss_curve, TARGET, 128, critical_batch=4096)
    one_gpu = float(rule.samples(1, 1, "sync")[0])
    # a deadline one T4 cannot meet forces a bigger cluster, which needs more samples
    r = run("--profile", str(path), "--target-loss", str(TARGET), "--critical-batch", "4096", "--deadline", "6m",
            "--no-baselines", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    plan = Plan.from_dict(d["plan"])
    nodes = sum(g.count for g in plan.groups)
    gpus = sum(g.count * g.gpus_per_node for g in plan.groups)
    assert gpus > 1
    assert plan.workload.samples_total == pytest.approx(float(rule.samples(nodes, gpus, "sync")[0]))
    assert plan.workload.samples_total > one_gpu
    # and that many samples reach the target: the large-batch law's steps at the plan's batch
    big = 128 * gpus
    steps = plan.workload.samples_total / big
    s_min = rule.model.steps_to_target(TARGET, batch_size_global=128, staleness=0.0) / (1 + 4096 / 128)
    assert steps >= s_min * (1 + 4096 / big) * (1 - 1e-9)
    assert plan.prediction.p_meet_deadline >= 0.95


def test_cli_default_rule_plan_reaches_the_target_per_the_model(profile):
    prof, path = profile
    r = run("--profile", str(path), "--target-loss", str(TARGET), "--deadline", "1h", "--no-baselines", "--json")
    assert r.returncode == 0, r.stderr
    plan = Plan.from_dict(json.loads(r.stdout)["plan"])
    gpus = sum(g.count * g.gpus_per_node for g in plan.groups)
    m = target_loss_work(prof.loss_curve, TARGET, 128).model
    steps = plan.workload.samples_total / (128 * gpus)
    assert m.loss_at(steps, batch_size_global=128 * gpus, workers=1, staleness=0.0) <= TARGET + 1e-9


@pytest.mark.parametrize("extra,msg", [
    ([], "loss curve"),  # a zoo model has no loss curve
])
def test_target_loss_without_a_curve_is_one_line(extra, msg):
    r = run("--model", "resnet50", "--target-loss", "0.5", "--deadline", "8h", *extra)
    assert r.returncode == 2 and msg in r.stderr and "--target-loss" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_profile_without_curve_and_unreachable_target(tmp_path, profile):
    prof, path = profile
    data = json.loads(path.read_text())
    data["loss_curve"] = None
    p = tmp_path / "nocurve.json"
    p.write_text(json.dumps(data))
    r = run("--profile", str(p), "--target-loss", "0.2", "--deadline", "8h")
    assert r.returncode == 2 and "--target-loss" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("--profile", str(path), "--target-loss", "0.001", "--deadline", "8h")
    assert r.returncode == 2 and "never reaches" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("--profile", str(path), "--samples", "1M", "--critical-batch", "512", "--deadline", "8h")
    assert r.returncode == 2 and "--critical-batch" in r.stderr
    assert math.isfinite(target_loss_work(prof.loss_curve, 0.2, 128).samples(1, 1, "sync")[0])


def test_async_target_loss_carries_the_steps_uncertainty_into_the_deadline_odds(profile):
    """Steps for more async workers than the profiled curve's are an extrapolation with a calibrated
    spread (the convergence model's steps interval): the columns' time quantile includes it."""
    from spottrain.planner import risk

    prof, _ = profile
    rule = target_loss_work(prof.loss_curve, TARGET, 128)
    n = np.arange(1, 9)
    sd = rule.log_sd(n, n, "async")
    assert sd[0] == 0.0 and (sd[1:] == pytest.approx(rule.model.steps_log_error_q90() / risk.Z90))
    assert (rule.log_sd(n, n, "sync") == 0.0).all()
    ctx = prepare(Workload.from_profile(prof), samples=1.0, deadline_s=3600.0, gpus=["V100"], max_nodes=8,
                  work_rule=rule, sync="async", ps=1, spot=False)
    cols = ctx.cols
    plain = risk.assess(cols.work, cols.thr, cols.low, cols.high, cols.rate, cols.stall_mean_s, cols.stall_sd_s,
                        ctx.job.checkpoint_s, deadline_s=3600.0, confidence=ctx.job.confidence)
    one = cols.n == 1
    assert cols.time_q_s[one] == pytest.approx(plain.time_q_s[one])
    assert (cols.time_q_s[~one] > plain.time_q_s[~one] * 1.05).all()


def _past_runs_csv(path):
    """The shipped transient-dl ResNet-32 runs (1/2/4/8 K80 workers) as a loss-curve CSV."""
    with path.open("w") as fh:
        fh.write("run,workers,batch_size,step,accuracy\n")
        for r in load_accuracy_curves():
            fh.write(f"{r['curve']},{r['workers']},{r['batch_size']},{r['step']},{r['accuracy']}\n")
    return path


def test_cli_plan_to_target_from_past_runs_curves(tmp_path):
    """--curves: the convergence model is fitted on past runs of several worker counts (no profile
    needed); measured counts carry no steps spread, others the model's own calibrated one."""
    from spottrain.perf.convergence import DEFAULT_STEPS_LOG_Q90, read_loss_curves
    from spottrain.planner import risk

    path = _past_runs_csv(tmp_path / "runs.csv")
    r = run("--model", "resnet32", "--batch-size", "128", "--target-loss", str(TARGET), "--curves", str(path),
            "--sync", "async", "--deadline", "2h", "--no-baselines", "--json")
    assert r.returncode == 0, r.stderr
    plan = Plan.from_dict(json.loads(r.stdout)["plan"])
    rule = target_loss_work(read_loss_curves(path), TARGET, 128)
    assert rule.model.worker_counts_ == (1, 2, 4, 8)
    nodes = sum(g.count for g in plan.groups)
    gpus = sum(g.count * g.gpus_per_node for g in plan.groups)
    assert plan.workload.samples_total == pytest.approx(float(rule.samples(nodes, gpus, "async")[0]))
    sd = rule.log_sd(np.array([1, 2, 3, 4, 6, 8, 16]), np.array([1, 2, 3, 4, 6, 8, 16]), "async")
    q = rule.model.steps_log_error_q90()
    assert q < DEFAULT_STEPS_LOG_Q90  # four worker counts calibrate a tighter spread than one curve's
    assert list(sd) == pytest.approx([0, 0, q / risk.Z90, 0, q / risk.Z90, 0, q / risk.Z90])


def test_curves_option_errors_are_one_line(tmp_path):
    path = _past_runs_csv(tmp_path / "runs.csv")
    r = run("--model", "resnet32", "--samples", "1M", "--curves", str(path), "--deadline", "1h")
    assert r.returncode == 2 and "--curves only applies with --target-loss" in r.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("step,accuracy\n100,0.5\n200,oops\n")
    r = run("--model", "resnet32", "--target-loss", "0.2", "--curves", str(bad), "--deadline", "1h")
    assert r.returncode == 2 and "bad.csv" in r.stderr and "line 3" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
