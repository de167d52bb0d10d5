"""Cluster throughput prediction: the fitted analytical model plus a learned correction.

:class:`ThroughputModel` follows the estimator contract: ``fit(measurements)`` calibrates the
analytical model of :mod:`spottrain.perf.analytical` (a maximum-a-posteriori fit in log space:
every parameter has a physical prior, so few measurements move it little and unseen GPUs or
models fall back to the physics), then, optionally, a ridge correction of the log residuals
(:mod:`spottrain.perf.correction`) that is kept only when cross-validation says it helps.
Prediction intervals come from cross-validated log residuals and widen when a query is outside
the fitted range (unseen GPU or model, more nodes than measured).

Example::

    >>> from spottrain.perf import predict_throughput, Workload
    >>> p = predict_throughput(Workload.from_zoo("resnet50", 64), "4xV100", ps=1, sync="async")
    >>> p.bottleneck in {"compute", "memory", "host", "input", "network", "ps", "pcie"}
    True
"""

from __future__ import annotations

import functools
import json
import math
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from importlib import resources

import numpy as np

from spottrain.catalog.gpus import gpu_spec
from spottrain.errors import InputError, NotFittedError, UnknownNameError
from spottrain.perf import analytical as an
from spottrain.perf.hardware import clouds_name, device, instance_cloud, instance_gpu_count, node_network_gbps
from spottrain.perf.measurements import Measurement, load_shipped
from spottrain.perf.placement import ps_load_share
from spottrain.perf.workload import Workload, estimate_tensor_count, input_pixels, known_intensity, known_tensor_count
from spottrain.profiler.zoo_info import canonical_model, is_zoo_model
from spottrain.types import ClusterGroup, ClusterSpec


SYNC_SIGMA = 0.3
"""Residual scale (log) of measured sync times: repeated placements in Pollux differ by ~30 %."""
SYNC_FLOOR_S = 1e-3
"""Sync times are compared as log(t + 1 ms): sub-millisecond waits are timer noise, not network."""


Z90 = 1.645
"""Standard normal quantile of a two-sided ~90 % interval."""
STUDY_LOG = 0.1
"""Log standard deviation between studies (frameworks, hosts, software eras) of one configuration,
beyond each study's own residuals: the floor of the level a query off a user's own rows adds (another
GPU of their table is another machine). A user's H100 machine's rows predicting their H200 machine's
cover 85.7 % of them with it, 83.7 % at 0.05 (bench/prediction_accuracy.py); 89.8 % with it since they take half
of what the H100 rows change (OTHER_MACHINE_SHARE)."""
POOLED_STUDY_LOG = 0.05
"""The same floor for a prediction off the shipped calibration, several studies pooled. Its regime
widths are the 90th percentile of the pooled rows' residuals, which hold the part of how studies
differ that their fitted levels do not (a GPU or a model faster in one study than in another), so
the level adds less there: leave one study out, 0.1 covered 94.9 / 100 / 97.6 / 94.7 / 93.9 % of
CM-DARE / transient-dl / Lambda / Pollux / ours, 0.05 covers 94.9 / 91.2 / 97.1 / 92.3 / 91.8 %
(the fitted levels' root mean square is 0.01-0.05, below either floor)."""
FP16_STACK_LOG = 0.27
"""Log standard deviation between software stacks of the mixed-precision gain of one configuration
(memory format, data loader, fused kernels), beyond the study level: the part of another study's
speed that its fp32 rows do not tell. Leave one study out, the held-out study's fp16 rows miss by
0.00 (Lambda), -0.25 (Pollux) and -0.10 (ours) more than its fp32 rows (median log ratio); NVIDIA's
published DeepLearningExamples speeds, never fitted, by +0.31 (its NHWC, DALI scripts train ResNet-50
and SSD300 in AMP 1.3-1.7x faster on V100 and A100 than Lambda's runs). Root mean square of the four:
0.206 (bench/prediction_accuracy.py, ``mixed_precision_rows``). Four stacks are few: a ~90 % interval
for a fifth stack's gain from four draws is +-t(0.95, 4 dof) x 0.206 = +-0.44, a standard deviation of
0.27 at the normal's 1.645. Leave one stack out, that rule (t at 3 dof on the other three) puts each
of the four inside its interval; 1.645 x their root mean square left NVIDIA's out (0.26 < 0.31). At
0.2, 39 % of NVIDIA's AMP rows were inside their interval, at 0.27 78 %; the held-out studies'
coverages moved by 0.0-2.1 points (bench/results/prediction_accuracy.md). A query off the pooled
calibration on the fp16 path takes the larger of this and its other reasons together: an unseen
GPU's or model's width is the spread of effects fitted on their own studies' stacks, which holds it
already."""
OTHER_MACHINE_SHARE = 0.5
"""Of what a user's own rows change in the prediction of a GPU type they do not hold (another machine
of theirs), the share kept; the rest is the calibration's. The rows tell of their software, which the
other machine shares, and of their host, which it does not, and nothing tells the two apart: the
middle of the two. Other GPU types' rows predicted from one type's rows, the calibration alone / half /
all of the change (bench/prediction_accuracy.py): ours 20.6 / 19.4 / 22.1 %, CM-DARE 11.0 / 9.7 / 9.7 %,
Lambda 14.2 / 13.8 / 15.7 %; a quarter and three quarters were within 1.0 of the half on each."""
STEP_REACH = math.log(2.0)
"""How far (log batch) past the batch sizes measured on one GPU their compute step still counts: the
measured residual fades linearly to nothing at twice the largest (half the smallest) batch."""
PATH_LOG = 0.15
"""Log sd added when a query runs on a precision path (FP16 / TF32 tensor cores, plain FP32) that no
fitted row used: the fraction of FLOPs on the fast path is then only its prior."""
NODES_LOG = 0.15
"""Log sd added per size far beyond the fitted range (more than twice the nodes or GPUs per node)."""
INTENSITY_NOTE = 0.05
"""Smallest intensity below the dense networks' scatter (log) that a prediction notes and widens for."""
SPREAD_FLOOR = {"gpu": 0.15, "model": 0.2}
"""Smallest log sd of an unseen GPU, model or (GPU, model) pair, whatever few effects a fit holds."""
SPREAD_CAP = 0.3
"""Largest log sd of an unseen model: with a handful of fitted models the median effect is noise
(leave one model out on CM-DARE's 16 models errs 7.8 %; 0.3 is ~x1.6 at 90 %)."""
DIE_FLOOR = 0.1
"""Smallest log sd of an unseen GPU whose die's other boards are fitted."""


STUDY_LEVEL_SIGMA = 0.15
"""Prior log sd of a study's compute-speed effect (its framework, host and software era) in a fit
on several studies. At 0.3 the six shipped studies' fitted levels spread by only 0.08 (root mean
square), and the slack let the compute shape (fraction of peak, arithmetic intensity) trade against
the levels: Lambda held out 14.8 %, 13.4 % at 0.15, about twice the spread the levels show
(bench/prediction_accuracy.py, leave one study out)."""
USER_LEVEL_SIGMA = 0.3
"""Prior log sd of the overall speed of a user's rows fitted over a calibrated model: one more
setup, which may differ from the shipped studies by more than they differ among themselves."""
HELD_SD = 1e-3
"""Prior log sd of a global parameter the rows cannot identify: held at the prior's value."""
GLOBALS_V1 = an.GLOBALS[: an.G_INDEX["log_two_node"]]
"""The analytical model's globals before the two-node rate: a model saved with them still loads."""
FEW_MODELS = 10
"""A prior fitted on fewer models than this has not learnt how speed varies with layer width and
step size: a fit on it keeps the physics' uncertainty there."""
STUDY_OVER_SIGMA = 1.0
"""Prior log sd of a study's per-step overhead effect (Python, hooks, optimizer: x3 either way)."""
STUDY_ROWS = 250
"""Rows of one study that count fully in a fit; a larger study's rows are down-weighted to as much.
One study's rows share a host, a framework and a software era: 1,220 Pollux rows on one T4 cluster
are not 1,220 independent views of how GPUs and models behave, and must not drown the 379 rows of
the three other studies."""


def _study_of(m: Measurement) -> str:
    """The study a row comes from: the first part of its ``source`` column (one study when absent)."""
    return (m.extra.get("source") or "").split("/")[0]


def _study_weights(rows: list[Measurement]) -> np.ndarray:
    """Per-row weight of the log residuals: sqrt(min(1, STUDY_ROWS / rows of the row's study))."""
    n = Counter(_study_of(m) for m in rows)
    return np.array([math.sqrt(min(1.0, STUDY_ROWS / n[_study_of(m)])) for m in rows])


def _architecture(gpu: str) -> str | None:
    """The registry's architecture of a GPU name; ``None`` for a name it does not hold."""
    try:
        return gpu_spec(gpu).architecture
    except UnknownNameError:
        return None


def _die(gpu: str) -> str | None:
    """The registry's die of a GPU name (``GA100``); ``None`` for a name it does not hold."""
    try:
        return gpu_spec(gpu).die or None
    except UnknownNameError:
        return None


@dataclass(frozen=True)
class _Kin:
    """The fitted GPUs an unseen GPU borrows its speed effect from."""

    by_die: bool
    """They share its die (else only its architecture)."""
    shared: str
    """What they share: ``"GA100 die"``, ``"Ampere"``."""
    names: tuple[str, ...]


@functools.lru_cache(maxsize=256)
def _kin(gpu: str, fitted: frozenset[str]) -> _Kin | None:
    """The GPUs of ``fitted`` that an unseen ``gpu`` borrows from: those of its die where any is
    fitted, else those of its architecture; ``None`` when neither is."""
    for by_die, of in ((True, _die), (False, _architecture)):
        mine = of(gpu)
        names = tuple(sorted(k for k in fitted if mine is not None and of(k) == mine))
        if names:
            return _Kin(by_die, f"{mine} die" if by_die else str(mine), names)
    return None


def _die_spread(effects: dict[str, float]) -> float | None:
    """Robust log sd of the fitted GPU effects about their die's mean, over the dies (per precision
    path) with two or more fitted boards, never below ``DIE_FLOOR``; ``None`` with fewer than three
    such boards: how far an unseen board may fall from its die's fitted ones."""
    groups: dict[tuple, list[float]] = {}
    for k, v in effects.items():
        name, _, prec = k.rpartition("/")
        if _die(name) is not None:
            groups.setdefault((_die(name), prec), []).append(v)
    dev = [(v - np.mean(vs)) * math.sqrt(len(vs) / (len(vs) - 1)) for vs in groups.values() if len(vs) > 1 for v in vs]
    if len(dev) < 3:
        return None
    return max(float(1.4826 * np.median(np.abs(dev))), DIE_FLOOR)


@functools.lru_cache(maxsize=64)
def _architectures(gpus: frozenset[str]) -> frozenset[str]:
    """Architectures of a set of GPU names (a fit's fitted GPUs)."""
    return frozenset(a for a in map(_architecture, gpus) if a is not None)


def _config_key(q: "_Query") -> str:
    """One measured configuration: model, per-GPU batch, cluster, servers, precision."""
    return f"{q.model}|{q.batch_size}|{q.cluster}|{q.ps}|{q.sync}|{q.precision}"


