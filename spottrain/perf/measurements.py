"""The measurement table: one row per measured (or queried) training configuration.

CSV columns (header names exact, order free)::

    model, batch_size, cluster, throughput                      required
    ps, sync                                                    0 and sync when absent
    network_gbps, flops_per_sample, param_count, precision,
    tensor_count, step_time_s, sync_time_s, input, cloud,
    activations_per_sample                                      optional

* ``batch_size``: per GPU. ``cluster``: '+'-joined groups ``NxGPU`` or ``NxGPU:G`` (N nodes of
  that GPU type, G GPUs each, default 1), e.g. ``4xK80``, ``1xV100+1xP100+2xK80``, ``2xA100:8``.
* ``ps``: number of parameter servers, 0 = ring all-reduce. ``sync``: ``sync`` or ``async``. A table
  without these columns (or with empty cells) is all-reduce, synchronous: ``ps`` 0, ``sync``.
* ``throughput``: samples/s of the whole cluster (empty in a query table).
* ``flops_per_sample``: forward + backward FLOPs of one sample; ``param_count``: parameters
  (gradient bytes = 4 x param_count). Both are derived from the model zoo when empty and
  ``model`` is a zoo name.
* ``network_gbps``: per-node network bandwidth; empty = the GPU's documented default.
* ``precision``: ``fp32`` (default; ``tf32`` too) or ``fp16`` (mixed precision on tensor cores; ``amp``, ``bf16``
  too): :data:`spottrain.types.PRECISION_SPELLINGS`.
* ``tensor_count``: number of parameter tensors (variables) of the model; parameter servers pay
  a per-tensor cost on every update. Empty = estimated from ``param_count``.
* ``step_time_s``: seconds per optimizer step of the cluster (sync all-reduce rows); with an empty
  ``throughput`` the throughput is GPUs x batch_size / step_time_s (a given throughput is kept).
* ``sync_time_s``: the part of the step spent waiting for the gradient all-reduce after the
  backward pass (what PyTorch DDP / AdaptDL time as sync); it fits the network model directly.
  Never longer than the step; ignored on parameter-server rows.
* ``input``: where the batches come from. ``host`` (default): the model's data loader on the host
  CPU (decoding and augmenting ImageNet-sized images can cap a fast GPU); ``device``: batches
  generated on or preloaded to the GPU (synthetic-data benchmarks), no host pipeline to wait for.
* ``cloud``: ``aws``, ``gcp`` or ``azure``, the cloud whose network the rows crossed (empty: not
  said). A fit knows which clouds its all-reduce rows across nodes measured; a query on another
  cloud gets the achieved network rate's prior width (clouds cap TCP flows differently).
* ``activations_per_sample``: elements the model's forward pass writes per sample (what ``spottrain
  profile`` reports); with ``flops_per_sample`` it gives the arithmetic intensity, which sets how
  memory-bound a step is. Empty = the zoo's intensity for a zoo model, else estimated from the layer
  width (parameters per tensor), which assumes dense layers: a network of depthwise convolutions
  (MobileNet, EfficientNet) writes ~7x more per FLOP than its width says.

Any other column is kept in :attr:`Measurement.extra` and written back unchanged.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from spottrain.errors import InputError, UnknownNameError
from spottrain.perf.hardware import device, instance_gpu_count
from spottrain.perf.workload import published_architecture, published_flops
from spottrain.types import PRECISION_SPELLINGS, ClusterSpec, precision_name

REQUIRED_COLUMNS = ("model", "batch_size", "cluster", "ps", "sync", "throughput")
DEFAULTED_COLUMNS = ("ps", "sync")
"""Of :data:`REQUIRED_COLUMNS` (the table's first columns when written), those a table read may
leave out: ``ps`` 0 and ``sync`` (PyTorch DDP's all-reduce), as for an empty cell."""
OPTIONAL_COLUMNS = ("network_gbps", "flops_per_sample", "param_count", "precision", "tensor_count", "step_time_s",
                    "sync_time_s", "input", "cloud", "activations_per_sample")
MAX_GPUS_PER_NODE = 16
"""The most GPUs one node holds (DGX-2, HGX-2: 16); a cluster group asking for more is a typo."""
INPUTS = ("host", "device")
CLOUDS = ("aws", "gcp", "azure")


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One row of a measurement table (``throughput`` is ``None`` in a query)."""

    model: str
    batch_size: int
    """Per-GPU batch size."""
    cluster: ClusterSpec
    ps: int
    """Parameter servers; 0 = all-reduce."""
    sync: str
    """``"sync"`` or ``"async"``."""
    throughput: float | None
    """Samples/s of the whole cluster."""
    flops_per_sample: float
    """Forward + backward FLOPs of one sample."""
    param_count: int
    network_gbps: float | None = None
    """Per-node network bandwidth; ``None`` = the GPU's default."""
    precision: str = "fp32"
    tensor_count: int | None = None
    """Parameter tensors of the model; ``None`` = estimated from ``param_count``."""
    step_time_s: float | None = None
    """Measured seconds per step (sync all-reduce), when the table gives it."""
    sync_time_s: float | None = None
    """Measured seconds of the step spent in the exposed gradient all-reduce, when the table gives it."""
    input: str = "host"
    """Where batches come from: ``host`` (a data loader on the CPU) or ``device`` (no host pipeline)."""
    cloud: str | None = None
    """``aws``, ``gcp`` or ``azure``: whose network the row's nodes crossed; ``None`` = not said."""
    activations_per_sample: float | None = None
    """Elements the forward pass writes per sample; ``None`` = the zoo's intensity or the width's estimate."""
    line: int | None = None
    """Line in the source file (for error messages)."""
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def gradient_bytes(self) -> float:
        return 4.0 * self.param_count


def parse_number(text: str, *, file, line, column, integer=False, positive=True, allow_zero=False):
    """The number in a table cell: finite, > 0 (>= 0 with ``allow_zero``; any sign without
    ``positive``), whole with ``integer``. Errors name the file, line and column."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", file=file, line=line, column=column) from None
    if not math.isfinite(value) or (positive and (value < 0 or (value == 0 and not allow_zero))):
        want = ">= 0" if allow_zero else "> 0"
        raise InputError(f"expected a number {want}, got {text!r}", file=file, line=line, column=column)
    if integer:
        if value != int(value):
            raise InputError(f"expected a whole number, got {text!r}", file=file, line=line, column=column)
        return int(value)
    return value


def _zoo_figures(model: str) -> tuple[float | None, int | None]:
    try:
        from spottrain.profiler.zoo_info import zoo_info
    except ImportError:  # pragma: no cover - profiler part missing
        return None, None
    try:
        info = zoo_info(model)
    except UnknownNameError:
        arch = published_architecture(model)  # a torchvision classifier the zoo does not build
        return (arch.flops_per_sample, arch.param_count) if arch is not None else (None, None)

    flops = info.get("flops_per_sample") or published_flops(model)
    return flops, info.get("param_count")


def parse_row(row: dict[str, str], *, file: str | None = None, line: int | None = None, query: bool = False) -> Measurement:
    """Validate one CSV row (a dict of column -> text) into a :class:`Measurement`."""
    def get(col: str) -> str:
        return (row.get(col) or "").strip()

    model = get("model")
    if not model:
        raise InputError("expected a model name, got an empty value", file=file, line=line, column="model")
    batch = parse_number(get("batch_size"), file=file, line=line, column="batch_size", integer=True)
    try:
        cluster = ClusterSpec.parse(get("cluster"), where="cluster") if get("cluster") else None
    except InputError as exc:
        msg = str(exc).removeprefix("column cluster: ")
        raise InputError(msg, file=file, line=line, column="cluster") from None
    if cluster is None:
        raise InputError("expected a cluster such as 4xK80 or 1xV100+2xK80:4, got an empty value", file=file, line=line, column="cluster")
    for g in cluster.groups:
        try:
            device(g.gpu)
        except UnknownNameError as exc:
            raise InputError(str(exc), file=file, line=line, column="cluster") from None
        _check_placement(g, file=file, line=line)
    ps = parse_number(get("ps") or "0", file=file, line=line, column="ps", integer=True, allow_zero=True)
    sync = get("sync").lower() or "sync"
    if sync not in ("sync", "async"):
        raise InputError(f"expected 'sync' or 'async', got {get('sync')!r}", file=file, line=line, column="sync")
    if sync == "async" and ps == 0:
        raise InputError("asynchronous training needs a parameter server (ps >= 1)", file=file, line=line, column="ps")
    thr_text = get("throughput")
    throughput = None
    if thr_text:
        throughput = parse_number(thr_text, file=file, line=line, column="throughput")
    elif not query and not get("step_time_s"):
        raise InputError("expected a throughput (samples/s) > 0, got an empty value", file=file, line=line, column="throughput")
    flops = parse_number(get("flops_per_sample"), file=file, line=line, column="flops_per_sample") if get("flops_per_sample") else None
    params = (parse_number(get("param_count"), file=file, line=line, column="param_count", integer=True)
              if get("param_count") else None)
    if flops is None or params is None:
        zoo_flops, zoo_params = _zoo_figures(model)
        flops = flops if flops is not None else zoo_flops
        params = params if params is not None else zoo_params
    if flops is None:
        raise InputError(f"model {model!r} is not in the zoo (or has no FLOPs there): fill flops_per_sample",
                         file=file, line=line, column="flops_per_sample")
    if params is None:
        raise InputError(f"model {model!r} is not in the zoo: fill param_count", file=file, line=line, column="param_count")
    net = parse_number(get("network_gbps"), file=file, line=line, column="network_gbps") if get("network_gbps") else None
    precision = precision_name(get("precision"))
    if precision is None:
        raise InputError(f"expected one of {', '.join(PRECISION_SPELLINGS)}, got {get('precision')!r}",
                         file=file, line=line, column="precision")
    tensors = (parse_number(get("tensor_count"), file=file, line=line, column="tensor_count", integer=True)
               if get("tensor_count") else None)
    source = get("input").lower() or "host"
    if source not in INPUTS:
        raise InputError(f"expected one of {', '.join(INPUTS)}, got {get('input')!r}", file=file, line=line, column="input")
    cloud = get("cloud").lower() or None
    if cloud is not None and cloud not in CLOUDS:
        raise InputError(f"expected one of {', '.join(CLOUDS)} (or empty), got {get('cloud')!r}", file=file, line=line,
                         column="cloud")
    step = parse_number(get("step_time_s"), file=file, line=line, column="step_time_s") if get("step_time_s") else None
    sync_t = (parse_number(get("sync_time_s"), file=file, line=line, column="sync_time_s", allow_zero=True)
              if get("sync_time_s") else None)
    if sync_t is not None and ps != 0:
        sync_t = None  # an all-reduce time means nothing for a parameter-server row: not used
    if step is not None and sync_t is not None and sync_t > step * (1 + 1e-6):
        raise InputError(f"sync time {get('sync_time_s')} s is longer than the step time {get('step_time_s')} s that "
                         "contains it", file=file, line=line, column="sync_time_s")
    if step is not None and throughput is None:
        throughput = cluster.total_gpus * batch / step  # a given throughput is kept as measured
    acts = (parse_number(get("activations_per_sample"), file=file, line=line, column="activations_per_sample")
            if get("activations_per_sample") else None)
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    extra = {k: v for k, v in row.items() if k is not None and k not in known}
    return Measurement(model=model, batch_size=batch, cluster=cluster, ps=ps, sync=sync, throughput=throughput,
                       flops_per_sample=float(flops), param_count=int(params), network_gbps=net, precision=precision,
                       tensor_count=tensors, step_time_s=step, sync_time_s=sync_t, input=source, cloud=cloud,
                       activations_per_sample=acts, line=line, extra=extra)


def _check_placement(group, *, file, line) -> None:
    """A group's GPUs per node must exist on one node: an instance type's own GPU count, else at most 16."""
    have = instance_gpu_count(group.gpu)
    if have is not None and group.gpus_per_node > have:
        raise InputError(f"cluster group {group}: {group.gpu} has {have} GPU(s) per node, the group asks for "
                         f"{group.gpus_per_node}; use :{have} or fewer, or more nodes", file=file, line=line, column="cluster")
    if group.gpus_per_node > MAX_GPUS_PER_NODE:
        raise InputError(f"cluster group {group}: {group.gpus_per_node} GPUs per node; no node holds more than "
                         f"{MAX_GPUS_PER_NODE} (write N nodes of G GPUs as NxGPU:G)", file=file, line=line, column="cluster")


def read_table(path: str | Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """A user CSV: its header (names stripped) and its non-blank rows with their line numbers.

    Lines starting with ``#`` are comments. The file passes :func:`spottrain.files.read_csv`: a
    missing, binary or non-UTF-8 file, a duplicated or unnamed column, or a row with more fields
    than the header raises :class:`InputError` naming the file and line (a byte-order mark, CRLF
    and quoted fields are accepted).
    """
    # lazy: spottrain.files only when a user table is read
    from spottrain.files import read_csv

    table = read_csv(path)
    return table.header, table.dicts()


def read_measurements(path: str | Path, *, query: bool = False) -> list[Measurement]:
    """Read and validate a measurement table (``query=True``: throughput may be empty).

    Errors name the file, line and column: ``m.csv, line 7, column cluster: unknown GPU 'V10'``.
    Columns are checked whole (pandas) and each distinct cluster and model is looked up once, so a
    100k-row table reads in about a second; the checks are :func:`parse_row`'s, row for row.
    """
    from spottrain.files import read_csv

    required = [c for c in REQUIRED_COLUMNS if c not in DEFAULTED_COLUMNS and not (query and c == "throughput")]
    table = read_csv(path, required=required, what="measurement table")
    if not len(table):
        raise InputError("the table has no data rows", file=str(path))
    return _validate_columns(table, query=query)


def _validate_columns(table, *, query: bool) -> list[Measurement]:
    """:func:`parse_row` over a whole :class:`~spottrain.files.CsvTable`, column by column."""

    file = table.file
    n = len(table)
    model = table.texts("model")
    for i, m in enumerate(model):
        if not m:
            raise table.error("expected a model name, got an empty value", row=i, column="model")
    batch = table.numbers("batch_size", integer=True)
    clusters: dict[str, ClusterSpec] = {}
    cluster_text = table.texts("cluster")
    for i, text in enumerate(cluster_text):
        if text in clusters:
            continue
        line = table.lines[i]
        if not text:
            raise table.error("expected a cluster such as 4xK80 or 1xV100+2xK80:4, got an empty value", row=i,
                              column="cluster")
        try:
            spec = ClusterSpec.parse(text, where="cluster")
        except InputError as exc:
            raise InputError(str(exc).removeprefix("column cluster: "), file=file, line=line, column="cluster") from None
        for g in spec.groups:
            try:
                device(g.gpu)
            except UnknownNameError as exc:
                raise InputError(str(exc), file=file, line=line, column="cluster") from None
            _check_placement(g, file=file, line=line)
        clusters[text] = spec
    ps_text = [t or "0" for t in table.texts("ps")]
    ps = table.numbers("ps", integer=True, low_open=False, texts=ps_text)
    sync_raw = table.texts("sync")
    sync = [s.lower() or "sync" for s in sync_raw]
    for i, s in enumerate(sync):
        if s not in ("sync", "async"):
            raise table.error(f"expected 'sync' or 'async', got {sync_raw[i]!r}", row=i, column="sync")
        if s == "async" and ps[i] == 0:
            raise table.error("asynchronous training needs a parameter server (ps >= 1)", row=i, column="ps")
    thr_text = table.texts("throughput")
    step_text = table.texts("step_time_s")
    throughput = table.numbers("throughput", required=False, texts=thr_text)
    if not query:
        for i in np.flatnonzero(np.isnan(throughput)):
            if not step_text[i]:
                raise table.error("expected a throughput (samples/s) > 0, got an empty value", row=int(i),
                                  column="throughput")
            break
    flops = table.numbers("flops_per_sample", required=False)
    params = table.numbers("param_count", integer=True, required=False)
    zoo: dict[str, tuple] = {}
    for i in np.flatnonzero(np.isnan(flops) | np.isnan(params)):
        m = model[i]
        if m not in zoo:
            zoo[m] = _zoo_figures(m)
        zoo_flops, zoo_params = zoo[m]
        if np.isnan(flops[i]):
            if zoo_flops is None:
                raise table.error(f"model {m!r} is not in the zoo (or has no FLOPs there): fill flops_per_sample",
                                  row=int(i), column="flops_per_sample")
            flops[i] = zoo_flops
        if np.isnan(params[i]):
            if zoo_params is None:
                raise table.error(f"model {m!r} is not in the zoo: fill param_count", row=int(i), column="param_count")
            params[i] = zoo_params
    net = table.numbers("network_gbps", required=False)
    prec_raw = table.texts("precision")
    precision = [precision_name(p) for p in prec_raw]
    for i, p in enumerate(precision):
        if p is None:
            raise table.error(f"expected one of {', '.join(PRECISION_SPELLINGS)}, got {prec_raw[i]!r}", row=i,
                              column="precision")
    tensors = table.numbers("tensor_count", integer=True, required=False)
    in_raw = table.texts("input")
    source = [v.lower() or "host" for v in in_raw]
    for i, v in enumerate(source):
        if v not in INPUTS:
            raise table.error(f"expected one of {', '.join(INPUTS)}, got {in_raw[i]!r}", row=i, column="input")
    cloud_raw = table.texts("cloud")
    cloud = [v.lower() or None for v in cloud_raw]
    for i, v in enumerate(cloud):
        if v is not None and v not in CLOUDS:
            raise table.error(f"expected one of {', '.join(CLOUDS)} (or empty), got {cloud_raw[i]!r}", row=i,
                              column="cloud")
    step = table.numbers("step_time_s", required=False, texts=step_text)
    sync_t = table.numbers("sync_time_s", required=False, low_open=False)
    sync_t[ps != 0] = np.nan  # an all-reduce time means nothing for a parameter-server row: not used
    has_sync_t = ~np.isnan(sync_t)
    sync_text = table.texts("sync_time_s")
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(has_sync_t & ~np.isnan(step) & (sync_t > step * (1 + 1e-6)))
    if len(bad):
        i = int(bad[0])
        raise table.error(f"sync time {sync_text[i]} s is longer than the step time {step_text[i]} s that contains it",
                          row=i, column="sync_time_s")
    has_step = ~np.isnan(step)
    if has_step.any():  # a given throughput is kept as measured
        gpus = np.array([clusters[c].total_gpus for c in cluster_text], dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            implied = gpus * batch / step
        throughput = np.where(has_step & np.isnan(throughput), implied, throughput)
    acts_l = table.numbers("activations_per_sample", required=False).tolist()
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    extra_cols = [(j, c) for j, c in enumerate(table.header) if c not in known]

    def opt(x: float):
        return None if x != x else x

    batch_i, ps_i = batch.astype(np.int64).tolist(), ps.astype(np.int64).tolist()
    thr_l, flops_l, params_i = throughput.tolist(), flops.tolist(), params.astype(np.int64).tolist()
    net_l, tens_l, step_l, synct_l = net.tolist(), tensors.tolist(), step.tolist(), sync_t.tolist()
    return [_validated(model=model[i], batch_size=batch_i[i], cluster=clusters[cluster_text[i]], ps=ps_i[i],
                       sync=sync[i], throughput=opt(thr_l[i]), flops_per_sample=flops_l[i], param_count=params_i[i],
                       network_gbps=opt(net_l[i]), precision=precision[i],
                       tensor_count=None if tens_l[i] != tens_l[i] else int(tens_l[i]),
                       step_time_s=opt(step_l[i]), sync_time_s=opt(synct_l[i]), input=source[i], cloud=cloud[i],
                       activations_per_sample=opt(acts_l[i]), line=table.lines[i],
                       extra={c: table.rows[i][j] for j, c in extra_cols})
            for i in range(n)]


def _validated(**values) -> Measurement:
    """A :class:`Measurement` from values already checked, without the frozen dataclass's
    per-field ``object.__setattr__`` (a third of the time of reading a 100k-row table)."""
    m = object.__new__(Measurement)
    m.__dict__.update(values)
    return m


def write_measurements(rows: list[Measurement], path: str | Path, *, extra_columns: dict[str, list] | None = None) -> None:
    """Write rows in the table format; ``extra_columns`` adds columns (e.g. predictions)."""
    extra_columns = extra_columns or {}
    kept = sorted({k for r in rows for k in r.extra})
    cols = [*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *kept, *extra_columns]
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i, r in enumerate(rows):
            base = [r.model, r.batch_size, str(r.cluster), r.ps, r.sync, "" if r.throughput is None else r.throughput,
                    "" if r.network_gbps is None else r.network_gbps, r.flops_per_sample, r.param_count, r.precision,
                    "" if r.tensor_count is None else r.tensor_count,
                    "" if r.step_time_s is None else r.step_time_s, "" if r.sync_time_s is None else r.sync_time_s, r.input,
                    r.cloud or "", "" if r.activations_per_sample is None else r.activations_per_sample]
            w.writerow(base + [r.extra.get(k, "") for k in kept] + [extra_columns[c][i] for c in extra_columns])


def shipped_tables() -> dict[str, Path]:
    """The real measurement tables shipped with spottrain (name -> path); see their SOURCE.md."""
    root = resources.files("spottrain").joinpath("data", "measurements")
    return {p.name.removesuffix(".csv"): Path(str(p)) for p in sorted(root.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".csv")}


def load_shipped(names: tuple[str, ...] | None = None) -> list[Measurement]:
    """Rows of the shipped tables (all, or those named)."""
    rows: list[Measurement] = []
    for name, path in shipped_tables().items():
        if names is None or name in names:
            rows.extend(read_measurements(path))
    return rows
