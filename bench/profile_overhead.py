"""Profiler overhead: wall time of `profile` vs. the same training steps run bare.

For each model, two fresh processes (so one-time costs such as torch's lazy imports count):
- baseline: build the zoo model and batch, make the optimizer, run W warm-up + N steps;
- profile:  `profile_zoo(model, batch, iterations=N, warmup=W)` (probe with FlopCounterMode
  and saved-tensor hooks, device info, synchronised phase timing, the Profile record).
Both are timed from just before the model is built to the end, excluding interpreter start and
`import torch`. Overhead = min profile wall / min baseline wall - 1 over --repeats alternating pairs (the
minimum is the run least disturbed by other load on the machine). "outside steps" is the profile's
wall time beyond its warm-up and measured steps (model build, probe, bookkeeping) relative to
its measured steps, from the same run, so it does not depend on run-to-run noise.

    .venv/bin/python bench/profile_overhead.py [--iterations 20] [--warmup 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

MODELS = [("resnet32", 32), ("resnet18-cifar", 8)]

_BASELINE = """
import json, sys, time, torch
from spottrain.profiler import zoo
name, b, n, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
model, batch = zoo.build(name, b)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
t1 = time.perf_counter()
for _ in range(w + n):
    loss = model(*batch)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
t2 = time.perf_counter()
print(json.dumps({"wall_s": t2 - t0, "steps_s": t2 - t1}))
"""

_PROFILE = """
import json, sys, time, torch
from spottrain.profiler.profiler import profile_zoo
name, b, n, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
p = profile_zoo(name, b, iterations=n, warmup=w)
t2 = time.perf_counter()
print(json.dumps({"wall_s": t2 - t0, **p.overhead}))
"""


def _run(code: str, *args: object) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for name, batch in MODELS:
        base_walls, prof_walls, own = [], [], []
        for _ in range(args.repeats):
            base = _run(_BASELINE, name, batch, args.iterations, args.warmup)
            prof = _run(_PROFILE, name, batch, args.iterations, args.warmup)
            base_walls.append(base["wall_s"])
            prof_walls.append(prof["wall_s"])
            # The profile's own work beyond its warm-up and measured steps, relative to the measured steps.
            own.append((prof["wall_s"] - prof["measured_s"] - prof["warmup_s"]) / prof["measured_s"])
        rows.append((name, batch, min(base_walls), min(prof_walls), min(prof_walls) / min(base_walls) - 1, min(own)))
    print(f"profile overhead on CPU: {args.iterations} measured + {args.warmup} warm-up iterations, "
          f"best of {args.repeats} fresh-process pairs")
    print(f"{'model':16s} {'batch':>5s} {'bare loop s':>12s} {'profile s':>10s} {'overhead':>9s} {'outside steps/measured':>24s}")
    for name, batch, bw, pw, ratio, o in rows:
        print(f"{name:16s} {batch:5d} {bw:12.2f} {pw:10.2f} {ratio:9.1%} {o:24.1%}")


if __name__ == "__main__":
    main()