ANY_STUDY = "*"
"""The study key of every row and query of a fit whose rows are one study (a user's own table)."""


def _step_key(study: str, model: str, gpu: str, precision: str) -> str:
    return f"{study}|{model}|{gpu}|{precision}"


def _measured_steps(rows: list[Measurement], residuals: np.ndarray, one_study: bool) -> dict[str, list[float]]:
    """The fit's log residual of every one-GPU all-reduce-free row, by (study, model, GPU, precision):
    a flat list ``[log b, r, log b, r, ...]`` sorted by batch, rows of one batch averaged. One GPU
    measures the compute step alone (no gradient exchange), so its residual is the compute model's
    error at that batch (:meth:`ThroughputModel._step_anchor`)."""
    acc: dict[str, dict[int, list[float]]] = {}
    for m, r in zip(rows, residuals):
        if m.ps == 0 and m.cluster.total_gpus == 1 and math.isfinite(r):
            key = _step_key(ANY_STUDY if one_study else _study_of(m), _model_key(m.model),
                            device(m.cluster.groups[0].gpu).name, m.precision)
            acc.setdefault(key, {}).setdefault(m.batch_size, []).append(float(r))
    return {k: [x for b in sorted(v) for x in (math.log(b), float(np.mean(v[b])))] for k, v in acc.items()}


def _regime(q: "_Query") -> str:
    """Which part of the model a query exercises most: single GPU, one node, across nodes, or PS."""
    if q.ps > 0:
        return "ps"
    if q.cluster.nodes > 1:
        return "inter"
    return "intra" if q.cluster.total_gpus > 1 else "single"


def _path(q: "_Query", gpu: str) -> str:
    """The precision path a query's GPU runs: fp16 tensor cores, TF32 tensor cores, or plain FP32."""
    if q.precision == "fp16":
        return "fp16"
    return "tf32" if device(gpu).tf32_tflops else "fp32"


RING_SIZES = ((2, 2), (3, 4), (5, 8), (9, 1 << 30))
"""Node counts whose all-reduce rows get a width of their own (where a fit holds 10+ rows of them):
the larger the ring, the more its pace varies from run to run (Pollux's rows fitted in sample, 90th
percentile of |log residual|: 0.18 at 2 nodes, 0.13 at 3-4, 0.18 at 5-8, 0.25 at 9-16)."""


def _width_keys(q: "_Query") -> list[str]:
    """The width keys of ``q``, most specific first: across nodes its :data:`RING_SIZES` class
    (``"inter:9-"``...), then its regime."""
    regime = _regime(q)
    if regime != "inter":
        return [regime]
    lo = next(lo for lo, hi in RING_SIZES if lo <= q.cluster.nodes <= hi)
    return [f"inter:{lo}-", regime]


def _regime_widths(queries: list, log_residuals, *, scale: float, floor: float) -> dict[str, float]:
    """90th percentile of |log residual| per regime (with 10+ rows; else of all rows), x scale + floor;
    and per ring-size class of the rows across nodes that hold 10+ rows (:data:`RING_SIZES`)."""
    res = np.abs(np.asarray(log_residuals, float))
    keys = [_width_keys(q) for q in queries]
    regimes = np.array([k[-1] for k in keys])
    sizes = np.array([k[0] if len(k) > 1 else "" for k in keys])
    every = float(np.quantile(res, 0.9)) if res.size else 0.0
    out = {}
    for r in ("single", "intra", "inter", "ps"):
        sel = res[regimes == r]
        out[r] = (float(np.quantile(sel, 0.9)) if sel.size >= 10 else every) * scale + floor
    for lo, _hi in RING_SIZES:
        sel = res[sizes == f"inter:{lo}-"]
        if sel.size >= 10:
            out[f"inter:{lo}-"] = float(np.quantile(sel, 0.9)) * scale + floor
    return out


BOTTLENECKS = {
    "compute": "the GPUs' arithmetic: more GPUs, or GPUs with a higher peak at this precision, help",
    "memory": "the GPUs' memory bandwidth: a GPU with more of it helps more than one with more FLOPS",
    "host": "the host's per-step work and kernel launches: a larger per-GPU batch helps, a faster GPU hardly does",
    "input": "the host's input pipeline (decoding, augmentation): more CPU cores per GPU or pre-processed data help",
    "network": "gradient traffic between nodes: fewer, larger nodes or a faster network help",
    "pcie": "the GPU-to-GPU link inside a node: NVLink nodes or fewer GPUs per node help",
    "ps": "the parameter servers: more servers help",
}
"""What each bottleneck name means and what relieves it (``spottrain predict`` and ``plan`` say it)."""


def explain_bottleneck(name: str) -> str:
    """``name: what it means and what helps`` (the name alone when it is not one of :data:`BOTTLENECKS`)."""
    return f"{name}: {BOTTLENECKS[name]}" if name in BOTTLENECKS else name


class ExtrapolationWarning(UserWarning):
    """A prediction is far outside the range the model was fitted on."""


@dataclass(frozen=True, kw_only=True)
class ThroughputPrediction:
    """Predicted training speed of one configuration."""

    throughput: float
    """Samples/s of the whole cluster."""
    low: float
    """Lower end of the ~90 % interval (samples/s)."""
    high: float
    """Upper end of the ~90 % interval (samples/s)."""
    iteration_time_s: float
    """Seconds per step of one worker (sync: of the cluster)."""
    bottleneck: str
    """What limits the step, one of :data:`BOTTLENECKS`: the GPU side (``compute``, ``memory``,
    ``host``, ``input``) or communication (``network``, ``ps``, ``pcie`` = intra-node link)."""
    extrapolated: bool = False
    """True when the query is outside the fitted range (interval widened)."""
    notes: tuple[str, ...] = ()
    """Why the prediction is extrapolated."""
    per_group: tuple[dict, ...] = field(default=())
    """Per cluster group: gpu, nodes, gpus_per_node, samples_per_s."""
    sync_time_s: float | None = None
    """All-reduce rows: seconds of the step spent waiting for the gradient all-reduce after the
    backward pass (what DDP / AdaptDL time as sync); ``None`` for parameter servers."""
    measured_step: bool = False
    """True when every group's compute step is one a row measured on one GPU of its type at this
    per-GPU batch (or between two such batches): only the gradient exchange is modelled
    (:meth:`ThroughputModel._step_anchor`)."""
    stack_borrowed: bool = False
    """True when the query runs fp16 off the shipped calibration alone: its interval holds how much
    other software stacks gain from mixed precision (:data:`FP16_STACK_LOG`), which no row of the
    user's measured."""
    profiled_on: str | None = None
    """The GPU a profile timed the model on, when the query runs on another GPU type: the query took
    :data:`OTHER_MACHINE_SHARE` of what the profile changes, the rest the calibration's."""

    def to_dict(self) -> dict:
        return {"throughput": self.throughput, "low": self.low, "high": self.high,
                "iteration_time_s": self.iteration_time_s, "sync_time_s": self.sync_time_s, "bottleneck": self.bottleneck,
                "extrapolated": self.extrapolated, "notes": list(self.notes), "per_group": list(self.per_group),
                "measured_step": self.measured_step, "profiled_on": self.profiled_on,
                "stack_borrowed": self.stack_borrowed}


def _resolve_groups(cluster: ClusterSpec) -> list[tuple[ClusterGroup, str, int]]:
    """(group, device name, GPUs per node): instance types expand to their GPU and GPU count."""
    out = []
    for g in cluster.groups:
        dev = device(g.gpu)
        gpn = g.gpus_per_node
        if gpn == 1 and dev.name.lower() != g.gpu.lower():
            n = instance_gpu_count(g.gpu)
            gpn = n if n else 1
        out.append((g, dev.name, gpn))
    return out


@functools.lru_cache(maxsize=1024)
def _model_key(name: str) -> str:
    """The zoo's name of a zoo network written another way (``ResNet-50``, ``VGG-16``, ``bert-base-uncased``),
    so that a table's rows and queries share the effects fitted on the shipped rows of that network;
    any other name as written (the shipped tables' own names, ``bert_base_squad``, are not zoo aliases)."""
    return canonical_model(name) if is_zoo_model(name) else name


@dataclass
class _Query:
    """A configuration to encode: the common form of measurements and ad-hoc queries."""

    model: str
    batch_size: int
    cluster: ClusterSpec
    ps: int
    sync: str
    flops: float
    grad: float
    precision: str = "fp32"
    network_gbps: float | None = None
    throughput: float | None = None
    tensors: float | None = None
    """Parameter tensors; ``None`` = the zoo's count for a zoo model, else estimated from the gradient bytes."""
    input: str = "host"
    """Where batches come from: ``host`` (the model's data loader) or ``device`` (no host pipeline)."""
    cloud: str | None = None
    """The cloud whose network the nodes cross (``None``: not said; instance types say their own)."""
    acts: float | None = None
    """Activation elements the forward pass writes per sample; ``None`` = the zoo's intensity for a zoo
    model, else estimated from the layer width."""

    @classmethod
    def of(cls, m: Measurement) -> "_Query":
        return cls(model=_model_key(m.model), batch_size=m.batch_size, cluster=m.cluster, ps=m.ps, sync=m.sync,
                   flops=m.flops_per_sample, grad=m.gradient_bytes, precision=m.precision,
                   network_gbps=m.network_gbps, throughput=m.throughput, tensors=m.tensor_count, input=m.input,
                   cloud=m.cloud, acts=m.activations_per_sample)

    @property
    def clouds(self) -> str | None:
        """The cloud of the query: its own, else that of its instance types ('+'-joined when they
        are several clouds); ``None`` when a group is a bare GPU name and no cloud is said."""
        if self.cloud:
            return self.cloud
        found = [instance_cloud(g.gpu) for g in self.cluster.groups]
        return None if None in found else clouds_name(found)

    def node_gbps(self, group: ClusterGroup, gpus_per_node: int) -> float:
        """Nominal network of one node of ``group`` (Gbit/s): the query's own figure, else the node's default."""
        return self.network_gbps or node_network_gbps(group.gpu, gpus_per_node)

    @property
    def tcp_across_nodes(self) -> bool:
        """An all-reduce across nodes over TCP (not RDMA): what the fitted achieved rate describes."""
        if self.ps != 0 or self.cluster.nodes < 2:
            return False
        return min(self.node_gbps(g, n) for g, _name, n in _resolve_groups(self.cluster)) < an.RDMA_GBPS

    @property
    def ps_share(self) -> tuple[float, float] | None:
        """Largest (bytes, tensors) shares on one parameter server, when the variable layout is known."""
        return ps_load_share(self.model, self.ps, self.grad / 4.0) if self.ps > 0 else None

    @property
    def pixels(self) -> float:
        """Image elements per sample the host's input pipeline decodes (0: none to wait for)."""
        return 0.0 if self.input == "device" else input_pixels(self.model)

    @property
    def n_acts(self) -> float:
        """Activation elements the forward pass writes per sample; 0 = unknown (estimated from width)."""
        if self.acts:
            return float(self.acts)
        intensity = known_intensity(self.model)
        return self.flops / intensity if intensity else 0.0

    @property
    def intensity(self) -> float:
        """log FLOPs per activation element over a dense network's of the same width (0: not known),
        as :func:`analytical.log_intensity`."""
        acts = self.n_acts
        if not acts > 0:
            return 0.0
        width = an.log_width(max(self.grad, 1.0), self.flops, self.n_tensors)  # the gradient bytes evaluate sees
        return float(an.log_intensity(self.flops, acts, width))

    def intensity_below(self, fitted_models: set[str] | None) -> float:
        """How far (log, <= 0) :attr:`intensity` lies below the dense networks' scatter (see
        :func:`analytical.intensity_below`), for a network none of ``fitted_models`` is; 0 for one a
        fit has rows of (its own fitted speed carries its traffic) or with no fit named (a fit's own rows)."""
        if fitted_models is None or self.model in fitted_models:
            return 0.0
        return float(an.intensity_below(self.intensity))

    @property
    def n_tensors(self) -> float:
        if self.tensors:
            return float(self.tensors)
        known = known_tensor_count(self.model)
        return float(known) if known else estimate_tensor_count(self.grad / 4.0)


