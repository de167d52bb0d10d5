"""How well `spottrain run` measures the gradient noise scale, against a problem whose noise is known.

    .venv/bin/python bench/noise_scale.py [--steps 800] [--write bench/results/noise_scale.md]

Each configuration is a real local run (gloo, one process per worker, on the CPU) of the job in
`bench/_known_noise.py`: a linear regression, y = x.w* + 0.5 noise over 4,096 fixed samples of 8
features, trained by plain SGD at learning rate 0: the weights stay at 0, so every step draws its
gradient from one known distribution. The per-sample gradients at w = 0 give the exact |G|^2, tr(Sigma) and noise scale
B_simple = tr(Sigma) / |G|^2 of the data set. The run stores, every LOSS_EVERY steps, the chief's
estimates of |G|^2 and tr(Sigma) from its shard's gradient and the all-reduced one
(`spottrain.runtime.api._GradientNoise`); the figures:

- the run's mean of the stored |G|^2 and tr(Sigma) against the exact values (% error): what the
  estimator gives over a long run;
- the noise scale the stored curve carries at each point (the ratio of the two parts' means over
  that point and the 19 before it, `spottrain.perf.own_runs.NOISE_SMOOTHING`; fewer at the
  start): median and 90th percentile of its % error over the run's points: what one point of a
  curve says;
- the same for one window alone (the ratio of one point's two parts; no smoothing).

Shard sizes: the global batch split over the workers (uneven where it does not divide: 64 over 3
is 22, 21, 21); the chief's shard is the smaller batch of the estimator.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._known_noise import exact  # noqa: E402
from bench._pages import write_results  # noqa: E402
from spottrain.perf.own_runs import own_curves  # noqa: E402
from spottrain.store import Store  # noqa: E402

CONFIGS = ((2, 32), (2, 64), (3, 64), (4, 64), (2, 256), (4, 256))
"""(workers, global batch) of the runs."""

def one_run(work: Path, workers: int, batch: int, steps: int) -> tuple[list[dict], list[float], float]:
    """(stored points, the curve's noise scale per point, wall seconds) of one real run."""
    job = f"linreg-{workers}x{batch}"
    env = {**os.environ, "SPOTTRAIN_DEVICE": "cpu", "SPOTTRAIN_STORE": str(work / "unused.db")}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local",
                          "--workers", str(workers), "--steps", str(steps), "--global-batch", str(batch),
                          "--checkpoint-every", str(10 * steps), "--job-id", job, "--run-dir", str(work / job),
                          "--store", str(work / f"{job}.db"), "--", sys.executable, "linreg.py"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=work)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"run {job} failed:\n{out.stderr[-2000:]}")
    with Store(work / f"{job}.db") as store:
        points = store.loss_points()
    (curve,) = own_curves("linreg", store_path=work / f"{job}.db").curves
    return points, list(curve.noise_scale), wall


def pct(a: float, b: float) -> float:
    return 100.0 * (a - b) / b


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--write")
    args = ap.parse_args(argv)
    sqr, var = exact()
    b_true = var / sqr
    lines = ["# Gradient noise scale as `spottrain run` measures it", "",
             f"Command: `.venv/bin/python bench/noise_scale.py --steps {args.steps}`  ",
             f"Machine: {os.cpu_count()} CPUs, torch {torch.__version__} (CPU, gloo); one process per worker.", "",
             f"Exact values of the data (per-sample gradients at w = 0): |G|^2 = {sqr:.4g}, tr(Sigma) = {var:.4g}, "
             f"noise scale B_simple = {b_true:.3g} samples.", "",
             "| workers | global batch | chief's shard | points | mean |G|^2 error | mean tr(Sigma) error | "
             "curve's noise scale: median / p90 abs error | one window alone: median / p90 | run wall |",
             "|---|---|---|---|---|---|---|---|---|"]
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "linreg.py").write_text((ROOT / "bench" / "_known_noise.py").read_text())
        for workers, batch in CONFIGS:
            points, curve_b, wall = one_run(work, workers, batch, args.steps)
            m_sqr = statistics.fmean(p["grad_sqr"] for p in points)
            m_var = statistics.fmean(p["grad_var"] for p in points)
            smooth = sorted(abs(pct(b, b_true)) for b in curve_b)
            alone = sorted(abs(pct(p["grad_var"] / p["grad_sqr"], b_true)) if p["grad_sqr"] > 0 else float("inf")
                           for p in points)
            q = lambda xs, f: xs[min(int(f * len(xs)), len(xs) - 1)]  # noqa: E731
            shard = -(-batch // workers)
            lines.append(f"| {workers} | {batch} | {shard} | {len(points)} | {pct(m_sqr, sqr):+.1f} % | "
                         f"{pct(m_var, var):+.1f} % | {statistics.median(smooth):.0f} / {q(smooth, 0.9):.0f} % | "
                         f"{statistics.median(alone):.0f} / {q(alone, 0.9):.0f} % | {wall:.1f} s |")
            print(lines[-1], flush=True)
    lines += ["", f"Bench wall time {time.perf_counter() - t_all:.0f} s."]
    write_results(argv, __file__, lines)


if __name__ == "__main__":
    main(sys.argv[1:])
