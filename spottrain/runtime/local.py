"""The local backend: N worker processes on this machine (or on hosts in network namespaces),
a controller, fault injection.

The controller is the long-lived process of the job (the "agent"): it hosts the c10d TCPStore
the workers rendezvous on and a liveness server (:mod:`spottrain.runtime.liveness`) every worker
keeps a heartbeat connection to; it publishes a new membership *generation* when a worker
leaves, is lost or joins, and asks the recovery policy (:mod:`spottrain.policies`, the same
functions the simulator runs) what to do on every event and at periodic ticks. It is an
explicit state machine over the events ``revoked`` / ``notice`` / ``joined`` / ``tick``; the
training itself never waits for it except to learn a new membership.

How a worker is found lost, by type, never by message text:

- its process exits (``Popen.poll``, as a host agent reports it) with a signal or an unknown
  code: ``revoked``; with :data:`~spottrain.runtime.elastic.EXIT_LEFT`: it left after a notice
  or a release; after posting ``error/<wid>`` (an exception in the training code): the job
  fails, nothing is replaced;
- its heartbeat connection closes without a ``bye`` (the process died; seen at once on any
  host whose kernel is alive), or stays silent past ``liveness_timeout_s`` (SIGSTOP, a link
  down, a host gone): it is declared lost, killed where the controller can reach it, fenced
  (it exits if it ever wakes up), and the survivors are told to abort the hung collective.

What the policy sees is what the simulator gives it (:class:`~spottrain.policies.JobState`):
the deadline, progress in samples, live nodes with their prices and measured throughput, the
options it may buy (spot and on-demand, with prices) and the on-demand fallback, the measured
restart overhead, ticks every ``tick_s``. Every :class:`~spottrain.policies.Decision` field is
carried out: ``checkpoint_now`` (all members agree on the step), ``request`` (a new process,
on a fresh host when the old one is gone), ``release`` (the node leaves at a step boundary; when
the same decision requests nodes, only after those have joined), ``switch_to_on_demand``
(outstanding spot requests are cancelled). What cannot be carried out (an unknown node id, the
replacement budget spent) is refused loudly: a ``refused`` event, printed by ``spottrain run``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

from spottrain.errors import InputError
from spottrain.policies import Decision, JobState, NodeOption, NodeView, get_policy
from spottrain.runtime.elastic import ENV_RDZV, ENV_WORKER_ID, EXIT_FENCED, EXIT_INPUT, EXIT_LEFT, EXIT_STOPPED
from spottrain.runtime.faults import Injection, needs_hosts
from spottrain.runtime.liveness import DEFAULT_DEADLINE_S, ENV_LIVENESS, LivenessServer
from spottrain.runtime.membership import MembershipPublisher
from spottrain.runtime.summary import RunSummary, summarize

TICK_S = 0.02
ENV_RUN_DIR = "SPOTTRAIN_RUN_DIR"
"""Every worker's environment names its job's run directory: how the job's processes are found."""
LOCAL_OPTION = NodeOption(instance_type="local", gpu="cpu", spot=True, zone=None, price_usd_per_hour=0.0,
                          throughput=1.0, delay_s=2.0)


@dataclass(kw_only=True)
class _Worker:
    wid: str
    slot: int
    proc: subprocess.Popen[bytes]
    started_s: float
    log: Any
    option: NodeOption
    host: Any = None
    batch: int | None = None
    ready: bool = False
    leaving: bool = False
    released: bool = False
    lost: bool = False
    notice_handled: bool = False
    fault_t: float | None = None
    """Wall time of the fault injected into this worker (recovery is measured from it)."""