def _encode(queries: list[_Query], dev_index: dict[str, int], gpu_effect: dict[str, int],
            model_effect: dict[str, int], inter_effect: dict[str, int] | None = None,
            link_effect: dict[str, int] | None = None,
            fitted_models: set[str] | None = None) -> tuple[an.Encoded, list]:
    """Queries as arrays. ``fitted_models``: the models a fit has rows of, whose own fitted speed
    carries their activation traffic (None: a fit's own rows, every one of them)."""
    inter_effect = inter_effect or {}
    link_effect = link_effect or {}
    K = max(len(q.cluster.groups) for q in queries)
    R = len(queries)
    cnt = np.zeros((R, K)); gpn = np.ones((R, K)); dev = np.zeros((R, K), dtype=int)
    net = np.ones((R, K)); gidx = -np.ones((R, K), dtype=int); iidx = -np.ones((R, K), dtype=int)
    lidx = -np.ones((R, K), dtype=int)
    resolved = []
    for i, q in enumerate(queries):
        groups = _resolve_groups(q.cluster)
        resolved.append(groups)
        for j, (g, name, n_gpu) in enumerate(groups):
            if name not in dev_index:
                dev_index[name] = len(dev_index)
            cnt[i, j] = g.count; gpn[i, j] = n_gpu; dev[i, j] = dev_index[name]
            net[i, j] = q.node_gbps(g, n_gpu) / 8.0
            gidx[i, j] = gpu_effect.get(f"{name}/{q.precision}", -1)
            iidx[i, j] = inter_effect.get(f"{name}/{q.precision}|{q.model}", -1)
            lidx[i, j] = link_effect.get(name, -1)
    shares = [q.ps_share for q in queries]  # (bytes, tensors) on the busiest server, when the layout is known
    enc = an.Encoded(cnt=cnt, gpn=gpn, dev=dev, net=net,
                     b=np.array([q.batch_size for q in queries], float),
                     flops=np.array([q.flops for q in queries], float),
                     grad=np.array([max(q.grad, 1.0) for q in queries], float),
                     ntens=np.array([q.n_tensors for q in queries], float),
                     fp16=np.array([q.precision == "fp16" for q in queries]),
                     ps=np.array([q.ps for q in queries]), asyn=np.array([q.sync == "async" for q in queries]),
                     gidx=gidx, midx=np.array([model_effect.get(q.model, -1) for q in queries]), iidx=iidx, lidx=lidx,
                     pidx=np.array([model_effect.get(_prec_key(q.model, q.precision), -1) for q in queries]),
                     pix=np.array([q.pixels for q in queries], float),
                     ps_bshare=np.array([sh[0] if sh else np.nan for sh in shares], float),
                     ps_tshare=np.array([sh[1] if sh else np.nan for sh in shares], float),
                     below=np.array([q.intensity_below(fitted_models) for q in queries], float))
    return enc, resolved


def _prec_key(model: str, precision: str) -> str:
    """Key of a model's mixed-precision effect in ``model_effects_`` (fitted for fp16 rows only)."""
    return f"{model}|{precision}"


def _is_prec_key(key: str) -> bool:
    """Whether a ``model_effects_`` key is a :func:`_prec_key` (else a model's own effect)."""
    return "|" in key


def _device_table(dev_index: dict[str, int]) -> an.DeviceTable:
    names = sorted(dev_index, key=dev_index.get)
    ds = [device(n) for n in names]
    return an.DeviceTable(
        names=names,
        log_p32=np.log([d.fp32_tflops * d.sustained for d in ds]),
        log_p16=np.log([d.tensor_tflops("fp16") * d.sustained for d in ds]),
        log_ptf=np.log([d.tensor_tflops("fp32") * d.sustained for d in ds]),
        log_bw=np.log([d.memory_bandwidth_gbs for d in ds]),
        link_gbs=np.array([(d.nvlink_gbs / 2.0) if d.nvlink_gbs else d.pcie_gbs for d in ds]),
        pcie_gbs=np.array([d.pcie_gbs for d in ds], float),
        log_pd=np.array([d.log_power_density for d in ds], float),
    )


NETWORK_STAGE = ("log_two_node", "log_ar_cap", "log_ar_lat", "link_spread")
"""Globals fitted after the main fit, on its residuals, every other parameter held: the two-node rate,
the TCP rate, the latency of a ring step between nodes and the spread of the links' rates (see
``_fit_network``)."""
NETWORK_HELD = ("log_two_node", "link_spread")
"""Those of :data:`NETWORK_STAGE` the main fit holds at their prior means (a rate of 1, every link
alike): there the compute parameters would stand in for them. They take their physics prior's sd in
the network stage."""


def _residual_supports(enc: "an.Encoded", s_idx: np.ndarray, sync_ix: np.ndarray, n_globals: int,
                       sizes: tuple[int, int, int, int, int]) -> list[np.ndarray | None]:
    """For each parameter of :meth:`ThroughputModel.fit` (globals; GPU, model, GPU x model and link
    effects; study levels, then study overheads), the residual entries it can change: ``None`` for a
    global, else the rows that carry the effect's index (their sync times too) and its own prior term."""
    nG, nM, nI, nL, nS = sizes
    R = len(s_idx)
    # Residual entries: the rows, then the rows' sync times, then one prior term per parameter.
    where_sync = {int(i): R + t for t, i in enumerate(sync_ix)}
    prior0 = R + len(sync_ix)

    def entries(mask: np.ndarray, j: int) -> np.ndarray:
        rows = np.flatnonzero(mask)
        return np.array([*rows, *(where_sync[i] for i in rows if i in where_sync), prior0 + j], dtype=int)

    out: list[np.ndarray | None] = [None] * n_globals
    j = n_globals
    for k in range(nG):
        out.append(entries((enc.gidx == k).any(axis=1), j + k))
    j += nG
    for k in range(nM):
        out.append(entries((enc.midx == k) | (enc.pidx == k), j + k))
    j += nM
    for k in range(nI):
        out.append(entries((enc.iidx == k).any(axis=1), j + k))
    j += nI
    for k in range(nL):
        out.append(entries((enc.lidx == k).any(axis=1), j + k))
    j += nL
    for half in range(2):  # a study's level, then its overhead: the same rows
        for k in range(nS):
            out.append(entries(s_idx == k, j + half * nS + k))
    return out


def _grouped_jacobian(fun, supports: list[np.ndarray | None]):
    """A forward-difference Jacobian of ``fun`` that moves several parameters in one evaluation.

    ``supports[j]`` holds the residual entries parameter j can change (``None``: all of them, as a
    global does). Parameters whose entries are disjoint (the effects of two GPU types, of two models,
    of two studies) share an evaluation, and each reads the change of its own entries only: the same
    numbers as one evaluation per parameter (scipy's 2-point step, ``approx_derivative``), since an
    entry's value does not depend on a parameter outside its support. A calibration's ~250 effects
    then cost ~10 evaluations instead of ~250. The last residuals computed are reused as f(x)."""
    n = len(supports)
    groups: list[list[int]] = [[j] for j in range(n) if supports[j] is None]
    packed: list[tuple[list[int], set]] = []
    for j in range(n):
        if supports[j] is None:
            continue
        rows = set(supports[j].tolist())
        for cols, used in packed:
            if used.isdisjoint(rows):
                cols.append(j)
                used |= rows
                break
        else:
            packed.append(([j], rows))
    groups += [cols for cols, _ in packed]
    last: dict[str, np.ndarray] = {}

    def cached(x: np.ndarray) -> np.ndarray:
        if "x" in last and np.array_equal(last["x"], x):
            return last["f"]
        f = fun(x)
        last["x"], last["f"] = x.copy(), f
        return f

    def jac(x: np.ndarray) -> np.ndarray:
        f0 = cached(x)
        out = np.empty((len(f0), n))
        h_all = np.finfo(float).eps ** 0.5 * np.where(x >= 0, 1.0, -1.0) * np.maximum(1.0, np.abs(x))
        h_all = (x + h_all) - x
        for cols in groups:
            xx = x.copy()
            xx[cols] += h_all[cols]
            df = fun(xx) - f0
            for j in cols:
                if supports[j] is None:
                    out[:, j] = df / h_all[j]
                else:
                    out[:, j] = 0.0
                    out[supports[j], j] = df[supports[j]] / h_all[j]
        return out

    return cached, jac


def _fit_network(resid, z: np.ndarray, n_data: int, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``z`` with the TCP all-reduce's network parameters (:data:`NETWORK_STAGE`) fitted together,
    every other parameter held where the main fit (which holds the two-node rate at 1 and every link
    alike) left them. Only all-reduce rows across TCP nodes depend on them, so no other row moves.

    Fitted with the rest, one cloud's two-node rows moved the compute parameters (Lambda held out
    13.8 -> 16.7 %). The two-node rate fitted alone left C and the latency where the main fit's
    two-node rows and equal links had put them: 3-4 nodes predicted 6-8 % too slow, 16 nodes 5 %
    too fast. C refitted with it made 16 nodes faster still, unless the ring's slowest link slows
    larger rings (the spread); the latency comes with them, having absorbed that growth in the
    main fit. ``resid``: the fit's residual function, whose first ``n_data`` entries are the rows'
    (throughputs, then sync times); ``mean``, ``sd``: the globals' prior (physics, or a prior
    model's values)."""
    from scipy.optimize import minimize

    ks = [an.G_INDEX[n] for n in NETWORK_STAGE]
    m = np.array([mean[k] for k in ks])
    s = np.array([sd[k] for k in ks])

    def cost(v: np.ndarray) -> float:
        zz = z.copy()
        zz[ks] = v
        r = resid(zz)[:n_data]
        return float(np.sum(r[np.isfinite(r)] ** 2) + np.sum(((v - m) / s) ** 2))

    bounds = [(mk - 4 * sk, mk + 4 * sk) for mk, sk in zip(m, s)]
    j = NETWORK_STAGE.index("link_spread")
    bounds[j] = (0.0, max(m[j] + 4 * s[j], 0.0))
    start = np.clip(z[ks], [b[0] for b in bounds], [b[1] for b in bounds])
    out = z.copy()
    out[ks] = minimize(cost, start, method="L-BFGS-B", bounds=bounds, options={"ftol": 1e-10}).x
    return out


