"""Expected time, cost and the probability of meeting a deadline, for many clusters at once.

The model (vectorized over numpy arrays, one entry per candidate cluster):

- Compute time. ``T0 = W / X`` for ``W`` samples at the performance model's median throughput
  ``X``. The perf model's interval ``[low, high]`` is read as a 90% interval of a lognormal, so
  ``sigma = ln(high / low) / (2 * 1.645)`` and ``T0 = W / X * exp(sigma * Z)``, ``Z ~ N(0, 1)``.
  With a target loss the work ``W`` is a prediction too (the convergence model's steps): its
  log-sd ``sigma_W``, independent of the throughput's, adds in quadrature,
  ``sigma = sqrt(sigma_X^2 + sigma_W^2)``.
- Checkpoints. Cost ``c`` seconds per checkpoint (size / write bandwidth), interval ``tau`` (see
  below) for the cluster revocation rate ``Lambda`` = sum over spot nodes of ``M(T) / T``: the
  renewal function of the node's fitted lifetime law over the run ``T`` (a fresh node at the
  start, each replacement fresh after the replacement delay; :meth:`Revocation.rate_over`),
  which is 1 / mean lifetime only for a memoryless law. ``T`` is the time the run the model
  predicts spends training (:func:`settle`): nothing is revoked while nothing trains, so a stop
  that halts the whole cluster (a lone node's revocation, a group's outage) adds its wait without
  exposure (:meth:`Revocation.exposure_rate`, :func:`wall_rate`). Overhead factor ``1 + c / tau``.
- Revocations (CM-DARE, spotDNN: a sync job stalls for every lost node). Revocations arrive at
  rate ``Lambda``; each costs a stall ``R`` given by the caller: re-forming the group twice, without
  the lost node and with its replacement (:data:`spottrain.clouds.REGROUP_S`, spotDNN's measured
  29.6 s dip, each), plus the replacement delay (transience models) times the lost node's share
  of the cluster throughput, since the survivors keep training until the replacement joins. The
  survivors also keep the model (spottrain's runtime holds it in their memory and hands it to the
  joiner), so a revocation restores a checkpoint (``c``) and loses work only when it leaves no
  node: with probability ``q``
  (:func:`state_loss`: 1 for a lone node, 0 beside an on-demand node, else the share of outages
  that take a market's whole group at once, measured on traces, plus the chance that a single
  revocation finds every other node's slot empty, awaiting its replacement). Such a loss costs
  the work since the last checkpoint (uniform on ``[0, tau]``), but no more than ``notice - c``
  when the checkpoint fits in the notice: the policy checkpoints on the preemption notice, and
  only the work after that checkpoint is lost. The interval ``tau`` is the Young/Daly optimum for those losses, ``sqrt(2 c / (q
  Lambda))``, held at :data:`CHECKPOINT_MAX_S` at most; it ignores the notice's bound, a hedge
  against a loss that comes without one. With ``rho = Lambda * E[L]``, a renewal-reward argument
  gives the expected wall time ``T = A T0`` with ``A = (1 + c / tau) / (1 - rho)``; ``rho >= 1``
  means it never finishes.
- Variability. Given ``T0``, the revocation part is compound Poisson with variance
  ``k T0``, ``k = A Lambda E[L^2] / (1 - rho)^2`` (normal limit). Unconditionally
  ``E[T] = A E[T0]`` and ``Var[T] = A^2 Var[T0] + k E[T0]`` (law of total variance, lognormal
  moments of ``T0``). ``T`` is then matched to a lognormal with these two moments, which gives
  ``P(T <= D)`` and every quantile in closed form -- and consistently: ``P(T <= D) >= c`` exactly
  when the c-quantile of ``T`` is ``<= D``, which the optimizer's linear deadline row relies on.
- Launch. Every plan first pays a fixed ``LAUNCH_S``: VM start-up
  (:data:`spottrain.clouds.VM_STARTUP_S`: CM-DARE's measured provisioning + staging + booting of
  GCE GPU VMs, mean 87 s) plus job set-up (environment, data, first restore). It is billed like the rest, so it keeps the planner from buying hundreds of
  GPUs for a two-minute job. ``T = LAUNCH_S + T'``: means and quantiles shift by it, and
  ``P(T <= D) = P(T' <= D - LAUNCH_S)``.
- The deadline policy's fallback (:func:`fallback`). A spot plan with a deadline runs under
  ``deadline-margin``, which moves the job to the same nodes on demand once the slack is gone, so
  its time, cost and P(deadline) are that run's: the run switches when its stalls exceed what the
  deadline can absorb, and the deadline is missed only when the failure-free run itself does not
  fit (the throughput's uncertainty). A replacement delay's spread is its observations' (AWS
  V100: 7.9 h for a 1.9 h mean; a few waits last days), and a revocation's stall spread counts its
  group's outages (:func:`spottrain.planner.columns.stall_sd_s`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from spottrain.clouds import PREEMPTION_NOTICE_S, VM_STARTUP_S
from spottrain.transience import group_outage, lifetime_model, replacement_delay, young_daly_interval_s
from spottrain.transience import optimal_checkpoint_interval_s as _optimal_interval
from spottrain.transience.renewal import renewal_curve, revocation_curve

_ERFC = np.frompyfunc(math.erfc, 1, 1)


def normal_cdf(z: np.ndarray | float) -> np.ndarray:
    """The standard normal CDF, elementwise, from the standard library's erfc (to 1e-16 of
    ``scipy.special.ndtr``; ~0.1 us per element, where importing ``scipy.special`` would cost
    the planning path ~0.15 s)."""
    return 0.5 * np.asarray(_ERFC(-np.asarray(z, float) / math.sqrt(2.0)), dtype=float)


Z90 = 1.6448536269514722
Z95 = Z90

CHECKPOINT_WRITE_GBS = 0.5
"""Checkpoint write bandwidth to durable storage (GB/s): a cloud persistent disk or object store."""
CHECKPOINT_FIXED_S = 2.0
JOB_SETUP_S = 60.0
"""Job set-up after the VMs boot (environment, data, first restore): one minute."""
LAUNCH_S = VM_STARTUP_S + JOB_SETUP_S
"""Fixed start of every plan (s): VM start-up (:data:`spottrain.clouds.VM_STARTUP_S`) + job set-up."""
CHECKPOINT_MAX_S = 3600.0
"""Longest checkpoint interval of a plan (s): however seldom the model is lost, a job that checkpoints
hourly loses at most an hour to a failure no model foresees (on-demand plans use it too)."""
ANCHOR_SNAPSHOT_GBS = 5.0
"""DeepVM-style asynchronous multi-level checkpointing to an on-demand anchor: the training stall
is only the snapshot to host memory / the anchor, persisted in the background."""


@dataclass(frozen=True, kw_only=True)
class Revocation:
    """What the risk model needs to know about losing one spot node of a kind."""

    rate_per_s: float
    """1 / mean lifetime: revocations per second of a node that is always up (a slot, which stands
    empty through each replacement delay, is revoked at :attr:`long_run_rate` in the long run)."""
    restart_mean_s: float
    restart_sd_s: float
    source: str
    renewals: tuple[np.ndarray, np.ndarray]
    """(t, M(t)): expected revocations of one node slot within t seconds of the start (the renewal
    function of the fitted law, each replacement starting a fresh life after the replacement delay)."""
    notice_s: float = math.inf
    """Warning before a revocation (the cloud's preemption notice); inf: none is counted on."""
    outage_share: float = 0.0
    """Share of the node's revocations that take every node of its group at once (a market-wide
    drop: :func:`spottrain.transience.group_outage`); the rest strike nodes independently."""
    group_renewals: tuple[np.ndarray, np.ndarray]
    """(t, M(t)) over the time a group of this market's nodes alone trains: a slot stands empty for
    the replacement delay after a single revocation (the others train on), not after an outage
    (the whole group waits, and nothing trains or is revoked): :func:`group_renewals`, whose mean
    gap is a life plus ``(1 - outage_share)`` x the replacement delay (:meth:`exposure_rate`)."""
    up_renewals: tuple[np.ndarray, np.ndarray]
    """(t, M(t)) over the time a lone node trains: the lifetimes' own renewal function (no delay:
    its job, and its exposure, stop while its slot stands empty)."""
    wait_mean_s: float | None = None
    """The part of the replacement delay with no node yet (the wait for capacity; the start-up after
    it is billed, from the grant); None: the whole delay."""

    @property
    def empty_s(self) -> float:
        """Mean time a revoked node's slot holds no node, and bills nothing, before its replacement."""
        return self.restart_mean_s if self.wait_mean_s is None else min(self.wait_mean_s, self.restart_mean_s)

    def exposure_rate(self, horizon_s, kind: str = "slot") -> np.ndarray:
        """Revocations per node and second of the time a cluster trains, over ``horizon_s`` seconds
        of it: ``"slot"`` a node beside others that train on whatever it loses (the slot's
        wall-clock renewals, :meth:`rate_over`), ``"group"`` a node of a group of this market alone
        (its outages stop the group), ``"up"`` a lone node. :func:`wall_rate` turns it into
        revocations per second of the run, whose stops expose nobody."""
        if kind == "slot":
            return self.rate_over(horizon_s)
        curve = self.up_renewals if kind == "up" else self.group_renewals
        delay = 0.0 if kind == "up" else (1.0 - self.outage_share) * self.restart_mean_s
        return _per_second(curve, 1.0 / (1.0 / max(self.rate_per_s, 1e-30) + delay), horizon_s)

    def rate_over(self, horizon_s) -> np.ndarray:
        """Revocations per node-second over a run of ``horizon_s`` seconds: M(T) / T.

        Not 1 / mean lifetime: the fitted laws lose young nodes faster than old ones (Weibull shapes
        below 1: infant mortality), and every replacement is young again, so a 20-minute run on
        azure T4 spot sees ~4x the revocations its 7.2 h mean lifetime implies (0.18 against 0.05 a
        node), a 16 h run about as many. Beyond the solved span, M grows at the long-run rate
        1 / (mean lifetime + replacement delay)."""
        return _per_second(self.renewals, self.long_run_rate, horizon_s)

    @property
    def long_run_rate(self) -> float:
        """Revocations per second of a node slot in the long run: 1 / (mean lifetime + replacement delay)."""
        return 1.0 / (1.0 / max(self.rate_per_s, 1e-30) + self.restart_mean_s)

    @property
    def down_fraction(self) -> float:
        """Share of a long run that the node's slot stands empty, awaiting a replacement:
        delay / (mean lifetime + delay)."""
        return self.restart_mean_s * self.long_run_rate

    def model_loss(self, nodes) -> np.ndarray:
        """Share of the revocations of ``nodes`` nodes of this market alone that leave no node
        holding the model: ``w / n + (1 - w) u^(n-1)`` (an outage revokes all n and loses the model
        once; a single revocation loses it while every other slot stands empty)."""
        n = np.asarray(nodes, float)
        w = self.outage_share
        return w / n + (1.0 - w) * self.down_fraction ** (n - 1.0)

    def rate_floor(self, horizon_s) -> np.ndarray:
        """The least of :meth:`rate_over` over runs of ``horizon_s`` seconds or longer: no run that
        long is revoked at a lower rate (the planner's pruning bound)."""
        t = self.renewals[0]
        rates = np.append(self.rate_over(t), self.long_run_rate)
        tail = np.minimum.accumulate(rates[::-1])[::-1]  # min over t_j >= t_i, and beyond
        i = np.searchsorted(t, np.asarray(horizon_s, float), side="left")
        return np.minimum(tail[np.minimum(i, len(t))], self.rate_over(horizon_s))


def _per_second(curve: tuple[np.ndarray, np.ndarray], long_run: float, horizon_s) -> np.ndarray:
    """M(T) / T of a renewal curve ``(t, M(t))`` at ``horizon_s``; beyond the solved span M grows at
    ``long_run`` per second."""
    t, M = curve
    h = np.maximum(np.asarray(horizon_s, float), t[1])
    beyond = M[-1] + (h - t[-1]) * long_run
    return np.where(h <= t[-1], np.interp(h, t, M), beyond) / h


@lru_cache(maxsize=1024)
def revocation(cloud: str, gpu: str, zone: str | None = None) -> Revocation:
    """Revocation rate and replacement delay of one spot node (the transience models, which fall
    back to a pooled estimate and say so when this (cloud, gpu, zone) has no data of its own)."""
    model = lifetime_model(cloud, gpu, zone)
    delay = replacement_delay(cloud, gpu)
    mean_d = float(delay.mean_s)
    sd = delay.sd_s
    src = f"{model.name} lifetime fit" + (f" (pooled from {model.pooled_from})" if model.pooled_from else "")
    return revocation_of(model, restart_mean_s=mean_d, restart_sd_s=sd, source=src,
                         notice_s=PREEMPTION_NOTICE_S.get(cloud, math.inf),
                         outage_share=group_outage(cloud, gpu).share,
                         wait_mean_s=max(mean_d - float(delay.mean_startup_s), 0.0))


def revocation_of(model, *, restart_mean_s: float, restart_sd_s: float, source: str,
                  notice_s: float = math.inf, outage_share: float = 0.0, wait_mean_s: float | None = None) -> Revocation:
    """The :class:`Revocation` of a node whose lifetime follows ``model`` (a fitted lifetime law),
    replaced after ``restart_mean_s`` on average."""
    mean_d = float(restart_mean_s)
    mean = float(model.mean_lifetime_s())
    # The slot's renewals over wall-clock time, over the time its group trains (no delay after an
    # outage) and over a lone node's training (no delay at all): :meth:`Revocation.exposure_rate`.
    w = min(max(float(outage_share), 0.0), 1.0)
    slot, up = slot_renewals(model, mean, mean_d), slot_renewals(model, mean, 0.0)
    group = slot if w == 0.0 else up if w == 1.0 else group_renewals(model, mean, mean_d, w)
    return Revocation(rate_per_s=1.0 / max(mean, 1.0), restart_mean_s=mean_d, restart_sd_s=float(restart_sd_s),
                      source=source, renewals=slot, notice_s=float(notice_s), outage_share=w,
                      group_renewals=group, up_renewals=up, wait_mean_s=wait_mean_s)


def slot_renewals(model, mean_s: float, delay_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(t, M(t)): expected revocations of a node slot within t seconds, each replacement a fresh life
    ``delay_s`` after the revocation (the first node up at the start).

    Two solves of the renewal equation, ~1 ms each: fine over the first hours (short runs, where
    young nodes' hazard matters most), coarse over RENEWAL_LIVES lives (past them M grows at its
    long-run rate, which the readers extrapolate). A slot's k-th revocation comes one delay before
    its k-th renewal of a life plus a delay: revocations by t = renewals by t + delay."""
    span = min(max(RENEWAL_LIVES * (mean_s + delay_s), RENEWAL_FINE_S), RENEWAL_SPAN_S)
    fine = renewal_curve(model, RENEWAL_FINE_S + delay_s, replacement_delay_s=delay_s, grid=RENEWAL_GRID)
    coarse = renewal_curve(model, span + delay_s, replacement_delay_s=delay_s, grid=RENEWAL_GRID)
    t_f, t_c = fine[0] - delay_s, coarse[0] - delay_s
    head, keep = t_f >= 0.0, t_c > t_f[-1]
    return (np.concatenate([[0.0], t_f[head], t_c[keep]]), np.concatenate([[0.0], fine[1][head], coarse[1][keep]]))


def group_renewals(model, mean_s: float, delay_s: float, outage_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(t, M(t)) over the time a group of one market alone trains: after an outage (a share
    ``outage_share`` of the revocations) the group comes back at once in its training time, a
    young node again; after a single revocation the slot stands empty for ``delay_s``
    (:func:`spottrain.transience.renewal.revocation_curve`, fine and coarse as :func:`slot_renewals`).
    The mean delay in place of the two (the renewal function with ``(1 - w) delay``) held every
    next life back by 0.63 h on AWS V100: 4 nodes over 30 minutes 1.23 revocations, simulated 1.58."""
    delays = ((outage_share, 0.0), (1.0 - outage_share, delay_s))
    mean_gap = mean_s + (1.0 - outage_share) * delay_s
    span = min(max(RENEWAL_LIVES * mean_gap, RENEWAL_FINE_S), RENEWAL_SPAN_S)
    fine = revocation_curve(model, RENEWAL_FINE_S, delays, grid=RENEWAL_GRID)
    coarse = revocation_curve(model, span, delays, grid=RENEWAL_GRID)
    keep = coarse[0] > fine[0][-1]
    return np.concatenate([fine[0], coarse[0][keep]]), np.concatenate([fine[1], coarse[1][keep]])


def wall_rate(exposed, stop_s) -> np.ndarray:
    """Revocations per second of a run from ``exposed``, those per second of the time it trains
    (:meth:`Revocation.exposure_rate`), when each revocation stops the whole cluster for ``stop_s``
    seconds on average (a lone node's every revocation, a group's outages): ``x / (1 + x stop)``.
    Nothing is revoked while nothing trains. Read as if the run's stops exposed its nodes, a
    10-minute job of one AWS spot node (Weibull shape 0.62, 1.7 h mean wait for a replacement)
    saw its young node's high rate held over the hours the waits add, and never finished in the
    renewal-reward model; the simulator of the same laws finishes it in 0.57 h on average."""
    x = np.asarray(exposed, float)
    return x / (1.0 + x * np.asarray(stop_s, float))


def state_loss(spot, total_nodes: int, *, sync: bool = True) -> float:
    """Probability that a revocation leaves no node holding the model, for a cluster of
    ``total_nodes`` nodes whose spot parts are ``spot`` (``(nodes, Revocation)``, each part one
    market): 0 when a node is on demand, 1 for a lone spot node. Asynchronous PS training
    (``sync`` False) rolls back when the chief worker goes, any of the ``total_nodes``:
    ``1 / total_nodes`` of the spot revocations, outages included (0 without a spot node).

    A part's revocations come in two kinds (:attr:`Revocation.outage_share` w of them in outages
    that take the whole part at once, the rest one node at a time), and the model is lost when,
    besides what the revocation takes, every other node's slot stands empty awaiting its
    replacement (:attr:`Revocation.down_fraction` u; slots of other parts and independent slots
    taken as independent). For n nodes of one market: :meth:`Revocation.model_loss`.
    """
    nodes = sum(n for n, _ in spot)
    if not sync:
        return 1.0 / total_nodes if spot else 0.0
    if not spot or nodes < total_nodes:
        return 0.0
    total = sum(n * rev.long_run_rate for n, rev in spot)
    if total <= 0:
        return 0.0
    lost = 0.0
    for i, (n, rev) in enumerate(spot):
        # parts, not laws: two zones of one GPU share a Revocation but not their outages
        rest = math.prod(r.down_fraction ** k for j, (k, r) in enumerate(spot) if j != i)
        lost += n * rev.long_run_rate * float(rev.model_loss(n)) * rest
    return min(lost / total, 1.0)


def state_loss_floor(spot, nodes) -> np.ndarray:
    """A lower bound of :func:`state_loss` over clusters of ``nodes`` spot nodes drawn from the
    markets ``spot`` (Revocations), in any mix: ``u^(n-1) (1 - w (1 - 1/n))`` at the least u and
    the largest w (the planner's pruning bound)."""
    n = np.asarray(nodes, float)
    u = min(r.down_fraction for r in spot)
    w = max(r.outage_share for r in spot)
    return u ** (n - 1.0) * (1.0 - w * (1.0 - 1.0 / n))


RENEWAL_FINE_S = 6 * 3600.0
"""Span (s) of the fine solve of a node's renewal function."""
RENEWAL_LIVES = 20
"""The coarse solve spans this many lives (mean lifetime + replacement delay) ..."""
RENEWAL_SPAN_S = 8 * 86400.0
"""... and at most this long."""
RENEWAL_GRID = 200
"""Steps of each solve: within 1.3 % of a 1,000-step solve on the shipped laws, 1-2 ms a spot type."""
SETTLE_ROUNDS = 1
"""Readings of the revocation rate after the first one (at the failure-free run) in :func:`settle`."""


def settle(assess_at, work, thr, trained=None) -> "Assessment":
    """The assessment ``assess_at(horizon_s)`` of clusters whose revocation rates are read over
    ``horizon_s`` seconds of training (:meth:`Revocation.exposure_rate`), at the training the run
    it predicts holds: first at the failure-free run (:func:`horizon_s`), then, :data:`SETTLE_ROUNDS`
    times, at :func:`next_horizon_s` of what the round before predicted (revocations lengthen a run,
    and a longer run sees old nodes as well as young ones). ``trained()``: the share of the last
    reading's run spent training (stops that halt the whole cluster expose nobody; default 1)."""
    h = horizon_s(work, thr)
    for k in range(SETTLE_ROUNDS + 1):
        a = assess_at(h)
        if k < SETTLE_ROUNDS:
            h = next_horizon_s(h, a.time_mean_s * (1.0 if trained is None else trained()))
    return a


def assess_settled(rate_at, work, thr, low, high, stall_at, stall_sd_s, ckpt_s,
                   **kwargs) -> tuple["Assessment", np.ndarray, np.ndarray]:
    """:func:`assess` of clusters revoked at ``rate_at(horizon_s)`` per second over runs that train
    ``horizon_s`` seconds, read at the run it predicts (:func:`settle`); ``rate_at`` returns the
    rates and the share of the run spent training, ``stall_at(horizon_s)`` the mean stalls (the
    waits that fall inside such runs). Returns the assessment and the rates and stalls it used."""
    used = {}

    def at(h):
        rate, share = rate_at(h)
        used["rate"], used["share"], used["stall"] = np.asarray(rate, float), share, np.asarray(stall_at(h), float)
        return assess(work, thr, low, high, used["rate"], used["stall"], stall_sd_s, ckpt_s, **kwargs)

    a = settle(at, work, thr, trained=lambda: used["share"])
    return a, used["rate"], used["stall"]


def next_horizon_s(h, run_s):
    """The horizon of the next reading in :func:`settle`: the geometric mean of this reading's
    horizon and the run it predicted. A short horizon reads young nodes' high rate and predicts a long
    run, whose rate is lower: read at the predicted run alone, the readings swing about the run that
    predicts itself; halfway (in log) they close in on it (ResNet-50 on 23 spot V100 nodes: 1.6 h
    failure-free, then 4.3 h, against the 5.3 h that predicts itself)."""
    h = np.asarray(h, float)
    run_s = np.asarray(run_s, float)
    return np.where(np.isfinite(run_s) & (run_s > 0), np.sqrt(h * np.where(run_s > 0, run_s, 1.0)), h)


def horizon_s(work, thr) -> np.ndarray:
    """The failure-free run (s) over which a cluster's nodes are exposed to revocation: launch plus
    the work at the predicted throughput (where :func:`settle` first reads the rate)."""
    thr = np.asarray(thr, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        run = np.where(thr > 0, np.asarray(work, float) / np.where(thr > 0, thr, 1.0), np.inf)
    return LAUNCH_S + np.where(np.isfinite(run), run, RENEWAL_SPAN_S)


@lru_cache(maxsize=4096)
def optimal_checkpoint_interval_s(checkpoint_cost_s: float, cloud: str, gpu: str, nodes: int,
                                  rate_per_s: float) -> float:
    """Exact optimum under the fitted lifetime model (``rate_per_s`` kept for the memo key)."""
    return float(_optimal_interval(checkpoint_cost_s, lifetime_model(cloud, gpu), nodes=nodes))


def checkpoint_cost_s(gradient_bytes: float, *, anchor: bool = False) -> float:
    """Seconds a checkpoint stalls training: weights + two Adam moments (3x the gradient size)."""
    size = 3.0 * float(gradient_bytes)
    bw = ANCHOR_SNAPSHOT_GBS if anchor else CHECKPOINT_WRITE_GBS
    return CHECKPOINT_FIXED_S + size / (bw * 1e9)


def sigma_from_interval(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Log sd of the throughput for deadline risk: its slow side's (``x / low`` is Z90 sds).

    An interval reaches further below the prediction than above it where a slower network would
    expose more all-reduce than a faster one could hide (the throughput model's network reason);
    a late finish comes from that side, so it sets the spread (a symmetric interval's two sides
    agree)."""
    low = np.maximum(np.minimum(low, x), 1e-12)
    high = np.maximum(high, x)
    return np.maximum(np.log(x / low), np.log(high / low) / 2.0) / Z90


@dataclass(frozen=True, kw_only=True)
class Assessment:
    """Arrays with one entry per assessed cluster."""

    interval_s: np.ndarray
    time_mean_s: np.ndarray
    time_p95_s: np.ndarray
    time_q_s: np.ndarray
    """Time at the requested confidence (quantile); inf when it never finishes."""
    p_deadline: np.ndarray | None
    revocations: np.ndarray
    finishes: np.ndarray
    log_mu: np.ndarray
    log_sigma: np.ndarray
    lost_work_s: np.ndarray
    """Expected training lost to revocations that leave no node holding the model (s of the run's
    training, redone): revocations x :func:`state_loss` x the work one such loss costs."""
    free_s: np.ndarray | None = None
    """The failure-free run ``T0`` at the median throughput (s, after launch) ..."""
    free_log_sd: np.ndarray | None = None
    """... its log sd (the throughput's interval and the work's spread) ..."""
    stall_per_s: np.ndarray | None = None
    """... and, given ``T0``, the run's stalls (revocations, checkpoints) have mean
    ``stall_per_s x T0`` ..."""
    stall_var_per_s: np.ndarray | None = None
    """... and variance ``stall_var_per_s x T0`` (s^2): :func:`fallback` reads them ..."""
    overhead: np.ndarray | None = None
    """... and the checkpoints' share of them: the failure-free run with its checkpoints is
    ``overhead x T0`` (``1 + c / tau``)."""


def assess(
    work: float | np.ndarray,
    thr: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    rate: np.ndarray,
    stall_mean_s: np.ndarray,
    stall_sd_s: np.ndarray,
    ckpt_s: float | np.ndarray,
    *,
    deadline_s: float | None = None,
    confidence: float = 0.95,
    launch_s: float = LAUNCH_S,
    work_log_sd: float | np.ndarray = 0.0,
    state_loss: float | np.ndarray = 1.0,
    notice_s: float | np.ndarray = math.inf,
) -> Assessment:
    """Assess clusters: see the module docstring for the model. ``work`` (samples) may differ per
    cluster (a target loss; ``inf`` = never reaches it), and be uncertain (``work_log_sd``).
    ``state_loss``: the probability that a revocation leaves no node holding the model
    (:func:`state_loss`; 1 = every revocation rolls back to the last checkpoint); ``notice_s``:
    the warning before a revocation, on which the job checkpoints."""
    thr = np.asarray(thr, dtype=float)
    work = np.asarray(work, dtype=float)
    rate = np.maximum(np.asarray(rate, dtype=float), 0.0)
    sigma = np.hypot(sigma_from_interval(thr, np.asarray(low, float), np.asarray(high, float)),
                     np.asarray(work_log_sd, float))
    stall_mean_s = np.asarray(stall_mean_s, float)
    stall_sd_s = np.asarray(stall_sd_s, float)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = np.clip(np.asarray(state_loss, float), 0.0, 1.0)
        lost_rate = rate * q  # revocations that lose the model
        tau = np.where(lost_rate > 0, np.minimum(young_daly_interval_s(
            ckpt_s, 1.0 / np.where(lost_rate > 0, lost_rate, 1.0)), CHECKPOINT_MAX_S),
            np.where(rate > 0, CHECKPOINT_MAX_S, 0.0))
        overhead = np.where(rate > 0, 1.0 + ckpt_s / np.where(tau > 0, tau, 1.0), 1.0)
        r = stall_mean_s
        # Work lost when the model is: min(age of the last checkpoint, the notice's bound).
        # (a checkpoint that cannot finish within the notice bounds nothing)
        notice = np.asarray(notice_s, float)
        bound = np.where(notice > ckpt_s, notice - ckpt_s, np.inf)
        cut = bound < tau
        t_div = np.where(tau > 0, tau, 1.0)
        e1 = np.where(cut, bound - bound**2 / (2.0 * t_div), tau / 2.0)
        e2 = np.where(cut, bound**2 - 2.0 * bound**3 / (3.0 * t_div), tau**2 / 3.0)
        # L = R + I (c + U): the stall R, and with probability q (no survivor holds the model) a
        # restore c and the lost work U
        mean_l = r + q * (ckpt_s + e1)
        mean_l2 = r**2 + stall_sd_s**2 + 2.0 * r * q * (ckpt_s + e1) + q * (ckpt_s**2 + 2.0 * ckpt_s * e1 + e2)
        rho = rate * mean_l
        finishes = (rho < 1.0) & (thr > 0) & np.isfinite(work)
        work = np.where(np.isfinite(work), work, 1.0)
        one_m = np.where(finishes, 1.0 - rho, 1.0)
        a = overhead / one_m
        m0 = work / np.where(thr > 0, thr, 1.0)
        s2 = sigma**2
        e_t0 = m0 * np.exp(s2 / 2.0)
        var_t0 = m0**2 * np.exp(s2) * np.expm1(s2)
        k = a * rate * mean_l2 / one_m**2
        mean = a * e_t0
        var = a**2 * var_t0 + k * e_t0
        log_sigma = np.sqrt(np.log1p(var / mean**2))
        log_mu = np.log(mean) - log_sigma**2 / 2.0
    zq = NormalDist().inv_cdf(confidence)
    revocations = rate * mean  # over the run after launch
    mean = mean + launch_s
    time_q = np.exp(log_mu + zq * log_sigma) + launch_s
    time_p95 = np.exp(log_mu + Z95 * log_sigma) + launch_s
    p = None
    if deadline_s is not None:
        run_s = deadline_s - launch_s
        if run_s <= 0:
            p = np.zeros(thr.shape)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(log_sigma > 0, (math.log(run_s) - log_mu) / np.where(log_sigma > 0, log_sigma, 1.0),
                             np.where(log_mu <= math.log(run_s), np.inf, -np.inf))
            p = np.where(finishes, normal_cdf(z), 0.0)
    inf = np.full(thr.shape, np.inf)
    return Assessment(
        interval_s=tau,
        time_mean_s=np.where(finishes, mean, inf),
        time_p95_s=np.where(finishes, time_p95, inf),
        time_q_s=np.where(finishes, time_q, inf),
        p_deadline=p,
        revocations=np.where(finishes, revocations, inf),
        lost_work_s=np.where(finishes, revocations * q * e1, inf),
        finishes=finishes,
        log_mu=log_mu,
        log_sigma=log_sigma,
        free_s=m0,
        free_log_sd=sigma * np.ones(thr.shape),
        stall_per_s=np.where(finishes, a - 1.0, inf),
        stall_var_per_s=np.where(finishes, k, inf),
        overhead=overhead * np.ones(thr.shape),
    )


FALLBACK_NODES = 32
"""Points of the midpoint rule over the failure-free run's normal score below the switch in :func:`fallback`..."""
FALLBACK_Z = 6.0
"""...from this many standard deviations below the median."""


@dataclass(frozen=True, kw_only=True)
class Fallback:
    """A spot run under the deadline policy's on-demand fallback (:func:`fallback`), per cluster."""

    time_mean_s: np.ndarray
    time_q_s: np.ndarray
    time_p95_s: np.ndarray
    p_deadline: np.ndarray
    p_switch: np.ndarray
    """Probability that the run falls back to on-demand nodes."""
    spot_s: np.ndarray
    """Expected wall time on the spot nodes (launch included)."""
    on_demand_s: np.ndarray
    """Expected wall time on the on-demand fallback (its start-up included)."""
    revocations: np.ndarray


def _lognormal(mean, var):
    """(mu, sigma) of the lognormal with this mean and variance."""
    sig2 = np.log1p(var / np.maximum(mean, 1e-300) ** 2)
    return np.log(np.maximum(mean, 1e-300)) - sig2 / 2.0, np.sqrt(sig2)


_ERFCC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
          -0.82215223, 0.17087277)


def _normal_cdf_fast(z) -> np.ndarray:
    """The standard normal CDF in numpy alone, to a relative 1.2e-7 (erfc's Chebyshev fit of Numerical
    Recipes, ``erfcc``): :func:`fallback` reads it at a few hundred thousand points a request, where
    :func:`normal_cdf`'s exact per-element calls took half the planning time."""
    y = -np.asarray(z, float) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * np.abs(y))
    poly = np.zeros_like(t)
    for c in _ERFCC[:0:-1]:
        poly = (poly + c) * t
    erfc = t * np.exp(-y * y + _ERFCC[0] + poly)
    return 0.5 * np.where(y >= 0, erfc, 2.0 - erfc)


def _fallback_grid(free, sigma, x, stall_per_s, stall_var_per_s):
    """The failure-free run ``F`` below the switch ``x`` on a midpoint grid of its normal score (above
    it, late, :func:`_fallback_means` reads it in closed form), and the stalls' lognormal at each point:
    ``(sigma, z of x, P(F < x), weights, F, mu, sd)``, rows by points."""
    sig = np.maximum(sigma, 1e-9)
    zx = np.minimum(np.log(x / free) / sig, FALLBACK_Z)
    h = (zx + FALLBACK_Z) / FALLBACK_NODES
    zg = -FALLBACK_Z + h[:, None] * (np.arange(FALLBACK_NODES) + 0.5)
    w = np.exp(-zg**2 / 2.0) * h[:, None]
    p_free = _normal_cdf_fast(zx)
    w *= (p_free / w.sum(axis=1))[:, None]
    f = free[:, None] * np.exp(sig[:, None] * zg)
    mu, sd = _lognormal(stall_per_s[:, None] * f, stall_var_per_s[:, None] * f)
    return sig, zx, p_free, w, f, mu, np.maximum(sd, 1e-9)


def _fallback_means(free, sigma, x, start, stall_per_s, stall_var_per_s):
    """:func:`fallback`'s means over the failure-free run ``F`` (rows where the fallback applies):
    ``(time, time on spot, time on demand, P(switch), P(F < x))``, each after launch."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        sig, zx, p_free, w, f, mu, sd = _fallback_grid(free, sigma, x, stall_per_s, stall_var_per_s)
        s = x[:, None] - f
        zs = (np.log(s) - mu) / sd
        q = 1.0 - _normal_cdf_fast(zs)                                            # P(X > s): the run switches
        x_below = np.exp(mu + sd**2 / 2.0) * _normal_cdf_fast(zs - sd)            # E[X; X <= s]
        inv_above = np.exp(-mu + sd**2 / 2.0) * _normal_cdf_fast(-zs - sd)        # E[1/X; X > s]
        st = start[:, None]
        spot_run = (w * ((1.0 - q) * f + x_below + s * q + s * f * inv_above)).sum(axis=1)
        # late (F >= x): the policy switches at once, and the on-demand nodes train it all
        late_f = free * np.exp(sig**2 / 2.0) * _normal_cdf_fast(sig - zx)         # E[F; F >= x]
        on_demand = (w * (q * (st + f) - f * s * inv_above)).sum(axis=1) + (1.0 - p_free) * start + late_f
        time = (w * ((1.0 - q) * f + x_below + q * (x[:, None] + st))).sum(axis=1) + (1.0 - p_free) * start + late_f
        p_switch = np.clip((w * q).sum(axis=1) + 1.0 - p_free, 0.0, 1.0)
    return time, spot_run, on_demand, p_switch, np.clip(p_free, 0.0, 1.0)


FALLBACK_BISECTIONS = 20
"""Bisections (in log time) of :func:`_fallback_quantiles`: 2^-20 of the span between F's low end and the switch."""


def _fallback_quantiles(free, sigma, x, start, stall_per_s, stall_var_per_s, probs):
    """Quantiles ``probs`` of :func:`fallback`'s run time (after launch): of ``F + X`` while it stays
    below the switch ``x``, ``x + start`` beyond (the runs that switch end there). Read off the same
    split as the means: a lognormal of the whole run, matched to its mean and variance, put the p95
    of 2 p5en.48xlarge nodes over 1.6 h of training at 7.5 h, where the simulator's is 2.9 h: the
    spread is the stalls' (AWS's waits for capacity), and most runs have none."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        sig, _zx, _p, w, f, mu, sd = _fallback_grid(free, sigma, x, stall_per_s, stall_var_per_s)

        def cdf(t):  # P(F + X <= t), t per (row, quantile)
            gap = t[..., None] - f[:, None, :]
            z = (np.log(np.maximum(gap, 1e-300)) - mu[:, None, :]) / sd[:, None, :]
            return (w[:, None, :] * np.where(gap > 0, _normal_cdf_fast(z), 0.0)).sum(axis=-1)

        # every quantile bisected at once (rows by quantiles): one pass of the grid per bisection
        p = np.asarray(probs, float)[None, :]
        at_switch = cdf(x[:, None])
        lo, hi = np.log(np.maximum(free * np.exp(-FALLBACK_Z * sig), 1e-3))[:, None], np.log(x)[:, None]
        for _ in range(FALLBACK_BISECTIONS):
            mid = (lo + hi) / 2.0
            below = cdf(np.exp(mid)) < p
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out = np.where(at_switch >= p, np.exp(hi), (x + start)[:, None])
    return list(out.T)


def fallback(a: Assessment, *, deadline_s: float, confidence: float, switch_s, start_s,
             launch_s: float = LAUNCH_S, quantiles: bool = True) -> Fallback:
    """A spot run ``a`` (:func:`assess`, spot alone) under the deadline policy
    (:func:`spottrain.policies.deadline_margin`), which moves the job to the same nodes on demand once
    the time left to the deadline, brought forward by its margin, only just holds the rest of the work
    on them and ``switch_s`` (their start-up and restarts); ``start_s``: what a switch costs before
    the on-demand nodes train.

    The spot run is ``T = F + X``: the failure-free run ``F`` (lognormal: ``Assessment.free_s``,
    ``free_log_sd``) and the stalls ``X`` that
    revocations and checkpoints add, lognormal given ``F`` with :func:`assess`'s mean and variance
    (``Assessment.stall_per_s``, ``stall_var_per_s``: both in proportion to ``F``; ``F`` integrated on
    :data:`FALLBACK_NODES` points below ``x``, in closed form above it). The stalls, not the
    whole run, carry the skew: most runs lose a little, a few lose an outage's hours. The run can
    absorb stalls up to ``s = x - F``, with ``x = D' - switch_s`` (``D'`` the policy's deadline after
    launch): the policy switches exactly when ``X > s`` (progress taken as uniform over the spot
    run), after ``t* = s T / X`` on spot, leaving ``F s / X`` of training to the on-demand nodes, and
    the run ends at ``x + start_s``. Means (time, time on spot and on demand) are closed-form given
    ``F``. Where ``F >= x`` even the on-demand nodes from the start would be late: the policy
    switches at once and the deadline is missed.

    The deadline is met when ``F < x`` (or the spot run alone makes it, :func:`assess`'s P): only the
    performance model's uncertainty can make the fallback late. Quantiles are those of the same split
    (:func:`_fallback_quantiles`); with ``quantiles`` False (the solver's columns, where bisecting
    every row would triple a request's time) the spot run's lognormal cut at the switch, an upper
    side. Clusters whose own fallback cannot meet the policy's deadline at the median
    throughput, or whose spot run never finishes, keep the spot run's figures."""
    from spottrain.policies import deadline_margin_s  # the policy's own margin

    free, sigma = a.free_s, a.free_log_sd
    start = np.asarray(start_s, float) * np.ones_like(free)
    x = (deadline_s - deadline_margin_s(deadline_s) - launch_s) - np.asarray(switch_s, float) * np.ones_like(free)
    run_mean = a.time_mean_s - launch_s
    use = a.finishes & (x > free * a.overhead) & np.isfinite(run_mean) & (a.stall_per_s + 1.0 > a.overhead)
    time, spot_run, on_demand, p_switch, p_free, tq, t95 = (np.zeros(free.shape) for _ in range(7))
    k = np.flatnonzero(use)
    if k.size:
        # the run as the policy and the on-demand nodes see it: checkpoints at the plan's interval
        # included (the policy reads the throughput net of them), revocations' stalls apart
        ov = a.overhead[k]
        rows = (free[k] * ov, sigma[k], x[k], start[k], (a.stall_per_s[k] + 1.0 - ov) / ov, a.stall_var_per_s[k] / ov)
        time[k], spot_run[k], on_demand[k], p_switch[k], p_free[k] = _fallback_means(*rows)
        if quantiles:
            tq[k], t95[k] = _fallback_quantiles(*rows, (confidence, 0.95))
        else:
            spot_q = (np.exp(a.log_mu[k] + z * a.log_sigma[k]) for z in (NormalDist().inv_cdf(confidence), Z95))
            tq[k], t95[k] = (np.where(t <= x[k], t, x[k] + start[k]) for t in spot_q)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        share = np.where(run_mean > 0, spot_run / np.where(run_mean > 0, run_mean, 1.0), 1.0)
        revocations = np.where(use, a.revocations * share, a.revocations)
    p_spot = np.zeros(free.shape) if a.p_deadline is None else a.p_deadline
    return Fallback(
        time_mean_s=np.where(use, launch_s + time, a.time_mean_s),
        time_q_s=np.where(use, launch_s + tq, a.time_q_s),
        time_p95_s=np.where(use, launch_s + t95, a.time_p95_s),
        p_deadline=np.where(use, np.maximum(p_spot, p_free), p_spot),
        p_switch=p_switch,
        spot_s=np.where(use, launch_s + spot_run, a.time_mean_s),
        on_demand_s=np.where(use, on_demand, 0.0),
        revocations=revocations,
    )