@dataclass(kw_only=True)
class LocalJob:
    """What to run and how to disturb it."""

    command: list[str]
    """argv of one worker (it reads its configuration from the SPOTTRAIN_* environment)."""
    workers: int
    run_dir: Path
    job_id: str
    env: dict[str, str] = field(default_factory=dict)
    injections: list[Injection] = field(default_factory=list)
    policy: str = "replace-same"
    replacement_delay_s: float = 2.0
    """Time from a revocation until the replacement process is started (acquisition); the
    ``delay_s`` of the default options."""
    steps: int | None = None
    checkpoint_dir: Path | None = None
    max_replacements: int = 32
    timeout_s: float = 1800.0
    instance_type: str = "local"
    price_usd_per_hour: float = 0.0
    samples_per_step: int = 1
    """Samples in one optimizer step (the global batch): progress is given to policies in samples."""
    deadline_s: float | None = None
    """Seconds from the start by which the job should be done (the plan's deadline)."""
    planned: tuple[NodeOption, ...] | None = None
    """The node each slot starts as (its type, market and price); default ``workers`` spot nodes
    of ``instance_type`` at ``price_usd_per_hour``."""
    options: tuple[NodeOption, ...] | None = None
    """What a policy may request (default: the planned nodes' kinds)."""
    on_demand_fallback: tuple[NodeOption, ...] = ()
    """The on-demand cluster deadline policies switch to."""
    tick_s: float = 5.0
    """Period of ``tick`` events to the policy (the simulator's ``tick_s``)."""
    liveness_timeout_s: float = DEFAULT_DEADLINE_S
    """A worker silent this long is declared lost."""
    start_timeout_s: float = 180.0
    """A started worker that has not connected within this long is declared lost."""
    stop_grace_s: float = 15.0
    """On SIGTERM/SIGINT of the controller: how long workers get to checkpoint and exit before SIGKILL."""
    hosts: list[Any] | None = None
    """Hosts (:class:`~spottrain.runtime.netns.Host`) the slots are placed on, round robin; None:
    this machine's own network stack."""
    network: Any = None
    """The :class:`~spottrain.runtime.netns.Network` of ``hosts``: network faults and fresh
    hosts for replacements of a host that is gone."""
    controller_address: str = "127.0.0.1"
    """Where workers reach the controller's store and liveness server."""


