"""Can I get k spot servers now, and how long until a revoked one is replaced?

**Availability** P(obtain k): the time-weighted fraction of a trace during which at least k
spot instances could be launched (SkyPilot availability traces: launch attempts per zone;
16-node traces give k up to 16). Where a zone only has a 1-node trace, P(k) = P_zone(1) x
P_pooled(>= k | >= 1) from the multi-node traces of the same GPU. GCP has no launch-attempt
traces for GPUs; there the Bamboo counts of live preemptible VMs (out of the number
requested) stand in. With no trace for the query the nearest pool is used and ``pooled_from``
says so.

**Group outages**: the share of a node's revocations that come in a drop taking every node of
its group at once (the live count falling to zero), from the traces that count more than one
node of a type (:func:`group_outage`). A synchronous job whose survivors keep the model loses it
only in such a drop, or when independent revocations happen to empty the group.

**Replacement delay** = acquisition wait + VM start-up. The wait comes from traces that keep a
cluster alive (SkyPilot preemption traces, Bamboo clusters): each drop of the live count is
matched first-in-first-out to the next rise. Start-up is the sum of GCP's provisioning, staging
and boot phases measured by CM-DARE (preemptible or on-demand; K80/P100, used for every GPU).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from spottrain.transience.events import Trace
from spottrain.transience.select import _canonical
from spottrain.transience.traces import data_dir, list_traces, load_trace


# ---------------------------------------------------------------- availability
def _steps(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, counts, durations) of the step function of ``available`` events."""
    ev = [e for e in trace.events if e.event == "available" and e.value is not None]
    times = np.array([e.time_s for e in ev])
    counts = np.array([e.value for e in ev])
    dur = np.diff(np.append(times, trace.duration_s))
    return times, counts, np.maximum(dur, 0.0)


def fraction_at_least(trace: Trace, k: int) -> float:
    """Time-weighted fraction of ``trace`` with at least ``k`` instances available."""
    _, counts, dur = _steps(trace)
    total = dur.sum()
    return float(dur[counts >= k].sum() / total) if total > 0 else 0.0


@dataclass(frozen=True, kw_only=True, eq=False)
class Availability:
    """P(obtain k spot servers now) for a (cloud, GPU or instance, zone)."""

    cloud: str
    gpu: str
    zone: str | None
    traces: tuple[str, ...]
    pooled_from: str | None
    note: str

    def p_obtain(self, k: int = 1) -> float:
        """Probability that ``k`` spot servers can be obtained at a random moment."""
        if k <= 0:
            return 1.0
        return _p_obtain(self.traces, self.cloud, self.gpu, int(k))


@functools.cache
def _p_obtain(names: tuple[str, ...], cloud: str, gpu: str, k: int) -> float:
    traces = [load_trace(n) for n in names]
    vals = []
    for tr in traces:
        cap = tr.capacity or 1
        if k <= cap:
            vals.append(fraction_at_least(tr, k))
        else:
            p1 = fraction_at_least(tr, 1)
            vals.append(p1 * _conditional_multi(cloud, gpu, k))
    return float(np.mean(vals)) if vals else 0.0


@functools.cache
def _conditional_multi(cloud: str, gpu: str, k: int) -> float:
    """P(>= k | >= 1) pooled over the multi-node traces of this GPU (or of any GPU)."""
    multi = [load_trace(n) for n in _avail_index().get((cloud, gpu), ()) if (load_trace(n).capacity or 1) > 1]
    if not multi:
        multi = [load_trace(n) for ns in _avail_index().values() for n in ns
                 if (load_trace(n).capacity or 1) > 1]
    num = sum(fraction_at_least(t, k) for t in multi if (t.capacity or 1) >= k)
    den = sum(fraction_at_least(t, 1) for t in multi if (t.capacity or 1) >= k)
    return num / den if den > 0 else 0.0


