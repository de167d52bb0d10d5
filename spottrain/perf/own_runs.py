"""Measurements of the user's own runs, read back from the store for ``predict``, ``plan`` and
``converge`` (``--from-store``, on by default when matching rows exist).

``spottrain run`` stores each run's steady-state throughput per world size
(:mod:`spottrain.runtime.record`). This module loads the rows that match or are near a query
and returns them as :class:`~spottrain.perf.measurements.Measurement` rows, nearest first:

- ``same cluster``: same model, GPU type, worker count and per-GPU batch;
- ``same GPU``: same model on a GPU type of the query (other worker counts or batches);
- ``same model``: same model on other GPUs (they inform the model's own efficiency).

Rows of another model, or measured on a device the performance model cannot price (the CPU
of a local test run), are not returned. A stored row that does not validate (a batch of 0, an
all-reduce longer than its step, a cluster the model does not know ...) is skipped with a note
naming its id and column, never raised. Nothing here creates or upgrades a store: a missing store is no rows.

>>> runs = own_rows("resnet50", cluster="4xV100", store_path="/nonexistent/spottrain.db")
>>> runs.rows, runs.exists
([], False)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from spottrain.errors import InputError, SpottrainError
from spottrain.perf.hardware import device
from spottrain.perf.measurements import Measurement, parse_row
from spottrain.perf.throughput import ThroughputModel
from spottrain.profiler.zoo_info import canonical_model
from spottrain.store import Store, default_store_path
from spottrain.types import ClusterSpec

RELATIONS = ("same cluster", "same GPU", "same model")
"""How near a stored row is to the query, nearest first."""

MAX_ROWS = 200
"""Most rows returned (the nearest; a store of many runs need not all enter a fit)."""


@dataclass(frozen=True, kw_only=True)
class OwnRuns:
    """Stored rows near a query, and what was left out."""

    store_path: Path
    exists: bool
    """Whether there is a store file at ``store_path``."""
    rows: list[Measurement] = field(default_factory=list)
    """Usable rows, nearest first, with their measured ``step_time_s`` / ``sync_time_s``; ``extra``
    holds ``run_id``, ``measured_at``, ``relation`` and ``source`` (``own-runs/<run id>``)."""
    skipped: list[str] = field(default_factory=list)
    """One line per stored row (or store) that could not be used, and why."""
    other_devices: int = 0
    """Rows of the model measured on a device the model cannot price (e.g. the CPU)."""

    def __bool__(self) -> bool:
        return bool(self.rows)

    def to_dict(self) -> dict:
        """What ``--json`` output says about the rows used."""
        return {"store": str(self.store_path), "rows": [
            {"run_id": m.extra.get("run_id"), "model": m.model, "batch_size": m.batch_size, "cluster": str(m.cluster),
             "throughput": m.throughput, "step_time_s": m.step_time_s, "sync_time_s": m.sync_time_s,
             "relation": m.extra.get("relation"), "measured_at": m.extra.get("measured_at")} for m in self.rows],
                "skipped": list(self.skipped)}

    def describe(self, *, limit: int = 3) -> str:
        """The one line a command prints: ``using 3 measured rows from your runs in PATH: ...``."""
        n = len(self.rows)
        parts = []
        for m in self.rows[:limit]:
            parts.append(f"{m.model} batch {m.batch_size} on {m.cluster} {m.throughput:,.1f} samples/s "
                         f"({m.extra.get('relation')}, run {m.extra.get('run_id')})")
        more = f"; +{n - limit} more" if n > limit else ""
        return f"using {n} measured row{'s' if n != 1 else ''} from your runs in {self.store_path}: " + "; ".join(parts) + more


def store_location(store_path: str | os.PathLike[str] | None = None) -> Path:
    """The store a read-only command looks in: ``store_path``, ``$SPOTTRAIN_STORE`` or the default."""
    return Path(store_path).expanduser() if store_path is not None else default_store_path()


def _model_key(name: str) -> str:
    try:
        return canonical_model(name)
    except (ImportError, SpottrainError):
        return name.strip().lower()


def _gpu_name(name: str) -> str | None:
    try:
        return device(name).name
    except SpottrainError:
        return None


def _to_measurement(raw: dict, path: Path) -> Measurement:
    """Validate one stored row as the measurement table's reader would; raises InputError.

    The row keeps its measured step and all-reduce times (``step_time_s``, ``sync_time_s``:
    the model fits the all-reduce time directly), its run id and when it was measured, and
    counts as a study of its own (``source`` ``own-runs``: your hosts and framework).
    """
    def text(col: str) -> str:
        v = raw.get(col)
        return "" if v is None else str(v)

    where = {"file": str(path), "line": None}
    step, sync_s = raw.get("step_time_s"), raw.get("sync_time_s")
    if not isinstance(step, (int, float)) or not math.isfinite(step) or step <= 0:
        raise InputError(f"expected a step time > 0, got {step!r}", **where, column="step_time_s")
    if sync_s is not None:
        if not isinstance(sync_s, (int, float)) or not math.isfinite(sync_s) or sync_s < 0:
            raise InputError(f"expected an all-reduce time >= 0, got {sync_s!r}", **where, column="sync_time_s")
        if sync_s > step:
            raise InputError(f"all-reduce time {sync_s:g} s is longer than the step time {step:g} s",
                             **where, column="sync_time_s")
    cells = {c: text(c) for c in ("model", "batch_size", "cluster", "ps", "sync", "throughput", "network_gbps",
                                  "flops_per_sample", "param_count", "precision", "tensor_count", "sync_time_s")}
    cells["source"] = f"own-runs/{text('run_id')}"
    m = parse_row(cells, **where)
    # The step time enters as measured when GPUs x per-GPU batch is the step's samples; a global
    # batch that does not split evenly over the workers stores a rounded per-GPU batch.
    if abs(m.cluster.total_gpus * m.batch_size / step / m.throughput - 1.0) <= 0.05:
        m = replace(m, step_time_s=float(step))
    return replace(m, extra={**m.extra, "run_id": text("run_id"), "measured_at": text("created_at")})


def own_rows(model: str | list[str] | None, *, cluster: ClusterSpec | str | None = None, batch_size: int | None = None,
             precision: str | None = None, store_path: str | os.PathLike[str] | None = None,
             max_rows: int = MAX_ROWS) -> OwnRuns:
    """Stored measurements of ``model`` (or of any of a list of models; all models when
    ``None``) near ``cluster`` and ``batch_size``, nearest first (see the module docstring).
    Reads the store read-only."""
    path = store_location(store_path)
    if not path.is_file():
        return OwnRuns(store_path=path, exists=False)

    try:
        with Store(path, read_only=True) as store:
            raw_rows = store.measurements()
    except SpottrainError as exc:  # a newer schema, a file that is not a store: say so, use nothing
        return OwnRuns(store_path=path, exists=True, skipped=[f"store not read: {exc}"])
    except Exception as exc:  # noqa: BLE001 - e.g. a store locked or corrupted mid-file
        return OwnRuns(store_path=path, exists=True, skipped=[f"store not read: {path}: {exc}"])
    models = [model] if isinstance(model, str) else model
    want_models = {_model_key(m) for m in models} if models else None
    if isinstance(cluster, str):
        cluster = ClusterSpec.parse(cluster)
    want_gpus = {_gpu_name(g.gpu) for g in cluster.groups} - {None} if cluster is not None else set()
    want_workers = cluster.total_gpus if cluster is not None else None
    scored: list[tuple[tuple, Measurement]] = []
    skipped: list[str] = []
    other_devices = 0
    for raw in raw_rows:
        name = raw.get("model")
        if want_models is not None and (not isinstance(name, str) or _model_key(name) not in want_models):
            continue
        gpu = _gpu_name(str(raw.get("gpu") or ""))
        if gpu is None:
            # Measured on the CPU (a local test run) or a device the model cannot price.
            other_devices += 1
            continue
        try:
            m = _to_measurement(raw, path)
        except SpottrainError as exc:
            skipped.append(f"stored measurement {raw.get('id')} (run {raw.get('run_id')}) skipped: {exc}")
            continue
        if precision is not None and m.precision != precision:
            continue
        same_gpu = gpu in want_gpus  # no cluster asked (plan, a query table): every row is "same model"
        same_size = want_workers is None or m.cluster.total_gpus == want_workers
        same_batch = batch_size is None or m.batch_size == batch_size
        relation = "same cluster" if same_gpu and same_size and same_batch else ("same GPU" if same_gpu else "same model")
        distance = (RELATIONS.index(relation),
                    abs(math.log(m.cluster.total_gpus / want_workers)) if want_workers else 0.0,
                    abs(math.log(m.batch_size / batch_size)) if batch_size else 0.0,
                    -int(raw.get("id") or 0))  # newer first among equals
        scored.append((distance, replace(m, extra={**m.extra, "relation": relation})))
    scored.sort(key=lambda x: x[0])
    return OwnRuns(store_path=path, exists=True, rows=[m for _, m in scored[:max_rows]], skipped=skipped,
                   other_devices=other_devices)


def refit_with_own_rows(base, own: OwnRuns, rows: list[Measurement] | None = None, *, folds: int = 5):
    """A :class:`~spottrain.perf.throughput.ThroughputModel` fitted on ``rows`` (a user table, may
    be empty) plus the own runs' rows, with ``base`` (the shipped calibration) as prior, as
    ``predict --measurements`` fits a user table. Own rows are measured on the user's own
    cluster, so they enter as they are: the fit moves the prediction of a measured
    configuration to (near) its measured value."""
    table = list(rows or []) + list(own.rows)
    model = ThroughputModel(prior=base, folds=folds if len(table) >= 10 else 0).fit(table)
    # The prior's knowledge stays in the refit: configurations it covered are not extrapolations.
    model.max_nodes_ = max(model.max_nodes_, base.max_nodes_)
    model.max_gpus_per_node_ = max(model.max_gpus_per_node_, base.max_gpus_per_node_)
    if len(table) < 10:
        # Too few rows to cross-validate: the in-sample residuals of a handful of rows say
        # nothing about configurations not measured; keep the prior's interval width.
        model.interval_log_ = max(model.interval_log_, base.interval_log_)
    return model


def calibrated_workload(workload, own: OwnRuns, base):
    """``workload`` calibrated on the own runs' rows through the path a profile takes (a
    reference step time on one GPU, :attr:`~spottrain.perf.Workload.step_time_s_ref`), for
    callers that query the shipped model (the planner).

    The rows are fitted first (:func:`refit_with_own_rows`, all of them: other worker counts
    and batches too); the reference is the fitted one-GPU step time of ``workload`` on the GPU
    of the nearest row. A one-GPU row of the same batch is reproduced as measured; a multi-GPU
    row passes on what it says about the model's own speed, while the communication part stays
    the shipped model's. Returns ``workload`` unchanged when there are no rows.
    """
    if not own.rows:
        return workload
    gpu = own.rows[0].cluster.groups[0].gpu
    q = Measurement(model=workload.model, batch_size=workload.batch_size, cluster=ClusterSpec.parse(f"1x{gpu}"), ps=0,
                    sync="sync", throughput=None, flops_per_sample=workload.flops_per_sample,
                    param_count=int(workload.gradient_bytes / 4), precision=workload.precision,
                    tensor_count=workload.tensor_count, input="device")  # the GPU's step, as a profile times it
    fitted = refit_with_own_rows(base, own, folds=0)
    thr = fitted.predict([q], warn=False)[0].throughput
    return replace(workload, step_time_s_ref=workload.batch_size / thr, ref_gpu=gpu)


def cli_own_runs(flag: bool | None, model: str | list[str], *, echo, cluster: ClusterSpec | str | None = None,
                 batch_size: int | None = None, precision: str | None = None, how: str = "") -> OwnRuns | None:
    """What ``--from-store/--no-from-store`` does in a command: the rows to use, or ``None``.

    ``flag`` ``None`` (the default) uses matching rows when there are some and says nothing
    otherwise; ``True`` also says when there are none; ``False`` reads nothing. ``echo(text,
    warning)`` prints a line (skipped rows are warnings; the ``using N measured rows ...`` line,
    followed by ``how`` the command uses them, is not). A missing store is not created.
    """
    if flag is False:
        return None
    own = own_rows(model, cluster=cluster, batch_size=batch_size, precision=precision)
    for line in own.skipped:
        echo(line, True)
    if own.rows:
        echo(own.describe() + how, False)
        return own
    if flag:
        names = model if isinstance(model, str) else ", ".join(sorted(set(model)))
        if not own.exists:
            echo(f"--from-store: no store at {own.store_path} yet (spottrain run writes one)", True)
        elif own.other_devices:
            echo(f"--from-store: your runs of {names} in {own.store_path} ran on a device the performance model "
                 f"cannot price (e.g. the CPU); none used", True)
        else:
            echo(f"--from-store: no measured rows of {names} in {own.store_path}", True)
    return None


MIN_CURVE_POINTS = 3
"""Fewest loss points of one run (at one global batch) that make a curve."""
NOISE_SMOOTHING = 20
"""A point's gradient noise scale is the ratio of the means of ``grad_var`` and ``grad_sqr`` over
it and the points before it, this many in all (200 steps at ``LOSS_EVERY`` = 10): one window's
estimate of |G|^2 is noisy (it can come out negative), and the noise scale is the ratio of the
two expectations, not the mean of the ratios (AdaptDL smooths both parts the same way, over ~1,000
steps, before dividing). On a problem of known noise (``bench/noise_scale.py``, 800 steps) a
point's median error is 29-44 % over 5 points, 17-20 % over 20 and 4-12 % over 40; the noise
scale of real training grows as the loss falls, so a longer mean lags it: 20 is the middle."""


def records_noise_scale(points: list[dict]) -> bool:
    """Whether a run's stored loss ``points`` give the gradient noise scale that ``converge`` and
    ``plan --target-loss`` use (every point's ``grad_sqr`` and ``grad_var``, see :func:`_noise_scales`)."""
    return _noise_scales(sorted(points, key=lambda p: p["step"])) is not None


def _noise_scales(points: list[dict]) -> list[float] | None:
    """The gradient noise scale (samples) at each of ``points`` (sorted by step) from their
    ``grad_sqr`` and ``grad_var`` (see :data:`NOISE_SMOOTHING`); ``None`` unless every point has
    both and at least one smoothed ratio is positive. A point whose smoothed ratio is not (an
    early window where |G|^2 came out <= 0) takes the nearest earlier one, else the first later one."""
    sqr = [p.get("grad_sqr") for p in points]
    var = [p.get("grad_var") for p in points]
    if not points or any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in (*sqr, *var)):
        return None
    out: list[float | None] = []
    for i in range(len(points)):
        lo = max(0, i + 1 - NOISE_SMOOTHING)
        s, v = sum(sqr[lo:i + 1]), sum(var[lo:i + 1])
        out.append(v / s if s > 0 and v > 0 else None)
    valid = [x for x in out if x is not None]
    if not valid:
        return None
    filled, last = [], valid[0]
    for x in out:
        last = x if x is not None else last
        filled.append(last)
    return filled