def _toward(p: ThroughputPrediction, calibrated: float) -> ThroughputPrediction:
    """``p`` moved toward the calibration's ``calibrated`` samples/s, keeping :data:`OTHER_MACHINE_SHARE`
    of the way from it in log (the interval and the step time scaled alike)."""
    f = math.exp((1.0 - OTHER_MACHINE_SHARE) * (math.log(calibrated) - math.log(p.throughput)))
    return replace(p, throughput=p.throughput * f, low=p.low * f, high=p.high * f, iteration_time_s=p.iteration_time_s / f,
                   per_group=tuple({**g, "samples_per_s": g["samples_per_s"] * f} if "samples_per_s" in g else g
                                   for g in p.per_group))


class ThroughputModel:
    """Analytical throughput model calibrated on a measurement table (estimator contract).

    Parameters
    ----------
    prior:
        ``"physics"`` (hand-set physical priors) or a fitted :class:`ThroughputModel` whose
        parameters (and GPU / model effects) become the prior means, e.g. the model fitted on
        the shipped real tables.
    correction:
        ``"auto"`` (ridge correction of residuals, kept only if cross-validation says it helps),
        ``"always"`` or ``"none"``.
    folds:
        Folds of the internal cross-validation (intervals and the correction decision); 0 skips it.
    gpu_sigma, model_sigma:
        Prior standard deviation (log scale) of per-GPU and per-model efficiency deviations.
    link_sigma:
        Prior standard deviation (log scale) of the per-GPU-type intra-node interconnect effect
        (fitted only for GPU types measured with several GPUs per node; 0 for the others).
    precision_sigma:
        Prior standard deviation (log scale) of a model's mixed-precision (fp16) effect, added to
        its model effect on fp16 rows only: how much of the model's step the framework's fp16
        path speeds up beyond what the roofline gives (autocast keeps fp32 weights and runs
        batch norm and the casts in fp32; a fully fp16 model does not). 0 for an unseen model
        and for a model measured only in fp32.
    """

    def __init__(self, *, prior="physics", correction: str = "auto", folds: int = 5, gpu_sigma: float = 0.35,
                 model_sigma: float = 0.5, inter_sigma: float = 0.25, obs_sigma: float = 0.08,
                 random_state: int = 0, link_sigma: float = 1.0, precision_sigma: float = 0.1) -> None:
        self.prior = prior
        self.correction = correction
        self.folds = folds
        self.gpu_sigma = gpu_sigma
        self.model_sigma = model_sigma
        self.inter_sigma = inter_sigma
        self.link_sigma = link_sigma
        self.precision_sigma = precision_sigma
        self.obs_sigma = obs_sigma
        self.random_state = random_state

    def get_params(self, deep: bool = False) -> dict:
        return {k: getattr(self, k) for k in ("prior", "correction", "folds", "gpu_sigma", "model_sigma",
                                               "inter_sigma", "obs_sigma", "random_state", "link_sigma",
                                               "precision_sigma")}

    def set_params(self, **params) -> "ThroughputModel":
        for k, v in params.items():
            setattr(self, k, v)
        return self

    # -- fitting ---------------------------------------------------------------------------
    def _prior_means(self) -> tuple[np.ndarray, np.ndarray, dict[str, float], dict[str, float]]:
        mean = np.array([an.PRIOR[n][0] for n in an.GLOBALS])
        sd = np.array([an.PRIOR[n][1] for n in an.GLOBALS])
        g_prior: dict[str, float] = {}
        m_prior: dict[str, float] = {}
        i_prior: dict[str, float] = {}
        if isinstance(self.prior, ThroughputModel):
            p = self.prior
            p._check()
            mean = p.theta_.copy()
            sd = sd * 0.5
            # The rows are one more study: their overall speed (framework, host) gets a study's prior,
            # wider than the shipped studies' (USER_LEVEL_SIGMA). Left free, the
            # level took whatever the rows' own GPU or host did to every other GPU: our H200 machine's
            # rows predicted the H100 machine's at 26.4 % (the prior alone: 18.4 %), with it 19.4 % when
            # this was chosen (bench/prediction_accuracy.py's latest page: 18.6 %, the prior alone 17.3 %).
            sd[an.G_INDEX["log_level"]] = USER_LEVEL_SIGMA
            # How arithmetic intensity and overheads vary with layer width and step size is learnt from
            # the prior's models: from a handful (three in the Lambda table) it is still the physics'.
            if sum(not _is_prec_key(k) for k in p.model_effects_) < FEW_MODELS:
                for name in ("log_ai", "w_ai", "w_size", "log_tau_t"):
                    sd[an.G_INDEX[name]] = an.PRIOR[name][1]
            g_prior = dict(p.gpu_effects_)
            m_prior = dict(p.model_effects_)
            i_prior = dict(p.inter_effects_)
        return mean, sd, g_prior, m_prior, i_prior

    def fit(self, measurements: list[Measurement]) -> "ThroughputModel":
        """Calibrate on measured rows (each needs ``throughput``); returns ``self``."""
        self.__dict__.pop("_arch_effect_cache", None)  # derived from the effects this fit replaces
        # lazy: scipy.optimize only when the model is fitted, not when shipped fits are read
        from scipy.optimize import least_squares

        rows = [m for m in measurements]
        if not rows:
            raise InputError("no measurements to fit")
        for m in rows:
            if m.throughput is None or not m.throughput > 0:
                raise InputError("expected a throughput > 0", line=m.line, column="throughput")
        queries = [_Query.of(m) for m in rows]
        mean, sd, g_prior, m_prior, i_prior = self._prior_means()
        # How speed varies from one model to another is not identified by rows of one model: with one
        # tensor count the per-tensor dispatch time trades exactly against the per-step time (their
        # sum is all the rows see), and with one layer width the intensity's growth with width
        # against its level. Those slopes keep the prior's values. Left to the rows, one network's
        # batch curve on a user's H200 set them for every other network: four networks in no table
        # predicted at 26.3 % from it, 21.4 % held (the calibration alone: 18.0 %).
        if len({q.n_tensors for q in queries}) < 2:
            sd[an.G_INDEX["log_tau_t"]] = HELD_SD
        if len({q.grad / q.n_tensors for q in queries}) < 2:
            sd[an.G_INDEX["w_ai"]] = HELD_SD
        # The TCP all-reduce's rates are fitted after everything else, on the rows they touch (_fit_network).
        net_sd = np.array([an.PRIOR[n][1] if n in NETWORK_HELD else sd[an.G_INDEX[n]] for n in an.GLOBALS])
        for name in NETWORK_HELD:
            sd[an.G_INDEX[name]] = HELD_SD
        gpu_keys = sorted({f"{device(g.gpu).name}/{q.precision}" for q in queries for g in q.cluster.groups})
        models = sorted({q.model for q in queries})
        # A model's mixed-precision effect: fp16 rows only, fp32 is the reference of the model effect.
        model_keys = models + sorted({_prec_key(q.model, q.precision) for q in queries if q.precision == "fp16"})
        inter_keys = sorted({f"{device(g.gpu).name}/{q.precision}|{q.model}" for q in queries for g in q.cluster.groups})
        gpu_effect = {k: i for i, k in enumerate(gpu_keys)}
        model_effect = {k: i for i, k in enumerate(model_keys)}
        inter_effect = {k: i for i, k in enumerate(inter_keys)}
        # Interconnect efficiency of each GPU type's node: only identified by rows with several GPUs per node.
        link_keys = sorted({name for q in queries for g, name, gpn in _resolve_groups(q.cluster) if gpn > 1})
        link_effect = {k: i for i, k in enumerate(link_keys)}
        dev_index: dict[str, int] = {}
        enc, _ = _encode(queries, dev_index, gpu_effect, model_effect, inter_effect, link_effect)
        devs = _device_table(dev_index)
        y = np.log([q.throughput for q in queries])
        w = _study_weights(rows)
        g0 = np.array([g_prior.get(k, 0.0) for k in gpu_keys])
        m0 = np.array([m_prior.get(k, 0.0) for k in model_keys])
        i0 = np.array([i_prior.get(k, 0.0) for k in inter_keys])
        # Link effects start at 0, whatever the prior: they describe the hosts a table was measured
        # on (see fit_default_model), and a new table's GPUs start from their interconnect's spec.
        l0 = np.zeros(len(link_keys))
        # Per-study effects on compute speed and per-step overhead (framework, host, software era),
        # fitted only when the rows come from two or more studies; a query from an unknown study
        # takes 0, and the effects' spread is the between-study part of its interval.
        study_keys = sorted({_study_of(m) for m in rows})
        study_keys = study_keys if len(study_keys) > 1 else []
        nS = len(study_keys)
        s_of = {k: i for i, k in enumerate(study_keys)}
        s_idx = np.array([s_of.get(_study_of(m), -1) for m in rows])
        nI = len(inter_keys)
        nT, nG, nM = len(mean), len(gpu_keys), len(model_keys)
        s_obs = self.obs_sigma
        m_sd = np.array([self.precision_sigma if _is_prec_key(k) else self.model_sigma for k in model_keys])

        # Measured all-reduce (sync) times of multi-GPU all-reduce rows fit the network model directly.
        sync_ix = np.array([i for i, m in enumerate(rows) if m.sync_time_s is not None and m.ps == 0
                            and m.cluster.total_gpus > 1], dtype=int)
        y_sync = np.log(np.array([rows[i].sync_time_s for i in sync_ix], float) + SYNC_FLOOR_S)

        nL = len(link_keys)
        base_n = nT + nG + nM + nI + nL

        def study_arrays(z):
            if not nS:
                return 0.0, 0.0
            sl, so = z[base_n: base_n + nS], z[base_n + nS:]
            return np.where(s_idx >= 0, sl[np.maximum(s_idx, 0)], 0.0), np.where(s_idx >= 0, so[np.maximum(s_idx, 0)], 0.0)

        def resid(z):
            th, eg, em = z[:nT], z[nT: nT + nG], z[nT + nG: nT + nG + nM]
            ei, el = z[nT + nG + nM: nT + nG + nM + nI], z[nT + nG + nM + nI: base_n]
            sl, so = study_arrays(z)
            with np.errstate(all="ignore"):
                pred, parts = an.evaluate(th, eg, em, enc, devs, e_i=ei, e_l=el, detail=True, study_level=sl,
                                          study_over=so)
            r = w * (np.log(np.maximum(pred, 1e-12)) - y) / s_obs
            r_sync = w[sync_ix] * (np.log(parts["t_sync"][sync_ix] + SYNC_FLOOR_S) - y_sync) / SYNC_SIGMA
            return np.concatenate([r, r_sync, (th - mean) / sd, (eg - g0) / self.gpu_sigma, (em - m0) / m_sd,
                                   (ei - i0) / self.inter_sigma, (el - l0) / self.link_sigma,
                                   z[base_n: base_n + nS] / STUDY_LEVEL_SIGMA, z[base_n + nS:] / STUDY_OVER_SIGMA])

        z0 = np.concatenate([mean, g0, m0, i0, l0, np.zeros(2 * nS)])
        fun, jac = _grouped_jacobian(resid, _residual_supports(enc, s_idx, sync_ix, nT, (nG, nM, nI, nL, nS)))
        sol = least_squares(fun, z0, jac=jac, method="lm", x_scale=1.0, max_nfev=60 * (len(z0) + 1))
        z = sol.x
        if any(q.tcp_across_nodes for q in queries):
            z = _fit_network(resid, z, len(rows) + len(sync_ix), mean, net_sd)
        self.theta_ = z[: len(mean)]
        self.gpu_effects_ = dict(zip(gpu_keys, z[len(mean): len(mean) + nG]))
        self.model_effects_ = dict(zip(model_keys, z[nT + nG: nT + nG + nM]))
        self.inter_effects_ = {**i_prior, **dict(zip(inter_keys, z[nT + nG + nM: nT + nG + nM + nI]))}
        self.link_effects_ = dict(zip(link_keys, z[nT + nG + nM + nI: base_n]))
        self.study_effects_ = {k: [float(z[base_n + i]), float(z[base_n + nS + i])] for i, k in enumerate(study_keys)}
        sl_fit, so_fit = study_arrays(z)
        self.gpu_effects_ = {**{k: v for k, v in g_prior.items() if k not in self.gpu_effects_}, **self.gpu_effects_}
        self.model_effects_ = {**{k: v for k, v in m_prior.items() if k not in self.model_effects_}, **self.model_effects_}
        self.fitted_gpus_ = {k.split("/")[0] for k in gpu_keys} | {k.split("/")[0] for k in g_prior}
        self.fitted_models_ = set(models) | {k for k in m_prior if not _is_prec_key(k)}
        self.max_nodes_ = max(q.cluster.nodes for q in queries)
        self.max_gpus_per_node_ = max(g.gpus_per_node for q in queries for g in q.cluster.groups)
        self.n_rows_ = len(rows)
        with np.errstate(all="ignore"):
            fitted = an.evaluate(self.theta_, *self._effect_arrays(enc_keys=(gpu_keys, model_keys)), enc, devs,
                                 e_i=np.array([self.inter_effects_[k] for k in inter_keys]),
                                 e_l=np.array([self.link_effects_[k] for k in link_keys]),
                                 study_level=sl_fit, study_over=so_fit)
        self.train_log_residuals_ = y - np.log(fitted)
        self.correction_ = None
        self.interval_log_ = float(np.quantile(np.abs(self.train_log_residuals_), 0.9)) * 1.5 + 0.02
        self.regime_log_ = _regime_widths(queries, self.train_log_residuals_, scale=1.2, floor=0.02)
        self.fitted_pairs_ = {f"{device(g.gpu).name}|{q.model}" for q in queries for g in q.cluster.groups}
        self.ar_nodes_ = max([q.cluster.nodes for q in queries if q.ps == 0] or [0])
        # Clouds whose TCP all-reduce across nodes the rows measured ("" for rows that do not say).
        self.ar_clouds_ = {q.clouds or "" for q in queries if q.tcp_across_nodes}
        # Whether any row measured an all-reduce across RDMA nodes (EFA, InfiniBand): none shipped does.
        self.ar_rdma_ = any(q.ps == 0 and q.cluster.nodes > 1 and not q.tcp_across_nodes for q in queries)
        self.fast_paths_ = sorted({_path(q, name) for q in queries for _g, name, _n in _resolve_groups(q.cluster)})
        # Robust spread (1.4826 x median |effect|): one outlying model (NCF's per-step overheads) must not
        # widen every unseen model's interval.
        rms = lambda v: float(1.4826 * np.median(np.abs(v))) if len(v) else 0.0  # noqa: E731
        # Root mean square of the fitted study effects: (speed level, per-step overhead).
        level_rms, over_rms = ((float(x) for x in np.sqrt(np.mean(np.square(list(self.study_effects_.values())), axis=0)))
                               if self.study_effects_ else (0.0, 0.0))
        self.spread_log_ = {
            "gpu": max(rms([v for v in self.gpu_effects_.values()]), SPREAD_FLOOR["gpu"]),
            "model": min(max(rms([v for k, v in self.model_effects_.items() if not _is_prec_key(k)]),
                             SPREAD_FLOOR["model"]), SPREAD_CAP),
            # A (GPU, model) pair never measured together: at least the spread the fit's own prior
            # allows pair effects (T4 runs BERT at 0.6x and ResNet-50 at 1.6x what its other rows say).
            "pair": max(rms(list(self.inter_effects_.values())), self.inter_sigma),
            # Between studies: the root mean square of the fitted study levels (a handful of studies:
            # no robust estimate), never below STUDY_LOG (a user's other machine) or POOLED_STUDY_LOG (a
            # query off the pooled calibration: see there).
            "study": max(level_rms, STUDY_LOG),
            "study_pooled": max(level_rms, POOLED_STUDY_LOG),
            "study_over": over_rms,
        }
        die = _die_spread(self.gpu_effects_)
        if die is not None:
            self.spread_log_["die"] = die
        # Rows of one study (a user's own table, one shipped table) are the setup the queries come
        # from: their GPUs and models need no between-study term; anything else is another study's.
        # Rows of several studies (the shipped calibration) are nobody's own setup.
        one_study = len({_study_of(m) for m in rows}) == 1
        self.measured_steps_ = _measured_steps(rows, self.train_log_residuals_, one_study)
        self.own_gpus_ = {k.split("/")[0] for k in gpu_keys} if one_study else set()
        self.own_models_ = set(models) if one_study else set()
        self.own_configs_ = set()
        if isinstance(self.prior, ThroughputModel):
            # With a handful of rows, only the configurations measured are known; the others (another
            # batch size, another cluster) are the prior's, with its between-study spread.
            self.own_configs_ = {_config_key(q) for q in queries} if len(rows) < 10 and one_study else set()
            p = self.prior
            self.spread_log_ = {k: max(self.spread_log_.get(k, 0.0), p.spread_log_.get(k, 0.0))
                                for k in self.spread_log_.keys() | p.spread_log_.keys()}
            self.fitted_pairs_ |= set(p.fitted_pairs_)
            self.ar_nodes_ = max(self.ar_nodes_, p.ar_nodes_)
            self.ar_clouds_ = self.ar_clouds_ | set(p.ar_clouds_)
            self.ar_rdma_ = self.ar_rdma_ or p.ar_rdma_
            self.fast_paths_ = sorted(set(self.fast_paths_) | set(p.fast_paths_))
            if len(rows) < 10:
                # A handful of rows shows nothing of the configurations they do not measure: the
                # prior's widths stay the floor (of every regime: _floor_unmeasured_regimes, below).
                self.interval_log_ = max(self.interval_log_, p.interval_log_)
        if self.folds and len(rows) >= 2 * max(self.folds, 2) and self.correction != "none":
            self._fit_correction_and_intervals(rows)
        elif self.correction == "always":
            # lazy: the residual correction only when one is fitted
            from spottrain.perf.correction import ResidualCorrection

            self.correction_ = ResidualCorrection().fit(rows, self._anchored_residuals(rows))
        if isinstance(self.prior, ThroughputModel):
            self._floor_unmeasured_regimes(queries)
        return self

    def _floor_unmeasured_regimes(self, queries: list[_Query]) -> None:
        """A regime the rows hardly measure (fewer than 10 rows: one node's rows say nothing of
        all-reduce across nodes) keeps at least the prior's width there: its own residuals are those
        of other regimes. Pollux's multi-node rows predicted from each model's one-node rows: covered
        83 % with the rows' own width, 92 % with this floor (bench/prediction_accuracy.py)."""
        counts = Counter(k for q in queries for k in _width_keys(q))
        p = self.prior
        self.regime_log_ = {k: max(v, p.regime_log_.get(k, 0.0)) if counts[k] < 10 else v
                            for k, v in self.regime_log_.items()}
        # A ring size the rows hold too few of keeps the prior's width for it.
        self.regime_log_.update({k: v for k, v in p.regime_log_.items() if k not in self.regime_log_})

    def _gpu_effect(self, name: str, precision: str) -> float:
        """The fitted speed effect of GPU ``name`` on ``precision``'s path; for a GPU the fit never saw,
        the mean effect of the fitted GPUs of its die on that path, else of its architecture (0 when
        there are none).

        Boards of one die (every A100, 40 or 80 GB, SXM or PCIe; the A10, A10G, A40 and RTX 3090)
        have the same SMs, caches and kernels and differ in clocks, memory and power, which their
        datasheet figures already carry; GPUs of one architecture share the SM design, tensor-core
        generation and the libraries' kernels for it, so how far they fall from their datasheets is
        mostly the die's, then the architecture's: an H100's slow fp16 path tells of an H200's (our
        own H100 rows predicting the H200's, bench/prediction_accuracy.py). Lambda's one-GPU rows,
        each GPU type held out in turn: 9.4 % by die, 9.8 % by architecture alone (every Ampere board
        better, the RTX A6000 13.2 -> 10.4 %)."""
        key = f"{name}/{precision}"
        if key in self.gpu_effects_:
            return self.gpu_effects_[key]
        cache = self.__dict__.setdefault("_arch_effect_cache", {})
        if key not in cache:
            kin = self._kin(name, precision)
            cache[key] = float(np.mean([self.gpu_effects_[f"{k}/{precision}"] for k in kin.names])) if kin else 0.0
        return cache[key]

    def _kin(self, name: str, precision: str) -> _Kin | None:
        """The fitted GPUs an unseen ``name`` borrows its effect on ``precision``'s path from."""
        return _kin(name, frozenset(k.rpartition("/")[0] for k in self.gpu_effects_ if k.endswith(f"/{precision}")))

    def _inter_effect(self, name: str, precision: str, model: str) -> float:
        """The fitted (GPU, model) effect of ``model`` on ``name``'s ``precision`` path; for a GPU the fit
        never saw, the mean of its die's fitted boards' effects for that model (0 when none has one).

        A model's deviation on a die (its kernels' fit to that die's SMs and caches) is shared by the
        die's boards: Lambda's one-GPU rows, each GPU type held out in turn, 9.4 % without it, 8.7 %
        with it (A100 80 GB 11.5 -> 6.5, A100 PCIe 4.2 -> 7.1)."""
        key = f"{name}/{precision}|{model}"
        if key in self.inter_effects_ or f"{name}/{precision}" in self.gpu_effects_:
            return self.inter_effects_.get(key, 0.0)
        cache = self.__dict__.setdefault("_arch_effect_cache", {})
        if key not in cache:
            kin = self._kin(name, precision)
            same = [self.inter_effects_[k] for k in (f"{n}/{precision}|{model}" for n in kin.names)
                    if k in self.inter_effects_] if kin is not None and kin.by_die else []
            cache[key] = float(np.mean(same)) if same else 0.0
        return cache[key]

    def _effects_for(self, qs: list) -> tuple[dict[str, float], dict[str, float]]:
        """The fitted GPU and (GPU, model) effects, plus what every unseen GPU of ``qs`` borrows
        (:meth:`_gpu_effect`, :meth:`_inter_effect`)."""
        gpu, inter = dict(self.gpu_effects_), dict(self.inter_effects_)
        for q in qs:
            for _g, name, _n in _resolve_groups(q.cluster):
                key = f"{name}/{q.precision}"
                if key not in gpu:
                    gpu[key] = self._gpu_effect(name, q.precision)
                if f"{key}|{q.model}" not in inter and (v := self._inter_effect(name, q.precision, q.model)) != 0.0:
                    inter[f"{key}|{q.model}"] = v
        return gpu, inter

    def _effect_arrays(self, enc_keys, gpu_effects: dict[str, float] | None = None):
        gk, mk = enc_keys
        gpu_effects = self.gpu_effects_ if gpu_effects is None else gpu_effects
        return (np.array([gpu_effects.get(k, 0.0) for k in gk]),
                np.array([self.model_effects_.get(k, 0.0) for k in mk]))

    def _fit_correction_and_intervals(self, rows: list[Measurement]) -> None:
        from spottrain.perf.correction import ResidualCorrection
        from spottrain.perf.validation import kfold_indices

        base = self.get_params()
        base.update(folds=0, correction="none")
        y = np.log([m.throughput for m in rows])
        cv_an = np.zeros(len(rows))
        cv_corr = np.zeros(len(rows))
        for train, test in kfold_indices(len(rows), self.folds, self.random_state):
            sub = ThroughputModel(**base).fit([rows[i] for i in train])
            pred = np.log([p.throughput for p in sub.predict([rows[i] for i in test], warn=False)])
            cv_an[test] = y[test] - pred
            corr = ResidualCorrection().fit([rows[i] for i in train], sub._anchored_residuals([rows[i] for i in train]))
            cv_corr[test] = y[test] - (pred + corr.predict([rows[i] for i in test]))
        mae_an, mae_corr = float(np.mean(np.abs(cv_an))), float(np.mean(np.abs(cv_corr)))
        use = self.correction == "always" or (self.correction == "auto" and mae_corr < 0.97 * mae_an)
        self.cv_log_residuals_ = cv_corr if use else cv_an
        self.cv_mae_log_ = {"analytical": mae_an, "corrected": mae_corr}
        if use:
            self.correction_ = ResidualCorrection().fit(rows, self._anchored_residuals(rows))
        self.interval_log_ = float(np.quantile(np.abs(self.cv_log_residuals_), 0.9))
        self.regime_log_ = _regime_widths([_Query.of(m) for m in rows], self.cv_log_residuals_, scale=1.0, floor=0.0)

    def _anchored_residuals(self, rows: list[Measurement]) -> np.ndarray:
        """Log residuals of the fitted rows as :meth:`predict` gives them (each one-GPU row's measured
        step in, :meth:`_step_anchor`), before any learned correction: what a correction can still learn.
        The interval widths keep :attr:`train_log_residuals_`, without the steps: a query at a batch
        no row measured on one GPU has none."""
        if not self.measured_steps_:
            return self.train_log_residuals_
        kept, self.correction_ = self.correction_, None
        try:
            pred = np.array([p.throughput for p in self.predict(rows, warn=False)])
        finally:
            self.correction_ = kept
        return np.log([m.throughput for m in rows]) - np.log(pred)

    # -- prediction ------------------------------------------------------------------------
    def _check(self) -> None:
        if not hasattr(self, "theta_"):
            raise NotFittedError("ThroughputModel.predict called before fit()")

    def _net_theta(self, z: float) -> np.ndarray:
        """The fitted parameters with the achieved inter-node rate ``z`` prior sds above its fit: the
        TCP cap and the RDMA fraction both (a query's slowest node goes through one of the two)."""
        theta = np.array(self.theta_, float)
        for name in ("log_ar_cap", "log_rdma_eff"):
            theta[an.G_INDEX[name]] += z * an.PRIOR[name][1]
        return theta

    def _extrapolation(self, q: _Query, cap_share: float = 0.0, over_share: float = 0.0,
                       net_note: str | None = None) -> list[tuple[str, float]]:
        """Why ``q`` lies outside what the fit has seen: (note, log standard deviation it adds).

        ``cap_share``: d log(step) / d log(achieved inter-node rate), the analytical model's
        ``cap_share`` part (0 for one node or an all-reduce the backward pass hides).
        ``net_note``: :meth:`_network_note` of ``q``, which the caller needs for the interval's
        sides too."""
        notes: list[tuple[str, float]] = []
        sp = self.spread_log_
        groups = _resolve_groups(q.cluster)
        for g, name, gpn in groups:
            if name not in self.fitted_gpus_:
                # An unseen architecture is said, not widened further: leave one study out on Lambda
                # (every GPU of a newer architecture) covers 95.7 % with the unseen GPU's and
                # precision path's widths.
                arch = _architecture(name)
                new_arch = arch is not None and arch not in _architectures(frozenset(self.fitted_gpus_))
                kin = self._kin(name, q.precision)
                by_die = kin is not None and kin.by_die
                one = by_die and len(kin.names) == 1
                source = (f", nor any {arch} GPU (predicted from its datasheet)" if new_arch
                          else f" (predicted from its peak FLOPS and bandwidth, and how far the fitted {', '.join(kin.names)}"
                               f" of its {kin.shared} {'falls' if one else 'fall'} short of {'its' if one else 'their'} own)"
                          if by_die else " (predicted from its peak FLOPS and bandwidth)")
                width = min(sp.get("die") or sp["gpu"], sp["gpu"]) if by_die else sp["gpu"]
                notes.append((f"GPU {name} not in the fitted data{source}", width))
            elif q.model in self.fitted_models_ and f"{name}|{q.model}" not in self.fitted_pairs_:
                notes.append((f"{q.model} never measured on {name}", sp["pair"]))
            if _path(q, name) not in self.fast_paths_:
                notes.append((f"{_path(q, name)} path never measured", PATH_LOG))
        # One reason per cause: two groups of one unseen GPU (a placement of 4 + 2 T4s) are one
        # unknown, not two independent ones; nor are two oversize node shapes.
        notes = list(dict(notes).items())
        gpn_max = max(gpn for _g, _name, gpn in groups)
        if gpn_max > 2 * self.max_gpus_per_node_:
            notes.append((f"{gpn_max} GPUs per node, fitted up to {self.max_gpus_per_node_}", NODES_LOG))
        if q.model not in self.fitted_models_:
            notes.append((f"model {q.model} not in the fitted data (predicted from its FLOPs)", sp["model"]))
        below = q.intensity_below(self.fitted_models_)
        if below <= -INTENSITY_NOTE:
            notes.append((f"{q.model} does {math.exp(-below):.1f}x fewer FLOPs per activation element than dense "
                          "networks of its layer width (its extra traffic from the roofline, whose scaling across GPUs "
                          "is uncertain)", an.INTENSITY_SD * -below))
        if q.cluster.nodes > 2 * max(self.max_nodes_, 1):
            notes.append((f"{q.cluster.nodes} nodes, fitted up to {self.max_nodes_}", NODES_LOG))
        if net_note is not None:
            rate = "log_ar_cap" if q.tcp_across_nodes else "log_rdma_eff"
            notes.append((net_note, an.PRIOR[rate][1] * cap_share))
        if self.own_gpus_ or self.own_models_:
            missing = [n for _g, n, _k in groups if n not in self.own_gpus_]
            if self.own_configs_ and not missing and q.model in self.own_models_ and _config_key(q) not in self.own_configs_:
                notes.append(("configuration not among your few measured rows", self.spread_log_.get("study", STUDY_LOG)))
            elif missing or q.model not in self.own_models_:
                what = f"GPU {missing[0]}" if missing else f"model {q.model}"
                level = self.spread_log_.get("study", STUDY_LOG)
                # Another GPU type is another machine: its host sets the per-step overhead as
                # another study's would.
                over = self.spread_log_.get("study_over", 0.0) * over_share if missing else 0.0
                why = (f"another machine: {OTHER_MACHINE_SHARE:.0%} of what your rows change, the rest the calibration's"
                       if self._other_machine(q) else "calibrated on another study's")
                notes.append((f"{what} not in your measurements ({why})", math.hypot(level, over)))
        return notes

    def _network_note(self, q: _Query, cap_share: float) -> str | None:
        """Why the rate ``q``'s all-reduce across nodes achieves is only its prior's, or ``None``."""
        if q.ps == 0 and q.cluster.nodes > 1 and self.ar_nodes_ <= 1:
            return "no all-reduce across nodes in the fitted data (achieved network rate from its prior)"
        if cap_share > 0.0 and not q.tcp_across_nodes:
            if self.ar_rdma_:
                return None
            return "no all-reduce over RDMA (EFA, InfiniBand) in the fitted data (achieved network rate from its prior)"
        if cap_share > 0.0 and self.ar_clouds_ and "" not in self.ar_clouds_:
            # The achieved rate is the fitted clouds' (NCCL's socket transport opens 16 sockets per
            # connection on AWS, 4 threads' worth on GCP, one socket elsewhere, and clouds cap flows
            # differently): on another cloud it is as unknown as its prior.
            cloud = q.clouds
            if cloud is not None and cloud not in self.ar_clouds_:
                return (f"all-reduce across nodes measured on {', '.join(sorted(self.ar_clouds_))} only, not on "
                        f"{cloud} (achieved network rate from its prior)")
        return None

    def _half_widths(self, q: _Query, notes: list[tuple[str, float]], over_share: float, net_note: str | None,
                     net_sides: tuple[float, float], row=None) -> tuple[float, float]:
        """(below, above) half-widths (log) of ``q``'s ~90 % interval.

        Where the achieved network rate is only its prior's (``net_note``), that reason's width is
        not its linear share ``cap_share x sd`` on both sides but ``net_sides`` = (up, down): the log
        gain of the throughput with the rate at its prior's 95th percentile and the log loss at its
        5th, through the model, each combined with the rest in quadrature. A faster
        network cannot speed a step by more than the all-reduce time it exposes, nor past the NIC's
        line rate; a slower one exposes the all-reduce more and more, and can expose one the backward
        pass hid. So the interval reaches further down than up (ResNet-50 at 57 images per GPU on two
        4-GPU T4 nodes, fitted without Pollux: 0.48 up and 0.84 down in log for this reason, 0.70 each
        way linearised; Pollux held out then covers 93.8 % of its rows, 96.8 % linearised)."""
        if net_note is None:
            half = self._half_width(q, notes, over_share, row)
            return half, half
        rest = [(n, sd) for n, sd in notes if n != net_note]
        core = self._half_width(q, rest, over_share, row)
        up, down = net_sides
        return math.hypot(core, down), math.hypot(core, up)

    def _borrows_stack(self, q: _Query, row=None) -> bool:
        """Whether ``q``'s mixed-precision gain is another software stack's: an fp16 query off the
        pooled calibration (no rows of the user's), unless a profile timed the user's stack in fp16 or
        ``q`` is a ``row`` of a fitted study (its study's stack)."""
        if q.precision != "fp16" or getattr(self, "stack_timed_", None) == "fp16" or self.own_gpus_ or self.own_models_:
            return False  # (an fp16 query runs the fp16 path on every GPU: ``_path``)
        return not (isinstance(row, Measurement) and _study_of(row) in self.study_effects_)

    def _half_width(self, q: _Query, notes: list[tuple[str, float]], over_share: float = 0.0, row=None) -> float:
        """Half-width (log) of the ~90 % interval of ``q``: the held-out error of its regime, plus
        what each reason it is outside the fitted data adds (1.645 standard deviations).

        ``over_share``: the share of the step that scales with the per-step overhead, which another
        study's framework and host set (the fitted studies' overheads differ by ~1.5x at one sd).
        Off the pooled calibration an fp16 query is at least :data:`FP16_STACK_LOG` wide, unless a
        profile timed the user's stack at that precision."""
        widths = getattr(self, "regime_log_", {})
        base = next((widths[k] for k in _width_keys(q) if k in widths), self.interval_log_)
        extra = math.sqrt(sum(sd * sd for _n, sd in notes))
        if not (self.own_gpus_ or self.own_models_):
            # Calibrated on published studies, not on the user's cluster: every query is another
            # study's, and studies disagree by more than their own residuals (leave one study out).
            level = self.spread_log_.get("study_pooled", self.spread_log_.get("study", STUDY_LOG))
            over = self.spread_log_.get("study_over", 0.0) * over_share
            extra = math.hypot(extra, level, over)
            if self._borrows_stack(q, row):
                extra = max(extra, math.hypot(max(level, FP16_STACK_LOG), over))
        return math.sqrt(base * base + (Z90 * extra) ** 2)

    def predict(self, queries, *, warn: bool = True) -> list[ThroughputPrediction]:
        """Predict each query (Measurements, or dict rows with the table's fields)."""
        self._check()
        qs = [_Query.of(q) if isinstance(q, Measurement) else q for q in queries]
        if not qs:
            return []
        g_effects, i_effects = self._effects_for(qs)
        gpu_keys = sorted(g_effects)
        model_keys = sorted(self.model_effects_)
        inter_keys = sorted(i_effects)
        link_keys = sorted(self.link_effects_)
        gmap = {k: i for i, k in enumerate(gpu_keys)}
        mmap = {k: i for i, k in enumerate(model_keys)}
        imap = {k: i for i, k in enumerate(inter_keys)}
        dev_index: dict[str, int] = {}
        enc, resolved = _encode(qs, dev_index, gmap, mmap, imap, {k: i for i, k in enumerate(link_keys)},
                                fitted_models=self.fitted_models_)
        devs = _device_table(dev_index)
        eg, em = self._effect_arrays((gpu_keys, model_keys), g_effects)
        ei = np.array([i_effects[k] for k in inter_keys])
        studies = [self.study_effects_.get(_study_of(q), (0.0, 0.0)) if isinstance(q, Measurement) else (0.0, 0.0)
                   for q in queries]
        rows_in = dict(e_i=ei, e_l=np.array([self.link_effects_[k] for k in link_keys]),
                       study_level=np.array([v[0] for v in studies]), study_over=np.array([v[1] for v in studies]),
                       log_comp=self._step_anchors(queries, qs, resolved, enc.dev.shape))
        anchors = np.zeros(enc.dev.shape) if rows_in["log_comp"] is None else rows_in["log_comp"]
        with np.errstate(all="ignore"):
            x, parts = an.evaluate(self.theta_, eg, em, enc, devs, detail=True, **rows_in)
        logx = np.log(x)
        net_notes = [self._network_note(q, float(parts["cap_share"][i])) for i, q in enumerate(qs)]
        sides = np.zeros((len(qs), 2))  # (above, below): the network reason's widths, log
        if any(n is not None for n in net_notes):
            with np.errstate(all="ignore"):
                sides[:, 0] = np.maximum(np.log(an.evaluate(self._net_theta(Z90), eg, em, enc, devs, **rows_in) / x), 0.0)
                sides[:, 1] = np.maximum(np.log(x / an.evaluate(self._net_theta(-Z90), eg, em, enc, devs, **rows_in)), 0.0)
        if self.correction_ is not None:
            logx = logx + self.correction_.predict([q for q in queries] if all(isinstance(q, Measurement) for q in queries)
                                                    else qs)
        out = []
        far = []
        for i, q in enumerate(qs):
            reasons = self._extrapolation(q, float(parts["cap_share"][i]), float(parts["over_share"][i]), net_notes[i])
            below, above = self._half_widths(q, reasons, float(parts["over_share"][i]), net_notes[i], tuple(sides[i]),
                                             queries[i])
            notes = [n for n, _sd in reasons]
            if notes:
                far.append(f"{q.model} on {q.cluster}: " + "; ".join(notes))
            thr = float(math.exp(logx[i]))
            gpus = q.cluster.total_gpus
            it = gpus * q.batch_size / thr if q.ps == 0 or q.sync == "sync" else float(parts["t_w"][i])
            out.append(ThroughputPrediction(
                throughput=thr, low=thr * math.exp(-below), high=thr * math.exp(above), iteration_time_s=it,
                bottleneck=an.bottleneck(q.ps, parts, i), extrapolated=bool(notes), notes=tuple(notes),
                sync_time_s=float(parts["t_sync"][i]) if q.ps == 0 else None,
                measured_step=bool(np.all(anchors[i, : len(resolved[i])] != 0.0)),
                stack_borrowed=self._borrows_stack(q, queries[i]),
                per_group=tuple({"gpu": name, "nodes": g.count, "gpus_per_node": gpn} for g, name, gpn in resolved[i])))
        if far and warn:
            more = f" (and {len(far) - 1} more queries outside the fitted data)" if len(far) > 1 else ""
            warnings.warn(far[0] + more + "; intervals widened", ExtrapolationWarning, stacklevel=2)
        other = [i for i, q in enumerate(qs) if self._other_machine(q)]
        if other:
            calibrated = self.prior.predict([qs[i] for i in other], warn=False)
            for i, c in zip(other, calibrated):
                out[i] = _toward(out[i], c.throughput)
        return out

    @staticmethod
    def _anchor_study(q) -> str | None:
        """The study a shipped row names (None for a user's query). A one-study fit (a user's own table)
        keeps its steps under :data:`ANY_STUDY`, which every query takes; a several-study fit (the
        calibration) under each study's name, which only that study's rows take: which study's software
        a user's query runs is not known."""
        return (_study_of(q) or None) if isinstance(q, Measurement) else None

    def _step_anchor(self, study: str | None, model: str, gpu: str, precision: str, batch: float) -> float:
        """Log factor on the predicted compute step of ``model`` on one ``gpu`` at per-GPU ``batch``:
        minus the fit's residual on the one-GPU rows of that configuration (interpolated in log batch
        between the batch sizes measured, fading past them over :data:`STEP_REACH`); 0 where none was
        measured.

        The compute model fits every row at once and misses the shape of one model's batch curve on
        one GPU (Pollux's ResNet-50 on a T4: +24 % at batch 20, -15 % at 200 with those rows in the
        fit). A multi-GPU step at a measured per-GPU batch runs that same compute step, then exchanges
        gradients: it takes the measured compute and the modelled exchange (and its overlap with the
        measured backward pass). Pollux's multi-node rows with one node of the model measured: 10.9 ->
        9.0 % (bench/prediction_accuracy.py)."""
        steps = self.measured_steps_
        pts = steps.get(_step_key(ANY_STUDY, model, gpu, precision)) or \
            (steps.get(_step_key(study, model, gpu, precision)) if study is not None else None)
        if not pts:
            return 0.0
        xs, rs = pts[0::2], pts[1::2]
        x = math.log(batch)
        beyond = max(xs[0] - x, x - xs[-1], 0.0)
        if beyond >= STEP_REACH:
            return 0.0
        return -float(np.interp(x, xs, rs)) * (1.0 - beyond / STEP_REACH)

    def _group_anchors(self, q: "_Query", resolved, study: str | None = None) -> list[float]:
        """:meth:`_step_anchor` of each group of one query (``study``: :meth:`_anchor_study` of the row
        it came from)."""
        if not self.measured_steps_:
            return [0.0] * len(resolved)
        return [self._step_anchor(study, q.model, name, q.precision, q.batch_size) for _g, name, _n in resolved]

    def _step_anchors(self, queries, qs: list["_Query"], resolved, shape) -> np.ndarray | None:
        """:meth:`_group_anchors` of every query of an encoded batch, (queries, groups); None when the
        fit holds no measured step."""
        if not self.measured_steps_:
            return None
        out = np.zeros(shape)
        for i, (orig, q) in enumerate(zip(queries, qs)):
            out[i, : len(resolved[i])] = self._group_anchors(q, resolved[i], self._anchor_study(orig))
        return out

    def _other_machine(self, q: "_Query") -> bool:
        """Whether ``q`` runs on a GPU type this user fit's own rows do not hold: another of the user's
        machines, which its prediction takes only :data:`OTHER_MACHINE_SHARE` of the rows' change for."""
        return (isinstance(self.prior, ThroughputModel) and bool(self.own_gpus_)
                and any(name not in self.own_gpus_ for _g, name, _n in _resolve_groups(q.cluster)))

    _STATE = ("theta_", "gpu_effects_", "model_effects_", "inter_effects_", "link_effects_", "fitted_gpus_", "fitted_models_",
              "max_nodes_", "max_gpus_per_node_", "n_rows_", "interval_log_", "regime_log_", "fitted_pairs_", "ar_nodes_",
              "fast_paths_", "spread_log_", "own_gpus_", "own_models_", "study_effects_", "own_configs_", "ar_clouds_",
              "ar_rdma_", "measured_steps_")
    # State a model saved before it was recorded lacks: its rows' clouds are not known; no row of it
    # crossed RDMA nodes (none shipped did).
    _STATE_DEFAULTS = {"ar_clouds_": [""], "ar_rdma_": False, "measured_steps_": {}}

    def to_dict(self) -> dict:
        """Fitted state as JSON-ready data (a model without a learned correction)."""
        self._check()
        if self.correction_ is not None:
            raise InputError("a model with a learned correction cannot be saved; fit with correction='none'")
        out = {"params": {k: v for k, v in self.get_params().items() if k != "prior"}, "globals": list(an.GLOBALS)}
        for k in self._STATE:
            v = getattr(self, k)
            if isinstance(v, np.ndarray):
                v = [float(x) for x in v]
            elif isinstance(v, set):
                v = sorted(v)
            elif isinstance(v, dict):
                v = {a: ([float(x) for x in b] if isinstance(b, (list, tuple)) else float(b)) for a, b in sorted(v.items())}
            out[k] = v
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "ThroughputModel":
        """Inverse of :meth:`to_dict`."""
        saved = list(data.get("globals", []))
        if saved != list(an.GLOBALS[: len(saved)]) or len(saved) < len(GLOBALS_V1):
            raise InputError("saved throughput model is from another version of the analytical model; refit it")
        m = cls(**data["params"])
        for k in cls._STATE:
            v = data.get(k, cls._STATE_DEFAULTS[k]) if k in cls._STATE_DEFAULTS else data[k]
            if k == "theta_":
                # A model saved before a global was added takes the value at which that global
                # changes nothing (an.NEUTRAL): its predictions stay as they were.
                v = np.array(list(v) + [an.NEUTRAL[n] for n in an.GLOBALS[len(saved):]], float)
            elif k in ("fitted_gpus_", "fitted_models_", "fitted_pairs_", "own_gpus_", "own_models_", "own_configs_",
                       "ar_clouds_"):
                v = set(v)
            setattr(m, k, v)
        m.correction_ = None
        return m

    def predict_one(self, q: "_Query") -> ThroughputPrediction:
        """Predict one configuration through the scalar fast path (no learned correction).

        Agrees with :meth:`predict` (tests check it); used by :func:`predict_throughput`.
        """
        self._check()
        if self.correction_ is not None:
            return self.predict([q], warn=False)[0]
        resolved = _resolve_groups(q.cluster)
        anchors = self._group_anchors(q, resolved)
        thr, parts, per = self._scalar(q, self.theta_, resolved, anchors)
        net_note = self._network_note(q, parts.get("cap_share", 0.0))
        reasons = self._extrapolation(q, parts.get("cap_share", 0.0), parts["over_share"], net_note)
        sides = (0.0, 0.0)
        if net_note is not None:
            sides = (max(math.log(self._scalar(q, self._net_theta(Z90), resolved, anchors)[0] / thr), 0.0),
                     max(math.log(thr / self._scalar(q, self._net_theta(-Z90), resolved, anchors)[0]), 0.0))
        below, above = self._half_widths(q, reasons, parts["over_share"], net_note, sides)
        notes = [n for n, _sd in reasons]
        out = ThroughputPrediction(
            throughput=thr, low=thr * math.exp(-below), high=thr * math.exp(above), iteration_time_s=parts["t_w"],
            bottleneck=an.bottleneck_of(q.ps, parts), extrapolated=bool(notes), notes=tuple(notes),
            sync_time_s=parts["t_sync"] if q.ps == 0 else None, measured_step=all(a != 0.0 for a in anchors),
            stack_borrowed=self._borrows_stack(q),
            per_group=tuple({"gpu": name, "nodes": g.count, "gpus_per_node": gpn, "samples_per_s": x}
                            for (g, name, gpn), x in zip(resolved, per)))
        return _toward(out, self.prior.predict_one(q).throughput) if self._other_machine(q) else out

    def _scalar(self, q: "_Query", theta: np.ndarray, resolved=None, anchors=None) -> tuple[float, dict, list[float]]:
        """(throughput, parts, per-group throughput) of ``q`` under the global parameters ``theta``
        (the fitted ones, or the network rate moved: :meth:`_net_theta`) through the scalar path;
        ``anchors``: each group's :meth:`_step_anchor` (None: looked up)."""
        resolved = _resolve_groups(q.cluster) if resolved is None else resolved
        if anchors is None:
            anchors = self._group_anchors(q, resolved)
        groups = []
        for (g, name, gpn), log_comp in zip(resolved, anchors):
            d = device(name)
            key = f"{name}/{q.precision}"
            groups.append(an.GroupInput(
                count=g.count, gpn=gpn, log_p=math.log(d.tensor_tflops(q.precision) * d.sustained),
                log_p32=math.log(d.fp32_tflops * d.sustained), log_bw=math.log(d.memory_bandwidth_gbs),
                link_gbs=(d.nvlink_gbs / 2.0) if d.nvlink_gbs else d.pcie_gbs,
                net_gbs=q.node_gbps(g, gpn) / 8.0,
                effect=self._gpu_effect(name, q.precision) + self._inter_effect(name, q.precision, q.model),
                link_effect=self.link_effects_.get(name, 0.0), pcie_gbs=d.pcie_gbs, log_pd=d.log_power_density,
                log_comp=log_comp))
        return an.predict_one(theta, groups, b=q.batch_size, flops=q.flops, grad=max(q.grad, 1.0),
                              ntens=q.n_tensors, fp16=q.precision == "fp16", ps=q.ps, asyn=q.sync == "async",
                              model_effect=self.model_effects_.get(q.model, 0.0)
                              + self.model_effects_.get(_prec_key(q.model, q.precision), 0.0),
                              pix=q.pixels, ps_share=q.ps_share,
                              below=q.intensity_below(self.fitted_models_))

    def score(self, measurements: list[Measurement]) -> float:
        """Mean absolute percentage error (%) on measured rows."""
        pred = self.predict(measurements, warn=False)
        return float(np.mean([abs(p.throughput - m.throughput) / m.throughput for p, m in zip(pred, measurements)]) * 100)


