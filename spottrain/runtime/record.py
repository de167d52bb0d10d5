"""Write a run's record (membership changes, checkpoints, lost steps, stalls, cost) to the
SQLite store (:mod:`spottrain.store`), so that real runs can refine the models.

Besides the record, a run leaves *measurement rows* (the store's ``measurements`` table): its
steady-state throughput at each world size it trained at, in the columns of the measurement
table. ``predict``, ``plan`` and ``converge`` read them back (:mod:`spottrain.perf.own_runs`).

How a row is measured, from the chief's ``step`` events (``events-<worker>.jsonl``):

- the step time is the gap between consecutive completed steps of one membership generation,
  so the first step after each (re-)formation, which has no predecessor, is never counted;
- warm-up: the first :data:`WARMUP_FRACTION` of each generation's gaps (at least
  :data:`MIN_WARMUP_STEPS`) are dropped (allocator, cuDNN autotuning, DDP bucket rebuilds);
- stalls: a gap longer than :data:`STALL_FACTOR` x the median gap of its world size
  (a blocking checkpoint, a peer being replaced) is not a training step and is dropped;
- the rest, pooled over the generations with the same world size, give the mean step time;
  a world size with fewer than :data:`MIN_STEADY_STEPS` such steps gives no row;
- throughput = samples per step at that world size / mean step time; the per-GPU batch is the
  global batch split over the world (``accumulate``) or the planned per-worker batch
  (``scale-lr``);
- all-reduce (sync) time: the mean of the steps' ``sync_time_s`` when the workers report it;
  empty otherwise.

It also leaves the run's training-loss curve (the store's ``loss_points``): the chief's mean loss
over each window of :data:`~spottrain.runtime.api.LOSS_EVERY` steps, as its step events carry it,
with the global batch of that step and, from a group of two or more, the gradient's |G|^2 and
tr(Sigma) (``grad_sqr``, ``grad_var``: the gradient noise scale's parts). A step trained twice (a restart from a checkpoint repeats the
steps after it) keeps its later loss. Any device's run gives one: steps to a loss do not depend on
the hardware, so a CPU run's curve serves ``converge`` as well as a GPU run's.
"""

from __future__ import annotations

import logging
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spottrain.runtime.summary import RunSummary, read_worker_events

log = logging.getLogger(__name__)

# Controller events worth keeping in the store (per-step progress is not stored).
_KEEP = ("start", "spawn", "inject", "exit", "notice", "left", "joined", "membership", "decision", "finished", "stop")

WARMUP_FRACTION = 0.1
"""Share of each generation's first step gaps left out as warm-up."""
MIN_WARMUP_STEPS = 2
"""At least this many step gaps of each generation are warm-up."""
STALL_FACTOR = 3.0
"""A gap this many times the median of its world size is a stall, not a step."""
MIN_STEADY_STEPS = 5
"""Fewest steady-state steps that make a measurement row."""


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    """What a run's measurement rows describe besides its events: model, batch and device."""

    model: str
    """Model name of the rows (a zoo name, the plan's workload, ``example-<name>``)."""
    global_batch_size: int
    """Samples per optimizer step (``accumulate``), or of the planned world (``scale-lr``); 0:
    unknown (no measurement rows; the loss curve's reports carry their own batch)."""
    gpu: str
    """Device every worker trains on, as the performance model names it (``H100``), or ``cpu``."""
    rescale: str = "accumulate"
    planned_world_size: int | None = None
    gpus_shared: bool = False
    """True when all workers share one GPU (then only a 1-worker world is a GPU measurement)."""
    flops_per_sample: float | None = None
    """Forward + backward FLOPs of one sample (``None``: the zoo's, for a zoo model)."""
    param_count: int | None = None
    tensor_count: int | None = None
    precision: str = "fp32"
    network_gbps: float | None = None
    source: str = "spottrain run --backend local"


def record_run(summary: RunSummary, events: list[dict[str, Any]], *, store_path: str | None = None,
               plan: dict[str, Any] | None = None, backend: str = "local", setup: RunSetup | None = None) -> str | None:
    """Store the run (and, given its ``setup``, its measurement rows); returns the store path,
    or ``None`` when it could not be written."""
    try:
        from spottrain.store import Store
    except ImportError:  # pragma: no cover - the store ships with spottrain
        return None
    try:
        with Store(store_path) as store:
            meta = summary.to_dict()
            meta["backend"] = backend
            store.record_run(summary.job_id, status="completed" if summary.ok else "failed", plan=plan, meta=meta)
            _store_events(store, summary.job_id, events, time_key="t")
            for ck in summary.checkpoints:
                store.record_event(summary.job_id, "checkpoint", data=ck)
            if setup is not None:
                worker_events = read_worker_events(Path(summary.run_dir))
                _store_measured(store, summary.job_id, setup.model, measurement_rows(worker_events, setup),
                                loss_points(worker_events))
            return str(store.path)
    except Exception as exc:  # noqa: BLE001 - a record must never fail the run
        log.warning("could not write the run record: %s", exc)
        return None


