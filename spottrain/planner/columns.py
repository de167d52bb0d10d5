"""The column table: every (candidate, node count) pair, assessed exactly as a homogeneous cluster.

Column ``j = (i, n)`` is ``n`` nodes of candidate ``i``. For each column we hold the throughput
(performance model, median / low / high), the price rate, the revocation rate, and the risk
model's expected time, time at the confidence level, P(deadline) and expected cost
(:mod:`spottrain.planner.risk`). All arrays are flat numpy arrays with one entry per column, so
enumerating every homogeneous cluster of the catalog is a handful of vectorized operations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.clouds import REGROUP_S
from spottrain.perf import predict_throughput
from spottrain.perf.hardware import clouds_name
from spottrain.planner import risk
from spottrain.planner.candidates import Candidate
from spottrain.types import ClusterGroup, ClusterSpec


def waited_s(delay_s, run_s):
    """The part of a replacement delay ``delay_s`` that falls inside a run of ``run_s`` seconds, for
    a revocation at a uniform time of the run: ``E[min(delay, rest)]`` with the rest uniform on
    ``[0, run]``, ``d - d^2 / (2 run)`` (``run / 2`` once the delay outlasts the run). Survivors
    that train on at a reduced rate lose nothing once the run is over: 16 AWS T4 nodes waiting
    51 minutes for a replacement lose at most a few minutes' share of a 10-minute run."""
    d = np.asarray(delay_s, float)
    run = np.maximum(np.asarray(run_s, float), 1e-9)
    return np.where(d <= run, d - d * d / (2.0 * run), run / 2.0)


def revocation_stall_s(rev, part_nodes, total_nodes, lost_single=None, lost_outage=None, *, sync=True,
                       run_s=None):
    """Mean stall (s) of one revocation of a spot part of ``part_nodes`` nodes (revocation model
    ``rev``, :func:`risk.revocation`) in a group of ``total_nodes`` nodes.

    Synchronous training: a single revocation re-forms the group twice, without the lost node and
    with its replacement (:data:`REGROUP_S` each, as the simulator charges); an outage that takes the
    part's every node at once (a share ``rev.outage_share`` of the market's revocations) re-forms it
    twice in all, shared by its ``part_nodes`` revocations. Asynchronous parameter-server training
    re-forms nothing: a worker leaves and joins on its own, and only the loss of the chief worker
    (a revocation takes it with probability ``1 / total_nodes``, outages included) restarts the job
    (two re-forms' time, the simulator's restart before its checkpoint read).

    Meanwhile the survivors train at the throughput of the nodes left, for the replacement delay:
    ``lost_single`` is the share of the group's throughput lost while one node of the part is
    missing (``1 - X(N-1) / X(N)``, at least 0: a group that scales sublinearly, or workers that
    wait on their parameter servers, lose less than ``1 / N``), ``lost_outage`` the share lost
    while the whole part is (1 when it is the whole group: nobody trains). Default: throughput in
    proportion to the nodes (``1 / total_nodes`` and ``part_nodes / total_nodes``). With ``run_s``,
    a wait that others train through counts only within a run of that length (:func:`waited_s`);
    one that stops everybody (a lone node's, a whole group's outage) is waited out in full."""
    w = rev.outage_share
    part = np.asarray(part_nodes, float)
    total = np.asarray(total_nodes, float)
    single = 1.0 / total if lost_single is None else np.asarray(lost_single, float)
    outage = part / total if lost_outage is None else np.asarray(lost_outage, float)
    re_forms = (1.0 - w + w / part) if sync else 1.0 / total
    wait_single, wait_outage = _waits(rev.restart_mean_s, total, outage, run_s)
    return 2.0 * REGROUP_S * re_forms + (1.0 - w) * single * wait_single + w * outage / part * wait_outage


