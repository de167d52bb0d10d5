"""Simulation-refined planning: plan, simulate the promising plans on real traces, choose.

The planner's analytical risk model (:mod:`spottrain.planner.risk`) prices revocations as
independent per-node Poisson events, computes P(deadline) for spot-only execution and bills
replacement waits. Real spot markets differ in three ways that move the best choice:

- capacity of an instance type goes and comes back *for all its nodes at once* (correlated
  outages), so a bigger cluster that finishes inside an up window can cost less than a small
  one that waits through several outages;
- the plan runs under a deadline-aware policy (``deadline-margin``) that falls back to
  on-demand, so a plan whose spot-only P(deadline) is low may meet every deadline in practice
  and the risk shows in its cost instead;
- nothing is billed while capacity is gone.

:func:`refine` keeps the analytical planner for what it is good at (a fast search over
thousands of clusters) and lets the simulator settle the choice among a bounded set of
candidates:

1. **Candidates** (:func:`candidate_plans`): the planner's plan, its runners-up, the Pareto
   points that can meet the deadline, and single-type sweeps around the fastest failure-free
   size ``n0`` of each node kind (``n0, n0+1, n0+2``; for spot also ``1.25, 1.5, 2, 3 x n0``).
   A spot plan cannot cost less than its failure-free cost, so candidates whose failure-free
   cost exceeds the cheapest on-demand plan that meets the deadline are dropped; the rest are
   kept in order of origin, then failure-free cost, up to ``max_candidates``.
2. **Availability model**: each candidate's spot nodes are replayed on random windows of the
   real shipped traces of its instance type, pooled over zones and dates
   (:func:`spottrain.sim.sources.matching_traces`, :class:`~spottrain.sim.sources.TracePool`),
   minus ``exclude`` (trace names or zones). Types without a trace fall back to lifetimes sampled
   from the fitted lifetime model, and the result says so.
3. **Simulation**: every candidate under the policy it would run with, on the same ``runs``
   seeds (common random numbers), with :func:`spottrain.sim.hindsight.simulate_plans`.
4. **Choice**: with a deadline, the least mean cost among candidates whose simulated
   deadline-met rate is at least the confidence (and, with a budget too, mean cost within it);
   with only a budget, the least mean makespan among those whose mean cost is within it. When
   no candidate qualifies, the planner's plan stays, with its simulated figures and a note.

Deterministic given ``seed``; about ``max_candidates x runs`` simulated runs.

>>> from spottrain.planner.api import plan                               # doctest: +SKIP
>>> from spottrain.planner.engine import prepare                          # doctest: +SKIP
>>> from spottrain.planner.refine import refine                          # doctest: +SKIP
>>> kw = dict(samples=90 * 1.28e6, deadline_s=16 * 3600, regions=["us-west-2"])
>>> r = refine(plan(w, **kw), prepare(w, **kw), runs=100)                # doctest: +SKIP
>>> r.plan.cluster, r.plan.prediction.cost_usd, r.plan.prediction.p_meet_deadline  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.errors import InputError
from spottrain.perf.throughput import explain_bottleneck
from spottrain.plan_file import Plan
from spottrain.planner.api import PlanResult, plan
from spottrain.planner.engine import Context, market_mask, to_plan
from spottrain.planner.pareto import homogeneous_front
from spottrain.planner.risk import normal_cdf
from spottrain.sim import sources
from spottrain.sim.hindsight import plan_setups, run_setups
from spottrain.sim.sources import matching_traces, pooled_source
from spottrain.units import format_rate, format_usd, plural

SWEEP_SPOT = (1.25, 1.5, 2.0, 3.0)
"""Multiples of the fastest failure-free size ``n0`` tried for spot node kinds (besides n0, n0+1, n0+2)."""
ORIGINS = ("planner", "runner-up", "sweep", "baseline", "pareto")
"""Where a candidate comes from, in the order a node kind's candidates are kept under the candidate cap."""


