"""Benchmark of the elastic runtime: throughput against plain DDP, and a fault matrix, on hosts
made of Linux network namespaces (one per host, veth links on a private bridge, addresses in
198.18.0.0/15), every figure from the same run.

1. Throughput: steady-state steps/s of the spottrain runtime on H hosts divided by that of a
   plain DistributedDataParallel loop over the same namespaces, model, data and batches
   (goal >= 0.97); the two alternate, ROUNDS times each, to share the machine's noise. The
   checkpoint stall (training-thread time per save) comes from the same runs.
2. Fault matrix: one run per fault kind, the fault at step K: kill -9, SIGTERM (notice),
   SIGSTOP, link down (silent), packet loss, delay, the chief's host vanishing, the launcher
   killed (SIGKILL), the controller stopped (SIGTERM). Per kind: recovery (fault -> next step
   completed by the survivors), lost steps, orphans (processes of the job alive 30 s after
   the job or its launcher ended), whether the final parameters equal a fault-free run of the
   same seed (max |diff|), and for launcher/controller death: how long until every worker was
   gone, and the step the rerun resumed from.
3. torchft 0.2.0 (``--torchft``, if installed): the same faults on a torchft job (Lighthouse,
   Manager, ProcessGroupGloo, one replica per host, the same model and global batch).
4. Soak (``--soak SECONDS``): a random fault every 20-60 s on H hosts until the time is up;
   the job must complete with no orphan process and no lost checkpoint.

    .venv/bin/python bench/runtime.py [--example cifar-resnet] [--hosts 4] [--rounds 3] [--torchft] [--soak 1800]

Needs root and iproute2 (namespaces); it says why and stops otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pages import write_page  # noqa: E402
from spottrain.runtime.checkpoint import Checkpointer, load_checkpoint  # noqa: E402
from spottrain.runtime.faults import parse_injections  # noqa: E402
from spottrain.runtime.local import LocalJob, job_pids, run_local  # noqa: E402
from spottrain.runtime.netns import Host, Network, available  # noqa: E402
from spottrain.runtime.summary import read_worker_events  # noqa: E402

WARMUP = 10
FAULTS = ("kill", "sigterm", "stop", "linkdown", "loss", "delay", "vanish", "launcher-kill", "controller-term")
LABEL = {"baseline": "none (fault-free run)", "kill": "kill -9 of a worker", "sigterm": "SIGTERM (notice)", "stop": "SIGSTOP of a worker",
         "linkdown": "link down (silent)", "loss": "packet loss 5 % for 10 s", "delay": "slow link for 10 s",
         "vanish": "the chief's host vanishes", "launcher-kill": "launcher killed (SIGKILL)",
         "controller-term": "controller stopped (SIGTERM)"}

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


def _rate(times: list[float]) -> float:
    t = times[WARMUP:]
    return (len(t) - 1) / (t[-1] - t[0])


def plain_ddp(net: Network, example: str, steps: int) -> float:
    hosts = net.hosts
    procs = []
    for rank, host in enumerate(hosts):
        env = {**os.environ, **host.env(), "RANK": str(rank), "WORLD_SIZE": str(len(hosts)),
               "MASTER_ADDR": hosts[0].address, "MASTER_PORT": "29500", "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen(host.prefix + [sys.executable, "-c", PLAIN, example, str(steps)], env=env,
                                      stdout=subprocess.PIPE, text=True))
    out = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("plain DDP run failed")
    return _rate(json.loads(out[0]))


def _job(net: Network, example: str, steps: int, tmp: Path, name: str, *, inject: str = "",
         interval_s: float | None = None, every: int | None = None, job_id: str | None = None) -> LocalJob:
    run_dir = tmp / name
    ck = tmp / (job_id or name) / "ck"
    env = {"SPOTTRAIN_STEPS": str(steps), "SPOTTRAIN_CHECKPOINT_DIR": str(ck), "SPOTTRAIN_SEED": "0"}
    if interval_s:
        env["SPOTTRAIN_CHECKPOINT_INTERVAL_S"] = str(interval_s)
    if every:
        env["SPOTTRAIN_CHECKPOINT_EVERY_STEPS"] = str(every)
    n = len(net.hosts)
    return LocalJob(command=[sys.executable, "-m", "spottrain.runtime.examples", example], workers=n,
                    run_dir=run_dir / "run", job_id=job_id or name, env=env, steps=steps, checkpoint_dir=ck,
                    injections=parse_injections(inject, workers=n) if inject else [], replacement_delay_s=1.0,
                    timeout_s=900, hosts=list(net.hosts), network=net, controller_address=net.address)


def _params(path: str | None) -> dict[str, Any] | None:
    return load_checkpoint(path)["model"] if path else None


def _diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if a is None or b is None:
        return None
    return max((a[k] - b[k]).abs().max().item() for k in a)


# ---------------------------------------------------------------------------- ours
def ours_fault(kind: str, args: argparse.Namespace, tmp: Path, base: dict[str, Any] | None) -> dict[str, Any]:
    at = args.fault_step
    with Network(hosts=args.hosts) as net:
        if kind in ("launcher-kill", "controller-term"):
            return _controller_death(kind, net, args, tmp, base)
        spec = {"kill": f"kill:1@step{at}", "sigterm": f"sigterm:1@step{at}", "stop": f"stop:1@step{at}",
                "linkdown": f"linkdown:1@step{at}", "loss": f"loss:1@step{at}/10s",
                "delay": f"delay:1@step{at}/10s", "vanish": f"vanish:chief@step{at}"}[kind]
        job = _job(net, args.example, args.steps, tmp, f"ours-{kind}", inject=spec, every=args.every)
        events: list[dict[str, Any]] = []
        s = run_local(job, on_event=lambda k, d: events.append(d) if k == "inject" else None)
        time.sleep(1.0)
        orphans = len(job_pids(job.run_dir)) + sum(len(h.pids()) for h in net.hosts)
    steps = [(e["t"], e["step"]) for e in read_worker_events(job.run_dir) if e["kind"] == "step"]
    row: dict[str, Any] = {"kind": kind, "ok": s.ok, "failure": s.failure, "orphans": orphans,
                           "lost_steps": s.lost_steps, "revocations": s.revocations,
                           "params_diff": _diff(_params(s.final_checkpoint), base)}
    rec = [r["recovery_s"] for r in s.recoveries if r["recovery_s"] is not None]
    row["recovery_s"] = max(rec) if rec else None
    row["max_stall_s"] = s.max_stall_s
    if kind in ("loss", "delay"):
        row.update(_impairment_rates(steps, s, events[0]["t"] if events else None))
    return row


def _impairment_rates(steps: list[tuple[float, int]], s: Any, t_fault: float | None) -> dict[str, Any]:
    """Steps/s in the 10 s of the impairment against the 10 s before it; workers declared lost."""
    out: dict[str, Any] = {"false_losses": s.revocations}
    if t_fault is None:
        return out

    def rate(a: float, b: float) -> float | None:
        inside = [st for t, st in steps if a <= t <= b]
        return (max(inside) - min(inside)) / (b - a) if len(inside) > 1 else None

    before, during = rate(t_fault - 10, t_fault), rate(t_fault, t_fault + 10)
    out["rate_before"], out["rate_during"] = before, during
    return out


def _controller_death(kind: str, net: Network, args: argparse.Namespace, tmp: Path,
                      base: dict[str, Any] | None) -> dict[str, Any]:
    """The controller in its own process, killed (or stopped) at step K; then the same job again."""
    name = f"ours-{kind}"
    spec = {"hosts": [h.__dict__ for h in net.hosts], "address": net.address, "example": args.example,
            "steps": args.steps, "tmp": str(tmp), "name": name, "every": args.every}
    run_dir = tmp / name / "run"
    ctl = subprocess.Popen([sys.executable, __file__, "--_controller", json.dumps(spec)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    events = run_dir / "events-w0.jsonl"
    deadline = time.monotonic() + 600
    last = 0
    while time.monotonic() < deadline and ctl.poll() is None:
        if events.exists():
            st = [json.loads(x)["step"] for x in events.read_text().splitlines() if '"step"' in x]
            last = max(st, default=0)
            if last >= args.fault_step:
                break
        time.sleep(0.1)
    ctl.send_signal(signal.SIGKILL if kind == "launcher-kill" else signal.SIGTERM)
    t_kill = time.monotonic()
    ctl.wait(timeout=60)
    gone_s = None
    orphans_30 = None
    while time.monotonic() - t_kill < 60:
        alive = job_pids(run_dir)
        if not alive and gone_s is None:
            gone_s = time.monotonic() - t_kill
            break
        if orphans_30 is None and time.monotonic() - t_kill >= 30:
            orphans_30 = len(alive)
        time.sleep(0.05)
    leftover = job_pids(run_dir)
    if orphans_30 is None:
        orphans_30 = len(leftover)
    for pid in leftover:
        os.kill(pid, signal.SIGKILL)
    wev = read_worker_events(run_dir)
    at_kill = max((e["step"] for e in wev if e["kind"] == "step"), default=0)
    # the same command again
    t_rerun = time.time()
    again = subprocess.run([sys.executable, __file__, "--_controller", json.dumps(spec)], capture_output=True,
                           text=True, timeout=900)
    summary = json.loads(again.stdout.strip().splitlines()[-1]) if again.returncode == 0 else {}
    restores = [e["step"] for e in read_worker_events(run_dir) if e["kind"] == "restore" and e["t"] >= t_rerun]
    resumed = min(restores) if restores else 0
    return {"kind": kind, "ok": bool(summary.get("ok")), "failure": summary.get("failure"), "orphans": orphans_30,
            "gone_s": gone_s, "step_at_fault": at_kill, "resumed_from": resumed,
            "lost_steps": max(at_kill - resumed, 0), "completed": summary.get("completed_steps"),
            "recovery_s": None, "params_diff": _diff(_params(summary.get("final_checkpoint")), base)}


def _controller_main(spec_json: str) -> None:
    spec = json.loads(spec_json)

    class _Net:  # the bench owns the namespaces; this process only places workers on them
        address = spec["address"]
        hosts = [Host(**h) for h in spec["hosts"]]

    net = _Net()
    job = _job(net, spec["example"], spec["steps"], Path(spec["tmp"]), spec["name"], every=spec["every"])  # type: ignore[arg-type]
    job.network = None
    s = run_local(job)
    print(json.dumps({"ok": s.ok, "failure": s.failure, "completed_steps": s.completed_steps,
                      "final_checkpoint": s.final_checkpoint}))


# ---------------------------------------------------------------------------- soak
def _last_step(run_dir: Path) -> int:
    """The newest step any worker logged (read from the ends of the event files)."""
    best = 0
    for path in Path(run_dir).glob("events-*.jsonl"):
        try:
            with open(path, "rb") as fh:
                fh.seek(max(fh.seek(0, 2) - 4096, 0))
                tail = fh.read().decode(errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in tail:
            if '"step"' in line:
                try:
                    best = max(best, int(json.loads(line)["step"]))
                except (ValueError, KeyError):
                    continue
    return best


SOAK_KINDS = ("kill", "sigterm", "stop", "linkdown", "loss", "delay", "vanish")


def soak(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    t, spec = 0.0, []
    while True:
        t += rng.uniform(20, 60)
        if t > args.soak:
            break
        kind = rng.choice(SOAK_KINDS)
        worker = "chief" if kind == "vanish" or rng.random() < 0.25 else rng.randrange(args.hosts)
        dur = "/10s" if kind in ("stop", "loss", "delay", "linkdown") and rng.random() < 0.5 else ""
        if kind == "linkdown" and not dur:
            dur = ""
        spec.append(f"{kind}:{worker}@{t:.0f}s{dur}")
    # The job must outlast the fault schedule and then complete. Its speed on a shared machine
    # varies tenfold with the load, so it is paced: every forward pass sleeps for the time in a
    # file (SPOTTRAIN_EXAMPLE_SLEEP_FILE, timing only), which the bench adjusts every 5 s so that
    # the job ends about a minute after the last scheduled fault (--soak-rate steps/s on average).
    steps = args.soak_steps or int(args.soak_rate * (args.soak + 60))
    pace_file = tmp / "soak-pace"
    pace_file.write_text("0.05")
    with Network(hosts=args.hosts) as net:
        job = _job(net, args.example, steps, tmp, "soak", inject=",".join(spec), interval_s=10.0)
        job.env["SPOTTRAIN_EXAMPLE_SLEEP_FILE"] = str(pace_file)
        job.timeout_s = 2 * args.soak + 1800
        job.max_replacements = 1000
        loads: list[float] = []
        done = threading.Event()

        def sample_load() -> None:  # the machine is shared: the 1-minute load average every 15 s
            while not done.wait(15.0):
                loads.append(os.getloadavg()[0])

        def pace() -> None:
            sleep, last = 0.05, None
            end = t0 + args.soak + 60
            while not done.wait(5.0):
                now, step = time.monotonic(), _last_step(job.run_dir)
                if last is not None and step > last[1]:
                    per_step = (now - last[0]) / (step - last[1])  # compute + the current sleep
                    left = end - now
                    want = left / (steps - step) if left > 0 and step < steps else 0.0
                    sleep = min(max(want - (per_step - sleep), 0.0), 1.0)
                    pace_file.write_text(f"{sleep:.4f}")
                last = (now, step)

        t0 = time.monotonic()
        sampler = threading.Thread(target=sample_load, daemon=True)
        sampler.start()
        threading.Thread(target=pace, daemon=True).start()
        injected: dict[str, int] = {}
        skipped: list[str] = []

        def on_event(kind: str, ev: dict[str, Any]) -> None:
            if kind == "inject":
                injected[ev["fault"]] = injected.get(ev["fault"], 0) + 1
            elif kind == "inject_skipped":
                skipped.append(f"{ev['fault']}:{ev['target']} ({ev['reason']})")

        s = run_local(job, on_event=on_event)
        wall = time.monotonic() - t0
        done.set()
        time.sleep(1.0)
        orphans = len(job_pids(job.run_dir)) + sum(len(h.pids()) for h in net.hosts)
    ck = Checkpointer(job.checkpoint_dir, job_id=job.job_id)
    listed = ck.list()
    loadable = 0
    for info in listed:
        try:
            loadable += load_checkpoint(info.path, job_id=job.job_id)["step"] == info.step
        except Exception as exc:  # noqa: BLE001 - counted as not loadable and named
            print(f"checkpoint {info.path} not loadable: {exc}", flush=True)
    kinds: dict[str, int] = {}
    for item in spec:
        kinds[item.split(":")[0]] = kinds.get(item.split(":")[0], 0) + 1
    rec = [r["recovery_s"] for r in s.recoveries if r["recovery_s"] is not None]
    return {"seconds": args.soak, "wall_s": wall, "faults": len(spec), "kinds": kinds, "ok": s.ok,
            "failure": s.failure, "completed": s.completed_steps, "steps": steps, "orphans": orphans,
            "revocations": s.revocations, "lost_steps": s.lost_steps,
            "max_recovery_s": max(rec) if rec else None, "median_recovery_s": statistics.median(rec) if rec else None,
            "checkpoints": len(listed), "checkpoints_loadable": loadable, "final": s.final_checkpoint,
            "injected": injected, "skipped": skipped, "spec": ",".join(spec),
            "load_median": statistics.median(loads) if loads else None, "load_max": max(loads, default=None)}


# ---------------------------------------------------------------------------- main
def _fmt(x: Any, unit: str = "", nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}{unit}"
    return f"{x}{unit}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", default="cifar-resnet")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fault-step", type=int, default=40)
    ap.add_argument("--every", type=int, default=20, help="checkpoint every N steps in the fault runs")
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--torchft", action="store_true", help="also run torchft 0.2.0 through the fault matrix")
    ap.add_argument("--soak", type=float, default=0.0, help="seconds of soak (0: none)")
    ap.add_argument("--soak-steps", type=int, default=0, help="steps of the soak job (0: --soak-rate x its length)")
    ap.add_argument("--soak-rate", type=float, default=3.0, help="average steps/s the soak job is paced to")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-ours", action="store_true", help="no fault matrix of the spottrain runtime")
    ap.add_argument("--torchft-timeout", type=float, default=5.0,
                    help="torchft Manager/ProcessGroup/quorum timeouts and the Lighthouse heartbeat timeout (s)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "runtime.md"))
    ap.add_argument("--_controller")
    args = ap.parse_args()
    if args._controller:
        _controller_main(args._controller)
        return
    # SIGTERM (a timeout, a CI cancel) unwinds like an exception: every network is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    ok, why = available()
    if not ok:
        sys.exit(f"bench/runtime.py needs network namespaces: {why}")
    tmp = Path(tempfile.mkdtemp(prefix="spottrain-bench-runtime-"))
    t_start = time.time()
    lines = ["# bench/runtime: elastic runtime on hosts in network namespaces, faults, torchft", "",
             "Command (same run for every figure):", "",
             "    .venv/bin/python " + " ".join(["bench/runtime.py", *sys.argv[1:]]), ""]
    load = os.getloadavg()
    lines += [f"Machine: {os.cpu_count()} CPU cores, load average {load[0]:.1f} at the start (shared); torch CPU, "
              f"gloo. Job: `{args.example}`, {args.hosts} hosts (one network namespace each, veth on a bridge, "
              "198.18.0.0/15), one worker per host.", ""]
    # 1. throughput
    if not args.skip_throughput:
        plain, ours, stalls = [], [], []
        for r in range(args.rounds):
            with Network(hosts=args.hosts) as net:
                # Alternate which runs first: on a shared machine the load drifts within a round.
                for which in (("plain", "ours") if r % 2 == 0 else ("ours", "plain")):
                    if which == "plain":
                        plain.append(plain_ddp(net, args.example, args.steps))
                        continue
                    s = run_local(_job(net, args.example, args.steps, tmp, f"ov{r}", interval_s=5.0))
                    if not s.ok:
                        raise RuntimeError(f"spottrain run failed: {s.failure}")
                    ours.append(_rate([e["t"] for e in read_worker_events(tmp / f"ov{r}" / "run") if e["kind"] == "step"]))
                    stalls += [c["stall_s"] for c in s.checkpoints]
            print(f"round {r}: plain {plain[-1]:.2f} steps/s, ours {ours[-1]:.2f} steps/s", flush=True)
        ratio = statistics.median(ours) / statistics.median(plain)
        paired = statistics.median(o / p for o, p in zip(ours, plain))
        args.rate = statistics.median(ours)
        lines += [f"## Throughput over {args.hosts} namespace hosts", "",
                  "| figure | value | goal |", "|---|---|---|",
                  f"| plain DDP over the same namespaces (median of {args.rounds}) | {statistics.median(plain):.2f} steps/s "
                  f"(runs {', '.join(f'{x:.2f}' for x in plain)}) | |",
                  f"| spottrain runtime, checkpoint every 5 s (median of {args.rounds}) | {statistics.median(ours):.2f} steps/s "
                  f"(runs {', '.join(f'{x:.2f}' for x in ours)}) | |",
                  f"| throughput ratio, median of ours / median of plain | **{ratio:.3f}** | >= 0.97 |",
                  f"| throughput ratio, median of the paired rounds | **{paired:.3f}** (rounds "
                  f"{', '.join(f'{o / p:.2f}' for o, p in zip(ours, plain))}; plain ran first in even rounds) | >= 0.97 |",
                  f"| checkpoint stall per save (training thread) | {statistics.median(stalls) * 1e3:.1f} ms | |", ""]
        print("\n".join(lines[-9:]), flush=True)
    # 2. fault matrix, ours
    faults = [f for f in args.faults.split(",") if f]
    if not args.skip_ours:
        with Network(hosts=args.hosts) as net:
            base_s = run_local(_job(net, args.example, args.steps, tmp, "baseline", every=args.every))
        base = _params(base_s.final_checkpoint)
        rows = []
        for kind in faults:
            row = ours_fault(kind, args, tmp, base)
            rows.append(row)
            print(json.dumps(row), flush=True)
        lines += _matrix_table("spottrain", rows, args)
    # 3. torchft
    if args.torchft:
        from bench import _torchft

        ft_rows = _torchft.matrix(args, tmp, [k for k in faults if k in _torchft.KINDS])
        for row in ft_rows:
            print(json.dumps(row), flush=True)
        lines += _matrix_table(f"torchft 0.2.0 ({args.torchft_timeout:g} s timeouts, quorum call "
                               f"{3 * args.torchft_timeout:g} s)", ft_rows, args)
    # 4. soak
    if args.soak > 0:
        res = soak(args, tmp)
        print(json.dumps(res), flush=True)
        lines += [f"## Soak: {args.soak / 60:g} minutes, a random fault every 20-60 s, {args.hosts} hosts", "",
                  "| figure | value |", "|---|---|",
                  f"| faults scheduled | {res['faults']} ({', '.join(f'{k} {v}' for k, v in sorted(res['kinds'].items()))}) |",
                  f"| faults injected | {sum(res['injected'].values())} "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(res['injected'].items()))}) |",
                  f"| faults skipped (no live target, or due after the job ended) | {len(res['skipped'])} |",
                  f"| job completed | {'yes' if res['ok'] else 'NO: ' + str(res['failure'])} "
                  f"({res['completed']} / {res['steps']} steps, {res['wall_s'] / 60:.1f} min) |",
                  f"| workers lost (revocations) | {res['revocations']} |",
                  f"| lost steps | {res['lost_steps']} |",
                  f"| recovery, median / max | {_fmt(res['median_recovery_s'], ' s')} / {_fmt(res['max_recovery_s'], ' s')} |",
                  f"| orphan processes after the job | {res['orphans']} |",
                  f"| checkpoints kept / loadable | {res['checkpoints']} / {res['checkpoints_loadable']} |",
                  f"| load average (1 min) during the soak, median / max | {_fmt(res['load_median'], '', 1)} / "
                  f"{_fmt(res['load_max'], '', 1)} |", ""]
    lines += [f"Bench wall time {(time.time() - t_start) / 60:.1f} min.", ""]
    print("\n".join(lines))
    if args.out:
        write_page(args.out, lines)


def _matrix_table(engine: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    out = [f"## Fault matrix: {engine}, {args.hosts} hosts, fault at step {args.fault_step} of {args.steps}", "",
           "| fault | completed | recovery (fault -> next step) | longest gap between steps | lost steps | orphans "
           "| final params vs fault-free | notes |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        notes = []
        label = LABEL.get(r["kind"], r["kind"])
        if engine.startswith("torchft") and r["kind"] == "launcher-kill":
            # torchft's coordinator is the Lighthouse; the harness keeps no checkpoint to rerun from
            label = "the Lighthouse killed (SIGKILL)"
            notes.append(f"all replicas gone {_fmt(r.get('gone_s'), ' s', 1)} after; completed {r.get('completed')} "
                         f"of {args.steps} steps; no checkpoint to resume from")
        elif r.get("gone_s") is not None or r["kind"] in ("launcher-kill", "controller-term"):
            notes.append(f"all workers gone {_fmt(r.get('gone_s'), ' s', 1)} after; rerun resumed from step "
                         f"{r.get('resumed_from')} (at the fault: {r.get('step_at_fault')})")
        if r["kind"] in ("loss", "delay"):
            notes.append(f"workers declared lost: {r.get('false_losses', r.get('revocations'))}; steps/s "
                         f"{_fmt(r.get('rate_before'))} before, {_fmt(r.get('rate_during'))} during")
        if r.get("failure") and not r["ok"] and not (engine.startswith("torchft") and r["kind"] == "launcher-kill"):
            notes.append(str(r["failure"])[:120])
        diff = r.get("params_diff")
        out.append(f"| {label} | {'yes' if r['ok'] else 'NO'} | {_fmt(r.get('recovery_s'), ' s')} "
                   f"| {_fmt(r.get('max_stall_s'), ' s')} "
                   f"| {_fmt(r.get('lost_steps'))} | {_fmt(r.get('orphans'))} | "
                   f"{'-' if diff is None else f'{diff:.1e}'} | {'; '.join(notes)} |")
    return out + [""]


if __name__ == "__main__":
    main()