_DEFAULT: ThroughputModel | None = None
_LOCK = threading.Lock()


DEFAULT_PARAMS_FILE = "default_model.json"
"""Fitted state of :func:`default_model`, in spottrain/data/measurements (written by
``tools/convert_measurements.py``; a test checks it equals a fresh fit)."""


def fit_default_model() -> ThroughputModel:
    """Fit the default model on the shipped real measurement tables (a few seconds)."""
    model = ThroughputModel(folds=0, correction="none").fit(load_shipped())
    # The per-GPU-type interconnect effects describe the measured hosts, not the GPU: Lambda's
    # 8x A100-80GB machine all-reduces BERT's gradients at a few GB/s (8 GPUs run BERT-large only
    # 3.3x as fast as one), where a cloud node of the same GPU has NVLink / NVSwitch (AWS p4de,
    # GCP a2-ultragpu). The shipped calibration prices cloud nodes from their interconnect's spec
    # and the fitted global link efficiency (which the NVLink hosts of the tables, H100 and B200,
    # set); a user's own table (`predict --measurements`) learns its hosts' effects again.
    model.link_effects_ = {}
    return model


def default_model() -> ThroughputModel:
    """The model calibrated on the shipped real measurement tables (loaded once per process).

    Reads the saved fit (milliseconds); fits afresh only if the saved file is missing or stale.
    """
    global _DEFAULT
    with _LOCK:
        if _DEFAULT is None:
            try:
                text = resources.files("spottrain").joinpath("data", "measurements", DEFAULT_PARAMS_FILE).read_text()
                _DEFAULT = ThroughputModel.from_dict(json.loads(text))
            except (OSError, ValueError, KeyError, InputError):
                _DEFAULT = fit_default_model()
        return _DEFAULT