@dataclass(frozen=True, kw_only=True)
class CandidateFigures:
    """One candidate plan: what the planner predicted and what the simulation gave."""

    label: str
    origin: str
    """planner, runner-up, pareto, baseline or sweep."""
    plan: Plan
    """The candidate as the planner assessed it (analytical prediction)."""
    availability: str
    """What replayed its spot nodes: pooled traces, the fitted lifetime model, or none (on-demand)."""
    failure_free_cost_usd: float
    predicted_cost_usd: float
    predicted_p_deadline: float | None
    mean_cost_usd: float
    p95_cost_usd: float
    mean_duration_s: float
    """Mean makespan over the runs that finished (inf if none did)."""
    p95_duration_s: float
    met_rate: float | None
    """Share of runs that met the deadline (None without a deadline)."""
    finished_rate: float
    mean_revocations: float
    on_demand_rate: float | None
    """Share of runs the deadline policy moved to on-demand nodes (None where it has none to move)."""
    eligible: bool
    """Whether it satisfies the request in simulation (deadline rate, budget), on its own runs."""
    runs: int = 0
    """Simulated runs it got (racing: more only while it was in contention)."""
    dropped: str = ""
    """Why racing stopped simulating it before the last stage ('' : it ran to the end)."""

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "plan"}
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


@dataclass(frozen=True, kw_only=True)
class Refinement:
    """What :func:`refine` chose and why."""

    plan: Plan
    """The chosen plan, its prediction replaced by the simulated figures (see ``plan.extra['refined']``)."""
    analytical: Plan
    """The planner's own choice (unchanged)."""
    changed: bool
    """Whether the simulation chose another cluster than the planner."""
    candidates: tuple[CandidateFigures, ...]
    runs: int
    seed: int
    traces: dict[str, tuple[str, ...]]
    """Instance type -> the traces pooled for it (empty: the fitted lifetime model was used)."""
    model_fallback: tuple[str, ...]
    """Instance types with no matching trace, simulated on the fitted lifetime model instead."""
    excluded: tuple[str, ...]
    notes: tuple[str, ...]
    seconds: float
    timed_out: bool = False
    """The race did not finish within its time budget: ``plan`` is the analytical plan."""
    confidence_chosen: float | None = None
    """Estimated probability that the chosen plan is the cheapest (fastest, with only a budget)
    candidate meeting the request (see :meth:`_Race.confidence`)."""
    total_runs: int = 0
    """Simulated runs over all candidates."""
    first_runs: int = 0
    """Runs every candidate got in the first stage of the race."""

    @property
    def chosen(self) -> CandidateFigures:
        return next(c for c in self.candidates if c.label == self.plan.label)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.plan.label, "analytical_label": self.analytical.label,
                "changed": self.changed, "plan": self.plan.to_dict(),
                "candidates": [c.to_dict() for c in self.candidates], "runs": self.runs, "seed": self.seed,
                "traces": {k: list(v) for k, v in self.traces.items()}, "model_fallback": list(self.model_fallback),
                "excluded": list(self.excluded), "notes": list(self.notes), "seconds": round(self.seconds, 3),
                "timed_out": self.timed_out, "confidence_chosen": self.confidence_chosen,
                "total_runs": self.total_runs, "first_runs": self.first_runs}


# --------------------------------------------------------------------------- candidates


def failure_free_cost_usd(p: Plan) -> float:
    """Cost of ``p`` if nothing were ever revoked: a lower bound on the cost of any run of a
    spot plan (start-up aside), and the cost of an on-demand plan."""
    return p.workload.samples_total / max(p.prediction.throughput_samples_per_s, 1e-12) * p.price_usd_per_hour / 3600


@dataclass(frozen=True)
class _Pick:
    """A single-type candidate not yet turned into a plan: its column's figures are enough to
    select it (:func:`_select`); only the selected ones are evaluated exactly (:func:`_resolve`)."""

    i: int
    n: int
    label: str
    spot: bool
    kind: tuple
    ff_cost_usd: float
    duration_s: float


def _ff(p: Any) -> float:
    return p.ff_cost_usd if isinstance(p, _Pick) else failure_free_cost_usd(p)


def _has_spot(p: Any) -> bool:
    return p.spot if isinstance(p, _Pick) else any(g.spot for g in p.groups)


def _kind(p: Any) -> tuple:
    return p.kind if isinstance(p, _Pick) else tuple((g.instance_type, g.spot) for g in p.groups)


def _duration(p: Any) -> float:
    return p.duration_s if isinstance(p, _Pick) else p.prediction.duration_s


def _resolve(ctx: Context, p: Any) -> Plan:
    if isinstance(p, _Pick):
        return to_plan(ctx, ctx.evaluate(((p.i, p.n),)), exact_interval=True)
    return p


