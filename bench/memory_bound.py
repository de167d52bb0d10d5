"""How far each shipped one-GPU measurement sits from its GPU's compute peak and memory bandwidth.

    .venv/bin/python bench/memory_bound.py

For every one-GPU row of a study: the achieved TFLOPS (samples/s x training FLOPs per sample),
that as a fraction of the sustained peak of the path the precision uses (the throughput model's
figure: fp16 tensor cores, TF32 where it exists, else FP32), and as FLOPs per byte of the GPU's
memory bandwidth. A workload bound by memory traffic keeps the last figure nearly constant across
GPUs whatever their peak FLOPS; a compute-bound one keeps the fraction of peak constant. The
spread of each column over GPUs (max / min, per model and precision) says which bound the
measurements follow. No model is fitted: it reads the measurements and the GPUs' datasheets.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _machine import machine  # noqa: E402  (bench/ is on sys.path when this script runs)
from _pages import write_page  # noqa: E402
from spottrain.perf import load_shipped  # noqa: E402
from spottrain.perf.hardware import device  # noqa: E402

STUDIES = {"Lambda": "lambda", "Pollux": "pollux", "CM-DARE": "cmdare", "transient-dl": "transient_dl"}


def rows_of(table: str) -> dict[tuple[str, str], list[tuple[str, float, float, float]]]:
    """(model, precision) -> [(GPU, achieved TFLOPS, fraction of the path's peak, FLOPs per byte)]."""
    out: dict[tuple[str, str], list[tuple[str, float, float, float]]] = defaultdict(list)
    for m in load_shipped((table,)):
        if m.cluster.total_gpus != 1 or m.ps:
            continue
        gpu = m.cluster.groups[0].gpu
        d = device(gpu)
        tflops = m.throughput * m.flops_per_sample / 1e12
        peak = d.tensor_tflops(m.precision) * d.sustained
        out[(m.model, m.precision)].append((d.name, tflops, tflops / peak, tflops * 1e3 / d.memory_bandwidth_gbs))
    return out


def spread(values: list[float]) -> float:
    return max(values) / min(values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", default=str(HERE / "results" / "memory_bound.md"))
    args = ap.parse_args()
    lines = ["# Compute or memory bound: the shipped one-GPU rows against each GPU's datasheet", "",
             "Command: `.venv/bin/python bench/memory_bound.py`", "", f"Machine: {machine()} (no timing here).", "",
             "Per study, model and precision: the GPUs measured, and the spread over them (max / min) of the "
             "achieved fraction of the path's sustained peak and of the achieved FLOPs per byte of memory "
             "bandwidth. The smaller spread is the bound the rows follow.", "",
             "| study | model | precision | GPUs | fraction of peak: median (spread) | FLOPs per byte of bandwidth: median (spread) |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for study, table in STUDIES.items():
        for (model, prec), rs in sorted(rows_of(table).items()):
            # one figure per GPU (the largest batch measured: the regime a planner picks)
            best: dict[str, tuple[float, float, float]] = {}
            for gpu, tf, frac, per_byte in rs:
                if gpu not in best or tf > best[gpu][0]:
                    best[gpu] = (tf, frac, per_byte)
            if len(best) < 3:
                continue
            fr = [v[1] for v in best.values()]
            pb = [v[2] for v in best.values()]
            lines.append(f"| {study} | {model} | {prec} | {len(best)} | {statistics.median(fr):.2f} (x{spread(fr):.1f}) | "
                         f"{statistics.median(pb):.1f} (x{spread(pb):.1f}) |")
            print(lines[-1], flush=True)
    write_page(args.write, lines)


if __name__ == "__main__":
    main()
