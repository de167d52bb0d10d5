#!/usr/bin/env python3
"""Convert the Pollux validation curves into spottrain loss-curve tables (one per model).

Reads ``<data>/pollux/<model>/validation-<B>.csv`` (one run at global batch ``B``: ``progress,
iteration, metric, grad_sqr, grad_var`` per epoch) and writes
``spottrain/data/measurements/curves/pollux_<model>.csv`` in the loss-curve format of
``spottrain converge --curves`` (docs/formats.md)::

    python tools/convert_pollux_curves.py --data ../shared/data --out spottrain/data/measurements/curves

Columns written: ``step`` (optimizer steps = ``iteration``), the metric under the name that
declares its direction (``accuracy`` or ``hit_rate`` as a fraction, ``f1`` in percent: higher is
better), ``workers`` = 1 and ``batch_size`` = B (the global batch of a synchronous step),
``noise_scale`` (the gradient noise scale in samples, see below), and the raw ``grad_sqr``,
``grad_var``, ``progress`` for reference (the reader ignores them).

The noise scale: AdaptDL (Pollux's implementation) keeps ``grad_var`` normalised to the base batch
``B0`` of the job (the smallest batch of each trace folder: its ``progress`` equals its
``iteration``), so the gradient noise scale of McCandlish et al. is
``B_noise = B0 * grad_var / grad_sqr`` samples. Check (printed): ``progress`` grows per step by
Pollux's gain ``(B / B0) (B_noise + B0) / (B_noise + B)``; after the first epoch the gain from
each row's statistics matches the measured growth to within a few per cent.
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import re

METRIC = {"cifar10": "accuracy", "imagenet": "accuracy", "bert": "f1", "ncf": "hit_rate"}
MODEL = {"cifar10": "resnet18-cifar10", "imagenet": "resnet50-imagenet", "bert": "bert-squad", "ncf": "ncf-movielens"}
COLUMNS = ["model", "step", "accuracy", "f1", "hit_rate", "workers", "batch_size", "noise_scale",
           "grad_sqr", "grad_var", "progress", "source"]


def read_runs(folder: str) -> dict[int, list[dict[str, float]]]:
    """Global batch -> the run's rows (numbers), sorted by batch."""
    runs = {}
    for path in glob.glob(os.path.join(folder, "validation-*.csv")):
        batch = int(re.search(r"validation-(\d+)\.csv$", path).group(1))
        with open(path, newline="") as fh:
            runs[batch] = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]
    return dict(sorted(runs.items()))


def convert(folder: str, name: str) -> tuple[list[dict], float]:
    """Rows of one model's table and the worst relative gain mismatch after the first epoch."""
    runs = read_runs(folder)
    base = min(runs)
    metric = METRIC[name]
    out, worst = [], 0.0
    for batch, rows in runs.items():
        prev_step = prev_progress = 0.0
        for k, r in enumerate(rows):
            noise = base * r["grad_var"] / r["grad_sqr"]
            gain = (batch / base) * (noise + base) / (noise + batch)
            measured = (r["progress"] - prev_progress) / max(r["iteration"] - prev_step, 1e-9)
            if k > 0:
                worst = max(worst, abs(measured / gain - 1.0))
            prev_step, prev_progress = r["iteration"], r["progress"]
            row = dict.fromkeys(COLUMNS, "")
            row.update(model=MODEL[name], step=f"{r['iteration']:g}", workers="1", batch_size=str(batch),
                       noise_scale=f"{noise:.6g}", grad_sqr=f"{r['grad_sqr']:.10g}", grad_var=f"{r['grad_var']:.10g}",
                       progress=f"{r['progress']:.10g}", source=f"pollux/{name}/validation-{batch}.csv")
            row[metric] = f"{r['metric']:.10g}"
            out.append(row)
    return out, worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data", help="folder holding pollux/")
    ap.add_argument("--out", default="spottrain/data/measurements/curves")
    args = ap.parse_args()
    for name in sorted(METRIC):
        rows, worst = convert(os.path.join(args.data, "pollux", name), name)
        cols = [c for c in COLUMNS if c not in METRIC.values() or c == METRIC[name]]
        path = os.path.join(args.out, f"pollux_{name}.csv")
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        print(f"{path}: {len(rows)} rows; Pollux gain from the noise scale vs measured progress per step, "
              f"worst after epoch 1: {100 * worst:.1f} %")


if __name__ == "__main__":
    main()
