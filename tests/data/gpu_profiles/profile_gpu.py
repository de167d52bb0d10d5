"""Profile a few zoo models on a CUDA GPU; writes one JSON list of profiles.

    PYTHONPATH=. python3 tests/data/gpu_profiles/profile_gpu.py OUT.json

(the provenance of the files beside this script: see PROVENANCE.md).
"""

import json
import sys
import time

from spottrain.profiler import profiler as prof

RUNS = [("resnet50", 64), ("bert-base", 32), ("gpt2-small", 8), ("vgg16", 64), ("resnet32", 128)]

out = []
for precision in ("fp32", "amp"):
    for name, batch in RUNS:
        t0 = time.perf_counter()
        p = prof.profile_zoo(name, batch, device="cuda", precision=precision, iterations=30, warmup=5,
                             loss_steps=50 if (name == "resnet32" and precision == "fp32") else 0)
        out.append(p.to_dict())
        print(f"{name:12s} {precision:5s} b={batch:4d} step={p.step_time_s * 1e3:8.2f} ms  {p.samples_per_s:9.1f} samples/s  "
              f"{p.achieved_tflops:7.2f} TFLOPS  {100 * (p.fraction_of_peak or 0):5.1f}% of {p.device['peak_tflops']}  "
              f"peak mem {p.memory['peak_bytes'] / 2**30:.2f} GiB  wall {time.perf_counter() - t0:.1f}s", flush=True)
try:
    prof.profile_zoo("gpt2-small", 4096, device="cuda", iterations=3, warmup=1)
except prof.BatchSizeError as exc:
    print("OOM search:", exc, flush=True)
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh, indent=1)
