"""The local backend: N worker processes on this machine, a controller, fault injection.

The controller is the long-lived process of the job (the "agent"): it hosts the c10d TCPStore
the workers rendezvous on, watches its workers (``Popen.poll`` sees a ``kill -9`` within one
20 ms tick), publishes a new membership generation when one leaves or joins, and asks the
recovery policy (:mod:`spottrain.policies`, the same functions the simulator runs) what to do
on every event: checkpoint now, request a replacement. It is an explicit state machine over
the events ``revoked`` / ``notice`` / ``joined``; the training itself never waits for it
except to learn a new membership.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

from spottrain.errors import SpottrainError
from spottrain.policies import Decision, JobState, NodeOption, NodeView, get_policy
from spottrain.runtime.elastic import ENV_RDZV, ENV_WORKER_ID, EXIT_LEFT
from spottrain.runtime.faults import Injection
from spottrain.runtime.summary import RunSummary, summarize

TICK_S = 0.02


@dataclass(kw_only=True)
class _Worker:
    wid: str
    slot: int
    proc: subprocess.Popen[bytes]
    started_s: float
    log: Any
    ready: bool = False
    leaving: bool = False
    notice_handled: bool = False


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
    """Time from a revocation until the replacement process is started (acquisition)."""
    steps: int | None = None
    checkpoint_dir: Path | None = None
    max_replacements: int = 32
    timeout_s: float = 1800.0
    instance_type: str = "local"
    price_usd_per_hour: float = 0.0


def run_local(job: LocalJob, *, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> RunSummary:
    """Run ``job`` to completion (or failure) and return its summary."""
    return _Controller(job, on_event).run()


class _Controller:
    def __init__(self, job: LocalJob, on_event: Callable[[str, dict[str, Any]], None] | None) -> None:
        self.job = job
        self.on_event = on_event or (lambda kind, data: None)
        self.policy = get_policy(job.policy)
        self.events: list[dict[str, Any]] = []
        self.workers: dict[str, _Worker] = {}
        self.members: list[str] = []
        self.gen = -1
        self.ckpt_requests = 0
        self.pending: list[tuple[float, int]] = []  # (start at, slot)
        self.replacements = 0
        self.slot_gen = {i: 0 for i in range(job.workers)}
        self.slot_wid = {i: f"w{i}" for i in range(job.workers)}
        self.finished = False
        self.failed: str | None = None
        self._last_progress_t = 0.0
        self.train_t0: float | None = None
        self._last_progress = -1

    # ---------------------------------------------------------------- helpers
    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, kind: str, **data: Any) -> None:
        ev = {"t": time.time(), "time_s": round(self.now(), 4), "kind": kind, **data}
        self.events.append(ev)
        self.on_event(kind, ev)

    def publish(self, members: list[str]) -> None:
        self.gen += 1
        self.members = members
        self.store.set(f"gen/{self.gen}/members", json.dumps(members))
        self.store.set("gen", json.dumps(self.gen))
        self._set_ctl()
        self.record("membership", gen=self.gen, members=list(members), world=len(members))

    def _set_ctl(self) -> None:
        self.store.set("ctl", json.dumps({"gen": self.gen, "ckpt": self.ckpt_requests}))

    def spawn(self, slot: int) -> _Worker:
        n = self.slot_gen[slot]
        self.slot_gen[slot] = n + 1
        wid = f"w{slot}" if n == 0 else f"w{slot}r{n}"
        self.slot_wid[slot] = wid
        env = {**os.environ, **self.job.env, ENV_RDZV: f"127.0.0.1:{self.store.port}", ENV_WORKER_ID: wid,
               "SPOTTRAIN_RUN_DIR": str(self.job.run_dir), "SPOTTRAIN_JOB_ID": self.job.job_id,
               "OMP_NUM_THREADS": self.job.env.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED": "1"}
        log = open(self.job.run_dir / f"worker-{wid}.log", "ab")
        proc = subprocess.Popen(self.job.command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        w = _Worker(wid=wid, slot=slot, proc=proc, started_s=self.now(), log=log)
        self.workers[wid] = w
        self.record("spawn", worker=wid, slot=slot, pid=proc.pid)
        return w

    def live(self) -> list[_Worker]:
        return [w for w in self.workers.values() if w.proc.poll() is None]

    def state(self, event: str, subject: str | None) -> JobState:
        def view(w: str) -> NodeView:
            return NodeView(node_id=w, instance_type=self.job.instance_type, gpu="cpu", spot=True, zone=None,
                            price_usd_per_hour=self.job.price_usd_per_hour, throughput=1.0)

        live = [w.wid for w in self.live() if not w.leaving]
        done = self._progress()
        option = NodeOption(instance_type=self.job.instance_type, gpu="cpu", spot=True, zone=None,
                            price_usd_per_hour=self.job.price_usd_per_hour, throughput=1.0,
                            delay_s=self.job.replacement_delay_s)
        return JobState(now_s=self.now(), event=event, subject=subject, nodes=tuple(view(w) for w in live),
                        planned=tuple(view(self.slot_wid[i]) for i in range(self.job.workers)),
                        pending=len(self.pending), samples_done=float(done),
                        samples_total=float(self.job.steps or 0), deadline_s=None,
                        restart_overhead_s=1.0, options=(option,))

    def _progress(self) -> int:
        try:
            return int(json.loads(self.store.get("progress"))) if self.store.check(["progress"]) else 0
        except Exception:  # noqa: BLE001
            return 0

    def decide(self, event: str, subject: str | None, slot: int | None) -> Decision:
        decision = self.policy(self.state(event, subject))
        self.record("decision", event=event, worker=subject, checkpoint_now=decision.checkpoint_now,
                    request=len(decision.request), reason=decision.reason)
        if event == "revoked" and decision.checkpoint_now:
            self.ckpt_requests += 1
            self._set_ctl()
        for option in decision.request:
            if self.replacements < self.job.max_replacements and slot is not None:
                self.replacements += 1
                self.pending.append((self.now() + option.delay_s, slot))
        return decision

    # ---------------------------------------------------------------- main loop
    def run(self) -> RunSummary:
        job = self.job
        job.run_dir.mkdir(parents=True, exist_ok=True)
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=30))
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        self.record("start", workers=job.workers, policy=job.policy, port=self.store.port)
        for i in range(job.workers):
            self.spawn(i)
        self.publish([f"w{i}" for i in range(job.workers)])
        todo = list(job.injections)
        try:
            while not self._step(todo):
                time.sleep(TICK_S)
        finally:
            self._shutdown()
        return summarize(job=job, controller_events=self.events, wall0=self.wall0, failed=self.failed)

    def _step(self, todo: list[Injection]) -> bool:
        """One tick; True when the job is over."""
        now = self.now()
        for inj in list(todo):
            if self._due(inj, now):
                todo.remove(inj)
                self._inject(inj)
        for w in list(self.workers.values()):
            code = w.proc.poll()
            if code is not None and w.wid in self.workers:
                self._exited(w, code)
        for w in self.live():
            if not w.ready and self.store.check([f"ready/{w.wid}"]):
                w.ready = True
                if w.wid not in self.members and not self.finished:
                    self.record("joined", worker=w.wid, slot=w.slot)
                    self.publish([m for m in self.members if self._alive(m)] + [w.wid])
                    self.decide("joined", w.wid, w.slot)
            if not w.notice_handled and self.store.check([f"notice/{w.wid}"]):
                w.notice_handled = True
                self.record("notice", worker=w.wid, slot=w.slot)
                d = self.decide("notice", w.wid, w.slot)
                self.store.set(f"decision/{w.wid}", json.dumps({"checkpoint_now": d.checkpoint_now}))
            if not w.leaving and self.store.check([f"left/{w.wid}"]):
                w.leaving = True
                self.record("left", worker=w.wid, slot=w.slot)
                if not self.finished:
                    self.publish([m for m in self.members if self._alive(m) and m != w.wid])
                    self.decide("revoked", w.wid, w.slot)
        if now - self._last_progress_t >= 0.25:
            self._last_progress_t = now
            step = self._progress()
            if step != self._last_progress:
                self._last_progress = step
                self.on_event("progress", {"step": step, "time_s": now})
        for start_at, slot in list(self.pending):
            if now >= start_at and not self.finished:
                self.pending.remove((start_at, slot))
                self.spawn(slot)
        if self.finished:
            return not self.live() or now > self.finish_deadline
        if not self.live() and not self.pending:
            self.failed = self.failed or "all workers lost and no replacement requested"
            return True
        if now > self.job.timeout_s:
            self.failed = f"timed out after {self.job.timeout_s:.0f}s"
            return True
        return False

    def _alive(self, wid: str) -> bool:
        w = self.workers.get(wid)
        return w is not None and w.proc.poll() is None and not w.leaving

    def _exited(self, w: _Worker, code: int) -> None:
        del self.workers[w.wid]
        w.log.close()
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
        kind = "left" if code == EXIT_LEFT else "revoked"
        self.record("exit", worker=w.wid, slot=w.slot, code=code, how=kind)
        if w.leaving:
            return  # handled when it announced it was leaving
        if w.wid in self.members:
            survivors = [m for m in self.members if self._alive(m)]
            if survivors:
                self.publish(survivors)
        self.decide("revoked", w.wid, w.slot)
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
            if self._progress() < 1:
                return False
            self.train_t0 = now
            self.record("training_started")
        return inj.time_s is not None and now - self.train_t0 >= inj.time_s

    def _inject(self, inj: Injection) -> None:
        if inj.worker == "chief":
            target = next((self.workers.get(m) for m in self.members if self._alive(m)), None)
        else:
            target = next((w for w in self.live() if w.slot == inj.worker and not w.leaving), None)
        if target is None or self.finished:
            self.record("inject_skipped", target=str(inj.worker), fault=inj.kind, reason="no live worker there")
            return
        sig = signal.SIGKILL if inj.kind == "kill" else signal.SIGTERM
        try:
            os.kill(target.proc.pid, sig)
        except ProcessLookupError:
            return
        self.record("inject", worker=target.wid, slot=target.slot, fault=inj.kind,
                    chief=bool(self.members and self.members[0] == target.wid))

    def _shutdown(self) -> None:
        for w in self.live():
            w.proc.kill()
        for w in list(self.workers.values()):
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            w.log.close()
        self.record("stop", failed=self.failed)


def default_run_dir(base: str | os.PathLike[str] | None, job_id: str) -> Path:
    """``<base>/<job_id>`` (``base`` defaults to ./spottrain-runs)."""
    return Path(base or "spottrain-runs") / job_id


def new_job_id() -> str:
    return time.strftime("run-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def python_command(*args: str) -> list[str]:
    return [sys.executable, *args]