def _store_events(store: Any, job_id: str, events: list[dict[str, Any]], *, time_key: str) -> None:
    """The run's events of the kinds kept (:data:`_KEEP`) into the store, each at its ``time_key``
    (a local run's events carry ``t``, a fleet controller's ``time_s``)."""
    for ev in events:
        if ev.get("kind") in _KEEP:
            store.record_event(job_id, ev["kind"], time_s=ev.get(time_key),
                               data={k: v for k, v in ev.items() if k not in (time_key, "kind")})


def _store_measured(store: Any, job_id: str, model: str, rows: list[dict[str, Any]],
                    points: list[dict[str, Any]]) -> None:
    """What a run measured into the store: its measurement rows and its loss curve (each when any)."""
    if rows:
        store.add_measurements(job_id, rows)
    if points:
        store.add_loss_points(job_id, model, points)


def steady_step_times(worker_events: list[dict[str, Any]]) -> dict[int, tuple[list[dict[str, Any]], int]]:
    """World size -> (the chief's steady-state steps ``{"step", "gen", "time_s"[, "sync_time_s"]}``,
    how many steps were left out as warm-up); see the module docstring."""
    steps = sorted((e for e in worker_events if e.get("kind") == "step" and "world" in e and "gen" in e),
                   key=lambda e: e["t"])
    by_world: dict[int, list[dict[str, Any]]] = {}
    warmup: dict[int, int] = {}
    prev: dict[str, Any] | None = None
    gen_gaps: list[dict[str, Any]] = []

    def close_generation() -> None:
        warm = max(MIN_WARMUP_STEPS, math.ceil(WARMUP_FRACTION * len(gen_gaps)))
        for gap in gen_gaps[:warm]:
            warmup[gap["world"]] = warmup.get(gap["world"], 0) + 1
        for gap in gen_gaps[warm:]:
            by_world.setdefault(gap["world"], []).append(gap)
        gen_gaps.clear()

    for ev in steps:
        if prev is not None and ev["gen"] != prev["gen"]:
            close_generation()
        elif prev is not None and int(ev["step"]) == int(prev["step"]) + 1:
            gap = {"step": int(ev["step"]), "gen": ev["gen"], "world": int(ev["world"]), "time_s": ev["t"] - prev["t"]}
            if isinstance(ev.get("sync_time_s"), (int, float)):
                gap["sync_time_s"] = float(ev["sync_time_s"])
            gen_gaps.append(gap)
        prev = ev
    close_generation()
    out = {}
    for world, gaps in by_world.items():
        median = statistics.median(g["time_s"] for g in gaps)
        out[world] = ([g for g in gaps if g["time_s"] <= STALL_FACTOR * median], warmup.get(world, 0))
    return out