def candidate_plans(ctx: Context, result: PlanResult, *, baselines: bool = False,
                    on_demand: bool = True, lazy: bool = False) -> list[tuple[str, Plan]]:
    """``(origin, plan)`` of every candidate, without duplicates (first origin wins): the
    planner's plan, runners-up, (the baselines' plans when ``baselines``), Pareto points that can
    meet the deadline, and single-type sweeps around the fastest failure-free size of each node
    kind (with only a budget: around the largest size whose failure-free cost fits it).
    ``on_demand=False`` leaves out plans with on-demand nodes (a spot-only request), except the
    planner's own. ``lazy``: single-type candidates stay :class:`_Pick` (turned into plans by
    :func:`_resolve`; refine resolves only those it simulates)."""
    out: dict[str, tuple[str, Any]] = {}

    def add(origin: str, p: Any) -> None:
        if on_demand or origin == "planner" or _all_spot(p):
            out.setdefault(p.label, (origin, p))

    add("planner", result.best)
    for p in result.runners_up:
        add("runner-up", p)
    if baselines:
        for b in result.baselines.values():
            if isinstance(b, Plan):
                add("baseline", b)
    deadline, budget = ctx.limits.deadline_s, ctx.limits.budget_usd
    cols = ctx.cols
    # every column by (candidate, size), found by one sorted search rather than a scan per candidate
    width = int(cols.n.max()) + 1 if cols.size else 1
    key = cols.cand.astype(np.int64) * width + cols.n
    by_key = np.argsort(key, kind="stable")
    sorted_key = key[by_key]

    def smallest_at_least(i: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Column of candidate ``i`` with the smallest size >= ``s`` (-1: none; columns may skip sizes)."""
        pos = np.searchsorted(sorted_key, i * width + s)
        inside = pos < sorted_key.size
        found = np.zeros(i.size, dtype=bool)
        found[inside] = sorted_key[pos[inside]] // width == i[inside]
        return np.where(found, by_key[np.minimum(pos, max(sorted_key.size - 1, 0))], -1)
    picks: dict[tuple[int, int], str] = {}
    # the homogeneous cost-vs-time front of the request's markets (the front's mixes are not
    # candidates; computed here, not read from result.pareto, so that it does not depend on
    # whether or how the planner swept mixes into its front)
    for j in homogeneous_front(ctx, market_mask(ctx, spot=True, on_demand=on_demand)):
        if deadline is not None and cols.time_mean_s[j] > deadline:
            continue
        picks.setdefault((int(cols.cand[j]), int(cols.n[j])), "pareto")
    # single-type sweeps: around the fewest nodes that finish by the deadline without a revocation
    # (with only a budget: the most nodes whose failure-free cost fits it)
    t_free = cols.work / np.maximum(cols.thr, 1e-12)
    ref = np.full(len(ctx.cands), -1, dtype=np.int64)
    if deadline is not None:
        fit = t_free <= deadline
        ref[:] = np.iinfo(np.int64).max
        np.minimum.at(ref, cols.cand[fit], cols.n[fit])
        ref[ref == np.iinfo(np.int64).max] = -1
    elif budget is not None:
        fit = t_free * cols.price_rate / 3600 <= budget
        np.maximum.at(ref, cols.cand[fit], cols.n[fit])
    want_i, want_s = [], []
    for i in np.flatnonzero(ref >= 0):
        c = ctx.cands[int(i)]
        if not c.spot and not on_demand:
            continue
        r = int(ref[i])
        if deadline is not None:
            sizes = {r, r + 1, r + 2} | ({math.ceil(f * r) for f in SWEEP_SPOT} if c.spot else set())
        else:
            sizes = {r, r - 1, r - 2} | ({math.ceil(r / f) for f in SWEEP_SPOT} if c.spot else set())
        for sz in sizes:
            if 1 <= sz <= ctx.limits.max_nodes:
                want_i.append(int(i))
                want_s.append(sz)
    if want_i:
        j_of = smallest_at_least(np.asarray(want_i, dtype=np.int64), np.asarray(want_s, dtype=np.int64))
        for i, j in zip(want_i, j_of):
            # A size next to the reference need not fit too: two TCP nodes can train slower than one
            # (Pollux's two-node all-reduce), so more nodes are not always faster.
            if j >= 0 and fit[j]:
                picks.setdefault((i, int(cols.n[j])), "sweep")
    chosen = sorted(picks.items())
    j_all = smallest_at_least(np.asarray([i for (i, _), _ in chosen], dtype=np.int64),
                              np.asarray([n for (_, n), _ in chosen], dtype=np.int64))
    for ((i, sz), origin), j in zip(chosen, j_all):
        c = ctx.cands[i]
        tf = float(cols.work[j] / max(cols.thr[j], 1e-12))
        add(origin, _Pick(i=i, n=sz, label=f"{sz}x {c.instance_type} {'spot' if c.spot else 'on-demand'}", spot=c.spot,
                          kind=((c.instance_type, c.spot),), ff_cost_usd=tf * float(cols.price_rate[j]) / 3600,
                          duration_s=float(cols.time_mean_s[j])))
    if lazy:
        return list(out.values())
    return [(o, _resolve(ctx, p)) for o, p in out.values()]


def _all_spot(p: Any) -> bool:
    return p.spot if isinstance(p, _Pick) else all(g.spot for g in p.groups)


def _select(cands: list[tuple[str, Plan]], ctx: Context, cap: int) -> tuple[list[tuple[str, Plan]], int]:
    """Drop candidates that cannot beat the cheapest deadline-feasible on-demand plan (or fit the
    budget) even without a revocation, then keep at most ``cap``: the planner's plan, the cheapest on-demand
    plan that meets the deadline (the safe choice), then round-robin over node kinds (each kind's
    candidates by origin, then failure-free cost), so that every kind gets its sweep before any
    kind gets its long tail of Pareto points. Returns the kept candidates and how many were
    dropped as dominated."""
    deadline = ctx.limits.deadline_s

    def on_demand_ok(p: Any) -> bool:
        return not _has_spot(p) and (deadline is None or _duration(p) <= deadline)

    od = [_ff(p) for _, p in cands if on_demand_ok(p)]
    bound = min(od) if od and deadline is not None else math.inf
    if ctx.limits.budget_usd is not None:  # no run of a plan costs less than its failure-free cost
        bound = min(bound, ctx.limits.budget_usd)
    kept = [(o, p) for o, p in cands if o == "planner" or _ff(p) <= bound * (1 + 1e-9)]
    dominated = len(cands) - len(kept)
    if len(kept) <= cap:
        return kept, dominated
    rank = {o: k for k, o in enumerate(ORIGINS)}
    first = [kept[0]]  # the planner's plan
    safe = min((op for op in kept[1:] if on_demand_ok(op[1])), key=lambda op: _ff(op[1]), default=None)
    if safe is not None:
        first.append(safe)
    kinds: dict[tuple, list[tuple[str, Plan]]] = {}
    for op in kept:
        if op not in first:
            kinds.setdefault(_kind(op[1]), []).append(op)
    queues = sorted((sorted(q, key=lambda op: (rank[op[0]], _ff(op[1]))) for q in kinds.values()),
                    key=lambda q: min(_ff(p) for _, p in q))
    out = list(first)
    while len(out) < cap and any(queues):
        for q in queues:
            if q and len(out) < cap:
                out.append(q.pop(0))
    return out, dominated


# --------------------------------------------------------------------------- availability


def replay_group(p: Plan) -> Any:
    """The group whose market replays the plan's spot nodes (the largest spot group)."""
    spot = [g for g in p.groups if g.spot]
    return max(spot, key=lambda g: g.count * g.gpus_per_node) if spot else None


class _Availability:
    """Revocation sources per candidate: a pool of matching traces, else the fitted model."""

    def __init__(self, traces: Sequence[str] | None, exclude: Sequence[str], params: Any) -> None:
        self.traces, self.exclude, self.params = traces, tuple(exclude), params
        self.pools: dict[str, tuple[str, ...]] = {}

    def names_for(self, group: Any) -> tuple[str, ...]:
        key = group.instance_type
        if key not in self.pools:
            self.pools[key] = tuple(matching_traces(group, traces=self.traces, exclude=self.exclude))
        return self.pools[key]

    def __call__(self, p: Plan) -> tuple[Any, str]:
        g = replay_group(p)
        names = self.names_for(g)
        mixed = len({x.instance_type for x in p.groups if x.spot}) > 1
        suffix = f" (the spot groups of this mix replay the market of {g.instance_type})" if mixed else ""
        if names:
            src = pooled_source(p, names, self.params)
            return src, src.description + suffix
        src = sources.from_model(p)
        return src, f"no trace of {g.instance_type}: {src.description}" + suffix


# --------------------------------------------------------------------------- racing

Z_DROP = 2.5
"""A candidate leaves the race when its paired difference to the leader (mean cost, or mean
duration with only a budget) is this many standard errors above zero, or when the upper Wilson
bound of its deadline-met (finished) rate at this z is below the confidence."""


def _wilson(hits: float, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval of a rate ``hits / n``."""
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    den = 1.0 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(mid - half, 0.0), min(mid + half, 1.0)


class _Race:
    """Successive halving with common random numbers: every candidate gets a first batch of
    runs; while more than one remains in contention, the runs double for those still in it.

    Run ``i`` of every candidate uses the same seed, so two candidates are compared on the
    differences of their runs (paired), which are far less noisy than their separate means."""

    def __init__(self, setups: list, *, seed: int, conf: float, deadline: float | None, budget: float | None,
                 workers: int | None, engine: str) -> None:
        self.setups, self.seed, self.conf = setups, seed, conf
        self.deadline, self.budget, self.workers, self.engine = deadline, budget, workers, engine
        self.alive: list[int] = list(range(len(setups)))
        self.dropped: dict[int, str] = {}
        self._parts: dict[int, list[tuple]] = {k: [] for k in range(len(setups))}
        self.total_runs = 0

    def data(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(cost, met, makespan or inf, revocations, switched to on-demand)`` of every run of candidate ``k``."""
        parts = self._parts[k]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(5))  # type: ignore[return-value]

    def run(self, first: int, most: int, *, t0: float, time_budget_s: float | None,
            progress: Callable[[int, int], None] | None) -> bool:
        """Race to the end; False when the time budget ran out first."""
        n, target, stages_done = 0, first, 0
        per_run_s: float | None = None
        stages_left = 1 + max(math.ceil(math.log2(most / first)), 0) if most > first else 1
        while True:
            ks = list(self.alive)
            extra = target - n
            if time_budget_s is not None and per_run_s is not None:
                if time.perf_counter() - t0 + per_run_s * extra * len(ks) > time_budget_s:
                    return False
            ts = time.perf_counter()

            def tick(done: int, _total: int, base: int = stages_done) -> None:
                if progress is not None:
                    progress(base + done, base + len(ks) * stages_left)

            out = run_setups([self.setups[k] for k in ks], runs=extra, seed=self.seed, workers=self.workers,
                             engine=self.engine, first_run=n, progress=tick)
            for k, o in zip(ks, out):
                self._parts[k].append(o)
            self.total_runs += extra * len(ks)
            per_run_s = (time.perf_counter() - ts) / max(extra * len(ks), 1)
            stages_done += len(ks)
            stages_left -= 1
            n = target
            if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                return False
            if n >= most:
                return True
            self._drop(n)
            if len(self.alive) == 1 and self._settled(self.alive[0], n):
                return True
            target = min(2 * n, most)
            stages_left = max(stages_left, 1)

    # the figures the race compares
    def _ok_hits(self, k: int) -> np.ndarray:
        c, m, t, _r, _sw = self.data(k)
        return m if self.deadline is not None else np.isfinite(t)

    def _metric(self, k: int) -> np.ndarray:
        c, m, t, _r, _sw = self.data(k)
        if self.deadline is not None:
            return c
        return t

    def _settled(self, k: int, n: int) -> bool:
        lo, hi = _wilson(float(self._ok_hits(k).sum()), n, Z_DROP)
        return lo >= self.conf or hi < self.conf

    def _eligible_now(self, k: int) -> bool:
        ok = self._ok_hits(k).mean() >= self.conf - 1e-12
        if self.budget is not None:
            ok = ok and float(self.data(k)[0].mean()) <= self.budget
        return bool(ok)

    def _drop(self, n: int) -> None:
        for k in list(self.alive):
            hits = float(self._ok_hits(k).sum())
            if _wilson(hits, n, Z_DROP)[1] < self.conf:
                what = "met the deadline" if self.deadline is not None else "finished"
                self._out(k, f"{what} in {format_rate(hits / n, runs=n)}")
            elif self.budget is not None:
                c = self.data(k)[0]
                se = float(c.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
                if c.mean() - Z_DROP * se > self.budget:
                    self._out(k, f"mean cost {format_usd(c.mean())} over the budget after {plural(n, 'run')}")
        leaders = [k for k in self.alive if self._eligible_now(k)]
        if not leaders:
            return
        lead = min(leaders, key=lambda k: (self._mean(self._metric(k)), k))
        x0 = self._metric(lead)
        for k in list(self.alive):
            if k == lead:
                continue
            md, se = self._paired(self._metric(k), x0)
            if md > 0 and md - Z_DROP * se > 0:
                what = "costlier" if self.deadline is not None else "slower"
                unit = format_usd(md) if self.deadline is not None else f"{md / 3600:.2f} h"
                self._out(k, f"{what} than the leader by {unit} (paired, {md / max(se, 1e-12):.1f} standard errors) "
                             f"after {n} runs")

    def _out(self, k: int, why: str) -> None:
        self.alive.remove(k)
        self.dropped[k] = why

    @staticmethod
    def _mean(x: np.ndarray) -> float:
        f = x[np.isfinite(x)]
        return float(f.mean()) if f.size else math.inf

    @staticmethod
    def _paired(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Mean and standard error of ``x - y`` over their common (finite) runs."""
        n = min(len(x), len(y))
        both = np.isfinite(x[:n]) & np.isfinite(y[:n])
        d = x[:n][both] - y[:n][both]
        if d.size == 0:
            return 0.0, math.inf
        se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else math.inf
        return float(d.mean()), se

    def confidence(self, best: int) -> float:
        """Estimated probability that candidate ``best`` is the cheapest (with only a budget: the
        fastest) candidate meeting the request: the probability that it meets the request times,
        for every other candidate, the probability that it does not both meet the request and beat
        ``best`` (normal approximations of the paired differences on common runs and of the
        rates; candidates treated as independent)."""
        out = self._p_eligible(best)
        xb = self._metric(best)
        for k in range(len(self.setups)):
            if k == best:
                continue
            md, se = self._paired(self._metric(k), xb)
            if not math.isfinite(se) or se == 0.0:
                p_better = 1.0 if md < 0 else (0.5 if md == 0 and math.isfinite(se) else 0.0)
            else:
                p_better = float(normal_cdf(-md / se))
            out *= 1.0 - self._p_eligible(k) * p_better
        return float(min(max(out, 0.0), 1.0))

    def _p_eligible(self, k: int) -> float:
        hits = self._ok_hits(k)
        n = hits.size
        p = (float(hits.sum()) + 0.5) / (n + 1.0)  # shrunk towards 1/2: a rate of 1 over few runs is not certain
        p_ok = float(normal_cdf((p - self.conf) / math.sqrt(p * (1 - p) / n)))
        if self.budget is not None:
            c = self.data(k)[0]
            se = float(c.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
            p_ok *= float(normal_cdf((self.budget - c.mean()) / se)) if se > 0 else float(c.mean() <= self.budget)
        return p_ok


# --------------------------------------------------------------------------- refine


def refine(
    result: PlanResult,
    ctx: Context,
    *,
    runs: int = 100,
    seed: int = 0,
    confidence: float | None = None,
    traces: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    max_candidates: int = 20,
    on_demand: bool = True,
    baselines: bool = False,
    params: Any = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    first_runs: int | None = None,
    time_budget_s: float | None = None,
    engine: str = "auto",
) -> Refinement:
    """Re-choose the plan of ``result`` by simulating its candidates on real traces.

    ``ctx``: the planner's context of the same request (:func:`spottrain.planner.engine.prepare`
    with the arguments given to ``plan``). ``runs`` simulated runs per candidate on common seeds
    derived from ``seed``; ``confidence`` defaults to the request's. ``traces``: trace names or
    user-CSV paths to draw availability from (default: every shipped trace); ``exclude``: trace
    names or zones left out. At most ``max_candidates`` candidates (>= 2); ``on_demand=False``
    for spot-only requests; ``baselines`` adds the planner's baseline plans as candidates.
    ``params``: :class:`spottrain.sim.setup.SimParams`. ``progress(done, total)`` is called as
    candidates finish (for a progress bar). See the module docstring for the procedure.

    Racing: every candidate gets ``first_runs`` runs (default ``max(runs // 4, 8)``), then the
    runs double for those still in contention, up to ``runs``. ``time_budget_s``: when the race
    cannot finish within it, the analytical plan is returned (``timed_out``) and a note says so.
    ``engine``: see :func:`spottrain.sim.hindsight.simulate_plans`.
    """
    if runs < 1:
        raise InputError(f"expected a run count >= 1, got {runs}", column="--runs")
    if max_candidates < 2:
        raise InputError(f"expected at least 2 candidates, got {max_candidates}", column="--max-candidates")
    t0 = time.perf_counter()
    conf = float(confidence if confidence is not None else ctx.limits.confidence)
    deadline, budget = ctx.limits.deadline_s, ctx.limits.budget_usd
    every = candidate_plans(ctx, result, baselines=baselines, on_demand=on_demand, lazy=True)
    kept, dominated = _select(every, ctx, max_candidates)
    kept = [(o, _resolve(ctx, p)) for o, p in kept]
    avail = _Availability(traces, exclude, params)
    setups, sources = plan_setups([p for _, p in kept], source_for=avail, params=params)
    race = _Race(setups, seed=seed, conf=conf, deadline=deadline, budget=budget, workers=workers, engine=engine)
    first = max(1, min(runs, first_runs if first_runs is not None else max(runs // 4, 8)))
    finished_race = race.run(first, runs, t0=t0, time_budget_s=time_budget_s, progress=progress)
    figures = []
    for k, ((origin, p), src) in enumerate(zip(kept, sources)):
        c, m, t, r, sw = race.data(k)
        fin = t[np.isfinite(t)]
        met = float(m.mean()) if deadline is not None else None
        mean_cost = float(c.mean())
        finished = fin.size / len(t)
        # without a deadline the plan must at least finish (at the requested rate) to qualify
        ok = ((met >= conf - 1e-12) if met is not None else finished >= conf - 1e-12) and (
            budget is None or mean_cost <= budget)
        figures.append(CandidateFigures(
            label=p.label, origin=origin, plan=p, availability=src,
            failure_free_cost_usd=failure_free_cost_usd(p), predicted_cost_usd=p.prediction.cost_usd,
            predicted_p_deadline=p.prediction.p_meet_deadline, mean_cost_usd=mean_cost,
            p95_cost_usd=float(np.percentile(c, 95)),
            mean_duration_s=float(fin.mean()) if fin.size else math.inf,
            p95_duration_s=float(np.percentile(fin, 95)) if fin.size else math.inf,
            met_rate=met, finished_rate=float(finished),
            mean_revocations=float(r.mean()) if r is not None else math.nan,
            on_demand_rate=float(np.mean(sw)) if deadline is not None and p.prediction.p_on_demand is not None else None,
            eligible=ok, runs=len(c), dropped=race.dropped.get(k, "")))
    notes = []
    # the choice is made among the candidates still in contention (those with every run); when the
    # leader they were dropped against fails the request on its last runs (a mean cost that ends
    # just over the budget), among the dropped ones that met it on theirs
    ok = ([f for k, f in enumerate(figures) if f.eligible and k in race.alive]
          or [f for k, f in enumerate(figures) if f.eligible and k in race.dropped])
    timed_out = not finished_race
    if timed_out:
        best = figures[0]
        notes.append(f"refine did not finish within its time budget of {time_budget_s:g} s "
                     f"({race.total_runs} runs simulated): the analytical plan is returned")
    elif ok:
        key = (lambda f: (f.mean_cost_usd, f.label)) if deadline is not None else (lambda f: (f.mean_duration_s, f.label))
        best = min(ok, key=key)
    else:
        best = figures[0]  # the planner's plan (kept first)
        what = f"{'met the deadline' if deadline is not None else 'finished'} in >= {conf:.0%} of runs"
        if budget is not None:
            what += (" and " if what else "") + f"stayed within ${budget:,.2f} on average"
        notes.append(f"no candidate {what} in simulation; keeping the planner's plan")
    best_k = figures.index(best)
    certainty = None if timed_out else race.confidence(best_k)
    if not timed_out:
        notes.append(f"racing: {first} runs per candidate, up to {runs} for those in contention "
                     f"({race.total_runs} runs in all, {len(race.alive)} candidate{'s' if len(race.alive) != 1 else ''} to the end)"
                     + ("" if certainty is None else
                        f"; confidence {certainty:.1%} that the chosen plan is the best one meeting the request"))
    fallback = tuple(sorted(k for k, v in avail.pools.items() if not v))
    if fallback:
        notes.append("no trace of " + ", ".join(fallback) + ": simulated on the fitted lifetime model, with the "
                     "outages that take a whole group as often as the cloud's traces of several nodes show them")
    if dominated:
        notes.append(f"{dominated} spot candidates dropped: even without revocations they cost more than "
                     "the cheapest on-demand plan that meets the deadline")
    if len(every) - dominated > len(kept):
        notes.append(f"{len(every) - dominated - len(kept)} candidates beyond the cap of {max_candidates} not simulated")
    seconds = time.perf_counter() - t0
    if timed_out:
        chosen = result.best
    else:
        chosen = _with_simulated(best, figures, runs=runs, seed=seed, seconds=seconds, notes=notes,
                                 analytical=result.best, excluded=tuple(exclude), confidence=certainty,
                                 total_runs=race.total_runs)
    return Refinement(plan=chosen, analytical=result.best, changed=best.label != result.best.label,
                      candidates=tuple(figures), runs=runs, seed=seed,
                      traces={k: v for k, v in avail.pools.items()}, model_fallback=fallback,
                      excluded=tuple(exclude), notes=tuple(notes), seconds=seconds, timed_out=timed_out,
                      confidence_chosen=certainty, total_runs=race.total_runs, first_runs=first)


def _with_simulated(best: CandidateFigures, figures: list[CandidateFigures], *, runs: int, seed: int,
                    seconds: float, notes: list[str], analytical: Plan, excluded: tuple[str, ...],
                    confidence: float | None = None, total_runs: int | None = None) -> Plan:
    """``best.plan`` with its prediction replaced by the simulated figures, and a record of what was simulated."""
    p = best.plan
    pred = dataclasses.replace(
        p.prediction, cost_usd=best.mean_cost_usd, cost_p95_usd=best.p95_cost_usd, p_meet_deadline=best.met_rate,
        p_on_demand=best.on_demand_rate, expected_revocations=best.mean_revocations if math.isfinite(best.mean_revocations)
        else p.prediction.expected_revocations)
    if math.isfinite(best.p95_duration_s):  # else no run finished: the analytical durations stay
        pred = dataclasses.replace(pred, duration_s=best.mean_duration_s, duration_p95_s=best.p95_duration_s)
    record = {
        "runs": runs, "seed": seed, "candidates": len(figures), "availability": best.availability,
        "excluded": list(excluded), "seconds": round(seconds, 3), "notes": list(notes),
        "analytical": {"label": p.label, **p.prediction.figures()},
        "finished_rate": best.finished_rate,
        "planner_choice": analytical.label,
        "runs_per_candidate": {f.label: f.runs for f in figures},
        "total_runs": total_runs,
        "confidence_chosen": confidence,
    }
    met = "" if best.met_rate is None else f", deadline met in {best.met_rate:.0%} of runs"
    text = (f"Refined by simulation: {best.label} chosen among {len(figures)} candidates ({best.runs} runs of it, "
            f"fewer of those out of contention) on {best.availability}: mean ${best.mean_cost_usd:,.2f}{met}.")
    if analytical.label != best.label:
        a = next((f for f in figures if f.label == analytical.label), None)
        if a is not None:
            text += (f" The analytical choice {a.label} simulated at mean ${a.mean_cost_usd:,.2f}"
                     + ("" if a.met_rate is None else f", {a.met_rate:.0%} met") + ".")
    if "Bottleneck:" not in (p.explanation or ""):  # a candidate other than the analytical choice
        text += f" Bottleneck: {explain_bottleneck(p.prediction.bottleneck)}."
    explanation = (p.explanation + " " if p.explanation else "") + text
    return dataclasses.replace(p, prediction=pred, explanation=explanation,
                               extra={**p.extra, "refined": record})


def plan_refined(workload: Any, *, runs: int = 100, seed: int = 0, traces: Sequence[str] | None = None,
                 exclude: Sequence[str] = (), max_candidates: int = 20, workers: int | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 **plan_kwargs: Any) -> tuple[PlanResult, Refinement]:
    """:func:`spottrain.planner.plan` with ``plan_kwargs``, then :func:`refine` on the same
    request (with the context the planner prepared for it).

    >>> result, ref = plan_refined(w, samples=90 * 1.28e6, deadline_s=16 * 3600, runs=100)  # doctest: +SKIP
    >>> ref.plan.cluster, ref.changed, ref.notes                                             # doctest: +SKIP
    """
    result = plan(workload, **plan_kwargs)
    on_demand = bool(plan_kwargs.get("allow_on_demand", True)) and not plan_kwargs.get("spot_only", False)
    ref = refine(result, result.context, runs=runs, seed=seed, traces=traces, exclude=exclude,
                 max_candidates=max_candidates, on_demand=on_demand, workers=workers, progress=progress)
    return result, ref