def stall_sd_s(rev, part_nodes, total_nodes, lost_single=None, lost_outage=None):
    """Standard deviation (s) of the stall one revocation of a spot part costs
    (:func:`revocation_stall_s`): the replacement delay's spread (:attr:`risk.Revocation.restart_sd_s`,
    heavy-tailed where capacity runs out for days) times the share of the cluster it idles, a single
    node's (``lost_single``) or, in the ``outage_share`` of revocations that take the part's whole
    group, the part's (``lost_outage`` shared by its nodes), plus the spread between the two cases.
    Counting single revocations only, 2 p3.16xlarge nodes (whose survivor trains as fast as both)
    had no spread at all, however long their group's outages."""
    w = rev.outage_share
    part = np.asarray(part_nodes, float)
    total = np.asarray(total_nodes, float)
    single = 1.0 / total if lost_single is None else np.asarray(lost_single, float)
    outage = (part / total if lost_outage is None else np.asarray(lost_outage, float)) / part
    d, sd = rev.restart_mean_s, rev.restart_sd_s
    second = ((1.0 - w) * single**2 + w * outage**2) * (sd**2 + d**2)
    mean = ((1.0 - w) * single + w * outage) * d
    return np.sqrt(np.maximum(second - mean**2, 0.0))


def _waits(wait_s, total, outage, run_s):
    """(after a single revocation, after an outage): a wait of ``wait_s`` in full where it stops
    the whole cluster (a lone node's; an outage that takes everything, ``outage`` >= 1), else only
    the part within a run of ``run_s`` seconds (:func:`waited_s`; the others train on meanwhile)."""
    through = wait_s if run_s is None else waited_s(wait_s, run_s)
    return np.where(total > 1, through, wait_s), np.where(outage < 1.0, through, wait_s)


def empty_s(rev, part_nodes, total_nodes, lost_outage=None, *, run_s=None):
    """Mean time (s) the slot of one revoked node of a spot part holds no node, and bills nothing:
    the replacement's wait for capacity (:attr:`risk.Revocation.empty_s`; its start-up is billed from
    the grant), in full where the cluster stops (a lone node; an outage that takes a part with
    nobody beside it), else only within a run of ``run_s`` seconds (:func:`waited_s`)."""
    part = np.asarray(part_nodes, float)
    total = np.asarray(total_nodes, float)
    outage = part / total if lost_outage is None else np.asarray(lost_outage, float)
    single, whole = _waits(rev.empty_s, total, outage, run_s)
    return (1.0 - rev.outage_share) * single + rev.outage_share * whole


def billed_rate(price_rate, time_mean_s, parts, free_s=None):
    """Mean $/h of a cluster over its run: ``price_rate`` (all its nodes held) less what the empty
    slots of revoked nodes do not bill; ``parts``: per spot part, ``(expected revocations, $/h of one
    node, empty_s per revocation)`` (arrays or floats). A cloud bills a spot node from its grant to its
    revocation: a job on a market with long waits for capacity (AWS: 0.9-1.9 h) pays for its nodes'
    training, not for its run's hours (the simulator's cost, bench/lost_work.py).

    With ``free_s``, at least every node over that failure-free run (launch and the work at the
    median throughput) is billed: the mixes' floor, which keeps the mix search's relaxation (every
    node over the failure-free run) a bound on every mix's cost. A node whose absence slows the
    cluster little (asynchronous workers that wait on their server, 2 p3.16xlarge nodes of a slow
    all-reduce) bills less in truth; a single kind of node, which the search prices exactly, keeps
    that."""
    time = np.asarray(time_mean_s, float)
    held = np.asarray(price_rate, float)
    idle = sum(np.asarray(r, float) * price * np.asarray(e, float) for r, price, e in parts)
    ok = np.isfinite(time) & (time > 0)
    rate = held - np.where(ok, idle / np.where(ok, time, 1.0), 0.0)
    return np.maximum(rate, 0.0) if free_s is None else billed_floor(rate, held, time, free_s)


def billed_floor(rate, held, time_mean_s, free_s):
    """``rate`` ($/h over a run of ``time_mean_s``), at least ``held`` (every node) over the failure-free
    run ``free_s``: :func:`billed_rate`'s floor of a mix."""
    time = np.asarray(time_mean_s, float)
    ok = np.isfinite(time) & (time > 0)
    held = np.asarray(held, float)
    return np.maximum(rate, np.where(ok, held * np.minimum(np.asarray(free_s, float) / np.where(ok, time, 1.0), 1.0),
                                     held))