@dataclass(frozen=True, kw_only=True)
class OwnCurves:
    """The training-loss curves your runs of one model stored, one per global batch (runs at one
    global batch pooled, as :func:`~spottrain.perf.convergence.pool_runs` pools a table's runs)."""

    store_path: Path
    exists: bool
    curves: list = field(default_factory=list)
    """:class:`~spottrain.perf.convergence.LossCurve` per global batch, smallest first
    (``batch_size`` = the global batch, ``workers`` = 1: synchronous steps)."""
    runs: list[str] = field(default_factory=list)
    """Ids of the runs the curves hold."""
    skipped: list[str] = field(default_factory=list)
    """One line per stored run (or store) that gave no curve, and why."""
    other_models: list[str] = field(default_factory=list)
    """Models of which the store holds curves, when none is of the one asked for."""

    def __bool__(self) -> bool:
        return bool(self.curves)

    def describe(self) -> str:
        batches = ", ".join(f"{c.batch_size:g}" for c in self.curves)
        points = sum(len(c.steps) for c in self.curves)
        noise = sum(c.noise_scale is not None for c in self.curves)
        measured = ("" if not noise else "; with the gradient noise scale they measured" if noise == len(self.curves)
                    else f"; {noise} of them with the gradient noise scale they measured")
        return (f"training loss of your {len(self.runs)} run(s) in {self.store_path} (global batch {batches}; "
                f"{points} points, each the chief's mean over a window of steps{measured})")