def measurement_rows(worker_events: list[dict[str, Any]], setup: RunSetup) -> list[dict[str, Any]]:
    """The run's measurement rows (dicts in the store's columns), one per world size trained at;
    none when the samples per step are unknown (``global_batch_size`` 0)."""
    if setup.global_batch_size < 1:
        return []
    rows = []
    for world, (gaps, warm) in sorted(steady_step_times(worker_events).items()):
        if len(gaps) < MIN_STEADY_STEPS:
            log.info("world size %d: %d steady steps, fewer than %d; no measurement row", world, len(gaps),
                     MIN_STEADY_STEPS)
            continue
        if setup.gpus_shared and setup.gpu != "cpu" and world > 1:
            log.info("world size %d: the workers shared one GPU; no measurement row", world)
            continue
        if setup.rescale == "scale-lr":
            per_worker = max(setup.global_batch_size // (setup.planned_world_size or world), 1)
            samples = per_worker * world
        else:
            samples = setup.global_batch_size
            per_worker = max(round(samples / world), 1)
        step_s = statistics.fmean(g["time_s"] for g in gaps)
        syncs = [g["sync_time_s"] for g in gaps if "sync_time_s" in g]
        rows.append(_row(setup, world=world, per_worker=per_worker,
                         cluster=f"1x{setup.gpu}:{world}" if world > 1 else f"1x{setup.gpu}",
                         samples=samples, step_s=step_s,
                         sync_s=statistics.fmean(syncs) if len(syncs) == len(gaps) else None,
                         steps=len(gaps), warmup=warm))
    return rows


def _row(setup: RunSetup, *, world: int, per_worker: int, cluster: str, samples: int, step_s: float,
         sync_s: float | None, steps: int, warmup: int) -> dict[str, Any]:
    """One measurement row in the store's columns: ``world`` synchronous workers of ``setup``'s
    model and GPU, ``samples`` per step of ``step_s`` seconds."""
    return {
        "model": setup.model, "batch_size": per_worker, "cluster": cluster, "gpu": setup.gpu, "workers": world,
        "ps": 0, "sync": "sync", "throughput": samples / step_s, "step_time_s": step_s, "sync_time_s": sync_s,
        "steps": steps, "warmup_steps": warmup, "network_gbps": setup.network_gbps,
        "flops_per_sample": setup.flops_per_sample, "param_count": setup.param_count,
        "precision": setup.precision, "tensor_count": setup.tensor_count, "source": setup.source,
    }


def loss_points(worker_events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's loss curve: ``{"step", "loss", "global_batch_size", "workers"[, "grad_sqr", "grad_var"]}`` per step event
    that carries a loss (see the module docstring), by step; a repeated step keeps its later report."""
    by_step: dict[int, dict[str, Any]] = {}
    for ev in sorted((e for e in worker_events if e.get("kind") == "step"), key=lambda e: e.get("t", 0.0)):
        loss, batch = ev.get("loss"), ev.get("batch")
        if not isinstance(loss, (int, float)) or not math.isfinite(loss) or not isinstance(batch, int) or batch < 1:
            continue
        point = {"step": int(ev["step"]), "loss": float(loss), "global_batch_size": batch,
                 "workers": int(ev.get("world", 1))}
        sqr, var = ev.get("grad_sqr"), ev.get("grad_var")
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in (sqr, var)):
            point.update(grad_sqr=float(sqr), grad_var=float(var))
        by_step[int(ev["step"])] = point
    return [by_step[k] for k in sorted(by_step)]


def window_rows(reports: list[dict[str, Any]], setup: RunSetup) -> list[dict[str, Any]]:
    """Measurement rows from the chief's window reports (a cloud run, whose per-step events stay
    on its nodes): per world size, the median step time of its windows (``window_s`` /
    ``window_steps``), leaving out each generation's first window (warm-up: the allocator, cuDNN,
    DDP's buckets) and any window holding a stall (over :data:`STALL_FACTOR` x the median: a
    blocking checkpoint). The median of whole windows, not of single steps: coarser than
    :func:`measurement_rows`, and as robust to the odd slow window. A world size needs
    :data:`MIN_STEADY_STEPS` such steps; one row each, the cluster ``<world>x<gpu>`` (one worker
    per node)."""
    by_world: dict[int, list[tuple[float, int, int]]] = {}
    first_of_gen: set[int] = set()
    for r in sorted(reports, key=lambda r: (r.get("t", 0.0))):
        steps, secs, world, batch = r.get("window_steps"), r.get("window_s"), r.get("world"), r.get("batch")
        if not (isinstance(steps, int) and steps > 0 and isinstance(secs, (int, float)) and secs > 0
                and isinstance(world, int) and world > 0 and isinstance(batch, int) and batch > 0):
            continue
        gen = r.get("gen")
        if gen not in first_of_gen:
            first_of_gen.add(gen)
            continue
        by_world.setdefault(world, []).append((secs / steps, steps, batch))
    rows = []
    for world, windows in sorted(by_world.items()):
        median = statistics.median(w[0] for w in windows)
        kept = [w for w in windows if w[0] <= STALL_FACTOR * median]
        if sum(w[1] for w in kept) < MIN_STEADY_STEPS:
            continue
        batch = statistics.median_low(w[2] for w in kept)
        rows.append(_row(setup, world=world, per_worker=max(batch // world, 1), cluster=f"{world}x{setup.gpu}",
                         samples=batch, step_s=statistics.median(w[0] for w in kept), sync_s=None,
                         steps=sum(w[1] for w in kept), warmup=sum(w[1] for w in windows) - sum(w[1] for w in kept)))
    return rows


def record_fleet_run(job_id: str, result: Any, *, plan: dict[str, Any] | None, setup: RunSetup | None,
                     store_path: str | None = None) -> str | None:
    """Store a cloud run (``spottrain run --backend skypilot``: :class:`~spottrain.runtime.fleet.FleetResult`):
    its record and controller events, and from the chief's window reports its loss curve and, given
    a ``setup`` whose GPU is known, its measurement rows. Returns the store path, or ``None`` when
    it could not be written (a record never fails the run)."""
    try:
        from spottrain.store import Store

        with Store(store_path) as store:
            store.record_run(job_id, status="completed" if result.ok else "failed", plan=plan,
                             meta={"backend": "skypilot", "steps": result.steps_done, "failure": result.failure})
            _store_events(store, job_id, result.events, time_key="time_s")
            if setup is not None:
                _store_measured(store, job_id, setup.model, window_rows(result.reports, setup) if setup.gpu else [],
                                loss_points(result.reports))
            return str(store.path)
    except Exception as exc:  # noqa: BLE001 - a record must never fail the run
        log.warning("could not write the run record: %s", exc)
        return None


def local_setup(job: Any, *, example: str | None = None, plan: Any = None,
                precision: str | None = None) -> RunSetup | None:
    """The :class:`RunSetup` of a local job, or ``None`` (see :func:`_local_setup`); never raises:
    a run that trained is not failed by its record. ``precision``: what the command trains in
    (``spottrain run --precision``), else the plan's, else fp32."""
    try:
        return _local_setup(job, example=example, plan=plan, precision=precision)
    except Exception as exc:  # noqa: BLE001 - e.g. a malformed SPOTTRAIN_* variable
        log.warning("no measurement rows for this run: %s", exc)
        return None