@functools.cache
def _avail_index() -> dict[tuple[str, str], tuple[str, ...]]:
    idx: dict[tuple[str, str], list[str]] = {}
    for name in list_traces():
        tr = load_trace(name)
        if tr.gpu and tr.kind == "availability":
            idx.setdefault((tr.cloud, tr.gpu), []).append(name)
    # GCP has no launch-attempt GPU traces: live-VM counts of requested clusters stand in.
    for name in list_traces():
        tr = load_trace(name)
        if tr.gpu and tr.kind == "alive" and tr.cloud == "gcp" and (tr.cloud, tr.gpu) not in idx:
            idx.setdefault((tr.cloud, tr.gpu), []).append(name)
    return {k: tuple(v) for k, v in idx.items()}


def availability(cloud: str, gpu_or_instance: str, zone: str | None = None) -> Availability:
    """How likely k spot servers of a GPU (or instance type) can be obtained now in ``zone``.

    >>> availability("aws", "V100", "us-east-1a").p_obtain(1) > 0
    True
    """
    cloud = cloud.strip().lower()
    idx = _avail_index()
    itype = gpu_or_instance if "." in gpu_or_instance else None
    gpu = _canonical(gpu_or_instance)
    names = idx.get((cloud, gpu), ())
    if itype:
        by_type = tuple(n for n in names if load_trace(n).instance_type == itype)
        names = by_type or names
    else:  # a GPU name means 1-GPU instances where the trace says so
        single = tuple(n for n in names if not (load_trace(n).instance_type or "").endswith("16xlarge"))
        names = single or names
    pooled = None
    if names and zone:
        in_zone = tuple(n for n in names if load_trace(n).zone == zone)
        if in_zone:
            names = in_zone
        else:
            pooled = f"{cloud}/{gpu} in all traced zones (no availability trace for {zone})"
    if not names:
        names = tuple(n for (c, _), ns in idx.items() if c == cloud for n in ns)
        pooled = f"{cloud} all GPUs (no {cloud}/{gpu} availability trace)"
        if not names:
            names = tuple(n for ns in idx.values() for n in ns)
            pooled = f"all clouds and GPUs (no {cloud} availability trace)"
    kinds = {load_trace(n).kind for n in names}
    note = ("launch attempts (SkyPilot availability traces)" if kinds == {"availability"}
            else "live preemptible VMs out of those requested (Bamboo GCP counts)")
    return Availability(cloud=cloud, gpu=gpu, zone=zone, traces=names, pooled_from=pooled, note=note)


# ---------------------------------------------------------------- replacement delay
@functools.cache
def startup_times_s(*, preemptible: bool = True, gpu: str | None = None) -> np.ndarray:
    """VM start-up times (s) measured by CM-DARE on GCP: provisioning + staging + booting."""
    root = data_dir() / "cmdare" / "startup_time"
    out = []
    for p in sorted(root.glob("*/*.csv")):
        is_pre = p.parent.name.startswith("pre_")
        g = "K80" if "k80" in p.name else "P100"
        if is_pre != preemptible or (gpu is not None and gpu in ("K80", "P100") and g != gpu):
            continue
        rows = [line.split(",") for line in p.read_text().split("\n")[1:] if line.strip()]
        out += [sum(float(c) for c in r) for r in rows]
    return np.array(out)


def _live_counts(trace: Trace) -> list[tuple[float, int]]:
    """(time, live count) steps of a trace that counts live nodes (or launchable ones)."""
    if trace.kind == "nodes":
        live, steps = 0, []
        for e in trace.events:
            live += 1 if e.event == "start" else -1 if e.event in ("revoke", "end") else 0
            steps.append((e.time_s, live))
        return steps
    return [(e.time_s, int(e.value)) for e in trace.events if e.event == "available" and e.value is not None]