def predict_throughput(workload: Workload, cluster: ClusterSpec | str, *, ps: int = 0, sync: str = "sync",
                       network_gbps: float | None = None, model: ThroughputModel | None = None,
                       cloud: str | None = None) -> ThroughputPrediction:
    """Predict the throughput of ``workload`` on ``cluster`` (``"4xV100"``, ``"2xp3.8xlarge"``).

    ``ps`` = parameter servers (0 = all-reduce); ``sync`` = ``"sync"`` or ``"async"``;
    ``model`` defaults to :func:`default_model`; ``cloud`` (``aws``, ``gcp``, ``azure``) is whose
    network the nodes cross (instance types say their own). Results are memoised per (workload, cluster,
    ps, sync, network, cloud, model), so the planner's repeated queries cost microseconds. A profiled step time on a GPU (``Workload.
    step_time_s_ref``) calibrates the model's efficiency for this workload.
    """
    m = model or default_model()
    key = (workload, str(cluster), ps, sync, network_gbps, cloud, id(m))
    hit = _CACHE.get(key)
    if hit is not None and _CACHE_OWNERS.get(id(m)) is m:
        return hit
    pred = _predict_uncached(workload, cluster, ps=ps, sync=sync, network_gbps=network_gbps, model=m, cloud=cloud)
    if len(_CACHE) > 100_000:
        _CACHE.clear()
    _CACHE[key] = pred
    _CACHE_OWNERS[id(m)] = m
    return pred


