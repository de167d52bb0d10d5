"""Measure one GPU's training step time on the profiler zoo's networks (synthetic batches).

Runs where a CUDA GPU is, with nothing but PyTorch: the zoo's architectures are loaded from
``spottrain/profiler`` without importing the package (whose profile schema needs pydantic).
For every (model, precision, per-GPU batch) it times ``steps`` optimiser steps after
``warmup`` with CUDA events and writes one CSV row in the shipped measurement tables' columns
(``throughput`` in samples/s, ``step_time_s``) plus the settings that explain it.

Precisions: ``fp32`` is PyTorch's default (cuDNN convolutions may use TF32, matrix products do
not), ``tf32`` also lets matrix products use TF32, ``fp16`` is autocast with a gradient scaler
(fp32 weights, as NVIDIA's ResNet-50 recipe), the mixed precision a user gets from
``torch.autocast``. Inputs are generated on the GPU: no data loader, so these rows measure the
GPU and framework, never a host's input pipeline.

    python3 bench/gpu_speeds.py --out gpu_speeds.csv          # on the GPU machine
"""

from __future__ import annotations

import argparse
import csv
import importlib
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

# (model, precisions, per-GPU batch sizes): sizes a user of each would train with, on one GPU.
PLAN = [
    ("resnet50", ("fp32", "fp16"), (32, 64, 128, 256)),
    ("resnet18-cifar", ("fp32", "fp16"), (128, 256, 512, 1024)),
    ("vgg16", ("fp32", "fp16"), (32, 64, 128)),
    ("bert-base", ("fp32", "tf32", "fp16"), (16, 32, 64, 128)),
    ("gpt2-small", ("fp32", "tf32", "fp16"), (4, 8, 16)),
    ("transformer-base", ("fp32", "tf32", "fp16"), (64, 128, 256)),
    ("lstm-lm", ("fp32", "fp16"), (20, 64, 256)),
    ("resnet32", ("fp32", "fp16"), (128, 512)),
    ("resnet101", ("fp32", "fp16"), (32, 64, 128)),
    ("resnet152", ("fp32", "fp16"), (32, 64, 128)),
    ("bert-large", ("fp32", "tf32", "fp16"), (8, 16, 32, 64)),
    ("gpt2-medium", ("fp32", "tf32", "fp16"), (2, 4, 8)),
    ("mobilenet-v2", ("fp32", "fp16"), (32, 64, 128, 256)),
    ("vit-b16", ("tf32", "fp16"), (16, 32, 64, 128)),
    ("efficientnet-b0", ("fp32", "fp16"), (32, 64, 128, 256)),
    ("convnext-tiny", ("tf32", "fp16"), (32, 64, 128, 256)),
]
COLUMNS = ["model", "batch_size", "cluster", "ps", "sync", "throughput", "precision", "step_time_s",
           "step_time_p10_s", "step_time_p90_s", "optimizer", "channels_last", "matmul_tf32", "cudnn_tf32",
           "gpu_name", "torch", "cuda", "source"]


def _zoo():
    """spottrain.profiler.zoo without spottrain.profiler's __init__ (pydantic-free)."""
    if "spottrain.profiler" not in sys.modules:
        sys.path.insert(0, str(ROOT))
        pkg = types.ModuleType("spottrain.profiler")
        pkg.__path__ = [str(ROOT / "spottrain" / "profiler")]
        sys.modules["spottrain.profiler"] = pkg
    return importlib.import_module("spottrain.profiler.zoo")


def _gpu_name() -> str:
    name = torch.cuda.get_device_name(0)
    for short in ("H200", "H100", "GH200", "B200", "A100", "L40S", "L4", "A10G", "A10", "T4", "V100"):
        if short in name:
            return short
    return name.replace(" ", "-")


def time_one(zoo, model_name: str, precision: str, batch: int, *, warmup: int, steps: int) -> tuple[list[float], str]:
    """Per-step seconds of ``steps`` timed training steps, and the optimiser's name."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    model, (x, y) = zoo.build(model_name, batch, device="cuda")
    conv = model.family in ("resnet", "vgg", "mobilenet", "efficientnet")
    opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if conv
           else torch.optim.AdamW(model.parameters(), lr=1e-4))
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    amp = precision == "fp16"

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(steps)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) / 1e3 for s, e in events]
    del model, opt, x, y
    torch.cuda.empty_cache()
    return times, "sgd-momentum" if conv else "adamw"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop starting new rows after this long")
    ap.add_argument("--models", default="", help="comma-separated subset of the plan's models")
    args = ap.parse_args(argv)
    zoo = _zoo()
    gpu = _gpu_name()
    keep = set(filter(None, args.models.split(",")))
    started = time.monotonic()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=COLUMNS)
        out.writeheader()
        for name, precisions, batches in PLAN:
            if keep and name not in keep:
                continue
            for precision in precisions:
                for batch in batches:
                    if time.monotonic() - started > args.budget_s:
                        print(f"budget reached; skipped {name} {precision} {batch}", flush=True)
                        continue
                    try:
                        times, optimizer = time_one(zoo, name, precision, batch, warmup=args.warmup, steps=args.steps)
                    except torch.OutOfMemoryError:
                        torch.cuda.empty_cache()
                        print(f"{name} {precision} b={batch}: out of memory", flush=True)
                        continue
                    med = statistics.median(times)
                    q = statistics.quantiles(times, n=10)
                    out.writerow({
                        "model": name, "batch_size": batch, "cluster": f"1x{gpu}", "ps": 0, "sync": "sync",
                        "throughput": round(batch / med, 3), "precision": "fp16" if precision == "fp16" else "fp32",
                        "step_time_s": round(med, 6), "step_time_p10_s": round(q[0], 6), "step_time_p90_s": round(q[-1], 6),
                        "optimizer": optimizer,
                        "channels_last": False, "matmul_tf32": precision == "tf32", "cudnn_tf32": True,
                        "gpu_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
                        "cuda": torch.version.cuda, "source": "bench/gpu_speeds.py",
                    })
                    fh.flush()
                    print(f"{name:18s} {precision:5s} b={batch:5d} {med * 1e3:9.2f} ms  {batch / med:10.1f}/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
