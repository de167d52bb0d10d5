"""Benchmark of the elastic runtime against plain DDP, in the same run.

1. Overhead with no failures: steady-state steps/s of `spottrain run --backend local` (the
   per-step control all-reduce, store read, event log, periodic async checkpoints) divided by
   that of a plain DistributedDataParallel loop over the same model, data and batches
   (goal >= 0.97). The two alternate, ROUNDS times each, to share the machine's noise.
2. Checkpoint stall: training-thread time per checkpoint (snapshot to CPU) as a share of the
   time between checkpoints at the chosen interval (goal <= 3%).
3. Recovery: kill -9 of one worker -> next completed step of the survivors (goal <= 10 s),
   and lost steps per revocation (kill -9 and SIGTERM notice; goal <= one interval, 0 with
   a notice).

    .venv/bin/python bench/runtime.py [--example cifar-resnet] [--workers 2] [--steps 80]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spottrain.runtime.faults import parse_injections
from spottrain.runtime.local import LocalJob, run_local
from spottrain.runtime.summary import read_worker_events

WARMUP = 10

PLAIN = r"""
import json, os, sys, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from spottrain.runtime.examples import get_example, classification_loss
from spottrain.runtime.sampler import DeterministicSampler, shard
torch.set_num_threads(1)
name, steps = sys.argv[1], int(sys.argv[2])
ex = get_example(name)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(ex.model())
opt = torch.optim.SGD(model.parameters(), lr=ex.lr, momentum=0.9)
data = ex.dataset()
sampler = DeterministicSampler(size=len(data), seed=0)
B = ex.global_batch_size
times = []
for step in range(steps):
    idx = shard(sampler.global_batch(B), rank, world)
    opt.zero_grad(set_to_none=True)
    (classification_loss(model, data.get_batch(idx)) * (len(idx) / B * world)).backward()
    opt.step()
    sampler.advance(B)
    times.append(time.time())
if rank == 0:
    print(json.dumps(times))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rate(times: list[float]) -> float:
    t = times[WARMUP:]
    return (len(t) - 1) / (t[-1] - t[0])


def plain_ddp(example: str, workers: int, steps: int) -> float:
    port = _free_port()
    procs = []
    for rank in range(workers):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(workers), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-c", PLAIN, example, str(steps)], env=env,
                                      stdout=subprocess.PIPE, text=True))
    out = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("plain DDP run failed")
    return _rate(json.loads(out[0]))


def spottrain_run(example: str, workers: int, steps: int, tmp: Path, *, interval_s: float | None,
                  inject: str = "", name: str = "run") -> tuple[float, object]:
    run_dir = tmp / name
    env = {"SPOTTRAIN_STEPS": str(steps), "SPOTTRAIN_CHECKPOINT_DIR": str(run_dir / "ck"), "SPOTTRAIN_SEED": "0"}
    if interval_s:
        env["SPOTTRAIN_CHECKPOINT_INTERVAL_S"] = str(interval_s)
    job = LocalJob(command=[sys.executable, "-m", "spottrain.runtime.examples", example], workers=workers,
                   run_dir=run_dir / "run", job_id=name, env=env, steps=steps, checkpoint_dir=run_dir / "ck",
                   injections=parse_injections(inject, workers=workers) if inject else [], replacement_delay_s=1.0)
    summary = run_local(job)
    if not summary.ok:
        raise RuntimeError(f"spottrain run failed: {summary.failure}")
    steps_t = [e["t"] for e in read_worker_events(job.run_dir) if e["kind"] == "step"]
    return _rate(steps_t), summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", default="cifar-resnet")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=5.0, help="checkpoint interval (s) of the overhead runs")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="spottrain-bench-"))
    plain, ours, stalls, summaries = [], [], [], []
    for r in range(args.rounds):
        plain.append(plain_ddp(args.example, args.workers, args.steps))
        rate, s = spottrain_run(args.example, args.workers, args.steps, tmp, interval_s=args.interval, name=f"ov{r}")
        ours.append(rate)
        summaries.append(s)
        stalls += [c["stall_s"] for c in s.checkpoints]
    p_med, o_med = statistics.median(plain), statistics.median(ours)
    ratio = o_med / p_med
    step_s = 1.0 / o_med
    stall = statistics.median(stalls) if stalls else 0.0
    persist = statistics.median([c["persist_s"] for s in summaries for c in s.checkpoints] or [0.0])
    opt_interval = None
    try:  # the interval the transience model would choose for this checkpoint cost
        from spottrain.transience import lifetime_model, optimal_checkpoint_interval_s

        opt_interval = optimal_checkpoint_interval_s(max(stall + persist, 1e-3), lifetime_model("aws", "V100"),
                                                     nodes=args.workers)
    except Exception:  # noqa: BLE001 - the bench still reports the measured interval
        pass
    _, kill = spottrain_run(args.example, max(args.workers, 3), args.steps, tmp, interval_s=args.interval,
                            inject="kill:1@step30", name="kill")
    _, term = spottrain_run(args.example, max(args.workers, 3), args.steps, tmp, interval_s=args.interval,
                            inject="sigterm:1@step30", name="term")
    rows = [
        ("throughput, plain DDP (steps/s)", f"{p_med:.2f}", f"runs: {', '.join(f'{x:.2f}' for x in plain)}"),
        ("throughput, spottrain (steps/s)", f"{o_med:.2f}", f"runs: {', '.join(f'{x:.2f}' for x in ours)}"),
        ("throughput ratio (goal >= 0.97)", f"{ratio:.3f}",
         "median / median; paired rounds: " + ", ".join(f"{o / p:.2f}" for o, p in zip(ours, plain))),
        ("checkpoint stall per save (ms)", f"{stall * 1e3:.1f}", f"persist in background {persist * 1e3:.1f} ms"),
        (f"stall share at {args.interval:g} s interval (goal <= 3%)", f"{100 * stall / args.interval:.3f}%",
         f"{100 * stall / step_s:.1f}% of one step, once per {args.interval / step_s:.0f} steps"),
    ]
    if opt_interval:
        rows.append(("transience-optimal interval (aws V100)", f"{opt_interval:.0f} s",
                     f"stall share there {100 * stall / opt_interval:.4f}%"))
    for label, s in (("kill -9", kill), ("SIGTERM notice", term)):
        rec = [r for r in s.recoveries if r["recovery_s"] is not None]
        rows.append((f"recovery after {label} (goal <= 10 s)", f"{max(r['recovery_s'] for r in rec):.2f} s",
                     "death -> next completed step"))
        rows.append((f"lost steps per revocation, {label}", str(s.lost_steps // max(s.revocations, 1)),
                     f"max stall {s.max_stall_s:.2f} s"))
    width = max(len(r[0]) for r in rows)
    print(f"# bench/runtime: {args.example}, {args.workers} workers (3 for the fault runs), {args.steps} steps, "
          f"gloo on CPU, {os.cpu_count()} cores")
    for label, value, note in rows:
        print(f"{label:<{width}}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