def cluster_stop_s(rev, part_nodes, total_nodes, lost_outage=None, *, sync=True):
    """The part of :func:`revocation_stall_s` in which no node of the cluster trains, nor can be
    revoked: a lone node's whole stall; an outage that takes a group with nobody beside it (its
    replacement delay and re-form, shared by its ``part_nodes`` revocations); else nothing (the
    others train on)."""
    part = np.asarray(part_nodes, float)
    total = np.asarray(total_nodes, float)
    outage = part / total if lost_outage is None else np.asarray(lost_outage, float)
    w = rev.outage_share
    whole = w * (rev.restart_mean_s + (2.0 * REGROUP_S if sync else 0.0)) / part
    return np.where(total <= 1, revocation_stall_s(rev, part, total, 1.0, 1.0, sync=sync),
                    np.where(outage >= 1.0, whole, 0.0))


def exposure_kind(part_nodes: int, total_nodes: int, lost_outage: float | None = None) -> str:
    """How a spot part's nodes are exposed (:meth:`risk.Revocation.exposure_rate`): ``"up"`` a lone
    node, ``"group"`` a part whose outage stops the cluster, ``"slot"`` one that others outlast."""
    if total_nodes <= 1:
        return "up"
    whole = (part_nodes >= total_nodes) if lost_outage is None else lost_outage >= 1.0
    return "group" if whole else "slot"


def lost_share(without, full):
    """Share of a group's throughput ``full`` lost while it runs at ``without`` (0 to 1; 1 where
    ``full`` is 0), elementwise."""
    without, full = np.asarray(without, float), np.asarray(full, float)
    return np.where(full > 0, np.clip(1.0 - without / np.where(full > 0, full, 1.0), 0.0, 1.0), 1.0)


def lost_shares(workload: Any, groups: Sequence[tuple[str, int, int, float, str, bool]], thr: float, *,
                sync: str, ps: int) -> list[tuple[float, float]]:
    """Per spot group of a cluster (``(gpu, GPUs per node, nodes, network Gbit/s, cloud, spot)``
    each, in order), the shares of its throughput ``thr`` lost while one of the group's nodes is
    missing and while all of them are: the survivors train at the throughput of the nodes left
    (the perf model's, as the simulator's membership does; asynchronous workers that wait on their
    parameter servers lose little with one of them gone), for :func:`revocation_stall_s`."""
    out = []
    for k, (_gpu, _g, count, _net, _cloud, spot) in enumerate(groups):
        if not spot:
            continue
        shares = []
        for left in (count - 1, 0):
            rest = [(gpu, g, left if kk == k else n, net, cloud)
                    for kk, (gpu, g, n, net, cloud, _s) in enumerate(groups)]
            rest = [r for r in rest if r[2] > 0]
            x = 0.0
            if rest:
                x = throughput_mix(workload, [r[:4] for r in rest], sync=sync, ps=ps,
                                   clouds=tuple(r[4] for r in rest))[0]
            shares.append(float(lost_share(x, thr)))
        out.append((shares[0], shares[1]))
    return out


_CURVES: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]] = {}

BREAKPOINTS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256)
"""Node counts at which the performance model is queried; the planner's throughput curve is
piecewise linear between them (and exact at them). Up to 6 nodes every count is a breakpoint."""


def _breakpoints(max_nodes: int) -> np.ndarray:
    pts = [b for b in BREAKPOINTS if b < max_nodes] + [max_nodes]
    return np.array(sorted(set(pts)))


