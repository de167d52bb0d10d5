#!/usr/bin/env python3
"""Turn ``bench/gpu_speeds.py`` output into a measurement table (the shipped tables' columns).

    python tools/convert_gpu_speeds.py bench/data/gpu_speeds_h100.csv bench/data/gpu_speeds_h200.csv \
        --out spottrain/data/measurements/hopper_zoo.csv

FLOPs per sample, parameter and tensor counts come from the profiler zoo (the networks the
rows timed). One row per (model, precision, batch):

* ``fp32`` means what it means in every shipped table on Ampere and later GPUs: convolutions
  and matrix products may take the TF32 path (NVIDIA's containers' default, Lambda's rows).
  For the networks built of matrix products (BERT, GPT-2, Transformer, LSTM) that is the
  ``matmul_tf32`` row; PyTorch's own default keeps matrix products in strict FP32, and those rows
  are left out of the table (they stay in the raw file: 2-4x slower than TF32 on an H200).
  Convolution networks' ``fp32`` rows ran with cuDNN's TF32 default.
* ``fp16`` is autocast with a gradient scaler.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COLUMNS = ["model", "batch_size", "cluster", "ps", "sync", "throughput", "network_gbps", "flops_per_sample",
           "param_count", "precision", "tensor_count", "step_time_s", "input", "source"]
MATMUL_NETWORKS = frozenset({"bert-base", "bert-large", "gpt2-small", "gpt2-medium", "transformer-base", "lstm-lm"})


def convert(raws: list[Path], study: str) -> list[dict[str, object]]:
    from spottrain.perf.workload import known_tensor_count
    from spottrain.profiler.zoo_info import zoo_entry

    rows = []
    for raw in raws:
        with raw.open(newline="") as fh:
            rows.extend(csv.DictReader(fh))
    out: list[dict[str, object]] = []
    for r in rows:
        name = r["model"]
        tf32 = r["matmul_tf32"] == "True"
        if r["precision"] == "fp32" and name in MATMUL_NETWORKS and not tf32:
            continue  # strict-FP32 matrix products: not what precision=fp32 means in the tables
        entry = zoo_entry(name)
        out.append({
            "model": name, "batch_size": int(r["batch_size"]), "cluster": r["cluster"], "ps": 0, "sync": "sync",
            "throughput": float(r["throughput"]), "network_gbps": "", "flops_per_sample": f"{entry.flops_per_sample:.6g}",
            "param_count": entry.param_count, "precision": r["precision"], "tensor_count": known_tensor_count(name),
            "step_time_s": float(r["step_time_s"]), "input": "device",
            "source": f"{study}-{r['cluster'].split('x', 1)[1].lower()}/bench/gpu_speeds.py ({r['gpu_name']}, torch {r['torch']})",
        })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, nargs="+", help="bench/gpu_speeds.py output files (one per GPU)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--study", default="spottrain-zoo", help="the source column's first part, before the GPU's name: each machine (host and GPU) is a study")
    args = ap.parse_args(argv)
    rows = convert(args.raw, args.study)
    with args.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"{args.out}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
