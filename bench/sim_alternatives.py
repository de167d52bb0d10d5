"""Replacement across instance types: replace-cheapest with and without other types' markets,
and the deadline-aware deadline-cheapest against deadline-margin (plan's types only).

    .venv/bin/python bench/sim_alternatives.py [--runs 1000] [--write bench/results/sim_alternatives.md]

A 24-hour job on 16 x p3.2xlarge spot (36 h deadline), replayed over SkyPilot's 1-node V100
availability traces (AWS, Feb-Mar 2023) of two zones, 1,000 runs per row, 2 worker processes:
replace-same (the anchor), replace-cheapest with only the plan's types (``alternatives=()``),
and replace-cheapest with the 4 catalog alternatives (each with its own market: shipped traces
of its instance type, else its fitted lifetime model); then deadline-margin (the deadline-aware
anchor) and deadline-cheapest with the same 4 alternatives. Speed goal of bench/simulator.py
(<= 5 s per 1,000 runs) is for replace-same; the rows show what the alternatives cost.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import machine  # noqa: E402
from _pages import write_page  # noqa: E402
from sim_plans import make_plan  # noqa: E402

from spottrain.sim.setup import SimParams  # noqa: E402
from spottrain.sim.montecarlo import simulate  # noqa: E402

TRACE = "skypilot-availability-1-node-aws-02-15-2023-{zone}_v100_1"
ZONES = ("us-east-1a", "us-west-2b")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--write", default=None)
    args = ap.parse_args()
    runs = args.runs
    lines = ["| trace zone | policy | wall s | runs/s | mean cost $ | deadline met | mean makespan h | "
             "other-type nodes/run |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for zone in ZONES:
        plan = make_plan(zone=zone)
        rows = (("replace-same", SimParams()), ("replace-cheapest, alternatives=()", SimParams(alternatives=())),
                ("replace-cheapest, 4 alternatives", SimParams()), ("deadline-margin", SimParams()),
                ("deadline-cheapest, 4 alternatives", SimParams()))
        for label, params in rows:
            res = simulate(plan, trace=TRACE.format(zone=zone), policies=[label.split(",")[0]], runs=runs,
                           workers=2, params=params)
            s = res.summaries[0]
            lines.append(f"| {zone} | {label} | {res.elapsed_s:.2f} | {runs / res.elapsed_s:.0f} | "
                         f"{s.cost_usd.mean:,.0f} | {100 * (s.deadline_met_rate or 0):.0f}% | {s.makespan_h.mean:.1f} | "
                         f"{s.other_type_nodes.mean:.1f} |")
            print(lines[-1], flush=True)
            if res.alternatives and not any(n.startswith(f"- {zone}: ") for n in notes):  # once per zone
                notes.append(f"- {zone}: " + "; ".join(
                    f"{a['instance_type']} ({a['gpu']}, ${a['price_usd_per_hour']:.3f}/h): {a['revocations']}"
                    for a in res.alternatives))
    page = ["# Replacement across instance types", "",
            f"Command: `.venv/bin/python bench/sim_alternatives.py --runs {runs}`", "",
            f"Machine: {machine()} (shared with other jobs while measured: timings are noisy).", "",
            "Plan: 16 x p3.2xlarge spot (V100, $0.918/h in the fixture), 24 h of work, 36 h deadline, "
            "synchronous all-reduce. Anchors: replace-same, and deadline-margin for deadline-cheapest, on the same "
            "runs (common random numbers).", "",
            *lines, "", "Alternatives and where their revocations came from:", "", *notes, ""]
    print("\n".join(page))
    if args.write:
        write_page(args.write, page)


if __name__ == "__main__":
    main()