def throughput_curve(workload: Any, gpu: str, gpus_per_node: int, network_gbps: float, max_nodes: int,
                     *, sync: str = "sync", ps: int = 0,
                     cloud: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Cluster throughput (median, low, high in samples/s) and bottleneck for n = 1..max_nodes
    homogeneous nodes: the perf model at :data:`BREAKPOINTS`, linear in between. Memoized per
    (workload, node shape, cloud), since the planner asks for every candidate. ``cloud``: whose
    network the nodes cross (a cloud the perf model has no all-reduce rows of widens the interval);
    ``None`` leaves it unsaid."""
    key = (workload, gpu, gpus_per_node, round(network_gbps, 3), sync, ps, cloud)
    hit = _CURVES.get(key)
    if hit is not None and hit[0].size >= max_nodes:
        return hit[0][:max_nodes], hit[1][:max_nodes], hit[2][:max_nodes], hit[3][:max_nodes]
    m = max(max_nodes, 64)
    ns = np.arange(1, m + 1)
    bp = _breakpoints(m)
    t, l, h, b = np.empty(bp.size), np.empty(bp.size), np.empty(bp.size), []
    for k, n in enumerate(bp):
        spec = ClusterSpec(groups=(ClusterGroup(count=int(n), gpu=gpu, gpus_per_node=gpus_per_node),))
        p = predict_throughput(workload, spec, ps=ps, sync=sync, network_gbps=network_gbps, cloud=cloud)
        t[k], l[k], h[k] = p.throughput, p.low, p.high
        b.append(str(p.bottleneck))
    seg = np.searchsorted(bp, ns, side="right") - 1
    out = (np.interp(ns, bp, t), np.interp(ns, bp, l), np.interp(ns, bp, h), tuple(b[s] for s in seg))
    if len(_CURVES) > 20000:
        _CURVES.clear()
    _CURVES[key] = out
    return out[0][:max_nodes], out[1][:max_nodes], out[2][:max_nodes], out[3][:max_nodes]


def throughput_mix(workload: Any, groups: list[tuple[str, int, int, float]], *, sync: str = "sync",
                   ps: int = 0, clouds: tuple[str, ...] = ()) -> tuple[float, float, float, str]:
    """Throughput of a heterogeneous cluster [(gpu, gpus_per_node, count, network_gbps), ...];
    ``clouds``: the clouds its nodes are on (empty: not said)."""
    cloud = clouds_name(clouds)
    if len(groups) == 1:
        gpu, g, n, net = groups[0]
        thr, lo, hi, bott = throughput_curve(workload, gpu, g, net, n, sync=sync, ps=ps, cloud=cloud)
        return float(thr[-1]), float(lo[-1]), float(hi[-1]), bott[-1]
    spec = ClusterSpec(groups=tuple(ClusterGroup(count=n, gpu=gpu, gpus_per_node=g) for gpu, g, n, _ in groups))
    net = min(net for *_, net in groups)
    p = predict_throughput(workload, spec, ps=ps, sync=sync, network_gbps=net, cloud=cloud)
    return float(p.throughput), float(p.low), float(p.high), str(p.bottleneck)


def cluster_revocations(parts: Sequence[tuple[int, float, Any]], total_nodes: int,
                        lost: Sequence[tuple[float, float]] | None = None, *,
                        sync: bool = True, run_s: float | None = None) -> tuple[float, float, float]:
    """(revocation rate /s, mean stall s, stall sd s) of a cluster of ``total_nodes`` nodes from its
    spot parts ``(nodes, revocation rate of the part, its revocation model from risk.revocation)``.

    A lost node stalls the group :func:`revocation_stall_s`, with ``lost`` (per part: the shares
    of throughput lost without one of its nodes and without all of them; default in proportion
    to the nodes; ``sync``: synchronous training, else asynchronous PS; ``run_s``: the run the
    waits fall in); the stall's moments are the rate-weighted mix of the parts'. No spot part:
    rate 0, the stall of a re-form only.
    """
    rate = smean = s2 = 0.0
    for k, (n, r, rev) in enumerate(parts):
        single, outage = lost[k] if lost is not None else (None, None)
        rate += r
        smean += r * float(revocation_stall_s(rev, n, total_nodes, single, outage, sync=sync, run_s=run_s))
        s2 += r * float(stall_sd_s(rev, n, total_nodes, single, outage)) ** 2
    if rate > 0:
        return rate, smean / rate, (s2 / rate) ** 0.5
    return rate, REGROUP_S, 0.0


def assess_cluster(spot: Sequence[tuple[int, Any]], total_nodes: int, work, thr: float, low: float, high: float,
                   ckpt_s: float, *, state_loss: float | None = None,
                   lost: Sequence[tuple[float, float]] | None = None, sync: bool = True, **kwargs) -> Any:
    """:func:`risk.assess` of one cluster of ``total_nodes`` nodes whose spot parts are ``spot``
    (``(nodes, risk.Revocation)``), each part revoked at its rate over the run the model predicts
    (:func:`risk.settle`), the model lost only with every node (:func:`risk.state_loss`; or with
    the ``state_loss`` given: 1 for a checkpoint-restart runtime; asynchronous PS training, ``sync``
    False, loses it with the chief worker); ``lost``: per part, the shares of throughput lost
    without one of its nodes and without all of them (:func:`cluster_revocations`); ``kwargs``:
    ``assess``'s deadline, confidence and work spread."""
    q = risk.state_loss(spot, total_nodes, sync=sync) if state_loss is None else state_loss
    notice = min((rev.notice_s for _, rev in spot), default=math.inf)

    outages = [None] * len(spot) if lost is None else [o for _s, o in lost]
    kinds = [exposure_kind(n, total_nodes, o) for (n, _rev), o in zip(spot, outages)]
    stops = [float(cluster_stop_s(rev, n, total_nodes, o, sync=sync)) for (n, rev), o in zip(spot, outages)]
    trained = {"share": 1.0}

    def at(run):
        parts = [(n, n * float(rev.exposure_rate(run, kind)[0]), rev) for (n, rev), kind in zip(spot, kinds)]
        rate, smean, sd = cluster_revocations(parts, total_nodes, lost, sync=sync, run_s=float(np.ravel(run)[0]))
        if rate > 0:  # nothing is exposed while a stop halts the whole cluster
            stop = sum(r * st for (_n, r, _rev), st in zip(parts, stops)) / rate
            trained["share"] = 1.0 / (1.0 + rate * stop)
            rate = float(risk.wall_rate(rate, stop))
        return risk.assess(work, np.array([thr]), np.array([low]), np.array([high]), np.array([rate]),
                           np.array([smean]), np.array([sd]), ckpt_s, state_loss=q, notice_s=notice, **kwargs)

    return risk.settle(at, work, np.array([thr]), trained=lambda: trained["share"])


@dataclass(frozen=True, kw_only=True)
class Job:
    """What is being planned: the workload, its size and how it is trained."""

    workload: Any
    samples: float
    sync: str = "sync"
    ps: int = 0
    checkpoint_s: float = 10.0
    deadline_s: float | None = None
    confidence: float = 0.95
    work_rule: Any = None
    """A :class:`spottrain.planner.work.TargetLoss` when the work depends on the cluster; else
    every cluster trains ``samples``."""

    def work(self, nodes, gpus) -> np.ndarray:
        """Samples a cluster of ``nodes`` nodes and ``gpus`` GPUs must train (arrays)."""
        if self.work_rule is None:
            return np.full(np.shape(np.atleast_1d(nodes)), self.samples)
        return self.work_rule.samples(nodes, gpus, self.sync)

    @property
    def fallback_terms(self) -> dict[str, float]:
        """What :func:`on_demand_fallback` needs of the job besides the runs."""
        return {"deadline_s": self.deadline_s, "confidence": self.confidence, "checkpoint_s": self.checkpoint_s}

    def work_log_sd(self, nodes, gpus) -> np.ndarray:
        """Log-sd of that work: 0 for a fixed sample count, the convergence model's for a target loss."""
        if self.work_rule is None:
            return np.zeros(np.shape(np.atleast_1d(nodes)))
        return self.work_rule.log_sd(nodes, gpus, self.sync)


@dataclass(frozen=True, kw_only=True)
class Columns:
    cand: np.ndarray
    """Candidate index of each column."""
    n: np.ndarray
    work: np.ndarray
    """Samples the column must train (depends on the cluster with a target loss)."""
    thr: np.ndarray
    low: np.ndarray
    high: np.ndarray
    bottleneck: np.ndarray
    price_rate: np.ndarray
    """$/h of the whole column with every node held (what the solver's bounds price)."""
    billed_rate: np.ndarray
    """Mean $/h the column is billed over its run: :attr:`price_rate` less what revoked nodes' empty
    slots do not bill (:func:`billed_rate`); the expected cost is this rate x the expected time."""
    rate: np.ndarray
    """Revocations per second of the column (0 for on-demand)."""
    stall_mean_s: np.ndarray
    stall_sd_s: np.ndarray
    time_mean_s: np.ndarray
    time_q_s: np.ndarray
    time_p95_s: np.ndarray
    p_deadline: np.ndarray | None
    interval_s: np.ndarray
    revocations: np.ndarray
    p_on_demand: np.ndarray
    """Probability that the deadline policy moves the run to on-demand nodes (0 without a deadline
    or a spot node): the times, costs, revocations and P(deadline) above are the run's with it."""

    @property
    def size(self) -> int:
        return int(self.cand.size)

    @property
    def cost_usd(self) -> np.ndarray:
        return self.billed_rate / 3600.0 * self.time_mean_s

    @property
    def cost_p95_usd(self) -> np.ndarray:
        return self.billed_rate / 3600.0 * self.time_p95_s


def node_counts(cands: Sequence[Candidate], max_nodes: int, quotas: dict[str, int] | None) -> np.ndarray:
    limits = np.full(len(cands), max_nodes, dtype=int)
    if quotas:
        q = {k.lower(): v for k, v in quotas.items()}
        for i, c in enumerate(cands):
            limits[i] = min(limits[i], q.get(c.instance_type.lower(), max_nodes), q.get(c.gpu.lower(), max_nodes))
    return limits


def build_columns(job: Job, cands: Sequence[Candidate], limits: np.ndarray) -> Columns:
    """Assess every (candidate, 1..limit) column.

    Throughput and risk depend on the node kind (cloud, GPU, GPUs per node, network, market) and
    the count, not on the region or zone, so each distinct kind is assessed once and shared.
    """
    keys: dict[tuple, int] = {}
    kind_of = np.empty(len(cands), dtype=int)
    for i, c in enumerate(cands):
        kind_of[i] = keys.setdefault((c.cloud, c.gpu, c.gpus_per_node, c.network_gbps, c.spot), len(keys))
    limits = np.asarray(limits, dtype=int)
    kind_m = np.zeros(len(keys), dtype=int)
    if len(cands):
        np.maximum.at(kind_m, kind_of, limits)
    sync = job.sync == "sync"
    thr, lo, hi, bott, revs, ssd, kn, work, work_sd, lose, notice, stops, singles = ([] for _ in range(13))
    for (cloud, gpu, g, net, spot), k in keys.items():
        m = int(kind_m[k])
        if m < 1:
            continue
        t, l, h, b = throughput_curve(job.workload, gpu, g, net, m, sync=job.sync, ps=job.ps, cloud=cloud)
        n = np.arange(1, m + 1)
        thr.append(t[:m])
        lo.append(l[:m])
        hi.append(h[:m])
        bott.extend(b[:m])
        kn.append(n)
        work.append(job.work(n, n * g))
        work_sd.append(job.work_log_sd(n, n * g))
        if spot:
            rev = risk.revocation(cloud, gpu)
            revs.append(rev)
            # the survivors of a single revocation train at n - 1 nodes' throughput
            single = np.ones(m)
            single[1:] = lost_share(t[:m - 1], t[1:m])
            singles.append(single)
            stops.append(cluster_stop_s(rev, n, n, 1.0, sync=sync))
            ssd.append(stall_sd_s(rev, n, n, single, 1.0))
            lose.append(rev.model_loss(n) if sync else 1.0 / n)  # risk.state_loss of n nodes of one market
            notice.append(np.full(m, rev.notice_s))
        else:
            revs.append(None)
            stops.append(None)
            singles.append(None)
            ssd.append(np.zeros(m))
            lose.append(np.zeros(m))
            notice.append(np.full(m, math.inf))
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
    offset = np.concatenate([[0], np.cumsum(np.maximum(kind_m, 0))])
    thr_k, n_k = cat(thr), cat(kn)
    seg = np.cumsum([0] + [len(x) for x in kn])

    def rate_at(horizon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Revocations per second of every column's run, for runs that train ``horizon`` seconds,
        and the share of the run spent training (a lone node, and a group's outage, halt it)."""
        out, share = np.zeros(len(horizon)), np.ones(len(horizon))
        for rev, stop, a, b in zip(revs, stops, seg[:-1], seg[1:]):
            if rev is not None:  # each kind's columns are 1..m nodes: the first a lone node
                x = n_k[a:b] * rev.exposure_rate(horizon[a:b], "group")
                x[0] = rev.exposure_rate(horizon[a], "up")
                out[a:b] = risk.wall_rate(x, stop)
                share[a:b] = 1.0 / (1.0 + x * stop)
        return out, share

    def stall_at(horizon: np.ndarray) -> np.ndarray:
        """Every column's mean stall per revocation, the waits that others train through counted
        within runs that train ``horizon`` seconds (:func:`waited_s`)."""
        out = np.full(len(horizon), REGROUP_S)  # on demand: a re-form only
        for rev, single, a, b in zip(revs, singles, seg[:-1], seg[1:]):
            if rev is not None:
                out[a:b] = revocation_stall_s(rev, n_k[a:b], n_k[a:b], single, 1.0, sync=sync, run_s=horizon[a:b])
        return out

    a, rate_k, stall_k = risk.assess_settled(rate_at, cat(work), thr_k, cat(lo), cat(hi), stall_at, cat(ssd),
                                    job.checkpoint_s, deadline_s=job.deadline_s, confidence=job.confidence,
                                    work_log_sd=cat(work_sd), state_loss=cat(lose), notice_s=cat(notice))
    # the slots revoked nodes leave empty bill nothing: per kind, the empty time of a revocation
    empty_k = np.zeros(len(thr_k))
    spot_k = np.zeros(len(thr_k), bool)
    for rev, a_, b_ in zip(revs, seg[:-1], seg[1:]):
        if rev is not None:
            empty_k[a_:b_] = empty_s(rev, n_k[a_:b_], n_k[a_:b_], 1.0, run_s=a.time_mean_s[a_:b_])
            spot_k[a_:b_] = True
    fb = (on_demand_fallback(a, quantiles=False, **job.fallback_terms)
          if job.deadline_s is not None and spot_k.any() else None)
    pos = [offset[kind_of[i]] + np.arange(int(limits[i])) for i in range(len(cands)) if limits[i] >= 1]
    cand = [np.full(int(limits[i]), i) for i in range(len(cands)) if limits[i] >= 1]
    g = cat(pos).astype(int)
    cand_a = cat(cand).astype(int)
    n_a = cat(kn).astype(int)[g] if g.size else np.zeros(0, int)
    price = np.array([c.price_usd_per_hour for c in cands])
    bott_a = np.array(bott, dtype=object)
    work_a = cat(work)[g] if g.size else np.zeros(0)
    node_price = price[cand_a] if g.size else np.zeros(0)
    held = n_a * node_price
    billed = billed_rate(held, a.time_mean_s[g], [(a.revocations[g], node_price, empty_k[g])])
    times, p_deadline, revocations = (a.time_mean_s, a.time_q_s, a.time_p95_s), a.p_deadline, a.revocations
    p_on_demand = np.zeros(g.size)
    if fb is not None:
        # the deadline policy's fallback: the spot part billed as before, then the same nodes on demand
        # (rows it does not apply to, on-demand ones among them, keep their figures in fb)
        od_rate = n_a * np.array([c.on_demand_price_usd_per_hour for c in cands])[cand_a]
        billed = fallback_rate(billed, od_rate, fb, g)
        times = (fb.time_mean_s, fb.time_q_s, fb.time_p95_s)
        p_deadline, revocations, p_on_demand = fb.p_deadline, fb.revocations, fb.p_switch[g]
    return Columns(cand=cand_a, n=n_a, work=work_a, thr=thr_k[g], low=cat(lo)[g], high=cat(hi)[g], bottleneck=bott_a[g],
                   price_rate=held, billed_rate=billed, rate=rate_k[g],
                   stall_mean_s=stall_k[g], stall_sd_s=cat(ssd)[g], time_mean_s=times[0][g],
                   time_q_s=times[1][g], time_p95_s=times[2][g],
                   p_deadline=None if p_deadline is None else p_deadline[g], interval_s=a.interval_s[g],
                   revocations=revocations[g], p_on_demand=p_on_demand)


def on_demand_fallback(a, *, deadline_s: float, confidence: float, checkpoint_s: float,
                       quantiles: bool = True) -> "risk.Fallback":
    """:func:`risk.fallback` of spot runs ``a`` (:func:`risk.assess`) under a deadline: the deadline
    policy moves a run that falls behind to the same nodes on demand, which boot, restore the last
    checkpoint (``checkpoint_s``) and train the rest at the same throughput; ``quantiles``: see
    :func:`risk.fallback`."""
    start = risk.LAUNCH_S + checkpoint_s  # the on-demand nodes boot, set up and restore
    return risk.fallback(a, deadline_s=deadline_s, confidence=confidence,
                         switch_s=start + risk.JOB_SETUP_S + checkpoint_s, start_s=start, quantiles=quantiles)


def fallback_rate(billed, od_rate, fb, idx=slice(None)):
    """Mean $/h of a run under the on-demand fallback ``fb`` (:func:`on_demand_fallback`): the spot
    part at its ``billed`` rate over the time on spot, the ``od_rate`` of the same nodes on demand
    over the time on them (entries ``idx`` of ``fb``)."""
    time = fb.time_mean_s[idx]
    ok = np.isfinite(time) & (time > 0)
    cost = np.asarray(billed, float) * fb.spot_s[idx] + np.asarray(od_rate, float) * fb.on_demand_s[idx]
    return np.where(ok, cost / np.where(ok, time, 1.0), billed)
