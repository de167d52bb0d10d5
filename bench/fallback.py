"""The planner's deadline-policy fallback against the simulator on the same fitted laws.

    .venv/bin/python bench/fallback.py [--runs 400] [--write PATH]

A spot plan with a deadline runs under ``deadline-margin``, which moves the job to the same nodes
on demand once the slack is gone; the planner counts that in closed form
(:func:`spottrain.planner.risk.fallback`). For homogeneous clusters of real catalog types (the work
set to a number of failure-free hours of each), the planner's exact evaluation of the plan against
the simulator's runs of it, under the same policy, on lifetimes drawn from the fitted laws
(``simulate(model=True)``): expected cost, P(deadline) against the met rate, the chance of the
switch against the switched rate, mean and p95 time. Two readings of the planner: the throughput
taken as known (its interval's spread set to zero, as the simulator takes the planned throughput
as the truth) and as planned (the interval's spread in, what ``spottrain plan`` shows).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import machine  # noqa: E402
from _pages import write_results  # noqa: E402

from spottrain.perf.workload import Workload  # noqa: E402
from spottrain.planner import risk  # noqa: E402
from spottrain.planner.engine import prepare, to_plan  # noqa: E402
from spottrain.sim.montecarlo import simulate  # noqa: E402

WORKLOAD = Workload(model="resnet50", batch_size=64, flops_per_sample=24.3e9, param_count=25_557_032,
                    gradient_bytes=102e6)
# (cloud, instance type or GPU, nodes, failure-free hours, deadline hours)
CASES = [("aws", "p3.2xlarge", 1, 8.0, 12.0), ("aws", "p3.2xlarge", 4, 8.0, 12.0), ("aws", "p3.2xlarge", 4, 8.0, 9.5),
         ("aws", "p3.16xlarge", 2, 10.0, 14.0), ("aws", "g4dn.xlarge", 8, 8.0, 11.0), ("gcp", "V100", 4, 8.0, 10.0),
         ("azure", "T4", 4, 8.0, 10.0)]


def _evaluate(cloud: str, kind: str, nodes: int, hours: float, deadline_h: float):
    """The planner's outcome of ``nodes`` spot nodes of ``kind`` training ``hours`` failure-free, and its plan."""
    kw = dict(clouds=[cloud], max_nodes=nodes, **({"instance_types": [kind]} if "." in kind else {"gpus": [kind]}))
    ctx = prepare(WORKLOAD, samples=1.0, deadline_s=deadline_h * 3600, **kw)
    i = next(k for k, c in enumerate(ctx.cands) if c.spot)
    thr = ctx.evaluate(((i, nodes),)).thr
    ctx = prepare(WORKLOAD, samples=thr * hours * 3600, deadline_s=deadline_h * 3600, **kw)
    o = ctx.evaluate(((i, nodes),))
    return o, to_plan(ctx, o), ctx.cands[i].instance_type


def main(argv: list[str]) -> None:
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 400
    t0 = time.perf_counter()
    exact_sigma = risk.sigma_from_interval
    rows = []
    for cloud, kind, nodes, hours, deadline_h in CASES:
        risk.sigma_from_interval = lambda x, lo, hi: 0.0 * np.asarray(x, float)  # the throughput as known
        known, plan, itype = _evaluate(cloud, kind, nodes, hours, deadline_h)
        risk.sigma_from_interval = exact_sigma
        planned, _, _ = _evaluate(cloud, kind, nodes, hours, deadline_h)
        res = simulate(plan, model=True, policies=["deadline-margin"], runs=runs, seed=3).results["deadline-margin"]
        cost = np.array([r.cost_usd for r in res])
        span = np.array([r.makespan_s for r in res]) / 3600
        met = np.mean([r.deadline_met for r in res])
        switched = np.mean([r.switched_on_demand for r in res])
        rows.append(f"| {cloud} {itype} x{nodes} | {hours:g} h / {deadline_h:g} h | {known.cost_usd:,.2f} / "
                    f"{cost.mean():,.2f} ({known.cost_usd / cost.mean():.2f}) | {planned.cost_usd:,.2f} | "
                    f"{known.p_on_demand:.2f} / {switched:.2f} | {planned.p_on_demand:.2f} | {known.p_deadline:.3f} / "
                    f"{met:.3f} | {planned.p_deadline:.3f} | {known.time_mean_s / 3600:.2f} / {span.mean():.2f} | "
                    f"{known.time_p95_s / 3600:.2f} / {np.percentile(span, 95):.2f} |")
        print(rows[-1], flush=True)
    lines = ["# The deadline policy's fallback: planner against simulator", "",
             f"Command: `.venv/bin/python bench/fallback.py --runs {runs}`  ",
             f"Machine: {machine()}; took {time.perf_counter() - t0:.0f} s.  ",
             f"Runs: {runs} per case, simulated on lifetimes drawn from the fitted laws (`simulate(model=True)`), "
             "policy deadline-margin; workload ResNet-50 (synthetic counts), the work set to the failure-free hours "
             "of each cluster.", "",
             "Each pair is planner / simulator. *Known*: the planner with the throughput taken as known (its "
             "interval's spread set to zero; the simulator takes the planned throughput as the truth). *Planned*: "
             "the planner as `spottrain plan` shows it, the throughput's interval in.", "",
             "| cluster | work / deadline | cost $, known / sim (ratio) | cost $, planned | P(switch), known / sim "
             "| P(switch), planned | P(deadline), known / met | P(deadline), planned | mean time h, known / sim "
             "| p95 time h, known / sim |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |", *rows]
    write_results(argv, __file__, lines)


if __name__ == "__main__":
    main(sys.argv[1:])