def group_losses(trace: Trace) -> tuple[int, int]:
    """(node revocations in drops of a live count of two or more, of which in drops to zero).

    A drop from one node says nothing about whether nodes fall together, so it is left out. In a
    trace of nodes, only revocations count (a node that ended its job was not revoked), and the
    revocations of one instant are one drop."""
    steps = _live_counts(trace)
    if trace.kind == "nodes":
        pairs: list[tuple[int, int]] = []  # (live before, live after) of each instant's revocations
        drop_at = None
        for e, (_, live) in zip(trace.events, steps):  # ``live``: the count after the event
            if e.event == "revoke":
                if drop_at == e.time_s:  # one more in the same drop
                    pairs[-1] = (pairs[-1][0], live)
                else:
                    pairs.append((live + 1, live))
                drop_at = e.time_s
            else:
                drop_at = None
    else:
        pairs = [(a, b) for (_, a), (_, b) in zip(steps, steps[1:]) if b < a]
    revoked = emptied = 0
    for before, after in pairs:
        if before >= 2:
            revoked += before - after
            emptied += before if after <= 0 else 0
    return revoked, emptied


@dataclass(frozen=True, kw_only=True, eq=False)
class GroupOutage:
    """How often a node's revocation takes every node of its group with it."""

    cloud: str
    gpu: str
    share: float
    """Share of node revocations that came in a drop of the live count to zero."""
    revocations: int
    """Node revocations counted (in drops from two or more live nodes)."""
    traces: tuple[str, ...]
    pooled_from: str | None


@functools.cache
def _group_index() -> dict[tuple[str, str], tuple[str, ...]]:
    idx: dict[tuple[str, str], list[str]] = {}
    for name in list_traces():
        tr = load_trace(name)
        if tr.gpu and tr.kind in ("alive", "availability", "nodes") and group_losses(tr)[0] > 0:
            idx.setdefault((tr.cloud, tr.gpu), []).append(name)
    return {k: tuple(v) for k, v in idx.items()}


def group_outage(cloud: str, gpu: str) -> GroupOutage:
    """Share of a ``cloud``/``gpu`` spot node's revocations that empty its whole group (``.share``).

    Pooled over the cloud's other GPUs, then over every trace, when this pair has no trace that
    counts several nodes; ``pooled_from`` says so. On the shipped traces: AWS V100 (SkyPilot's
    4- and 16-node traces) ~0.6, GCP V100 and A100 (Bamboo's 64-80-VM clusters) 0.

    >>> 0.0 <= group_outage("aws", "V100").share <= 1.0
    True
    """
    return _group_outage(cloud.strip().lower(), _canon(gpu))


GROUP_MIN_REVOCATIONS = 30
"""Fewest node revocations of a (cloud, GPU) that :func:`group_outage` estimates a share from on
their own; with fewer it pools (AWS K80: 3 in one Bamboo cluster)."""


@functools.cache
def _group_outage(cloud: str, gpu: str) -> GroupOutage:
    idx = _group_index()

    def losses(names):
        counts = [group_losses(load_trace(n)) for n in names]
        return sum(r for r, _ in counts), sum(e for _, e in counts)

    names, pooled = idx.get((cloud, gpu), ()), None
    revoked, emptied = losses(names)
    if revoked < GROUP_MIN_REVOCATIONS:
        names = tuple(n for (c, _), ns in idx.items() if c == cloud for n in ns)
        pooled = f"{cloud} all GPUs (too few {cloud}/{gpu} revocations in traces of several nodes)"
        revoked, emptied = losses(names)
    if revoked < GROUP_MIN_REVOCATIONS:
        names = tuple(n for ns in idx.values() for n in ns)
        pooled = f"all clouds and GPUs (no {cloud} trace of several nodes)"
        revoked, emptied = losses(names)
    return GroupOutage(cloud=cloud, gpu=gpu, share=emptied / revoked if revoked else 0.0, revocations=revoked,
                       traces=names, pooled_from=pooled)


