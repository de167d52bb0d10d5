"""The user-facing training API: give a model, an optimizer, a dataset and a loss function;
spottrain owns the loop's fault tolerance.

>>> cfg = TrainConfig.from_env(steps=200, global_batch_size=64)      # doctest: +SKIP
>>> Trainer(model=model, optimizer=opt, dataset=ds, loss_fn=loss_fn, config=cfg).fit()

``loss_fn(model, batch)`` returns the *mean* loss over ``batch``. The trainer splits each
global batch over the live workers (and into micro-batches), scales the losses so that the
gradient is exactly the global-batch mean whatever the world size, wraps the model in
DistributedDataParallel, checkpoints, and - under ``spottrain run`` - re-forms the process
group when workers leave or join, continuing from the survivors' in-memory state.

Three launch modes, picked from the environment:
- ``spottrain run`` (``SPOTTRAIN_RDZV`` set): elastic; survivors keep their state.
- ``torchrun`` (``WORLD_SIZE`` set): static group; a failure restarts from the newest checkpoint.
- plain ``python``: one process.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from spottrain.errors import InputError, SpottrainError
from spottrain.runtime.checkpoint import Checkpointer
from spottrain.runtime.elastic import (ENV_RDZV, EXIT_FENCED, EXIT_INPUT, EXIT_LEFT, EXIT_STOPPED, ElasticClient,
                                       WaitCancelled, cut_sockets, error_line, socket_inodes)
from spottrain.runtime.sampler import DeterministicSampler, shard

log = logging.getLogger(__name__)

RESCALE_MODES = ("accumulate", "scale-lr")

BOUNDARY_EVERY_S = 0.2
"""How often, at most, the members of a group stop to agree on checkpoints, leavers and a new
generation (:meth:`Trainer._boundary`). The agreement is a collective: on steps shorter than this
it runs every few steps, at a step all members know in advance, so a fast step does not pay a
second synchronization point (a host-device sync on a GPU). A notice, a checkpoint request or a
newer generation waits for it: at most this long plus two steps (what an agreement carries is read
at the start of the step it follows)."""

LOSS_EVERY = 10
"""Rank 0 reports its training loss (its own shard's mean over this many steps) in every
LOSS_EVERY-th step event; the run's record keeps them as its loss curve (``converge`` reads it).
Reading a GPU loss waits for the device, so it is read once a window, not every step."""

PROGRESS_EVERY_S = 0.05
"""Rank 0 publishes its step count to the controller at most this often (and always the first step
of a group and the last step): a store round trip per step was a tenth of a fast step."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How to train; every field can come from a ``SPOTTRAIN_<FIELD>`` environment variable."""

    steps: int = 100
    """Optimizer steps to complete."""
    global_batch_size: int = 64
    """Samples per optimizer step (``accumulate``); with ``scale-lr`` this is the batch of the
    planned world and shrinks/grows with it."""
    micro_batch_size: int | None = None
    """Largest batch one forward pass sees; larger shards use gradient accumulation."""
    rescale: str = "accumulate"
    """When the world size changes: ``accumulate`` keeps the global batch (exact same updates);
    ``scale-lr`` keeps the per-worker batch and scales the learning rate linearly."""
    planned_world_size: int | None = None
    """World size the hyper-parameters were tuned for (``scale-lr`` reference)."""
    seed: int = 0
    job_id: str = "default"
    checkpoint_dir: str | None = None
    checkpoint_interval_s: float | None = None
    """Seconds between checkpoints (from the transience model when planned)."""
    checkpoint_every_steps: int | None = None
    """Alternatively, checkpoint every N steps (deterministic; used in tests)."""
    keep_checkpoints: int = 3
    backend: str = "auto"
    """``gloo``, ``nccl`` or ``auto`` (nccl when each of the machine's workers has a GPU of its own,
    else gloo: see :func:`auto_backend`)."""
    device: str = "auto"
    """``cpu``, ``cuda:N`` or ``auto``: ``cuda:($LOCAL_RANK mod GPUs)`` when the machine has a GPU
    (one GPU per process, as torchrun and the local launcher number them), else ``cpu``."""
    pg_timeout_s: float = 10.0
    """Collective timeout: how long a hung (not dead) peer can stall the others."""
    rejoin_timeout_s: float = 120.0
    """How long a worker waits for a new membership generation after a failure."""
    notice_wait_s: float = 2.0
    """How long a notified worker waits for the policy's decision before leaving anyway."""
    run_dir: str | None = None
    """Where each worker appends its JSON-lines event log (``events-<worker>.jsonl``)."""
    controller_grace_s: float = 10.0
    """A worker that hears nothing from its controller this long checkpoints (rank 0) and exits."""
    exit_grace_s: float = 10.0
    """Once it must exit (controller lost or stopping), a worker is gone within this long, whatever
    it was blocked in."""
    confirm_s: float = 5.0
    """How long a worker whose collective failed waits for the controller to confirm a membership
    change before treating the error as its own (and failing the job)."""
    gradient_noise: int = 1
    """1: measure the gradient noise scale through DDP's all-reduce (:class:`_GradientNoise`; the
    run's loss curve then carries it); 0: DDP's built-in all-reduce, no hook."""

    @classmethod
    def from_env(cls, **defaults: Any) -> "TrainConfig":
        """``defaults`` overridden by ``SPOTTRAIN_<FIELD>`` variables set by ``spottrain run``."""
        values = dict(defaults)
        for f in fields(cls):
            raw = os.environ.get(f"SPOTTRAIN_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            kind = str(f.type)
            try:
                if "int" in kind:
                    values[f.name] = int(raw)
                elif "float" in kind:
                    values[f.name] = float(raw)
                else:
                    values[f.name] = raw
            except ValueError:
                expected = "an integer" if "int" in kind else "a number"
                raise InputError(f"environment variable SPOTTRAIN_{f.name.upper()}: expected {expected}, got {raw!r}") from None
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        return {f"SPOTTRAIN_{f.name.upper()}": str(getattr(self, f.name))
                for f in fields(self) if getattr(self, f.name) is not None}


class _Membership(Exception):
    """Internal: the process group must be re-formed (peer lost, member left or joined)."""


class _CommFailure(Exception):
    """Internal: a collective of the current group failed with a plain ``RuntimeError`` (gloo's
    "connection closed", a send or receive that timed out on a lossy link) where no training code
    ran: the runtime's own collectives, or DDP's gradient all-reduce after the backward pass had
    produced every gradient. Not the user's error; the group is re-formed (see ``Trainer._loop``)."""


def auto_backend(device_type: str, *, local_workers: int, gpus: int, device_named: bool = False) -> str:
    """The process group's backend for ``backend="auto"``: NCCL where each worker of the machine
    has a GPU of its own, else gloo.

    NCCL takes one process per GPU (two ranks on one device fail with "Duplicate GPU detected"),
    so workers that share a GPU -- more of them on the machine (``LOCAL_WORLD_SIZE``) than GPUs,
    or several pinned to one named device -- all-reduce through gloo, which moves CUDA tensors
    too (through host memory: slower, and the only way they can share the device)."""
    if device_type != "cuda":
        return "gloo"
    shared = local_workers > gpus or (device_named and local_workers > 1)
    return "gloo" if shared else "nccl"


def _first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an error's message, cut to ``limit`` characters (for a reason logged)."""
    return (str(exc).splitlines() or [""])[0][:limit]


@contextmanager
def _collective(active: bool | Callable[[], bool], what: str) -> Iterator[None]:
    """Turn a plain ``RuntimeError`` raised by a collective into :class:`_CommFailure` (the
    ``torch.distributed`` errors keep their own type and handling) when ``active`` (a callable is
    asked when the error is raised)."""
    try:
        yield
    except dist.DistError:
        raise
    except RuntimeError as exc:
        if not (active() if callable(active) else active):
            raise
        raise _CommFailure(f"{what}: {_first_line(exc)}") from exc


class Trainer:
    """Fault-tolerant data-parallel training loop (see the module docstring)."""

    def __init__(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, dataset: Any,
                 loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor], config: TrainConfig,
                 lr_scheduler: Any | None = None, collate_fn: Callable[[list[Any]], Any] | None = None) -> None:
        if config.rescale not in RESCALE_MODES:
            raise InputError(f"rescale must be one of {', '.join(RESCALE_MODES)}, got {config.rescale!r}")
        self.model = model
        self.optimizer = optimizer
        self.dataset = dataset
        self.loss_fn = loss_fn
        self.config = config
        self.lr_scheduler = lr_scheduler
        self.collate_fn = collate_fn or torch.utils.data.default_collate
        self.sampler = DeterministicSampler(size=len(dataset), seed=config.seed)
        self.step = 0
        self.checkpointer = (Checkpointer(config.checkpoint_dir, job_id=config.job_id, keep=config.keep_checkpoints)
                             if config.checkpoint_dir else None)
        self.worker_id = os.environ.get("SPOTTRAIN_WORKER_ID", f"pid{os.getpid()}")
        self.device = self._pick_device()
        self._pg_backend = self._backend()  # fixed for the trainer's life: read on every step boundary
        # In-place: the Parameter objects (and so the optimizer's references) stay the same.
        self.model.to(self.device)
        self._base_lrs = [g["lr"] for g in optimizer.param_groups]
        self._ddp: DDP | None = None
        self._gen = -1
        self._rank, self._world = 0, 1
        self._elastic: ElasticClient | None = None
        self._fresh = True  # holds no trained or restored state yet
        self._notice_at: float | None = None
        self._notice_posted: float | None = None
        self._ctl_ckpt_seen = 0
        self._next_boundary = 0
        """The step after which the group's members next agree (:meth:`_boundary`); every member
        learns it from the previous agreement, so all stop at the same step."""
        self._agreements = 0
        """Agreements (:meth:`_boundary` collectives) this worker took part in."""
        self._agreement: tuple[torch.Tensor, Any] | None = None
        """The flags and pending all-reduce of the agreement that follows the current step."""
        self._boundary_at: tuple[int, float] = (0, time.monotonic())
        self._progress_at = 0.0
        self._loss_sum: torch.Tensor | None = None
        """Rank 0's summed shard losses since its last report (on the device: no sync per step)."""
        self._loss_steps = 0
        self._noise: _GradientNoise | None = None
        self._grad_sums: list[torch.Tensor] = []
        """Rank 0's window sums of the shard's and the global batch's |g|^2 (see _GradientNoise)."""
        self._grad_steps = 0
        self._window_t0 = time.monotonic()
        self._last_ckpt_t = time.monotonic()
        self._last_ckpt_step = -1
        self._events = None
        self._heartbeat: Any = None
        self._lock = threading.Lock()
        self._group_socks: set[int] = set()
        self._group_gen = -1
        self._cut_gen = -1
        self._ctl_gen = -1
        self._abort_req = -1
        self._stopping: str | None = None
        self._released: bool | None = None
        self._sync = _SyncTimer()
        self._n_trainable = 0
        for p in self.model.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._sync.grad_ready)
                self._n_trainable += 1
        if config.run_dir:
            Path(config.run_dir).mkdir(parents=True, exist_ok=True)
            self._events = open(Path(config.run_dir) / f"events-{self.worker_id}.jsonl", "a", buffering=1)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything stateful: model, optimizer, scheduler, sampler, RNG, step."""
        return {
            "model": self.model.state_dict(),
            "optim": self.optimizer.state_dict(),
            "sched": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
            "sampler": self.sampler.state_dict(),
            "rng": torch.get_rng_state(),
            "step": self.step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])  # copies onto the model's device
        self.optimizer.load_state_dict(state["optim"])
        if self.lr_scheduler is not None and state.get("sched") is not None:
            self.lr_scheduler.load_state_dict(state["sched"])
        self.sampler.load_state_dict(state["sampler"])
        torch.set_rng_state(state["rng"])
        self.step = int(state["step"])
        self._fresh = False

    # ------------------------------------------------------------------ events
    def _event(self, kind: str, **data: Any) -> None:
        if self._events is not None:
            self._events.write(json.dumps({"t": time.time(), "wid": self.worker_id, "kind": kind, **data}) + "\n")

    # ------------------------------------------------------------------ main loop
    def fit(self) -> None:
        """Train to ``config.steps``; survives peers leaving and joining."""
        self._install_signal_handler()
        self._elastic = ElasticClient.from_env()
        if self._elastic is not None:
            self._elastic.cancelled = lambda: self._stopping is not None
        try:
            # Inside the try: a checkpoint that cannot be resumed (another job's, none readable)
            # is the user's input error, reported like any other (see _input_error_exit).
            self._resume_from_checkpoint()
            if self.step >= self.config.steps and not self._fresh:
                # Restored the final checkpoint: the job is complete (a rerun after the end, or a
                # replacement that started as the others finished). Nothing to join or wait for.
                self._event("done", step=self.step, gen=self._gen, world=0, restored=True)
                return
            if self._elastic is not None:
                self._start_heartbeat()
                self._elastic.register()
            self._loop()
        except BaseException as exc:
            if self._elastic is not None and not isinstance(exc, (SystemExit, KeyboardInterrupt)):
                self._event("error", type=type(exc).__name__, step=self.step)
                self._elastic.report_error(exc)
            raise
        finally:
            if self._heartbeat is not None:
                self._heartbeat.bye("done")
            if self.checkpointer is not None:
                self.checkpointer.close()
            self._teardown()

    def _loop(self) -> None:
        formed = False
        failures = 0
        while True:
            if self._stopping is not None:
                self._stop_now()
            try:
                if not formed:
                    try:
                        self._form()
                    except WaitCancelled:
                        self._stop_now()
                    formed = True
                if self.step >= self.config.steps:
                    self._finish()
                    return
                self._open_agreement()
                self._train_step()
                self._boundary()
                failures = 0
            except _Membership as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except (TimeoutError, dist.DistError, _CommFailure) as exc:
                # By type: a timeout, torch.distributed's errors (store, network, backend), or a
                # collective that failed where no training code runs. Never by the words of the
                # message. A lost member explains it; otherwise (a send or receive that timed out
                # on a lossy link, a reset connection) every member is alive, and the controller
                # is asked for a new generation of the same members (else none would come).
                if self._elastic is None:
                    raise
                first = f"{type(exc).__name__}: {_first_line(exc)}"
                if self._peer_failure():
                    reason = first
                else:
                    self._request_regroup(first)
                    reason = f"{first} (no member lost: regroup requested)"
            except RuntimeError as exc:
                # gloo raises a plain RuntimeError when a peer's connection closes; so may user
                # code. It is a membership failure only if this worker aborted the group itself
                # or the controller confirms a membership change (a lost member) in time.
                if self._elastic is None or not self._peer_failure():
                    raise
                reason = f"{type(exc).__name__} (membership change confirmed): {_first_line(exc, 120)}"
            else:
                continue
            # Outside the except clause: the traceback (and the failed step's frames holding
            # the old DDP wrapper) is released, so the wrapper is freed without a gc pass.
            t0 = time.time()
            self._teardown()
            self._event("reform", gen=self._gen, step=self.step, reason=reason, teardown_s=time.time() - t0)
            formed = False
            failures += 1
            if failures > 1:  # the store itself is failing (controller gone?): do not spin
                time.sleep(min(0.05 * failures, 1.0))

    def _request_regroup(self, reason: str) -> None:
        try:
            self._elastic.set(f"regroup/{self._gen}", {"worker": self.worker_id, "step": self.step,  # type: ignore[union-attr]
                                                       "reason": reason})
        except Exception:  # noqa: BLE001 - the store is gone: the controller-loss path stops this worker
            return
        self._event("regroup", gen=self._gen, step=self.step, reason=reason)

    def _peer_failure(self) -> bool:
        """True when the failure of a collective is a membership change: this worker cut its
        group's connections, or the controller publishes a generation newer than ours within
        ``confirm_s`` (it sees a dead process at once and a silent one after its deadline)."""
        deadline = time.monotonic() + self.config.confirm_s
        while True:
            if self._cut_gen >= self._gen or self._ctl_gen > self._gen or self._stopping is not None:
                return True
            try:
                gen = self._elastic.get_nowait("gen") if self._elastic is not None else None
            except Exception:  # noqa: BLE001 - the store is unreachable: the controller is in doubt
                return True
            if gen is not None and int(gen) > self._gen:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    # ------------------------------------------------------------------ liveness
    def _start_heartbeat(self) -> None:
        endpoint = os.environ.get("SPOTTRAIN_LIVENESS")
        if not endpoint:
            return
        from spottrain.runtime.liveness import Heartbeat

        self._heartbeat = Heartbeat(endpoint, self.worker_id, on_message=self._on_control,
                                    on_lost=self._on_controller_lost,
                                    grace_s=self.config.controller_grace_s).start()

    def _on_control(self, msg: dict[str, Any]) -> None:
        """A message from the controller (heartbeat thread)."""
        if "fence" in msg:
            self._event("fenced", step=self.step, gen=self._gen, reason=str(msg["fence"]))
            self._exit(EXIT_FENCED)
        if "gen" in msg:
            gen = int(msg["gen"])
            self._ctl_gen = max(self._ctl_gen, gen)
            if msg.get("abort"):
                self._abort_req = max(self._abort_req, gen)
                self._abort_group(gen)
        if "release" in msg:
            self._released = bool(msg.get("checkpoint", False))
            self._on_sigterm(signal.SIGTERM, None)
        if "stop" in msg:
            self._begin_stop(str(msg["stop"]))

    def _on_controller_lost(self) -> None:
        self._begin_stop("controller lost (silent, or refusing connections)")
        self._abort_group(self._group_gen + 1)

    def _begin_stop(self, reason: str) -> None:
        if self._stopping is not None:
            return
        self._stopping = reason
        self._event("stopping", step=self.step, reason=reason)
        if self._fresh:
            # Nothing trained or restored to save, and the training thread may be blocked in a
            # group's bootstrap whose other members already left: go now.
            self._event("stopped", step=self.step, gen=self._gen, reason=reason)
            self._exit(EXIT_STOPPED)
        # Whatever the training thread is blocked in, this process is gone in bounded time.
        timer = threading.Timer(self.config.exit_grace_s, self._exit, (EXIT_STOPPED,))
        timer.daemon = True
        timer.start()

    def _stop_now(self) -> None:
        """Stop at a consistent state: rank 0 of the last group writes a checkpoint, then exit."""
        if self._rank == 0 and self.checkpointer is not None and not self._fresh and self.step > 0:
            try:
                self.save_checkpoint(blocking=True)
                self.checkpointer.wait()
            except Exception as exc:  # noqa: BLE001 - exiting anyway; the older checkpoint stays
                log.warning("worker %s: checkpoint on stop failed: %s", self.worker_id, exc)
        self._event("stopped", step=self.step, gen=self._gen, reason=self._stopping)
        self._exit(EXIT_STOPPED)

    def _exit(self, code: int) -> None:
        if self._events is not None:
            try:
                self._events.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    def _abort_group(self, gen: int) -> None:
        """Abandon the current group if it is older than ``gen``: shut its connections down."""
        with self._lock:
            if self._group_socks and self._group_gen < gen and self._cut_gen < self._group_gen:
                self._cut_gen = self._group_gen
                n = cut_sockets(self._group_socks)
                self._event("abort", gen=self._group_gen, new_gen=gen, sockets=n)

    # ------------------------------------------------------------------ membership
    def _form(self) -> None:
        t0 = time.time()
        t_wait = 0.0
        before: set[int] = set()
        if self._elastic is not None:
            gen, members = self._elastic.wait_generation(self._gen, timeout_s=self.config.rejoin_timeout_s)
            # every member present before gloo's bootstrap, or a newer generation instead
            gen, members = self._elastic.arrive(gen, members, timeout_s=self.config.pg_timeout_s)
            t_wait = time.time() - t0
            self._gen, self._rank, self._world = gen, members.index(self.worker_id), len(members)
            before = socket_inodes()
            _reset_group_counter()
            with _collective(True, "process group bootstrap"):
                dist.init_process_group(self._pg_backend, store=self._elastic.group_store(gen), rank=self._rank,
                                        world_size=self._world, timeout=timedelta(seconds=self.config.pg_timeout_s))
        elif "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
            dist.init_process_group(self._pg_backend, timeout=timedelta(seconds=max(self.config.pg_timeout_s, 60)))
            self._gen, self._rank, self._world = 0, dist.get_rank(), dist.get_world_size()
        else:
            self._gen, self._rank, self._world = 0, 0, 1
        t_init = time.time()
        if dist.is_initialized():
            with _collective(self._elastic is not None, "state exchange"):
                source = self._exchange_state()
        else:
            source = "memory" if not self._fresh else "init"
        t_exchange = time.time()
        if self.config.rescale == "scale-lr":
            ref = self.config.planned_world_size or self._world
            for g, base in zip(self.optimizer.param_groups, self._base_lrs):
                g["lr"] = base * self._world / ref
        if dist.is_initialized():
            ids = [self.device.index] if self.device.type == "cuda" else None
            self._ddp = DDP(self.model, device_ids=ids, broadcast_buffers=False)
            self._noise = None
            if self.config.gradient_noise:
                self._noise = _GradientNoise(record=self._rank == 0)
                self._ddp.register_comm_hook(None, self._noise.hook)
            if self._elastic is not None:
                with self._lock:  # the connections of this group, for _abort_group
                    self._group_socks = socket_inodes() - before
                    self._group_gen = self._gen
                if self._abort_req > self._gen:  # a loss announced while this group formed
                    self._abort_group(self._abort_req)
        self._fresh = False
        self._next_boundary = self.step  # a new group agrees after its first step
        self._agreement = None
        self._progress_at = 0.0  # and tells the controller of it
        self._loss_sum, self._loss_steps = None, 0  # a window starts with the group
        self._grad_sums, self._grad_steps = [], 0
        self._window_t0 = time.monotonic()
        self._boundary_at = (self.step, time.monotonic())
        self._event("gen", gen=self._gen, rank=self._rank, world=self._world, step=self.step, source=source,
                    form_s=time.time() - t0, wait_s=t_wait, init_s=t_init - t0 - t_wait,
                    exchange_s=t_exchange - t_init, ddp_s=time.time() - t_exchange)

    def _exchange_state(self) -> str:
        """Agree on the newest state among the members and hand it to whoever lacks it."""
        dev = self._comm_device()
        mine = torch.tensor([self.step, 0 if self._fresh else 1], dtype=torch.int64, device=dev)
        everyone = [torch.zeros(2, dtype=torch.int64, device=dev) for _ in range(self._world)]
        dist.all_gather(everyone, mine)
        steps = [int(t[0]) for t in everyone]
        has = [int(t[1]) for t in everyone]
        best = max(steps)
        src = min(r for r in range(self._world) if steps[r] == best and (has[r] or best == 0))
        need = len(set(steps)) > 1 or (best > 0 and not all(has))
        if not need:
            return "memory" if has[self._rank] else "init"
        from spottrain.runtime.state import broadcast_state

        state = broadcast_state(self.state_dict() if self._rank == src else None, src, device=dev)
        if self._rank != src:
            self.load_state_dict(state)
            return "peer"
        return "memory"

    def _teardown(self) -> None:
        with self._lock:
            self._group_socks = set()
        # The old wrapper's reducer hooks must be gone before a new DDP wraps the same module.
        # Refcounting frees it at once; a full gc.collect() costs ~0.3 s, so only as a fallback.
        old, self._ddp = (weakref.ref(self._ddp) if self._ddp is not None else None), None
        if old is not None and old() is not None:
            gc.collect()
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group is exactly what we are discarding
                pass

    def _pick_device(self) -> torch.device:
        if self.config.device != "auto":
            return torch.device(self.config.device)
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            # more workers than GPUs (a local job of 4 workers on 2 GPUs) share them in turn
            index = local % torch.cuda.device_count()
            torch.cuda.set_device(index)
            return torch.device("cuda", index)
        return torch.device("cpu")

    def _backend(self) -> str:
        if self.config.backend != "auto":
            return self.config.backend
        gpus = torch.cuda.device_count() if self.device.type == "cuda" else 0
        return auto_backend(self.device.type, local_workers=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                            gpus=gpus, device_named=self.config.device != "auto")

    def _comm_device(self) -> torch.device:
        """Where small control tensors live: NCCL only moves GPU tensors."""
        return self.device if self._pg_backend == "nccl" else torch.device("cpu")

    # ------------------------------------------------------------------ one step
    def _train_step(self) -> None:
        cfg = self.config
        if cfg.rescale == "accumulate":
            batch_size = cfg.global_batch_size
        else:
            per_worker = max(cfg.global_batch_size // (cfg.planned_world_size or self._world), 1)
            batch_size = per_worker * self._world
        if batch_size < self._world:
            raise InputError(f"global batch {batch_size} is smaller than the world size {self._world}")
        mine = shard(self.sampler.global_batch(batch_size), self._rank, self._world)
        micro = cfg.micro_batch_size or len(mine)
        chunks = [mine[i:i + micro] for i in range(0, len(mine), micro)]
        model = self._ddp if self._ddp is not None else self.model
        # The all-reduce is timed on CPU (gloo) workers of a group: on a GPU the host does not wait for it.
        timed = self._ddp is not None and self._rank == 0 and self.device.type == "cpu"
        sync_s: float | None = None
        self.optimizer.zero_grad(set_to_none=True)
        shard_loss: torch.Tensor | None = None  # rank 0's mean loss over its shard of the step
        for i, idx in enumerate(chunks):
            batch = self._fetch(idx)
            # Mean over the global batch; DDP divides by the world size, so multiply it back.
            scale = len(idx) / batch_size * self._world
            last = i == len(chunks) - 1
            if self._ddp is not None and not last:
                with self._ddp.no_sync():
                    loss = self.loss_fn(model, batch)
                    (loss * scale).backward()
            elif self._ddp is not None:  # the last micro-batch: DDP all-reduces its gradients
                loss = self.loss_fn(model, batch)
                # A failure after every gradient was produced is not the training code's (the
                # backward pass is done): it is DDP's wait for the all-reduce.
                with _collective(lambda: self._elastic is not None and self._sync.count >= self._n_trainable,
                                 "gradient all-reduce"):
                    waited = self._sync.backward(loss * scale)
                sync_s = waited if timed else None
            else:
                loss = self.loss_fn(model, batch)
                (loss * scale).backward()
            if self._rank == 0:
                part = loss.detach() if len(chunks) == 1 else loss.detach() * (len(idx) / len(mine))
                shard_loss = part if shard_loss is None else shard_loss + part
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.sampler.advance(batch_size)
        self.step += 1
        if self._rank == 0:
            extra: dict[str, Any] = {} if sync_s is None else {"sync_time_s": round(sync_s, 6)}
            grads = self._noise.take() if self._noise is not None and self._ddp is not None else None
            window = self._window_report(shard_loss, grads, len(mine), batch_size)
            extra.update(window)
            self._event("step", step=self.step, gen=self._gen, world=self._world, **extra)
            if window and self._elastic is not None:
                self._post_window(window)
            now = time.monotonic()
            if self._elastic is not None and (now - self._progress_at >= PROGRESS_EVERY_S
                                              or self.step >= self.config.steps):
                self._elastic.set("progress", self.step)
                self._progress_at = now

    def _window_report(self, shard_loss: torch.Tensor | None, grads: tuple[torch.Tensor, torch.Tensor] | None,
                       b: int, big: int) -> dict[str, Any]:
        """Add this step to rank 0's window; at the window's end (every :data:`LOSS_EVERY` steps,
        and the last step) what its step event reports, else ``{}``.

        ``loss``: the mean of the step's shard losses over the window (none when it is not a
        finite number: a diverging run's curve stops there), with the global ``batch``.
        ``grad_sqr`` and ``grad_var``: |G|^2 and tr(Sigma) (per sample), the unbiased estimates
        from the window's means of the shard's and the global batch's |g|^2
        (:class:`_GradientNoise`; ``b`` samples in rank 0's shard, ``big`` in the global batch),
        when every step of the window had them. Rank 0's shard gradient is its samples' mean
        scaled by ``W b / B`` (the loss scale that makes the members' sum the global mean): it
        is taken back to their mean first."""
        if shard_loss is not None and shard_loss.numel() == 1:
            value = shard_loss.reshape(()).float()
            self._loss_sum = value if self._loss_sum is None else self._loss_sum + value
            self._loss_steps += 1
            if grads is not None and 0 < b < big:  # b and big stay the same within a window (of one group)
                self._grad_sums = (list(grads) if not self._grad_sums
                                   else [self._grad_sums[0] + grads[0], self._grad_sums[1] + grads[1]])
                self._grad_steps += 1
        if self._loss_steps == 0 or (self.step % LOSS_EVERY and self.step < self.config.steps):
            return {}
        n, mean = self._loss_steps, float(self._loss_sum) / self._loss_steps  # type: ignore[arg-type]
        sums, n_grad = self._grad_sums, self._grad_steps
        self._loss_sum, self._loss_steps, self._grad_sums, self._grad_steps = None, 0, [], 0
        now = time.monotonic()
        window_s, self._window_t0 = now - self._window_t0, now
        if not math.isfinite(mean):
            return {}
        out: dict[str, Any] = {"loss": round(mean, 6), "batch": big, "window_steps": n,
                               "window_s": round(window_s, 6)}
        if sums and n_grad == n:
            g_b, g_big = float(sums[0]) / n * (big / (self._world * b)) ** 2, float(sums[1]) / n
            grad_sqr = (big * g_big - b * g_b) / (big - b)
            grad_var = (g_b - g_big) / (1.0 / b - 1.0 / big)
            if math.isfinite(grad_sqr) and math.isfinite(grad_var):
                out.update(grad_sqr=float(f"{grad_sqr:.6g}"), grad_var=float(f"{grad_var:.6g}"))
        return out

    def _post_window(self, window: dict[str, Any]) -> None:
        """Give rank 0's window report to the controller too (``report/<n>`` in its store): on a
        cloud the workers' event files stay on the nodes, and the controller records the run
        from these (:func:`spottrain.runtime.record.window_rows`). A store that fails here is the
        controller's loss, which the next agreement handles: the report is dropped, not raised."""
        try:
            self._elastic.report({"kind": "step", "t": time.time(), "step": self.step, "gen": self._gen,  # type: ignore[union-attr]
                                  "world": self._world, **window})
        except Exception as exc:  # noqa: BLE001 - a report never stops training
            log.debug("window report not delivered: %s", exc)

    def _fetch(self, indices: list[int]) -> Any:
        get_batch = getattr(self.dataset, "get_batch", None)
        batch = get_batch(indices) if get_batch is not None else self.collate_fn([self.dataset[i] for i in indices])
        return _to_device(batch, self.device) if self.device.type != "cpu" else batch

    # ------------------------------------------------------------------ step boundary
    def _open_agreement(self) -> None:
        """At the start of a step that ends at an agreement: post this member's flags.

        The all-reduce is started here, asynchronously, and waited for after the step
        (:meth:`_boundary`): it completes while the members compute, and the step's gradient
        all-reduce is the only point where they wait for one another. (Started after the step, it
        was a second synchronization point: on CPU steps of ~35 ms over 4 hosts it absorbed the
        members' drift, ~10 ms per agreement.) What it carries is read now: the controller's
        generation and checkpoint requests, this member's notice, rank 0's checkpoint schedule."""
        self._agreement = None
        at = self.step + 1  # the step the agreement follows
        if at >= self.config.steps or at < self._next_boundary:
            return
        leaving, want_ckpt = 0, 0
        if self._notice_at is not None:
            leaving, want_ckpt = self._notice_decision()
        if self._rank == 0 and self._checkpoint_due(at):
            want_ckpt = 1
        ctl = self._elastic.control() if self._elastic is not None else {"gen": self._gen, "ckpt": 0}
        flags = torch.zeros(4 + self._world, dtype=torch.int64, device=self._comm_device())
        flags[0], flags[1], flags[2] = int(ctl["gen"]), want_ckpt, int(ctl["ckpt"])
        if self._rank == 0:
            flags[3] = self._boundary_after(at)
        flags[4 + self._rank] = leaving
        work = None
        if dist.is_initialized():
            with _collective(self._elastic is not None, "step-boundary all-reduce"):
                work = dist.all_reduce(flags, op=dist.ReduceOp.MAX, async_op=True)
        self._agreement = (flags, work)

    def _boundary(self) -> None:
        """Agree, at the steps chosen in advance, on checkpoints, leavers and membership changes."""
        if self.step >= self.config.steps:
            return
        if self._stopping is not None:
            self._stop_now()
        if self._agreement is None:
            return
        flags, work = self._agreement
        self._agreement = None
        if work is not None:
            with _collective(self._elastic is not None, "step-boundary all-reduce"):
                work.wait()
        flags = flags.cpu()
        self._agreements += 1
        self._next_boundary = int(flags[3])
        leavers = [r for r in range(self._world) if flags[4 + r] > 0]
        stay = [r for r in range(self._world) if r not in leavers]
        requested = int(flags[2]) > self._ctl_ckpt_seen
        self._ctl_ckpt_seen = max(self._ctl_ckpt_seen, int(flags[2]))
        if (int(flags[1]) or requested) and self.checkpointer is not None:
            writer = stay[0] if stay else 0
            if self._rank == writer:
                self.save_checkpoint(emergency=bool(leavers), blocking=self._rank in leavers)
        if self._rank in leavers:
            self._leave()
        if leavers or int(flags[0]) > self._gen:
            raise _Membership("leavers" if leavers else f"generation {int(flags[0])}")

    def _boundary_after(self, at: int) -> int:
        """The step of the agreement after the one that follows step ``at``, chosen by rank 0:
        about :data:`BOUNDARY_EVERY_S` ahead at the step time since the last one, never past a
        step-count checkpoint (the checkpoint is taken at an agreement)."""
        done = at - 1  # steps completed now, at the start of step ``at``
        last_step, last_t = self._boundary_at
        now = time.monotonic()
        self._boundary_at = (done, now)
        if done <= last_step:  # no step timed yet (a new group): agree after the next one
            ahead = 1
        else:
            per_step = (now - last_t) / (done - last_step)
            ahead = max(1, min(int(BOUNDARY_EVERY_S / max(per_step, 1e-6)), 64))
        every = self.config.checkpoint_every_steps
        if every and self.checkpointer is not None:
            ahead = min(ahead, every - at % every)
        return at + ahead

    def _notice_decision(self) -> tuple[int, int]:
        if self._elastic is None:
            return 1, 1
        if self._released is not None:  # the controller released this node: its decision is known
            return 1, int(self._released)
        if self._notice_posted is None:
            self._elastic.set(f"notice/{self.worker_id}", {"step": self.step, "t": time.time()})
            self._notice_posted = time.monotonic()
            self._event("notice", step=self.step)
        decision = self._elastic.get_nowait(f"decision/{self.worker_id}")
        if decision is not None:
            return 1, int(bool(decision.get("checkpoint_now", True)))
        if time.monotonic() - self._notice_posted > self.config.notice_wait_s:
            return 1, 1
        return 0, 0

    def _leave(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.wait()
        self._event("left", step=self.step, gen=self._gen)
        if self._elastic is not None:
            self._elastic.set(f"left/{self.worker_id}", self.step)
        if self._heartbeat is not None:
            self._heartbeat.bye("left")
        if self._events is not None:
            self._events.flush()
        # Everything durable is written (checkpoint waited for, events flushed). Exit now: a
        # preempted node has seconds left, and tearing down gloo's threads can take several.
        os._exit(EXIT_LEFT)

    def _checkpoint_due(self, at: int) -> bool:
        """Whether rank 0 asks for a checkpoint after step ``at``."""
        cfg = self.config
        if self.checkpointer is None:
            return False
        if cfg.checkpoint_every_steps and at % cfg.checkpoint_every_steps == 0:
            return True
        return bool(cfg.checkpoint_interval_s) and time.monotonic() - self._last_ckpt_t >= cfg.checkpoint_interval_s

    def save_checkpoint(self, *, emergency: bool = False, blocking: bool = False) -> None:
        """Snapshot now, persist in the background (or now when ``blocking``)."""
        assert self.checkpointer is not None
        if self._last_ckpt_step == self.step:
            return
        t0 = time.perf_counter()
        fut = self.checkpointer.save(self.state_dict(), step=self.step, blocking=blocking)
        stall = time.perf_counter() - t0
        self._last_ckpt_t = time.monotonic()
        self._last_ckpt_step = self.step
        step, gen, wid = self.step, self._gen, self.worker_id

        def done(f: Any) -> None:
            try:
                res = f.result()
                self._event("ckpt", step=step, gen=gen, stall_s=stall, persist_s=res.persist_s,
                            bytes=res.size_bytes, emergency=emergency, path=str(res.path))
            except Exception as exc:  # noqa: BLE001 - a failed write must not kill training
                self._event("ckpt_failed", step=step, error=str(exc)[:200])
                log.warning("worker %s: checkpoint at step %d failed: %s", wid, step, exc)

        fut.add_done_callback(done)

    def _resume_from_checkpoint(self) -> None:
        if self.checkpointer is None:
            return
        found = self.checkpointer.load_latest()
        if found is not None:
            state, info = found
            self.load_state_dict(state)
            self._last_ckpt_step = self.step
            self._event("restore", step=self.step, path=str(info.path))

    def _finish(self) -> None:
        if self._rank == 0:
            if self.checkpointer is not None:
                self.save_checkpoint(blocking=True)
                self.checkpointer.wait()
            self._event("done", step=self.step, gen=self._gen, world=self._world, agreements=self._agreements)
        if dist.is_initialized() and self._world > 1:
            # If rank 0 dies while writing the final checkpoint, this fails and the survivors
            # re-form; the new rank 0 writes it.
            with _collective(self._elastic is not None, "final barrier"):
                dist.barrier()

    # ------------------------------------------------------------------ signals
    def _install_signal_handler(self) -> None:
        try:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except ValueError:  # not the main thread
            pass
        source = os.environ.get("SPOTTRAIN_NOTICE_SOURCE")  # aws | gcp: poll the metadata service
        if source:
            from spottrain.runtime.watcher import make_watcher, start_watcher

            watcher = make_watcher(source, os.environ.get("SPOTTRAIN_NOTICE_URL") or None)
            start_watcher(watcher, lambda notice: self._on_sigterm(signal.SIGTERM, None))

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        # Only a flag: the step boundary acts on it (store and collectives are not reentrant).
        if self._notice_at is None:
            self._notice_at = time.monotonic()


def _reset_group_counter() -> None:
    """Name the next default process group as every fresh process does.

    torch names the default group after a process-wide counter that only a successful
    ``destroy_process_group`` resets. An ``init_process_group`` that failed midway (a peer that
    never came, a bootstrap timeout) leaves it raised, and this worker's next group would look
    up other store keys than its peers' (``gen/<g>/pg/4/...`` against ``gen/<g>/pg/0/...``): no
    group could form again (the 30-minute soak stalled on it). Only when no group exists."""
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is not None and hasattr(world, "group_count") and not dist.is_initialized():
        world.group_count = 0


class _SyncTimer:
    """Times the gradient all-reduce a step waits for: from the moment the backward pass has
    accumulated its last gradient (a post-accumulate hook on every parameter; DDP launches the
    last bucket's all-reduce then) to the moment ``backward()`` returns (DDP's final callback has
    waited for every bucket's all-reduce and copied the result back). The all-reduces of earlier
    buckets overlap the backward pass; what they add beyond it is in this wait too. That is the
    ``sync_time_s`` of the measurement table (what PyTorch DDP and AdaptDL time as the step's sync
    time) and what the run's measurement rows store (:mod:`spottrain.runtime.record`). The
    collective is DDP's own all-reduce, issued by :class:`_GradientNoise`'s hook."""

    __slots__ = ("armed", "last_grad", "count")

    def __init__(self) -> None:
        self.armed = False
        self.last_grad = 0.0
        self.count = 0
        """Gradients accumulated in the current timed backward pass."""

    def grad_ready(self, param: torch.Tensor) -> None:
        if self.armed:
            self.last_grad = time.perf_counter()
            self.count += 1

    def backward(self, loss: torch.Tensor) -> float:
        """``loss.backward()``; returns the seconds it waited for the all-reduce after its last gradient."""
        self.last_grad = 0.0
        self.count = 0
        self.armed = True
        try:
            loss.backward()
            end = time.perf_counter()
        finally:
            self.armed = False
        return max(end - self.last_grad, 0.0) if self.last_grad else 0.0


class _GradientNoise:
    """The chief's gradient before and after the all-reduce, for the gradient noise scale.

    A DDP communication hook on every member (the same all-reduce DDP runs by default: each
    bucket divided by the world size and summed) that, on rank 0, also sums the squares of each
    bucket before the all-reduce (its own shard's gradient, ``b`` samples) and after it (the
    global batch's, ``B`` samples). Per step the two sums are ``|g_b|^2`` and ``|g_B|^2``, whose
    expectations are ``|G|^2 + tr(Sigma)/b`` and ``|G|^2 + tr(Sigma)/B`` (McCandlish et al. 2018,
    "An Empirical Model of Large-Batch Training", appendix A.1; AdaptDL measures them the same
    way). :meth:`Trainer._window_report` turns a window's means into ``grad_sqr`` (|G|^2) and
    ``grad_var`` (tr Sigma), whose ratio is the noise scale the batch-size model reads.
    Nothing is read from the device per step: the sums stay tensors until the window ends."""

    __slots__ = ("record", "small", "big")

    def __init__(self, record: bool) -> None:
        self.record = record
        self.small: list[torch.Tensor] = []
        self.big: list[torch.Tensor] = []

    def hook(self, group, bucket):  # noqa: ANN001, ANN201 - DDP checks the annotations: none or the real types
        buf = bucket.buffer()
        if self.record:
            self.small.append(buf.detach().float().square().sum())
        buf.div_(dist.get_world_size(group))
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()

        def done(f: Any) -> torch.Tensor:
            out = f.value()[0]
            if self.record:
                self.big.append(out.detach().float().square().sum())
            return out

        return fut.then(done)

    def take(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """This step's (|g_b|^2, |g_B|^2), and start the next; ``None`` when it recorded none."""
        if not self.small or len(self.small) != len(self.big):
            self.small, self.big = [], []
            return None
        out = torch.stack(self.small).sum(), torch.stack(self.big).sum()
        self.small, self.big = [], []
        return out


def _input_error_exit(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    """``sys.excepthook`` of a worker under ``spottrain run``: an uncaught
    :class:`~spottrain.errors.SpottrainError` (from the trainer, or from the user's script or
    config before training starts) ends the process with one line, ``error: <message>``, and
    :data:`~spottrain.runtime.elastic.EXIT_INPUT`, which the launcher takes for the user's error
    (it stops the job with that line), not for a revocation. Anything else keeps its traceback."""
    if not issubclass(exc_type, SpottrainError):
        _previous_excepthook(exc_type, exc, tb)
        return
    try:
        print(f"error: {error_line(exc)}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # Raised before the trainer reported it (the user's script, its config): report it now,
        # so that a controller that sees only "node lost" (the fleet's) reads it too.
        endpoint = os.environ.get(ENV_RDZV, "")
        wid = os.environ.get("SPOTTRAIN_WORKER_ID")
        if endpoint and wid:
            ElasticClient(endpoint, wid, timeout_s=5.0).report_error(exc)
    except Exception:  # noqa: BLE001 - the exit code alone still tells the launcher
        pass
    finally:
        os._exit(EXIT_INPUT)


_previous_excepthook = sys.excepthook
if os.environ.get(ENV_RDZV):
    sys.excepthook = _input_error_exit


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch
