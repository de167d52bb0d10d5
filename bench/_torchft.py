"""torchft 0.2.0 through the same fault matrix as the spottrain runtime (bench/runtime.py --torchft).

One torchft replica per namespace host (replica group of one process: its own TCPStore,
``Manager`` with ``ProcessGroupGloo``, synchronous quorum, 5 s timeouts, 15 s for the quorum call), a Lighthouse in the
root namespace on the bridge (heartbeat timeout 5 s, quorum of at least hosts - 1), the same model, data,
sampler and global batch as the spottrain job (each participant takes its shard of the global
batch; the Manager averages gradients over the participants), a step committed only when
``should_commit()``. torchft's own ``DistributedDataParallel`` wrapper is not used: in 0.2.0 its
communication hook raises (``AttributeError: 'Future' object has no attribute '_fut'``, or an
AssertionError) as soon as the Manager has recorded an error, even when a replica merely joins
late; gradients go through ``Manager.allreduce`` on one flat buffer instead. The bench plays the scheduler: a replica that exits is replaced after 1 s by
a new one (on a fresh host when its host is gone), which torchft heals from a live peer.
Recovery = fault -> the next step committed by a survivor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spottrain.runtime.netns import Network

KINDS = ("kill", "sigterm", "stop", "linkdown", "loss", "delay", "vanish", "launcher-kill")

REPLICA = r"""
import json, os, sys, time, signal
from datetime import timedelta
import torch, torch.distributed as dist
from torchft import Manager, ProcessGroupGloo
from spottrain.runtime.examples import get_example, classification_loss
from spottrain.runtime.sampler import DeterministicSampler, shard
torch.set_num_threads(1)
if os.environ.get("GLOO_SOCKET_IFNAME"):
    # torchft builds its gloo backend with the 4-argument constructor, whose device comes from
    # the hostname, not from GLOO_SOCKET_IFNAME; on a namespace host that address is not the
    # host's own: bind gloo to the host's interface, as torch.distributed does.
    import torchft.process_group as _tpg
    _Gloo = _tpg.BaseProcessGroupGloo
    def _gloo(store, rank, world_size, timeout):
        opts = _Gloo._Options()
        opts._timeout = timeout
        opts._devices = [_Gloo.create_device(interface=os.environ["GLOO_SOCKET_IFNAME"])]
        return _Gloo(store, rank, world_size, opts)
    _tpg.BaseProcessGroupGloo = _gloo
name, steps, rid, lighthouse, addr, events = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
out = open(events, "a", buffering=1)
def ev(kind, **kw):
    out.write(json.dumps({"t": time.time(), "rid": rid, "kind": kind, **kw}) + "\n")
ex = get_example(name)
torch.manual_seed(0)
model = ex.model()
opt = torch.optim.SGD(model.parameters(), lr=ex.lr, momentum=0.9)
data = ex.dataset()
B = ex.global_batch_size
sampler = DeterministicSampler(size=len(data), seed=0)
def state_dict():
    return {"model": model.state_dict(), "optim": opt.state_dict(), "sampler": sampler.state_dict()}
def load_state_dict(sd):
    model.load_state_dict(sd["model"]); opt.load_state_dict(sd["optim"]); sampler.load_state_dict(sd["sampler"])