_CACHE: dict = {}
_CACHE_OWNERS: dict = {}


def _predict_uncached(workload: Workload, cluster: ClusterSpec | str, *, ps: int, sync: str,
                      network_gbps: float | None, model: ThroughputModel, cloud: str | None = None) -> ThroughputPrediction:
    if isinstance(cluster, str):
        cluster = ClusterSpec.parse(cluster)
    if sync not in ("sync", "async"):
        raise InputError(f"expected 'sync' or 'async', got {sync!r}", column="sync")
    if ps < 0:
        raise InputError(f"expected ps >= 0, got {ps}", column="ps")
    if sync == "async" and ps == 0:
        raise InputError("asynchronous training needs a parameter server (ps >= 1)", column="ps")
    m = model
    q = _Query(model=_model_key(workload.model), batch_size=workload.batch_size, cluster=cluster, ps=ps, sync=sync,
               flops=workload.flops_per_sample, grad=workload.gradient_bytes, precision=workload.precision,
               network_gbps=network_gbps, tensors=workload.tensor_count, cloud=cloud,
               acts=workload.activations_per_sample)
    if not (workload.step_time_s_ref and workload.ref_gpu):
        return m.predict_one(q)
    calibrated = _calibrated_for(m, workload)
    pred = calibrated.predict_one(q)
    if calibrated is m or {name for _g, name, _n in _resolve_groups(q.cluster)} <= {device(workload.ref_gpu).name}:
        return pred
    # A profile times the model on one machine: its step says as much of that machine (its host, its
    # GPU's quirks) as of the model, and nothing tells the two apart. Another GPU type is another
    # machine, which takes half of what the profile changes, as a user's rows do for their GPU types
    # they do not hold (OTHER_MACHINE_SHARE). One GPU type's row as the profile, the same model's row
    # on each other type predicted (bench/prediction_accuracy.py), all of the change / half: Lambda
    # 13.5 / 11.2 %, CM-DARE 21.8 / 18.3 %, ours 17.1 / 16.1 %, MobileNetV2 and EfficientNet-B0 on
    # the H100 and H200 leases 15.8 / 14.4 %, the leases' four models in no table 10.4 / 10.4 %.
    return replace(_toward(pred, m.predict_one(q).throughput), profiled_on=device(workload.ref_gpu).name)


