"""Exact checkpoint-interval optimisation: closed-form E[K] against the term-by-term sum.

    .venv/bin/python bench/checkpoint_interval.py

`optimal_checkpoint_interval_s` minimises the renewal-reward overhead under the fitted lifetime
law, which needs E[K] = sum_k S_c(k (tau + C)) for ~130 intervals per call. The baseline, run in
the same process on the same laws, is the previous implementation: every term summed, up to
200,000 of them (a short interval on a long-tailed law has millions); ours sums them while a
segment spans a grid cell and uses Euler-Maclaurin below that. Both optimise over the same candidates with the same Brent step, so
the intervals should agree to the optimiser's tolerance. The planner calls this once per (GPU,
cloud, node count) it refines: ~640 calls for `spottrain plan --deadline 12h`.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _machine import machine  # noqa: E402
from _pages import write_page  # noqa: E402
from spottrain.transience import lifetime_model, optimal_checkpoint_interval_s  # noqa: E402
from spottrain.perf.workload import Workload  # noqa: E402
from spottrain.planner.risk import checkpoint_cost_s  # noqa: E402
from spottrain.transience.checkpoint_interval import _cycle_terms  # noqa: E402

LAWS = [("aws", "V100"), ("aws", "T4"), ("gcp", "V100"), ("gcp", "T4"), ("azure", "A100"), ("aws", "A10G")]
NODES = (1, 4, 16)
COSTS_S = (checkpoint_cost_s(Workload.from_zoo("resnet50", 64).gradient_bytes), 60.0)
"""ResNet-50's checkpoint as the planner prices it (weights + Adam moments to disk), and a minute."""


def _direct_interval(cost_s: float, model, nodes: int) -> float:
    """The same optimisation with E[K] summed term by term (the baseline)."""
    grid, sc, cum = _cycle_terms(model, nodes, "node")
    mean_life = float(cum[-1])

    def overhead(tau: float) -> float:
        seg = tau + cost_s
        k = np.arange(1, int(min(grid[-1] / seg, 200_000)) + 1)
        ek = float(np.interp(k * seg, grid, sc, right=0.0).sum())
        return math.inf if ek <= 0 else mean_life / (tau * ek) - 1.0

    cands = np.geomspace(max(cost_s / 20, 1.0), max(grid[-1], 10.0), 120)
    vals = np.array([overhead(c) for c in cands])
    i = int(np.argmin(vals))
    lo, hi = cands[max(i - 1, 0)], cands[min(i + 1, len(cands) - 1)]
    res = optimize.minimize_scalar(lambda x: overhead(math.exp(x)), bounds=(math.log(lo), math.log(hi)),
                                   method="bounded", options={"xatol": 1e-4})
    return math.exp(res.x) if res.fun <= vals[i] else float(cands[i])


def main(argv: list[str]) -> None:
    rows, t_ours, t_base, diffs = [], [], [], []
    for cloud, gpu in LAWS:
        model = lifetime_model(cloud, gpu)
        for n, cost in [(n, c) for n in NODES for c in COSTS_S]:
            t = time.perf_counter()
            ours = optimal_checkpoint_interval_s(cost, model, n)
            a = time.perf_counter() - t
            t = time.perf_counter()
            base = _direct_interval(cost, model, n)
            b = time.perf_counter() - t
            t_ours.append(a)
            t_base.append(b)
            diffs.append(abs(ours / base - 1))
            rows.append(f"| {cloud} {gpu} ({model.name}) | {n} | {cost:.1f} | {base:,.0f} | {ours:,.0f} | "
                        f"{b * 1e3:.1f} | {a * 1e3:.1f} | {b / a:.1f} |")
    total_b, total_a = sum(t_base), sum(t_ours)
    lines = [
        "# checkpoint_interval", "",
        "Command: `.venv/bin/python bench/checkpoint_interval.py`  ",
        f"Machine: {machine()}. Fitted lifetime laws of the shipped traces.", "",
        "| law | nodes | checkpoint (s) | interval, previous (s) | interval, ours (s) | previous (ms) | ours (ms) | speed-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows, "",
        f"All {len(rows)} optimisations: previous {total_b:.2f} s, ours {total_a:.2f} s "
        f"(**{total_b / total_a:.1f}x**, median per call {statistics.median(np.array(t_base) / np.array(t_ours)):.1f}x); "
        f"largest relative difference of the intervals {max(diffs):.1e}.", "",
    ]
    print("\n".join(lines))
    if "--write" in argv:
        write_page(argv[argv.index("--write") + 1], lines)


if __name__ == "__main__":
    main(sys.argv[1:])