store = dist.TCPStore(addr, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
t5 = timedelta(seconds=float(os.environ.get("TORCHFT_BENCH_TIMEOUT_S", "5")))
# The quorum call waits 3x the Lighthouse's heartbeat timeout: with the same 5 s, the survivors'
# quorum call timed out just as the Lighthouse dropped the dead replica, the survivors crashed
# (TimeoutError in Manager._async_quorum) and, when all of them did, the job restarted from step 0.
tq = 3 * t5
from torchft.checkpointing import HTTPTransport
class HostTransport(HTTPTransport):
    # torchft's checkpoint server (what a healing replica fetches the live state from) advertises
    # socket.gethostname(); on this machine that name resolves to 127.0.0.1, which inside a
    # namespace host is the healing replica's own loopback: "Connection refused", the heal fails
    # and the replicas' first all-reduce times out. Advertise the host's own address instead.
    def address(self):
        return f"http://{addr}:{self._server.socket.getsockname()[1]}/checkpoint/"
manager = Manager(pg=ProcessGroupGloo(timeout=t5), load_state_dict=load_state_dict, state_dict=state_dict,
                  checkpoint_transport=HostTransport(timeout=t5, num_chunks=0),
                  min_replica_size=1, use_async_quorum=False, timeout=t5, quorum_timeout=tq, connect_timeout=t5,
                  rank=0, world_size=1, store_addr=addr, store_port=store.port, lighthouse_addr=lighthouse,
                  replica_id=rid, hostname=addr)
params = [p for p in model.parameters()]
ev("start")
# The first replicas wait for each other (a file barrier): torchft lets a lone early replica
# train ahead alone, and the later ones can then never heal once it has finished and left.
initial = int(sys.argv[7])
while initial and sum('"start"' in open(os.path.join(os.path.dirname(events), f)).read()
                      for f in os.listdir(os.path.dirname(events)) if f.endswith(".jsonl")) < initial:
    time.sleep(0.05)
while manager.current_step() < steps:
    opt.zero_grad(set_to_none=False)
    manager.start_quorum()
    r, n = manager.participating_rank(), manager.num_participants()
    idx = shard(sampler.global_batch(B), r or 0, max(n, 1))
    classification_loss(model, data.get_batch(idx)).backward()
    # torchft.ddp.DistributedDataParallel's comm hook fails once the manager has errored
    # (it returns a plain Future: AttributeError '_fut'), so the gradients go through the
    # Manager's fault-tolerant allreduce directly: one flat buffer, averaged over participants.
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    manager.allreduce(flat).wait()
    off = 0
    for p in params:
        p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
        off += p.numel()
    if manager.should_commit():
        opt.step()
        sampler.advance(B)
        ev("step", step=manager.current_step(), n=n)
torch.save(model.state_dict(), events + ".final.pt")
ev("done", step=manager.current_step())
manager.shutdown(wait=False)
os._exit(0)
"""


def _lighthouse(address: str, min_replicas: int, heartbeat_s: float = 5.0) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "torchft_lighthouse"
    return subprocess.Popen([str(exe), "--bind", f"{address}:29510", "--min_replicas", str(min_replicas),
                             "--heartbeat_timeout_ms", str(int(heartbeat_s * 1000))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_one(kind: str | None, args: Any, tmp: Path) -> dict[str, Any]:
    """One torchft job on ``args.hosts`` hosts with fault ``kind`` at step ``args.fault_step``."""
    name = f"tft-{kind or 'baseline'}"
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    with Network(hosts=args.hosts) as net:
        lh = _lighthouse(net.address, max(args.hosts - 1, 1), getattr(args, "torchft_timeout", 5.0))
        lh_addr = f"http://{net.address}:29510"
        procs: dict[str, tuple[subprocess.Popen[bytes], Any]] = {}
        counter = [0]

        def start(host: Any, initial: int = 0) -> str:
            rid = f"r{counter[0]}"
            counter[0] += 1
            env = {**os.environ, **host.env(), "OMP_NUM_THREADS": "1", "SPOTTRAIN_BENCH_RUN": str(d),
                   "TORCHFT_BENCH_TIMEOUT_S": str(getattr(args, "torchft_timeout", 5.0))}
            log = open(d / f"{rid}.log", "ab")
            p = subprocess.Popen(host.prefix + [sys.executable, "-c", REPLICA, args.example, str(args.steps), rid,
                                                lh_addr, host.address, str(d / f"events-{rid}.jsonl"), str(initial)],
                                 env=env, stdout=log, stderr=subprocess.STDOUT)
            procs[rid] = (p, host)
            return rid

        for h in net.hosts:
            start(h, len(net.hosts))
        t0 = time.monotonic()
        fault_t = None
        done_rid = None
        done_at = None
        replaced: set[str] = set()
        pending: list[tuple[float, Any]] = []
        timeout = 240
        failure = None
        while time.monotonic() - t0 < timeout:
            steps = _steps(d)
            if kind and fault_t is None and steps and max(s for _, s, _ in steps) >= args.fault_step:
                fault_t = time.time()
                victim = "r0" if kind == "vanish" else "r1"
                p, host = procs[victim]
                if kind == "kill":
                    p.send_signal(signal.SIGKILL)
                elif kind == "sigterm":
                    p.send_signal(signal.SIGTERM)
                elif kind == "stop":
                    p.send_signal(signal.SIGSTOP)
                elif kind == "linkdown":
                    net.link_down(host)
                elif kind == "vanish":
                    net.vanish(host)
                elif kind in ("loss", "delay"):
                    net.impair(host, kind)
                    pending.append((time.monotonic() + 10, lambda h=host: net.clear_impairment(h)))
                elif kind == "launcher-kill":
                    lh.send_signal(signal.SIGKILL)
                    break
            for at, fn in list(pending):
                if time.monotonic() >= at:
                    pending.remove((at, fn))
                    fn()
            for rid, (p, host) in list(procs.items()):
                code = p.poll()
                if code is None or rid in replaced:
                    continue
                replaced.add(rid)
                if code == 0:
                    done_rid = done_rid or rid
                    continue
                # the scheduler's part: a replacement after 1 s (a new host if this one is gone)
                if len(replaced) < 20 and done_rid is None:
                    new_host = host if host.up else net.add_host()
                    pending.append((time.monotonic() + 1.0, lambda h=new_host: start(h)))
            if done_rid is not None and all(p.poll() is not None for p, _ in procs.values()):
                break
            if done_rid is not None:
                done_at = done_at or time.monotonic()
                if time.monotonic() - done_at > 30:  # a replica still running 30 s after the end
                    break
            time.sleep(0.05)
        else:
            failure = f"not finished within {timeout} s"
        gone_s = None
        if kind == "launcher-kill":
            t_kill = time.monotonic()
            while time.monotonic() - t_kill < 60 and any(p.poll() is None for p, _ in procs.values()):
                time.sleep(0.1)
            alive = [rid for rid, (p, _) in procs.items() if p.poll() is None]
            gone_s = time.monotonic() - t_kill if not alive else None
        orphans = sum(1 for p, _ in procs.values() if p.poll() is None and p.returncode is None)
        # a stopped or stuck replica the harness must clean up counts as an orphan
        for p, _ in procs.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        lh.kill()
        lh.wait(timeout=10)
    steps = _steps(d)
    final = [e for e in _events(d) if e["kind"] == "done"]
    completed = max((e["step"] for e in final), default=max((s for _, s, _ in steps), default=0))
    row: dict[str, Any] = {"kind": kind or "baseline", "ok": bool(final) and completed >= args.steps and failure is None,
                           "failure": failure or (None if final else _last_error(d)), "orphans": orphans,
                           "completed": completed, "gone_s": gone_s}
    if fault_t is not None and kind != "launcher-kill":
        # Every replica logs every step it commits: the job's progress is the newest step any
        # replica committed. Recovery: the fault -> the first step newer than the newest before
        # it (a replica finishing the step in flight is not progress). Lost steps: how far any
        # replica's own step counter went back (0 when committed steps survive).
        before = max((s for t, s, _ in steps if t <= fault_t), default=0)
        after = next(((t, s) for t, s, _ in sorted(steps) if t > fault_t and s > before), None)
        row["recovery_s"] = round(after[0] - fault_t, 3) if after else None
        progress, newest = [], 0
        for t, s, _ in sorted(steps):
            if s > newest:
                newest = s
                if fault_t - 5 <= t <= fault_t + 60:
                    progress.append(t)
        row["max_stall_s"] = max((b - a for a, b in zip(progress, progress[1:])), default=None)
        lost = 0
        for rid in {r for _, _, r in steps}:
            mine = sorted((t, s) for t, s, r in steps if r == rid)
            last_before = max((s for t, s in mine if t <= fault_t), default=None)
            first_after = next((s for t, s in mine if t > fault_t), None)
            if first_after is None:
                continue
            # a replica started after the fault is compared with the job's progress: one that
            # commits step 1 again has redone everything (every replica was lost)
            ref = last_before if last_before is not None else before
            lost = max(lost, ref - (first_after - 1))
        row["lost_steps"] = lost if after else None
    else:
        row["recovery_s"], row["lost_steps"] = None, None
    if kind in ("loss", "delay") and fault_t is not None:
        def rate(a: float, b: float) -> float | None:
            inside = [s for t, s, _ in steps if a <= t <= b]
            return (max(inside) - min(inside)) / (b - a) if len(inside) > 1 else None
        row["rate_before"], row["rate_during"] = rate(fault_t - 10, fault_t), rate(fault_t, fault_t + 10)
        row["false_losses"] = sum(1 for rid in replaced if procs[rid][0].returncode not in (0, None))
    finals = sorted(d.glob("events-*.jsonl.final.pt"))
    row["final_params"] = str(finals[0]) if finals else None
    return row


def _events(d: Path) -> list[dict[str, Any]]:
    out = []
    for p in d.glob("events-*.jsonl"):
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def _steps(d: Path) -> list[tuple[float, int, str]]:
    return sorted((e["t"], e["step"], e["rid"]) for e in _events(d) if e["kind"] == "step")


def _last_error(d: Path) -> str | None:
    for log in sorted(d.glob("r*.log")):
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if "Error" in ln or "error" in ln]
        if lines:
            return f"{log.stem}: {lines[-1][:160]}"
    return None


def matrix(args: Any, tmp: Path, kinds: list[str]) -> list[dict[str, Any]]:
    import torch

    base = run_one(None, args, tmp)
    base_params = torch.load(base["final_params"], weights_only=True) if base["final_params"] else None
    rows = [base]
    if not base["ok"]:
        return rows  # it does not finish without faults here: the fault rows would say nothing more
    for kind in kinds:
        row = run_one(kind, args, tmp)
        if base_params is not None and row.get("final_params"):
            p = torch.load(row["final_params"], weights_only=True)
            row["params_diff"] = max((p[k] - base_params[k]).abs().max().item() for k in p)
        rows.append(row)
    return rows