def acquisition_waits_s(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(waits, observed): time from each drop of the live count to the rise that refills it.

    Drops still unfilled at the end of the trace are censored there.
    """
    steps = _live_counts(trace)
    pending: deque[float] = deque()
    waits, obs = [], []
    prev = None
    for t, n in steps:
        if prev is not None and n < prev:
            pending.extend([t] * (prev - n))
        elif prev is not None and n > prev:
            for _ in range(min(n - prev, len(pending))):
                waits.append(t - pending.popleft())
                obs.append(True)
        prev = n
    waits += [trace.duration_s - t for t in pending]
    obs += [False] * len(pending)
    return np.array(waits, float), np.array(obs, bool)


@dataclass(frozen=True, kw_only=True, eq=False)
class ReplacementDelay:
    """Time from a revocation until a replacement server is up: acquisition wait + start-up."""

    cloud: str
    gpu: str
    waits_s: np.ndarray
    """Observed acquisition waits (s); empty when no trace has them."""
    startups_s: np.ndarray
    """Measured start-up times (s)."""
    traces: tuple[str, ...]
    pooled_from: str | None

    def sample(self, n: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        """``n`` replacement delays (s), resampling waits and start-ups independently."""
        rng = np.random.default_rng(rng)
        w = rng.choice(self.waits_s, n) if len(self.waits_s) else np.zeros(n)
        return w + rng.choice(self.startups_s, n)

    @functools.cached_property
    def _draws(self) -> np.ndarray:
        return self.sample(20_000, np.random.default_rng(0))

    @property
    def mean_s(self) -> float:
        return float(self._draws.mean())

    @property
    def p95_s(self) -> float:
        return float(np.quantile(self._draws, 0.95))

    @property
    def sd_s(self) -> float:
        """Standard deviation (s) of the delay: the waits' and the start-ups' (independent), exactly
        from the observations. Heavy-tailed where capacity runs out for days (AWS V100: 7.9 h against
        a 1.9 h mean; (p95 - mean) / 1.645 reads 2.1 h)."""
        var = float(self.waits_s.var()) if len(self.waits_s) else 0.0
        return math.sqrt(var + float(self.startups_s.var()))

    @property
    def mean_wait_s(self) -> float:
        return float(self.waits_s.mean()) if len(self.waits_s) else 0.0

    @property
    def mean_startup_s(self) -> float:
        return float(self.startups_s.mean())


@functools.cache
def _wait_index() -> dict[tuple[str, str], tuple[str, ...]]:
    idx: dict[tuple[str, str], list[str]] = {}
    for name in list_traces():
        tr = load_trace(name)
        if tr.gpu and tr.kind in ("alive", "nodes") and not name.startswith("transient-dl"):
            idx.setdefault((tr.cloud, tr.gpu), []).append(name)
    return {k: tuple(v) for k, v in idx.items()}


def replacement_delay(cloud: str, gpu: str, *, preemptible: bool = True) -> ReplacementDelay:
    """Replacement delay after a revocation (``.mean_s``, ``.p95_s``, ``.sample(n, rng)``).

    >>> replacement_delay("aws", "V100").mean_s > 60
    True
    """
    return _replacement_delay(cloud.strip().lower(), _canon(gpu), preemptible)


def _canon(gpu: str) -> str:
    return _canonical(gpu)


@functools.cache
def _replacement_delay(cloud: str, gpu: str, preemptible: bool) -> ReplacementDelay:
    idx = _wait_index()
    names = idx.get((cloud, gpu), ())
    pooled = None
    if not names:
        names = tuple(n for (c, _), ns in idx.items() if c == cloud for n in ns)
        pooled = f"acquisition waits of {cloud} all GPUs (no {cloud}/{gpu} trace)"
    waits = []
    for n in names:
        w, o = acquisition_waits_s(load_trace(n))
        waits.append(w[o])
    startups = startup_times_s(preemptible=preemptible, gpu=gpu if gpu in ("K80", "P100") else None)
    return ReplacementDelay(cloud=cloud, gpu=gpu,
                            waits_s=np.concatenate(waits) if waits else np.zeros(0),
                            startups_s=startups, traces=names, pooled_from=pooled)