def run_local(job: LocalJob, *, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> RunSummary:
    """Run ``job`` to completion (or failure) and return its summary.

    Raises :class:`~spottrain.errors.CheckpointError` before any worker starts when the
    checkpoint directory cannot be resumed from (another job's checkpoints, none readable), and
    :class:`~spottrain.errors.InputError` with the worker's one-line message when a worker
    failed on the user's input (:data:`~spottrain.runtime.elastic.EXIT_INPUT`): the job is
    stopped at once, nothing is replaced.
    """
    bad = needs_hosts(job.injections)
    if bad and job.network is None:
        raise InputError(f"fault kinds {', '.join(bad)} need workers on network-namespace hosts", column="--inject")
    ctl = _Controller(job, on_event)
    summary = ctl.run()
    if ctl.input_error is not None:
        raise InputError(ctl.input_error)
    return summary


class _Stop(Exception):
    pass


class _Controller(MembershipPublisher):
    def __init__(self, job: LocalJob, on_event: Callable[[str, dict[str, Any]], None] | None) -> None:
        self.job = job
        self.on_event = on_event or (lambda kind, data: None)
        self.policy = get_policy(job.policy)
        self.events: list[dict[str, Any]] = []
        self.workers: dict[str, _Worker] = {}
        self.members: list[str] = []
        self.gen = -1
        self.ckpt_requests = 0
        self.pending: list[tuple[float, int, NodeOption, int]] = []  # (start at, slot, option, batch)
        self.replacements = 0
        default = NodeOption(instance_type=job.instance_type, gpu="cpu", spot=True, zone=None,
                             price_usd_per_hour=job.price_usd_per_hour, throughput=1.0,
                             delay_s=job.replacement_delay_s)
        self.planned: tuple[NodeOption, ...] = tuple(job.planned or (default,) * job.workers)
        if len(self.planned) != job.workers:
            raise InputError(f"{len(self.planned)} planned nodes for {job.workers} workers", column="--workers")
        self.options = tuple(job.options) if job.options is not None else tuple(dict.fromkeys(self.planned))
        self.slot_gen: dict[int, int] = {i: 0 for i in range(job.workers)}
        self.slot_wid = {i: f"w{i}" for i in range(job.workers)}
        self.slot_option: dict[int, NodeOption] = dict(enumerate(self.planned))
        self.slot_host: dict[int, Any] = {}
        if job.hosts:
            self.slot_host = {i: job.hosts[i % len(job.hosts)] for i in range(job.workers)}
        self.finished = False
        self.failed: str | None = None
        self.stop_reason: str | None = None
        self.switched = False
        self.batches = 0
        self.deferred: list[tuple[set[int], tuple[str, ...], bool]] = []  # (batches to join, release, ckpt)
        self._last_progress_t = 0.0
        self.train_t0: float | None = None
        self._last_progress = -1
        self._progress_hist: list[tuple[float, int]] = []
        self._keys_seen = -1
        self._await_recovery: list[float] = []
        self.recovery_s: list[float] = []
        self._last_tick = 0.0
        self.undo: list[tuple[float, Callable[[], None], str]] = []
        self.input_error: str | None = None
        """The one-line message of a worker that failed on the user's input."""

    # ---------------------------------------------------------------- helpers
    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, kind: str, **data: Any) -> None:
        ev = {"t": time.time(), "time_s": round(self.now(), 4), "kind": kind, **data}
        self.events.append(ev)
        self.on_event(kind, ev)

    def _host_for(self, slot: int) -> Any:
        if self.job.network is None and not self.job.hosts:
            return None
        host = self.slot_host.get(slot)
        if host is None or not host.up:
            # The slot's machine is gone (or the slot is new): a replacement is a new machine.
            if self.job.network is not None:
                host = self.job.network.add_host()
                self.record("host", host=host.name, address=host.address)
            elif self.job.hosts:
                host = self.job.hosts[slot % len(self.job.hosts)]
            self.slot_host[slot] = host
        return host

    def spawn(self, slot: int, option: NodeOption | None = None, batch: int | None = None) -> _Worker:
        n = self.slot_gen.get(slot, 0)
        self.slot_gen[slot] = n + 1
        wid = f"w{slot}" if n == 0 else f"w{slot}r{n}"
        self.slot_wid[slot] = wid
        option = option or self.slot_option[slot]
        self.slot_option[slot] = option
        host = self._host_for(slot)
        env = {**os.environ, **self.job.env, ENV_RDZV: f"{self.job.controller_address}:{self.store.port}",
               ENV_LIVENESS: self.liveness.endpoint, ENV_WORKER_ID: wid,
               ENV_RUN_DIR: str(self.job.run_dir), "SPOTTRAIN_JOB_ID": self.job.job_id,
               "OMP_NUM_THREADS": self.job.env.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
        # One GPU per slot on a machine with several (the worker takes LOCAL_RANK modulo its GPUs),
        # as torchrun numbers the processes of one node; a job's own LOCAL_RANK wins.
        if "LOCAL_RANK" not in self.job.env:
            env["LOCAL_RANK"] = str(slot)
        if "LOCAL_WORLD_SIZE" not in self.job.env:  # how many share this machine's GPUs (NCCL or gloo)
            env["LOCAL_WORLD_SIZE"] = str(max(self.job.workers, slot + 1))
        command = list(self.job.command)
        if host is not None:
            env.update(host.env())
            command = host.prefix + command
        log = open(self.job.run_dir / f"worker-{wid}.log", "ab")
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        w = _Worker(wid=wid, slot=slot, proc=proc, started_s=self.now(), log=log, option=option, host=host,
                    batch=batch)
        self.workers[wid] = w
        self.record("spawn", worker=wid, slot=slot, pid=proc.pid, instance_type=option.instance_type,
                    spot=option.spot, host=host.name if host is not None else None)
        return w

    def live(self) -> list[_Worker]:
        return [w for w in self.workers.values() if self._running(w)]

    @staticmethod
    def _running(w: _Worker) -> bool:
        """Not known to be gone. A process on a host that is cut off counts as running even if it
        died: nothing on that host can tell (only its silence will)."""
        return not w.lost and (w.proc.poll() is None or (w.host is not None and not w.host.up))

    # ---------------------------------------------------------------- the policy's view
    def _rate(self) -> float | None:
        """Measured samples/s over the last ~10 s of progress."""
        hist = self._progress_hist
        if len(hist) < 2:
            return None
        (t0, s0), (t1, s1) = hist[0], hist[-1]
        return (s1 - s0) * self.job.samples_per_step / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def state(self, event: str, subject: str | None, extra: NodeView | None = None) -> JobState:
        members = [self.workers[m] for m in self.members if self._alive(m)]
        rate = self._rate()
        per_node = rate / len(members) if rate and members else None

        def view(w: _Worker) -> NodeView:
            o = w.option
            return NodeView(node_id=w.wid, instance_type=o.instance_type, gpu=o.gpu, spot=o.spot, zone=o.zone,
                            price_usd_per_hour=o.price_usd_per_hour,
                            throughput=per_node if per_node is not None else o.throughput)

        planned = tuple(NodeView(node_id=f"plan{i}", instance_type=o.instance_type, gpu=o.gpu, spot=o.spot,
                                 zone=o.zone, price_usd_per_hour=o.price_usd_per_hour, throughput=o.throughput)
                        for i, o in enumerate(self.planned))
        if extra is not None:
            # the lost node stands in for a planned node of its kind (as in the simulator)
            i = next((k for k, v in enumerate(planned) if v.instance_type == extra.instance_type
                      and v.spot == extra.spot), 0)
            planned = planned[:i] + (extra,) + planned[i + 1:]
        # Started but not yet members: they count as pending nodes. A member that has just left
        # (its process is still exiting) is not one: counted, it hid the loss from the policy and
        # a node that left after a notice was never replaced.
        unjoined = [w for w in self.live() if w.wid not in self.members and not w.leaving]
        pending_opts = [p[2] for p in self.pending] + [w.option for w in unjoined]
        done = max(self._progress(), 0)
        return JobState(now_s=self.now(), event=event, subject=subject, nodes=tuple(view(w) for w in members),
                        planned=planned, pending=len(pending_opts),
                        samples_done=float(done * self.job.samples_per_step),
                        samples_total=float((self.job.steps or 0) * self.job.samples_per_step),
                        deadline_s=self.job.deadline_s, restart_overhead_s=self._restart_overhead(),
                        options=self.options, on_demand_fallback=tuple(self.job.on_demand_fallback),
                        pending_on_demand=sum(1 for o in pending_opts if not o.spot))

    def _restart_overhead(self) -> float:
        """Measured: median loss -> next step of this run; before the first, detection + 1 s."""
        if self.recovery_s:
            return float(statistics.median(self.recovery_s))
        return self.job.liveness_timeout_s + 1.0

    def _progress(self) -> int:
        try:
            return int(json.loads(self.store.get("progress"))) if self.store.check(["progress"]) else 0
        except Exception:  # noqa: BLE001
            return 0

    def decide(self, event: str, subject: str | None, slot: int | None, extra: NodeView | None = None) -> Decision:
        decision = self.policy(self.state(event, subject, extra))
        empty = not (decision.checkpoint_now or decision.request or decision.release or decision.switch_to_on_demand)
        if event == "tick" and empty:
            return decision
        self.record("decision", event=event, worker=subject, checkpoint_now=decision.checkpoint_now,
                    request=len(decision.request), release=list(decision.release),
                    switch_to_on_demand=decision.switch_to_on_demand, reason=decision.reason)
        self.apply(decision, event, subject, slot)
        return decision

    def apply(self, d: Decision, event: str, subject: str | None, slot: int | None) -> None:
        if d.switch_to_on_demand:
            self.switched = True
            for p in [p for p in self.pending if p[2].spot]:
                self.pending.remove(p)  # outstanding spot requests are cancelled
                self.record("cancelled", slot=p[1], instance_type=p[2].instance_type, reason="switch to on-demand")
            for w in [w for w in self.live() if w.wid not in self.members and w.option.spot]:
                self._kill(w, "switch to on-demand: spot request cancelled")
        if d.checkpoint_now and event != "notice":  # a notice's answer goes to the leaver itself
            self.request_checkpoint()
        batch = None
        if d.request:
            self.batches += 1
            batch = self.batches
            for k, option in enumerate(d.request):
                if self.replacements >= self.job.max_replacements:
                    self.record("refused", field="request", instance_type=option.instance_type,
                                reason=f"replacement budget of {self.job.max_replacements} spent")
                    continue
                self.replacements += 1
                s = slot if (k == 0 and event == "revoked" and slot is not None) else self._new_slot()
                self.pending.append((self.now() + option.delay_s, s, option, batch))
        if d.release:
            live_ids = []
            for nid in d.release:
                w = self.workers.get(nid)
                if w is not None and not w.lost and w.proc.poll() is None:
                    if w.wid in self.members:
                        live_ids.append(nid)
                    else:
                        self._kill(w, "released before it joined")
                else:
                    self.record("refused", field="release", worker=nid, reason="no live node with that id")
            if live_ids:
                if batch is not None and any(p[3] == batch for p in self.pending):
                    # make before break: release once the nodes requested with it have joined
                    self.deferred.append(({batch}, tuple(live_ids), d.checkpoint_now))
                    self.record("release_deferred", workers=live_ids, until_batch=batch)
                else:
                    self._release(live_ids, d.checkpoint_now)

    def _new_slot(self) -> int:
        slot = max(self.slot_gen) + 1 if self.slot_gen else 0
        self.slot_gen[slot] = 0
        return slot

    def _release(self, wids: list[str] | tuple[str, ...], checkpoint: bool) -> None:
        for wid in wids:
            w = self.workers.get(wid)
            if w is None or w.lost:
                continue
            w.released = True
            ok = self.liveness.send(wid, {"release": True, "checkpoint": checkpoint})
            self.record("release", worker=wid, slot=w.slot, delivered=ok)
            if not ok:  # not connected (yet): nothing to hand over; stop it
                self._kill(w, "released; not reachable")

    def _kill(self, w: _Worker, why: str) -> None:
        try:
            w.proc.kill()
        except ProcessLookupError:
            pass
        self.record("killed", worker=w.wid, slot=w.slot, reason=why)

    # ---------------------------------------------------------------- main loop
    def run(self) -> RunSummary:
        job = self.job
        self._check_checkpoints()
        job.run_dir.mkdir(parents=True, exist_ok=True)
        self.store = dist.TCPStore(job.controller_address, 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=30))
        self.liveness = LivenessServer(host=job.controller_address)
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.record("start", workers=job.workers, policy=job.policy, port=self.store.port,
                    liveness_port=self.liveness.port, hosts=len(job.hosts or []))
        old = self._install_signals()
        for i in range(job.workers):
            self.spawn(i)
        self.publish([f"w{i}" for i in range(job.workers)])
        todo = list(job.injections)
        try:
            while not self._step(todo):
                time.sleep(TICK_S)
        finally:
            self._shutdown()
            self._restore_signals(old)
        return summarize(job=job, controller_events=self.events, wall0=self.wall0, failed=self.failed)

    def _check_checkpoints(self) -> None:
        """Before any worker starts: the checkpoints the workers will resume from are this job's
        and one of them verifies (else :class:`CheckpointError`, naming the files); corrupt
        ones newer than it are set aside, each named in a ``checkpoint_set_aside`` event."""
        ckdir = self.job.env.get("SPOTTRAIN_CHECKPOINT_DIR") or self.job.checkpoint_dir
        if not ckdir:
            return
        from spottrain.runtime.checkpoint import Checkpointer

        ck = Checkpointer(ckdir, job_id=self.job.job_id)
        self.t0 = time.monotonic()
        info = ck.check_resumable()
        for old, new, why in ck.set_aside_paths:
            self.record("checkpoint_set_aside", path=str(old), moved_to=str(new), reason=why)
        if info is not None:
            self.record("resume_point", path=str(info.path), step=info.step)

    def _install_signals(self) -> dict[int, Any]:
        old: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return old

        def handler(signum: int, frame: Any) -> None:
            self.stop_reason = self.stop_reason or f"controller received {signal.Signals(signum).name}"

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            old[sig] = signal.signal(sig, handler)
        return old

    @staticmethod
    def _restore_signals(old: dict[int, Any]) -> None:
        for sig, h in old.items():
            signal.signal(sig, h)

    def _step(self, todo: list[Injection]) -> bool:
        """One tick; True when the job is over."""
        now = self.now()
        if self.stop_reason is not None:
            self.failed = self.failed or self.stop_reason
            return True
        for inj in list(todo):
            if self._due(inj, now):
                todo.remove(inj)
                self._inject(inj)
        for at, undo, what in list(self.undo):
            if now >= at:
                self.undo.remove((at, undo, what))
                undo()
                self.record("undo", fault=what)
        for w in list(self.workers.values()):
            code = w.proc.poll()
            if code is not None and w.wid in self.workers:
                self._exited(w, code)
        if self.failed:
            return True
        self._check_liveness(now)
        # What workers post (left/, ready/, notice/, formfail/, regroup/) are new keys, and only
        # this controller deletes keys: while the store's key count is unchanged there is nothing
        # new to read. One round trip per tick instead of one per worker and key (the controller
        # shares the workers' cores when they run on this machine).
        keys = self.store.num_keys()
        scan, self._keys_seen = keys != self._keys_seen, keys
        # Leavers first, all of this tick's at once: no generation is published that lists a
        # worker which has already announced it is leaving.
        leavers = [w for w in self.live() if not w.leaving and self.store.check([f"left/{w.wid}"])] if scan else []
        for w in leavers:
            w.leaving = True
            self.record("left", worker=w.wid, slot=w.slot, released=w.released)
        if leavers and not self.finished:
            self.publish([m for m in self.members if self._alive(m)])
            for w in leavers:
                if not w.released:
                    self.decide("revoked", w.wid, w.slot, extra=self._view_of(w))
        if scan:
            self._check_formation()
        if scan and not self.finished:
            self.check_regroup(self._alive)
        for w in self.live() if scan else ():
            if not w.ready and self.store.check([f"ready/{w.wid}"]):
                w.ready = True
                if w.wid not in self.members and not self.finished:
                    self.record("joined", worker=w.wid, slot=w.slot)
                    self.publish([m for m in self.members if self._alive(m)] + [w.wid])
                    self._joined_batch(w)
                    self.decide("joined", w.wid, w.slot)
            if not w.notice_handled and self.store.check([f"notice/{w.wid}"]):
                w.notice_handled = True
                self.record("notice", worker=w.wid, slot=w.slot)
                d = self.decide("notice", w.wid, w.slot)
                self.store.set(f"decision/{w.wid}", json.dumps({"checkpoint_now": d.checkpoint_now}))
        if now - self._last_progress_t >= 0.25:
            self._last_progress_t = now
            step = self._progress()
            if step != self._last_progress:
                self._last_progress = step
                self._progress_hist.append((now, step))
                while len(self._progress_hist) > 2 and now - self._progress_hist[0][0] > 10.0:
                    self._progress_hist.pop(0)
                for t in self._await_recovery:
                    self.recovery_s.append(now - t)
                self._await_recovery.clear()
                self.on_event("progress", {"step": step, "time_s": now})
                if self.train_t0 is None and step >= 1:
                    self.train_t0 = now
                    self._last_tick = now
                    self.record("training_started")
        if (self.train_t0 is not None and not self.finished and self.job.tick_s > 0
                and now - self._last_tick >= self.job.tick_s):
            self._last_tick = now
            self.decide("tick", None, None)
        for p in list(self.pending):
            if now >= p[0] and not self.finished:
                self.pending.remove(p)
                self.spawn(p[1], p[2], p[3])
        if self.finished:
            return not self.live() or now > self.finish_deadline
        if not self.live() and not self.pending:
            self.failed = self.failed or "all workers lost and no replacement requested"
            return True
        if now > self.job.timeout_s:
            self.failed = f"timed out after {self.job.timeout_s:.0f}s"
            return True
        return False

    def _check_formation(self) -> None:
        """A member that could not form the current generation in time (one listed member never
        came: it died or left while the generation was being published) asks for another; the
        controller republishes the members it still believes alive."""
        if self.finished or self.gen < 0 or not self.store.check([f"formfail/{self.gen}"]):
            return
        self.store.delete_key(f"formfail/{self.gen}")
        missing = [m for m in self.members if not self.store.check([f"gen/{self.gen}/arrived/{m}"])
                   and self.store.check([f"ready/{m}"])]
        self.record("formation_failed", gen=self.gen, missing=missing)
        # A member that did not come to form the group in time is stuck or gone: lost.
        gen = self.gen
        for wid in missing:
            w = self.workers.get(wid)
            if w is not None and self._running(w):
                self._lost(w, f"did not arrive to form generation {gen}", None)  # publishes the rest
        members = [m for m in self.members if self._alive(m)]
        if self.gen == gen and members:
            self.publish(members)  # nobody was declared lost here: try again with who is alive

    def _view_of(self, w: _Worker) -> NodeView:
        o = w.option
        return NodeView(node_id=w.wid, instance_type=o.instance_type, gpu=o.gpu, spot=o.spot, zone=o.zone,
                        price_usd_per_hour=o.price_usd_per_hour, throughput=o.throughput)

    def _joined_batch(self, w: _Worker) -> None:
        for entry in list(self.deferred):
            batches, wids, ckpt = entry
            waiting = [p for p in self.pending if p[3] in batches]
            unjoined = [x for x in self.live() if x.batch in batches and x.wid not in self.members and x is not w]
            if not waiting and not unjoined:
                self.deferred.remove(entry)
                self._release(wids, ckpt)

    def _alive(self, wid: str) -> bool:
        w = self.workers.get(wid)
        return w is not None and self._running(w) and not w.leaving

    def _check_liveness(self, now: float) -> None:
        for w in self.live():
            if w.leaving:
                continue
            st = self.liveness.status(w.wid)
            if st is None:
                if now - w.started_s > self.job.start_timeout_s:
                    self._lost(w, "never connected", None)
                continue
            state, silent = st
            if state == "closed":
                self._lost(w, "disconnected", None)
            elif state == "open" and silent > self.job.liveness_timeout_s:
                self._lost(w, f"silent {silent:.1f}s", None)

    def _exited(self, w: _Worker, code: int) -> None:
        host_down = w.host is not None and not w.host.up
        if host_down and not w.lost and code != 0:
            # The host is unreachable: no agent could report this exit. Liveness decides.
            return
        del self.workers[w.wid]
        w.log.close()
        if w.lost:
            return  # declared lost before; this is the fenced process going away
        if code == 0:
            if not self.finished:
                self.finished = True
                self.finish_deadline = self.now() + 5.0
                self.pending.clear()
                for other in self.live():
                    if other.wid not in self.members:  # a replacement that never joined
                        other.proc.kill()
            self.record("finished", worker=w.wid, slot=w.slot)
            return
        if self.finished:
            self.record("exit_after_finish", worker=w.wid, code=code)
            return
        error, report = None, {}
        try:
            if self.store.check([f"error/{w.wid}"]):
                report = json.loads(self.store.get(f"error/{w.wid}"))
                error = report.get("type")
        except Exception:  # noqa: BLE001
            pass
        if code == EXIT_INPUT or report.get("input"):
            # The user's input (a setting, a checkpoint), not a revocation: stop now, replace nothing.
            message = report.get("message") or self._error_line(w) or f"worker {w.wid} refused its input"
            self.record("exit", worker=w.wid, slot=w.slot, code=code, how="input_error", message=message)
            self.input_error = message
            self.failed = f"worker {w.wid} failed on its input: {message}; not retried"
            return
        if error is not None:
            self.record("exit", worker=w.wid, slot=w.slot, code=code, how="error", error=error)
            self.failed = (f"worker {w.wid} raised {error} in the training code (see "
                           f"{self.job.run_dir / f'worker-{w.wid}.log'}); not retried")
            return
        kind = {EXIT_LEFT: "left", EXIT_FENCED: "fenced", EXIT_STOPPED: "stopped"}.get(code, "revoked")
        w.lost = True
        self.record("exit", worker=w.wid, slot=w.slot, code=code, how=kind, fault_t=w.fault_t)
        if w.leaving:
            return  # handled when it announced it was leaving
        self._after_loss(w)

    def _error_line(self, w: _Worker) -> str | None:
        """The ``error: ...`` line a worker printed last (an input error before it reached the store)."""
        try:
            with open(self.job.run_dir / f"worker-{w.wid}.log", "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(fh.tell() - 8192, 0))
                lines = fh.read().decode(errors="replace").splitlines()
        except OSError:
            return None
        found = [ln[len("error: "):].strip() for ln in lines if ln.startswith("error: ")]
        return found[-1] if found else None

    def _lost(self, w: _Worker, why: str, code: int | None) -> None:
        """Declare ``w`` lost (silent or disconnected): fence it, kill it, re-form without it."""
        if w.lost:
            return
        w.lost = True
        self.liveness.fence(w.wid, why)
        if w.host is None or w.host.up:
            # what a real controller does to a node it gave up on: terminate it. A host that is
            # cut off cannot be reached: its worker stops by itself (no word from the controller).
            try:
                w.proc.kill()
            except ProcessLookupError:
                pass
        self.record("exit", worker=w.wid, slot=w.slot, code=code, how="lost", detail=why, fault_t=w.fault_t)
        if self.finished:
            return
        self._after_loss(w)

    def _after_loss(self, w: _Worker) -> None:
        self._await_recovery.append(self.now())
        if w.wid in self.members:
            survivors = [m for m in self.members if self._alive(m)]
            if survivors:
                self.publish(survivors, abort=True)
        self.decide("revoked", w.wid, w.slot, extra=self._view_of(w))
        if not self.live() and not self.pending:
            self.failed = "all workers lost and the policy requested no replacement"

    def _due(self, inj: Injection, now: float) -> bool:
        if inj.at_step is not None:
            return self._progress() >= inj.at_step
        if inj.on_checkpoint:
            ckpt = self.job.checkpoint_dir
            return ckpt is not None and ckpt.is_dir() and any(p.name.startswith(".tmp-") for p in ckpt.iterdir())
        # Times count from the first completed step: process start-up (seconds of Python and
        # torch imports) is not training time, and a simulator schedule starts with training.
        if self.train_t0 is None:
            return False
        return inj.time_s is not None and now - self.train_t0 >= inj.time_s

    def _inject(self, inj: Injection) -> None:
        if inj.worker == "chief":
            target = next((self.workers.get(m) for m in self.members if self._alive(m)), None)
        else:
            target = next((w for w in self.live() if w.slot == inj.worker and not w.leaving), None)
        if target is None or self.finished:
            self.record("inject_skipped", target=str(inj.worker), fault=inj.kind, reason="no live worker there")
            return
        target.fault_t = time.time()
        chief = bool(self.members and self.members[0] == target.wid)
        net, host = self.job.network, target.host
        try:
            if inj.kind in ("kill", "sigterm", "stop"):
                sig = {"kill": signal.SIGKILL, "sigterm": signal.SIGTERM, "stop": signal.SIGSTOP}[inj.kind]
                os.kill(target.proc.pid, sig)
                if inj.kind == "stop" and inj.duration_s:
                    pid = target.proc.pid
                    self._later(inj.duration_s, lambda: _signal(pid, signal.SIGCONT), f"SIGCONT {target.wid}")
            elif net is None or host is None:
                self.record("inject_skipped", target=target.wid, fault=inj.kind, reason="not on a namespace host")
                return
            elif inj.kind == "linkdown":
                net.link_down(host)
                if inj.duration_s:
                    self._later(inj.duration_s, lambda: net.link_up(host), f"link up {host.name}")
            elif inj.kind == "vanish":
                net.vanish(host)
            else:
                applied = net.impair(host, inj.kind)
                self.record("impair", host=host.name, how=applied)
                if inj.duration_s:
                    self._later(inj.duration_s, lambda: net.clear_impairment(host), f"impairment off {host.name}")
        except ProcessLookupError:
            return
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            # The fault could not be made (a tc or ip command refused): the job is not at fault
            # and goes on; the record says which fault was not injected and why.
            self.record("inject_failed", target=target.wid, fault=inj.kind, error=str(exc)[:300])
            return
        self.record("inject", worker=target.wid, slot=target.slot, fault=inj.kind, chief=chief,
                    host=host.name if host is not None else None)

    def _later(self, delay_s: float, fn: Callable[[], None], what: str) -> None:
        self.undo.append((self.now() + delay_s, fn, what))

    def _shutdown(self) -> None:
        if self.stop_reason is not None:
            # Stopped from outside: every worker checkpoints (rank 0) and exits; then SIGKILL.
            self.liveness.stop(self.stop_reason)
            self.record("stopping", reason=self.stop_reason)
            for w in self.workers.values():
                _signal(w.proc.pid, signal.SIGCONT)  # a stopped worker cannot act on the message
            end = time.monotonic() + self.job.stop_grace_s
            while any(w.proc.poll() is None for w in self.workers.values()) and time.monotonic() < end:
                time.sleep(0.05)
        for at, undo, what in self.undo:
            try:
                undo()
            except Exception:  # noqa: BLE001 - the network is torn down by its owner anyway
                pass
        for w in list(self.workers.values()):
            if w.proc.poll() is None:
                w.proc.kill()
        for w in list(self.workers.values()):
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            w.log.close()
        self.liveness.close()
        self.record("stop", failed=self.failed)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def job_pids(run_dir: str | os.PathLike[str]) -> list[int]:
    """Live (not zombie) processes of the job whose run directory is ``run_dir``: the workers
    (their environment holds ``SPOTTRAIN_RUN_DIR=<run_dir>``) and the children that inherited it,
    on any network-namespace host of this machine. For orphan checks: after a job (or its
    launcher) has ended this should be empty."""
    entry = f"{ENV_RUN_DIR}={run_dir}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if entry in env.split(b"\0") and state != "Z":
            out.append(int(d.name))
    return out


def default_run_dir(base: str | os.PathLike[str] | None, job_id: str) -> Path:
    """``<base>/<job_id>`` (``base`` defaults to ./spottrain-runs)."""
    return Path(base or "spottrain-runs") / job_id


def new_job_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def python_command(*args: str) -> list[str]:
    return [sys.executable, *args]