def _bad_point(p: dict) -> tuple[str, str] | None:
    """(column, what was expected) of the first unusable value of a stored loss point, else ``None``."""
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not (isinstance(p.get("step"), int) and p["step"] >= 0):
        return "step", "a whole number >= 0"
    if not (number(p.get("loss")) and p["loss"] >= 0):
        return "loss", "a finite number >= 0"
    if not (isinstance(p.get("global_batch_size"), int) and p["global_batch_size"] >= 1):
        return "global_batch_size", "a whole number >= 1"
    for col in ("grad_sqr", "grad_var"):
        if p.get(col) is not None and not number(p[col]):
            return col, "a finite number or nothing"
    return None


def own_curves(model: str, *, store_path: str | os.PathLike[str] | None = None) -> OwnCurves:
    """The loss curves ``spottrain run`` stored for ``model`` (its name as the run recorded it, or
    a zoo alias of it). Each run gives the points of its first global batch (a run whose global
    batch changed, ``--rescale scale-lr`` after a revocation, stops there: its later steps are
    another batch's); a point with an unusable value (a step, loss or batch that is not a number
    of its kind: a store edited by hand) is left out, and a run with fewer than
    :data:`MIN_CURVE_POINTS` points left gives no curve, each said in ``skipped`` (id, run and
    column). A store that cannot be read is a ``skipped`` line too, never an exception."""
    from spottrain.perf.convergence import LossCurve, pool_runs  # lazy: scipy

    path = store_location(store_path)
    if not path.is_file():
        return OwnCurves(store_path=path, exists=False)
    try:
        with Store(path, read_only=True) as store:
            points = store.loss_points()
    except SpottrainError as exc:  # a newer schema, a file that is not a store
        return OwnCurves(store_path=path, exists=True, skipped=[f"store not read: {exc}"])
    except Exception as exc:  # noqa: BLE001 - e.g. a store locked or corrupted mid-file
        return OwnCurves(store_path=path, exists=True, skipped=[f"store not read: {path}: {exc}"])
    key = _model_key(model)
    mine = [p for p in points if _model_key(str(p.get("model"))) == key]
    if not mine:
        return OwnCurves(store_path=path, exists=True, other_models=sorted({str(p.get("model")) for p in points}))
    by_run: dict[str, list[dict]] = {}
    skipped = []
    for p in mine:
        bad = _bad_point(p)
        if bad is not None:
            skipped.append(f"stored loss point {p.get('id')} (run {p.get('run_id')}) skipped: column {bad[0]}: "
                           f"expected {bad[1]}, got {p.get(bad[0])!r}")
            continue
        by_run.setdefault(str(p["run_id"]), []).append(p)
    pooled: dict[int, list[tuple[float, float, str]]] = {}
    noise: dict[int, list[tuple[float, float, str]] | None] = {}
    runs = []
    for run_id, pts in by_run.items():
        pts = sorted(pts, key=lambda p: p["step"])
        batch = pts[0]["global_batch_size"]
        first = pts[:next((i for i, p in enumerate(pts) if p["global_batch_size"] != batch), len(pts))]
        if len(first) < MIN_CURVE_POINTS:
            skipped.append(f"run {run_id}: {len(first)} usable loss point(s) at its first global batch "
                           f"{batch}, fewer than {MIN_CURVE_POINTS}")
            continue
        runs.append(run_id)
        pooled.setdefault(batch, []).extend((float(p["step"]), float(p["loss"]), run_id) for p in first)
        scales = _noise_scales(first)
        if scales is None or noise.get(batch, []) is None:
            noise[batch] = None  # every run of a batch measured it, or the curve has none
        else:
            noise.setdefault(batch, []).extend((float(p["step"]), x, run_id) for p, x in zip(first, scales))
    curves = []
    for batch in sorted(pooled):
        steps, losses = pool_runs(pooled[batch])
        scales = noise.get(batch)
        curves.append(LossCurve(steps=steps, losses=losses, batch_size=float(batch), workers=1, metric="loss",
                                noise_scale=pool_runs(scales)[1] if scales else None))
    return OwnCurves(store_path=path, exists=True, curves=curves, runs=runs, skipped=skipped)


