"""Does a GPU hold its datasheet clock under dense load? Dense GEMMs with the board's power and clocks sampled.

    python3 bench/gpu_power.py --seconds 20 --out power.csv
    python3 bench/gpu_power.py --train bert-base:fp16:64 resnet50:fp16:256 --out train_power.csv

Needs PyTorch with CUDA and ``nvidia-smi`` (both only read: no setting of the GPU is changed). For
each precision path (fp16 tensor cores, TF32 tensor cores, strict FP32) it multiplies two n x n
matrices back to back for ``--seconds``, while a thread samples ``nvidia-smi`` every 0.25 s: board
power and its limit, SM clock and the board's maximum SM clock. It prints one table row per path:
achieved TFLOPS, the mean SM clock under load as a fraction of the maximum, and the mean power as a
fraction of the limit: how far below its datasheet peak the board's power limit holds it. The
throughput model applies a power-density rule to GDDR boards (analytical.throttle) and leaves HBM
boards' shortfall to their fitted effects; this shows what the shortfall is under the densest
load on the GPU it runs on. ``--train MODEL:PRECISION:BATCH ...`` instead times training steps of
the profiler zoo's networks (bench/gpu_speeds.py's step) with the same sampling: how far real
training steps sit below the power limit. Not part of `bench/run_all.py` (no GPU there).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import statistics
import subprocess
import sys
import threading
import time

FIELDS = ("power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "temperature.gpu", "name")


def sample(stop: threading.Event, out: list[dict[str, str]]) -> None:
    while not stop.is_set():
        line = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-i", "0"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        if line:
            out.append(dict(zip(FIELDS, (v.strip() for v in line.split(",")))))
        stop.wait(0.25)


@contextlib.contextmanager
def sampling():
    """The board's samples, taken every 0.25 s while the block runs."""
    samples: list[dict[str, str]] = []
    stop = threading.Event()
    th = threading.Thread(target=sample, args=(stop, samples), daemon=True)
    th.start()
    try:
        yield samples
    finally:
        stop.set()
        th.join()


def board(samples: list[dict[str, str]], skip: int) -> dict[str, float | str]:
    """Mean clock, power and temperature of the samples after the first 1/``skip`` (settling)."""
    busy = samples[len(samples) // skip:] or samples
    f = lambda key: statistics.mean(float(s[key]) for s in busy)  # noqa: E731
    return {"sm_clock_mhz": round(f("clocks.sm")), "max_sm_clock_mhz": round(f("clocks.max.sm")),
            "clock_fraction": round(f("clocks.sm") / f("clocks.max.sm"), 3), "power_w": round(f("power.draw")),
            "power_limit_w": round(f("power.limit")), "power_fraction": round(f("power.draw") / f("power.limit"), 3),
            "temperature_c": round(f("temperature.gpu")), "samples": len(busy)}


def run_path(torch, path: str, n: int, seconds: float) -> dict[str, float | str]:
    dtype = torch.float16 if path == "fp16" else torch.float32
    torch.backends.cuda.matmul.allow_tf32 = path == "tf32"
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):  # warm-up: kernel choice, clocks ramp
        a @ b
    torch.cuda.synchronize()
    with sampling() as samples:
        t0 = time.perf_counter()
        iters = 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
            iters += 10
        dt = time.perf_counter() - t0
    flops = 2.0 * n ** 3 * iters / dt
    return {"gpu": samples[0]["name"] if samples else "?", "path": path, "n": n, "seconds": round(dt, 1),
            "tflops": round(flops / 1e12, 1), **board(samples, skip=5)}  # skip the first fifth: clocks settle


def run_training(spec: str, steps: int) -> dict[str, float | str]:
    """One zoo network's training steps (bench/gpu_speeds.py's step) with the board sampled meanwhile."""
    import gpu_speeds

    model_name, precision, batch = spec.split(":")
    with sampling() as samples:
        times, _opt = gpu_speeds.time_one(gpu_speeds._zoo(), model_name, precision, int(batch), warmup=10, steps=steps)
    step = statistics.median(times)
    return {"gpu": samples[0]["name"] if samples else "?", "path": f"train {model_name} {precision} b{batch}",
            "n": int(batch), "seconds": round(sum(times), 1), "samples_per_s": round(int(batch) / step, 1),
            **board(samples, skip=3)}  # skip the build and warm-up


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--out", default=None, help="also write the rows as CSV here")
    ap.add_argument("--train", nargs="*", default=None, metavar="MODEL:PRECISION:BATCH",
                    help="time training steps of these zoo networks instead of matrix products")
    ap.add_argument("--steps", type=int, default=200, help="timed training steps per --train entry")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.train:
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
        rows = [run_training(spec, args.steps) for spec in args.train]
    else:
        rows = [run_path(torch, p, args.n, args.seconds) for p in ("fp16", "tf32", "fp32")]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + " --- |" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    if args.out:
        with open(args.out, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
