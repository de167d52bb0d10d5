"""Monte Carlo over many runs and several policies, with common random numbers.

Run ``i`` of every policy uses the same seed (the same trace offset, the same sampled lifetimes
where the policy does not change what is asked for), so that differences between policies are
differences of the policies, not of luck.

Engines: a policy whose setup the array engine covers (:func:`spottrain.sim.vector.unsupported`)
runs all its runs at once in :mod:`spottrain.sim.vector`; the others run one by one on the
event engine (:mod:`spottrain.sim.job`), spread over worker processes (fork) when there are
many. ``engine="event"`` forces the event engine (the reference), ``engine="vector"`` refuses
a setup the array engine does not cover.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spottrain.errors import InputError
from spottrain.plan_file import Plan
from spottrain.policies import get_policy
from spottrain.sim import plan_transforms, sources, vector
from spottrain.sim.job import run_setup
from spottrain.sim.setup import RunResult, SimParams, SimSetup
from spottrain.sim.markets import Markets

DEFAULT_POLICIES = ("replace-same", "uniform-progress", "checkpoint-restart", "skypilot-managed", "on-demand")


@dataclass(frozen=True, kw_only=True)
class Distribution:
    mean: float
    p50: float
    p95: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Distribution":
        a = np.asarray(values, dtype=float)
        a = a[np.isfinite(a)]
        if a.size == 0:
            return cls(mean=math.nan, p50=math.nan, p95=math.nan)
        return cls(mean=float(a.mean()), p50=float(np.percentile(a, 50)), p95=float(np.percentile(a, 95)))


@dataclass(frozen=True, kw_only=True)
class PolicySummary:
    policy: str
    runs: int
    makespan_h: Distribution
    cost_usd: Distribution
    deadline_met_rate: float | None
    finished_rate: float
    revocations: Distribution
    lost_work_h: Distribution
    replacements: Distribution
    switched_on_demand_rate: float
    other_type_nodes: Distribution | None = None
    """Replacement nodes per run of instance types not in the plan (alternatives)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(kw_only=True)
class SimulationResult:
    plan_cluster: str
    source: str
    runs: int
    seed: int
    summaries: list[PolicySummary]
    notes: list[str] = field(default_factory=list)
    results: dict[str, list[RunResult]] = field(default_factory=dict, repr=False)
    elapsed_s: float = 0.0
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    """Other instance types offered to policies that buy them: type, GPU, price, revocation source."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_cluster": self.plan_cluster, "source": self.source, "runs": self.runs, "seed": self.seed,
            "policies": [s.to_dict() for s in self.summaries], "notes": self.notes, "elapsed_s": self.elapsed_s,
            "alternatives": self.alternatives,
        }


def summarize(policy: str, results: list[RunResult]) -> PolicySummary:
    met = [r.deadline_met for r in results if r.deadline_met is not None]
    return PolicySummary(
        policy=policy, runs=len(results),
        makespan_h=Distribution.of([r.makespan_s / 3600 for r in results if r.finished]),
        cost_usd=Distribution.of([r.cost_usd for r in results]),
        deadline_met_rate=(float(np.mean(met)) if met else None),
        finished_rate=float(np.mean([r.finished for r in results])) if results else math.nan,
        revocations=Distribution.of([r.revocations for r in results]),
        lost_work_h=Distribution.of([r.lost_work_s / 3600 for r in results]),
        replacements=Distribution.of([r.replacements for r in results]),
        switched_on_demand_rate=float(np.mean([r.switched_on_demand for r in results])) if results else math.nan,
        other_type_nodes=Distribution.of([r.other_type_nodes for r in results]),
    )


def run_seed(seed: int, i: int) -> int:
    """Seed of run ``i`` (the same for every policy: common random numbers)."""
    return (seed * 1_000_003 + i) % (2**63)


def make_setup(plan: Plan, policy: str, source: Any, params: SimParams | None = None,
               markets: Any = None) -> SimSetup:
    """The setup of one policy, after the policy's plan transform (baselines) if any;
    ``markets``: prepared markets of other instance types to share (see :func:`make_markets`)."""
    get_policy(policy)
    params = params or SimParams()
    transform = plan_transforms.PLAN_TRANSFORMS.get(policy)
    if transform is not None:
        plan, overrides = transform(plan)
        if overrides:
            params = dataclasses.replace(params, **overrides)
    return SimSetup(plan=plan, policy_name=policy, source=source, params=params, markets=markets)


def make_markets(plan: Plan, source: Any, params: SimParams | None = None) -> Markets:
    """The markets of the alternatives of ``plan`` (``params.alternatives``), shared by setups so
    that each alternative's trace or lifetime model is prepared once."""
    params = params or SimParams()
    return Markets.for_plan(plan, source, params.alternatives, params.max_alternatives,
                            horizon_s=sources.run_horizon_s(plan, params))


