"""Steps to a target when the global batch changes: BatchScalingModel on the shipped Pollux curves."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from spottrain.errors import InputError, NotFittedError
from spottrain.perf import ExtrapolationWarning
from spottrain.perf.batch_scaling import (DEFAULT_STEPS_LOG_Q90, EXTRAPOLATION_WIDENING, POLLUX_MODELS,
                                          BatchScalingModel, applies_to, batch_targets, load_pollux_curves)
from spottrain.perf.convergence import LossCurve, first_crossing, read_loss_curves


def _leave_one_batch_out(model):
    """(measured, predicted, low, high, naive) per held-out batch and target of a Pollux model."""
    curves = load_pollux_curves(model)
    out = []
    for held in curves:
        train = [c for c in curves if c is not held]
        m = BatchScalingModel().fit(train)
        near = min(train, key=lambda c: abs(math.log(c.global_batch / held.global_batch)))
        for t in batch_targets(curves):
            meas = first_crossing(held, t)
            if meas is None:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExtrapolationWarning)
                low, high = m.steps_interval(t, batch_size_global=held.global_batch)
            naive = first_crossing(near, t) * near.global_batch / held.global_batch
            out.append((meas, m.steps_to_target(t, batch_size_global=held.global_batch), low, high, naive))
    return np.array(out)


def test_shipped_curves_are_the_pollux_runs():
    sizes = {m: [c.global_batch for c in load_pollux_curves(m)] for m in POLLUX_MODELS}
    assert sizes["cifar10"] == [128, 256, 512, 1024, 2048, 4096]
    assert len(sizes["imagenet"]) == 7 and len(sizes["ncf"]) == 8 and len(sizes["bert"]) == 6
    bert = load_pollux_curves("bert")[0]
    assert bert.metric == "f1" and bert.metric_full == 100.0  # F1 in percent, higher is better
    assert bert.from_loss(bert.losses[-1]) == pytest.approx(88.61300062)
    assert all(c.noise_scale is not None and min(c.noise_scale) > 0 for m in POLLUX_MODELS for c in load_pollux_curves(m))


def test_held_out_batch_size_is_predicted_within_the_interval_and_beats_linear_scaling():
    """Fit on all batch sizes but one, predict the held-out run's steps to four targets."""
    rows = {m: _leave_one_batch_out(m) for m in POLLUX_MODELS}
    allr = np.vstack(list(rows.values()))
    meas, pred, low, high, naive = allr.T
    assert len(allr) >= 4 * 3 * len(POLLUX_MODELS)  # 3+ targets per model and batch
    covered = np.mean((low <= meas) & (meas <= high))
    assert 0.80 <= covered <= 0.97, covered  # a ~90 % interval: neither too narrow nor too wide
    assert np.mean(np.abs(pred / meas - 1)) <= 0.15
    for m, r in rows.items():  # better than the same samples at the nearest batch, on every model
        assert np.mean(np.abs(r[:, 1] / r[:, 0] - 1)) < np.mean(np.abs(r[:, 4] / r[:, 0] - 1)), m


def test_default_width_is_the_shipped_curves_held_out_error():
    inside = [e for m in POLLUX_MODELS for e, d in BatchScalingModel().fit(load_pollux_curves(m)).held_out_errors()
              if d == 0]
    assert float(np.quantile(inside, 0.9)) == pytest.approx(DEFAULT_STEPS_LOG_Q90, abs=0.01)


def test_extrapolation_warns_once_and_widens():
    m = BatchScalingModel().fit(load_pollux_curves("cifar10"))
    t = batch_targets(m.curves_)[2]
    inside = m.steps_interval(t, batch_size_global=1536)
    with pytest.warns(ExtrapolationWarning, match="outside the measured batch sizes 128-4096") as rec:
        far = m.steps_interval(t, batch_size_global=16384)
        farther = m.steps_interval(t, batch_size_global=65536)
        m.steps_interval(t, batch_size_global=32)
    assert len([w for w in rec if issubclass(w.category, ExtrapolationWarning)]) == 1
    width = [math.log(hi / lo) / 2 for lo, hi in (inside, far, farther)]
    assert width[0] == pytest.approx(m.steps_log_error_q90())
    assert width[1] >= width[0] + 2 * EXTRAPOLATION_WIDENING - 1e-9  # two doublings beyond 4096
    assert width[2] >= width[1] + 2 * EXTRAPOLATION_WIDENING - 1e-9


def test_more_workers_never_make_a_sample_worth_more():
    """The planner's invariant: samples to a target never fall as the global batch grows."""
    grid = 2.0 ** np.arange(3, 17)
    for name in POLLUX_MODELS:
        m = BatchScalingModel().fit(load_pollux_curves(name))
        for t in batch_targets(m.curves_):
            samples = [m.samples_to_target(t, batch_size_global=b) for b in grid]
            steps = [m.steps_to_target(t, batch_size_global=b) for b in grid]
            assert np.all(np.diff(samples) > 0) and np.all(np.diff(steps) <= 1e-9), name


def test_large_batch_law_is_recovered_without_gradient_statistics():
    """Synthetic curves that follow S(B) = S_min (1 + B_noise / B) exactly (S_min 1000, B_noise 600)."""
    runs = [LossCurve(steps=tuple(k * 100 * (1 + 600 / b) for k in range(1, 11)), losses=tuple(1.0 / k for k in range(1, 11)),
                      batch_size=b) for b in (64, 256, 1024)]
    m = BatchScalingModel().fit(runs)
    assert not m.uses_noise_scale_
    for b in (32, 128, 4096, 8192):
        assert m.steps_to_target(0.2, batch_size_global=b) == pytest.approx(500 * (1 + 600 / b), rel=1e-6)