def cli_own_curves(flag: bool | None, model: str | None, *, echo, curves_given: bool,
                   used: str = "fitted on the") -> OwnCurves | None:
    """``converge`` / ``plan --target-loss`` ``--from-store``: the training-loss curves your runs of
    ``model`` stored, when they are to be fitted, else ``None``; says what it found either way
    (``used`` opens the line that names them).

    They are fitted only without ``--curves``: a table's ``loss`` may be a validation loss or
    another metric, and one fit of two metrics answers neither (the note says how to use them).
    ``flag`` None (the default) looks when ``model`` is given; False never looks."""
    if flag is False or (model is None and not flag):
        return None
    if model is None:
        echo("--from-store: give --model M, the model your runs (spottrain run) trained, to use their loss curves",
             True)
        return None
    own = own_curves(model)
    for line in own.skipped:
        echo(line, True)
    if not own.exists:
        if flag:
            echo(f"--from-store: no store at {own.store_path} yet (spottrain run writes one)", True)
        return None
    if not own:
        if flag or not curves_given:
            more = f" (it has curves of {', '.join(own.other_models)})" if own.other_models else ""
            echo(f"no loss curves of {model} in {own.store_path}{more}", True)
        return None
    if curves_given:
        echo(f"your runs stored the {own.describe()}: not mixed with --curves, whose values may be another "
             "metric; leave out --curves to fit them", False)
        return None
    echo(f"{used} {own.describe()}", False)
    return own