def make_source(plan: Plan, *, trace: str | None, model: bool, params: SimParams | None = None) -> Any:
    if trace is not None and model:
        raise InputError("give either --trace NAME or --model fitted, not both", column="--trace/--model")
    params = params or SimParams()
    if trace is not None:
        return sources.from_trace(trace, plan, sources.run_horizon_s(plan, params))
    return sources.from_model(plan)


_FORKED: dict[str, Any] = {}


def _run_chunk(args: tuple[str, int, int, int]) -> list[RunResult]:
    policy, seed, lo, hi = args
    setup = _FORKED[policy]
    return [run_setup(setup, run_seed(seed, i)) for i in range(lo, hi)]


def simulate(
    plan: Plan, *, trace: str | None = None, model: bool = False, policies: Sequence[str] | None = None,
    runs: int = 1000, seed: int = 0, params: SimParams | None = None, workers: int | None = None,
    progress: Callable[[int], None] | None = None, engine: str = "auto",
) -> SimulationResult:
    """Simulate ``runs`` runs of ``plan`` under each policy against a trace (``trace``) or
    lifetimes sampled from the fitted model (``model=True``, also the default without a trace).

    >>> res = simulate(plan, trace="bamboo-aws-p3", runs=100)   # doctest: +SKIP
    >>> res.summaries[0].cost_usd.mean                          # doctest: +SKIP
    """
    if runs <= 0:
        raise InputError(f"expected a run count >= 1, got {runs}", column="--runs")
    if engine not in ENGINES:
        raise InputError(f"expected an engine among {', '.join(ENGINES)}, got {engine!r}", column="--engine")
    policies = list(policies or ([plan.policy] + [p for p in DEFAULT_POLICIES if p != plan.policy]))
    for p in policies:
        get_policy(p)
    t0 = time.perf_counter()
    source = make_source(plan, trace=trace, model=model, params=params)
    cross = [p for p in policies if getattr(get_policy(p), "buys_other_types", False)]
    markets = make_markets(plan, source, params) if cross else None
    setups = {p: make_setup(plan, p, source, params, markets if p in cross else None) for p in policies}
    first = next(iter(setups.values()))
    notes = [f"revocations: {source.description}", f"throughput: {first.throughput_desc}",
             f"checkpoint cost {first.checkpoint_cost_s:.0f} s every {first.interval_s:.0f} s of training; "
             f"restart from a checkpoint {first.restart_s:.0f} s"]
    kept = next((s for s in setups.values() if s.keep_state and s.sync), None)
    if kept is not None:
        notes[-1] += f"; re-forming around the nodes that hold the model {kept.regroup_s:.0f} s"
    if params is not None and params.price_trace:
        notes.append(f"prices: replayed from {params.price_trace} ({len(first.price_events)} price events for the plan's types)")
    alternatives = []
    if markets is not None:
        for k, g in enumerate(markets.groups, start=1):
            markets.source(k)  # prepared once here, before any fork
        for g in markets.groups:
            alternatives.append({"instance_type": g.instance_type, "gpu": g.gpu, "gpus_per_node": g.gpus_per_node,
                                 "zone": g.zone, "price_usd_per_hour": g.price_usd_per_hour,
                                 "revocations": markets.descriptions[g.instance_type]})
        notes.append(f"other instance types for {', '.join(cross)}: " + ("; ".join(
            f"{a['instance_type']} ({a['gpu']}, ${a['price_usd_per_hour']:.3f}/h: {a['revocations']})"
            for a in alternatives) or "none"))
    results: dict[str, list[RunResult]] = {}
    seeds = [run_seed(seed, i) for i in range(runs)]
    on_event = []
    for p, setup in setups.items():
        why = vector.unsupported(setup) if engine != "event" else "the event engine was asked for"
        if why is None:
            results[p] = vector.run_vector(setup, seeds).run_results()
            if progress is not None:
                progress(runs)
        elif engine == "vector":
            raise InputError(f"the array engine does not cover policy {p} here: {why}", column="--engine")
        else:
            on_event.append((p, why))
    notes.append(engine_note([p for p in policies if p in results], on_event))
    policies_ev = [p for p, _ in on_event]
    workers = workers if workers is not None else (min(os.cpu_count() or 1, 4) if runs * len(policies_ev) >= 400 else 1)
    if not policies_ev:
        pass
    elif workers > 1:
        _FORKED.clear()
        _FORKED.update(setups)
        chunk = max(runs // (workers * 4), 1)
        jobs = [(p, seed, lo, min(lo + chunk, runs)) for p in policies_ev for lo in range(0, runs, chunk)]
        ctx = mp.get_context("fork")
        with ctx.Pool(workers) as pool:
            out = pool.map(_run_chunk, jobs, chunksize=1) if progress is None else _mapped(pool, jobs, progress)
        for (p, *_), res in zip(jobs, out):
            results.setdefault(p, []).extend(res)
        _FORKED.clear()
    else:
        for p in policies_ev:
            setup = setups[p]
            rs = []
            for i in range(runs):
                rs.append(run_setup(setup, run_seed(seed, i)))
                if progress is not None:
                    progress(1)
            results[p] = rs
    summaries = [summarize(p, results[p]) for p in policies]
    return SimulationResult(plan_cluster=plan.cluster, source=source.description, runs=runs, seed=seed,
                            summaries=summaries, notes=notes, results=results,
                            elapsed_s=time.perf_counter() - t0, alternatives=alternatives)


ENGINES = ("auto", "vector", "event")
"""``auto``: the array engine where it covers the setup, else the event engine."""


def engine_note(on_vector: Sequence[str], on_event: Sequence[tuple[str, str]]) -> str:
    """One line saying which policies ran on which engine (and why not on the array engine)."""
    parts = []
    if on_vector:
        parts.append("array engine for " + ", ".join(on_vector))
    if on_event:
        parts.append("event engine for " + "; ".join(f"{p} ({why})" for p, why in on_event))
    return "engines: " + "; ".join(parts)


def _mapped(pool: Any, jobs: list, progress: Callable[[int], None]) -> list:
    out = []
    for (p, _s, lo, hi), res in zip(jobs, pool.imap(_run_chunk, jobs, chunksize=1)):
        out.append(res)
        progress(hi - lo)
    return out


def timeline_run(plan: Plan, *, trace: str | None, model: bool, policy: str, seed: int = 0,
                 params: SimParams | None = None, run: int | None = None) -> RunResult:
    """One recorded run (for the timeline plot): run ``run``, or the first of the first 100
    runs that sees a revocation (a quiet run makes a dull picture), else run 0."""
    source = make_source(plan, trace=trace, model=model, params=params)
    setup = make_setup(plan, policy, source, params)
    if run is None:
        run = next((i for i in range(100) if run_setup(setup, run_seed(seed, i)).revocations > 0), 0)
    return run_setup(setup, run_seed(seed, run), record=True)