def run_precision(given: str | None, plan: Any, example: str | None) -> str:
    """What a run's measurement rows say it trained in: the built-in examples' fp32, else
    ``spottrain run --precision``, else the plan's, else fp32."""
    if example is not None:
        return "fp32"
    return given or (plan.workload.precision if plan is not None else "fp32")


def _local_setup(job: Any, *, example: str | None, plan: Any, precision: str | None = None) -> RunSetup | None:
    """The :class:`RunSetup` of a local job (``LocalJob``); ``global_batch_size`` 0 when its
    samples per step are unknown (a custom command whose batch is set in its own code, not by
    ``--global-batch``): then it leaves a loss curve but no measurement row.

    The model is the built-in example's (``example-<name>``, its FLOPs counted here), else the
    plan's workload, else the command's script name. The device is what the workers pick
    (``TrainConfig.device``): ``$SPOTTRAIN_DEVICE``, else this machine's GPUs, one per slot
    (the local backend numbers its workers' ``LOCAL_RANK``; more workers than GPUs share them),
    else the CPU.
    """
    env = {**os.environ, **job.env}
    batch_text = env.get("SPOTTRAIN_GLOBAL_BATCH_SIZE")
    flops = params = tensors = None
    if example is not None:
        from spottrain.runtime.examples import get_example

        ex = get_example(example)
        model, flops, params, tensors = example_figures(ex.name)
        batch = int(batch_text) if batch_text else ex.global_batch_size
    else:
        if not batch_text:
            # Its loss curve still counts (each report names its batch); its throughput does not.
            log.info("the job's global batch is set in its own code; no measurement rows (pass --global-batch)")
        batch = int(batch_text) if batch_text else 0
        if plan is not None:
            w = plan.workload
            model, flops, params = w.model, w.flops_per_sample, w.param_count
        else:
            script = next((a for a in job.command[1:] if not a.startswith("-")), job.command[0])
            model = Path(script).stem
    gpu, shared = _worker_device(env.get("SPOTTRAIN_DEVICE", "auto"), workers=getattr(job, "workers", 1))
    planned = env.get("SPOTTRAIN_PLANNED_WORLD_SIZE")
    return RunSetup(model=model, global_batch_size=batch, gpu=gpu, gpus_shared=shared,
                    rescale=env.get("SPOTTRAIN_RESCALE", "accumulate"),
                    planned_world_size=int(planned) if planned else None, flops_per_sample=flops, param_count=params,
                    tensor_count=tensors, precision=run_precision(precision, plan, example))


def _worker_device(setting: str, workers: int = 1) -> tuple[str, bool]:
    """(device name, whether the workers share a GPU) for ``TrainConfig.device``: ``auto`` gives
    each of ``workers`` its own GPU while the machine has enough, one named GPU is shared."""
    if setting == "cpu":
        return "cpu", False
    import torch

    if not torch.cuda.is_available() or (setting != "auto" and not setting.startswith("cuda")):
        return "cpu", False
    index = int(setting.split(":")[1]) if ":" in setting else 0
    shared = setting != "auto" or workers > torch.cuda.device_count()
    name = torch.cuda.get_device_name(index)
    from spottrain.profiler.device import catalog_gpu_spec

    spec = catalog_gpu_spec(name)
    return (spec.name if spec is not None else name.replace(" ", "-")), shared


def example_figures(name: str) -> tuple[str, float, int, int]:
    """(model name in the store, forward + backward FLOPs per sample, parameters, parameter
    tensors) of the built-in example ``name``."""
    from spottrain.profiler.flops import counting_flops
    from spottrain.runtime.examples import classification_loss, get_example

    ex = get_example(name)
    model = ex.model()
    x, y = ex.dataset().get_batch([0, 1])
    with counting_flops() as counter:
        classification_loss(model, (x, y)).backward()
    params = list(model.parameters())
    return f"example-{ex.name}", counter.get_total_flops() / 2, int(sum(p.numel() for p in params)), len(params)
