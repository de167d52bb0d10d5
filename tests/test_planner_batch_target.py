"""Planning a synchronous job to a target from past runs at several global batch sizes: the
batch-size model (spottrain.perf.batch_scaling) gives each cluster's samples, not the
one-batch rule."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import numpy as np
import pytest

from spottrain.perf.convergence import read_loss_curves
from spottrain.plan_file import Plan
from spottrain.planner.work import TargetLoss, target_loss_work

TARGET = 0.15
"""Top-1 error of ResNet-18 on CIFAR-10 (accuracy 0.85), reached by every Pollux run."""


def _pollux(name="cifar10"):
    return str(resources.files("spottrain").joinpath("data", "measurements", "curves", f"pollux_{name}.csv"))


def run(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "plan", "--no-refine", *args],
                          capture_output=True, text=True)


def test_sync_samples_come_from_the_batch_model():
    curves = read_loss_curves(_pollux())
    rule = target_loss_work(curves, TARGET, 128)
    bm = rule.batch_model
    assert bm is not None and bm.batch_sizes_ == (128, 256, 512, 1024, 2048, 4096)
    gpus = np.array([1, 2, 4, 8, 16, 32, 64])
    got = rule.samples(np.ones_like(gpus), gpus, "sync")
    want = [bm.steps_to_target(TARGET, batch_size_global=128 * g) * 128 * g for g in gpus]
    assert got == pytest.approx(want, rel=1e-12)
    assert (np.diff(got) > 0).all()  # more GPUs, more samples ...
    steps = got / (128 * gpus)
    assert (np.diff(steps) < 0).all()  # ... in fewer steps
    # the one-batch rule (steps of one curve kept constant) would say otherwise
    plain = TargetLoss(model=rule.model, target_loss=TARGET, batch_size=128).samples(np.ones_like(gpus), gpus, "sync")
    assert not np.allclose(plain, got, rtol=0.05)
    # the steps' spread: the model's calibrated interval, wider past the measured 4096
    from spottrain.planner.risk import Z90

    sd = rule.log_sd(np.ones_like(gpus), gpus, "sync")
    assert sd[:6] == pytest.approx([bm.steps_log_error_q90() / Z90] * 6)
    assert sd[6] > sd[5]
    # asynchronous plans keep the staleness model
    assert rule.samples(np.array([4]), np.array([4]), "async")[0] == pytest.approx(
        rule.model.steps_to_target(TARGET, batch_size_global=128, workers=4) * 128)


def test_cli_sync_plan_to_target_uses_the_batch_model():
    path = _pollux()
    r = run("--model", "resnet18", "--batch-size", "128", "--target-loss", str(TARGET), "--curves", path,
            "--sync", "sync", "--deadline", "6h", "--no-baselines", "--json")
    assert r.returncode == 0, r.stderr
    plan = Plan.from_dict(json.loads(r.stdout)["plan"])
    rule = target_loss_work(read_loss_curves(path, batch_size=128), TARGET, 128)
    nodes = sum(g.count for g in plan.groups)
    gpus = sum(g.count * g.gpus_per_node for g in plan.groups)
    want = rule.batch_model.steps_to_target(TARGET, batch_size_global=128 * gpus) * 128 * gpus
    assert plan.workload.samples_total == pytest.approx(want, rel=1e-9)
    assert float(rule.samples(nodes, gpus, "sync")[0]) == pytest.approx(want, rel=1e-12)


def test_critical_batch_with_several_batches_and_unreachable_target_are_one_line():
    path = _pollux()
    r = run("--model", "resnet18", "--batch-size", "128", "--target-loss", str(TARGET), "--curves", path,
            "--sync", "sync", "--critical-batch", "1000", "--deadline", "6h")
    assert r.returncode == 2 and "--critical-batch" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("--model", "resnet18", "--batch-size", "128", "--target-loss", "0.001", "--curves", path,
            "--sync", "sync", "--deadline", "6h")
    assert r.returncode == 2 and "no run in the curves reaches 0.001" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_plan_outside_the_measured_batches_warns_once():
    """At 4 samples per GPU on one node (at most 16 GPUs), every plan's global batch is below the
    runs' smallest (128): one warning line, and the plan is still made."""
    r = run("--model", "resnet18", "--batch-size", "4", "--max-nodes", "1", "--target-loss", str(TARGET),
            "--curves", _pollux(), "--sync", "sync", "--deadline", "24h", "--no-baselines")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stderr.split())  # the console wraps long lines
    assert text.count("warning:") == 1
    assert "outside the past runs' batch sizes 128-4096" in text and "extrapolated" in text