def test_one_run_with_its_noise_scale_carries_to_other_batches():
    """The gradient statistics as the prior when only one batch size is measured: one ImageNet run
    at batch 800 predicts the others far better than the same samples would."""
    curves = load_pollux_curves("imagenet")
    one = next(c for c in curves if c.global_batch == 800)
    m = BatchScalingModel().fit([one])
    assert not m.steps_interval_is_calibrated() and m.steps_log_error_q90() == DEFAULT_STEPS_LOG_Q90
    errs, naive = [], []
    for c in curves:
        for t in batch_targets(curves):
            meas, ref = first_crossing(c, t), first_crossing(one, t)
            if c is one or meas is None or ref is None:
                continue
            errs.append(abs(m.steps_to_target(t, batch_size_global=c.global_batch) / meas - 1))
            naive.append(abs(ref * 800 / c.global_batch / meas - 1))
    assert np.mean(errs) < 0.2 and np.mean(errs) < np.mean(naive) / 2


def test_one_batch_without_statistics_keeps_the_steps_unless_a_critical_batch_is_given():
    run = LossCurve(steps=(100, 200, 300, 400), losses=(0.8, 0.5, 0.3, 0.2), batch_size=256)
    assert not applies_to([run])
    assert BatchScalingModel().fit([run]).steps_to_target(0.5, batch_size_global=1024) == pytest.approx(200)
    m = BatchScalingModel(critical_batch=512).fit([run])
    assert m.steps_to_target(0.5, batch_size_global=1024) == pytest.approx(200 * (1 + 0.5) / (1 + 2))


def test_not_fitted_and_bad_arguments():
    with pytest.raises(NotFittedError):
        BatchScalingModel().steps_to_target(0.1, batch_size_global=64)
    with pytest.raises(InputError):
        BatchScalingModel().fit([])
    with pytest.raises(InputError):
        BatchScalingModel(critical_batch=0).fit(load_pollux_curves("ncf"))
    m = BatchScalingModel().fit(load_pollux_curves("ncf"))
    with pytest.raises(InputError, match="global batch > 0"):
        m.steps_to_target(0.5, batch_size_global=0)
    assert m.steps_to_target(1e-6, batch_size_global=512) == math.inf  # no run reaches it


def test_reader_metric_columns_and_their_directions(tmp_path):
    f1 = tmp_path / "f1.csv"
    f1.write_text("step,f1,batch_size,noise_scale\n100,80,64,300\n200,86,64,500\n100,78,256,300\n200,85,256,600\n")
    cs = read_loss_curves(f1)
    assert [c.global_batch for c in cs] == [64, 256] and cs[0].metric_full == 100.0
    assert cs[0].losses == pytest.approx((20.0, 14.0)) and cs[1].noise_scale == (300.0, 600.0)
    assert applies_to(cs) and cs[0].to_loss(88) == pytest.approx(12.0)
    hit = tmp_path / "hit.csv"
    hit.write_text("step,hit_rate,workers,batch_size\n10,0.6,4,64\n20,0.65,4,64\n")
    (c,) = read_loss_curves(hit)
    assert c.global_batch == 256 and c.losses == pytest.approx((0.4, 0.35)) and c.noise_scale is None


@pytest.mark.parametrize("text, line, column, msg", [
    ("step,accuracy,batch_size\n100,0.5,256\n200,0.6,0\n", 3, "batch_size", "expected a number > 0"),
    ("step,accuracy,batch_size\n100,0.8,256\n200,0.7,256\n300,0.5,256\n", 4, "accuracy", "accuracy falls"),
    ("step,loss\n100,0.2\n200,0.5\n300,0.9\n", 4, "loss", "loss rises"),
    ("step,f1\n100,80\n200,130\n", 3, "f1", "a fraction or a percentage"),
    ("step,hit_rate,batch_size,noise_scale\n100,0.5,64,-3\n", 2, "noise_scale", "expected a number > 0"),
])
def test_bad_curve_rows_name_file_line_and_column(tmp_path, text, line, column, msg):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        read_loss_curves(path, batch_size=32)
    assert str(exc.value).startswith(f"{path}, line {line}, column {column}: ") and msg in str(exc.value)


def test_asynchronous_runs_are_not_batch_size_curves():
    """Parameter-server runs of several workers (staleness not given) are the staleness model's;
    several synchronous workers (staleness 0) count as a global batch of workers x batch_size."""
    async_runs = [LossCurve(steps=(100, 200, 300), losses=(0.5, 0.3, 0.2), batch_size=128, workers=n) for n in (1, 2, 4)]
    assert not applies_to(async_runs)
    with pytest.raises(InputError, match="asynchronous run"):
        BatchScalingModel().fit(async_runs)
    sync_runs = [LossCurve(steps=(100, 200, 300), losses=(0.5, 0.3, 0.2), batch_size=128, workers=n, staleness=0.0)
                 for n in (1, 2, 4)]
    assert applies_to(sync_runs) and BatchScalingModel().fit(sync_runs).batch_sizes_ == (128, 256, 512)