def _calibrated_for(m: ThroughputModel, w: Workload) -> ThroughputModel:
    """A shallow copy of ``m`` whose model effect for ``w.model`` reproduces the profiled step time."""
    try:
        ref = device(w.ref_gpu)
    except Exception:  # noqa: BLE001 - profiled on a GPU we do not know: ignore the calibration
        return m
    name = _model_key(w.model)
    # A profile times steps on batches already on the device (no data loader): so is the step it is
    # compared with, or a host pipeline the prediction waits for would be taken for the GPU's work.
    q = _Query(model=name, batch_size=w.batch_size, cluster=ClusterSpec.parse(f"1x{ref.name}"), ps=0, sync="sync",
               flops=w.flops_per_sample, grad=w.gradient_bytes, precision=w.precision, tensors=w.tensor_count,
               acts=w.activations_per_sample, input="device")
    clone = ThroughputModel(**m.get_params())
    clone.__dict__.update({k: v for k, v in m.__dict__.items() if k.endswith("_")})
    clone.model_effects_ = dict(m.model_effects_)
    clone.model_effects_[name] = 0.0
    clone.model_effects_.pop(_prec_key(name, w.precision), None)  # the profile gives the whole effect
    clone.correction_ = None
    # The profiled step measures the model: its effect carries its traffic (no intensity correction).
    clone.fitted_models_ = set(m.fitted_models_) | {name}
    pred = clone.predict([q], warn=False)[0]
    # The GPU-work part of the predicted and the profiled step (their fixed parts are the model's).
    t_pred = an.work_time(w.batch_size / pred.throughput, clone.theta_, q.n_tensors)
    t_meas = max(an.work_time(w.step_time_s_ref, clone.theta_, q.n_tensors), 1e-6)
    clone.model_effects_[name] = math.log(max(t_pred, 1e-9) / t_meas)
    clone.fitted_gpus_ = set(m.fitted_gpus_) | {ref.name}
    # The profile ran the user's own stack at this precision: what it gains from mixed precision is
    # measured, not another study's (FP16_STACK_LOG).
    clone.stack_timed_ = w.precision
    return clone
