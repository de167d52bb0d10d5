"""Steps to a target at an unseen global batch size (synchronous training), on the Pollux curves.

    .venv/bin/python bench/batch_convergence.py [--write bench/results/batch_convergence.md]

Leave one batch size out: for each of the four Pollux models (ResNet-18/CIFAR-10, ResNet-50/ImageNet,
BERT/SQuAD, NCF; 6-8 global batch sizes each), every batch size in turn is held out, the
:class:`~spottrain.perf.batch_scaling.BatchScalingModel` is fitted on the others and predicts the
held-out run's steps to four targets (50, 70, 85 and 95 % of the way from the worst first
evaluation to the worst best value of the model's runs; a metric value, the same for every fold).
Measured steps: the held-out run's first crossing of the target (linear between evaluations).

Baseline (naive): linear scaling of the nearest measured batch, steps(B) = steps(B_near) x B_near / B
(the same samples at any batch). Also shown: the large-batch law alone (no gradient statistics),
and the interval's coverage (goal 85-95 %) and median width (high / low).
"""

from __future__ import annotations

import math
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from spottrain.perf.batch_scaling import POLLUX_MODELS, BatchScalingModel, batch_targets, load_pollux_curves  # noqa: E402
from spottrain.perf.convergence import first_crossing  # noqa: E402

NAMES = {"bert": "BERT/SQuAD", "cifar10": "ResNet-18/CIFAR-10", "imagenet": "ResNet-50/ImageNet", "ncf": "NCF"}


def held_out(model: str) -> list[dict]:
    """One record per (held-out batch, target) the held-out run reaches."""
    curves = load_pollux_curves(model)
    targets = batch_targets(curves)
    out = []
    for held in curves:
        train = [c for c in curves if c is not held]
        ours = BatchScalingModel().fit(train)
        law = BatchScalingModel(use_noise_scale=False).fit(train)
        near = min(train, key=lambda c: (abs(math.log(c.global_batch / held.global_batch)), c.global_batch))
        b = held.global_batch
        for t in targets:
            meas = first_crossing(held, t)
            ref = first_crossing(near, t)
            if meas is None or meas <= 0 or ref is None:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                low, high = ours.steps_interval(t, batch_size_global=b)
            out.append({"model": model, "batch": b, "target": held.from_loss(t), "measured": meas,
                        "ours": ours.steps_to_target(t, batch_size_global=b),
                        "law": law.steps_to_target(t, batch_size_global=b),
                        "baseline": ref * near.global_batch / b, "low": low, "high": high,
                        "extrapolated": ours.extrapolation_doublings(b) > 0})
    return out


def from_one_run(model: str) -> list[dict]:
    """The gradient statistics as the prior: one run (with its noise scale) predicts every other
    batch size of the model, at the same targets."""
    curves = load_pollux_curves(model)
    targets = batch_targets(curves)
    out = []
    for one in curves:
        m = BatchScalingModel().fit([one])
        for held in curves:
            if held is one:
                continue
            b = held.global_batch
            for t in targets:
                meas, ref = first_crossing(held, t), first_crossing(one, t)
                if meas is None or meas <= 0 or ref is None:
                    continue
                low, high = m.steps_interval(t, batch_size_global=b, warn=False)
                out.append({"measured": meas, "ours": m.steps_to_target(t, batch_size_global=b),
                            "baseline": ref * one.global_batch / b, "low": low, "high": high})
    return out


def _ape(recs, key):
    return [abs(r[key] - r["measured"]) / r["measured"] * 100 for r in recs]


def rows() -> list[tuple]:
    """Rows ``(name, n, ours MAPE %, baseline MAPE %, nan, goal, note)`` as bench/prediction_accuracy.py
    reports them: per model, all models, and the interval coverage."""
    recs = {m: held_out(m) for m in POLLUX_MODELS}
    out = []
    for m, rs in list(recs.items()) + [("all", [r for rs in recs.values() for r in rs])]:
        name = NAMES.get(m, "all four models")
        out.append((f"steps to target, unseen global batch, LOBO ({name})", len(rs), float(np.mean(_ape(rs, "ours"))),
                    float(np.mean(_ape(rs, "baseline"))), math.nan, "<= 15",
                    f"baseline: nearest batch's steps x B_near/B; large-batch law alone: {np.mean(_ape(rs, 'law')):.1f}"))
    one = [r for m in POLLUX_MODELS for r in from_one_run(m)]
    hit1 = np.mean([r["low"] <= r["measured"] <= r["high"] for r in one])
    out.append(("steps to target from ONE run + its noise scale, other batches", len(one),
                float(np.mean(_ape(one, "ours"))), float(np.mean(_ape(one, "baseline"))), math.nan, "-",
                f"every (run, other batch) pair; baseline: that run's steps x B_run/B; interval covers {100 * hit1:.0f} %"))
    every = [r for rs in recs.values() for r in rs]
    hit = [r["low"] <= r["measured"] <= r["high"] for r in every]
    ext = [h for h, r in zip(hit, every) if r["extrapolated"]]
    width = statistics.median(r["high"] / r["low"] for r in every)
    out.append(("90 % steps interval coverage, unseen global batch (Pollux)", len(every), 100.0 * np.mean(hit),
                math.nan, math.nan, "85-95", f"median width high/low {width:.2f}; outside the measured batches: "
                f"{100.0 * np.mean(ext):.0f} % of {len(ext)} (the 'ours' column is % covered)"))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    t0 = time.time()
    table = rows()
    head = f"{'experiment (held-out MAPE %)':64s} {'rows':>5s} {'ours':>7s} {'naive':>7s}  goal"
    print(head)
    for name, n, ours, base, _, goal, note in table:
        print(f"{name:64s} {n:5d} {ours:7.1f} {base:7.1f}  {goal:6s} {note}")
    per_model = {m: held_out(m) for m in POLLUX_MODELS}
    lines = ["# Steps to target at an unseen global batch size (Pollux curves)", "",
             "Command: `.venv/bin/python bench/batch_convergence.py`  ",
             f"Machine: {platform.machine()}, Python {platform.python_version()}; runtime {time.time() - t0:.1f} s.", "",
             "Leave one global batch size out, four targets per model (50/70/85/95 % of the way from the worst "
             "first evaluation to the worst best value). Anchor: linear scaling of the nearest measured batch "
             "(the same samples at any batch), on the same held-out rows.", "",
             "| experiment | rows | ours (MAPE % or % covered) | naive baseline | goal | note |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, n, ours, base, _, goal, note in table:
        lines.append(f"| {name} | {n} | {ours:.1f} | {'-' if math.isnan(base) else f'{base:.1f}'} | {goal} | {note} |")
    lines += ["", "Per held-out batch (mean over targets, % error; interval hits of the targets):", "",
              "| model | held-out batch | outside measured range | ours | naive | covered |", "| --- | --- | --- | --- | --- | --- |"]
    for m, rs in per_model.items():
        for b in sorted({r["batch"] for r in rs}):
            sub = [r for r in rs if r["batch"] == b]
            lines.append(f"| {NAMES[m]} | {b:g} | {'yes' if sub[0]['extrapolated'] else 'no'} | "
                         f"{np.mean(_ape(sub, 'ours')):.1f} | {np.mean(_ape(sub, 'baseline')):.1f} | "
                         f"{sum(r['low'] <= r['measured'] <= r['high'] for r in sub)}/{len(sub)} |")
    from _pages import write_results

    write_results(argv, __file__, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
