"""A clearly synthetic report fixture for the report tests (made-up numbers, not measurements)."""

from __future__ import annotations

import math

from spottrain.report import (
    Report,
    distribution_plot,
    lifetime_plot,
    pareto_plot,
    throughput_plot,
    timeline_plot,
)

SYNTHETIC_SECTIONS = (
    "Plan (synthetic)",
    "Cost vs time (synthetic)",
    "Throughput per GPU type (synthetic)",
    "Node lifetimes (synthetic)",
    "Simulated outcomes per policy (synthetic)",
    "Local run timeline (synthetic)",
    "Stage that did not run (synthetic)",
)


def build_synthetic_report() -> Report:
    """Every section kind and every plot helper, on made-up data."""
    r = Report("spottrain report (synthetic fixture)", subtitle="made-up numbers for testing the report layout")
    r.add_section(SYNTHETIC_SECTIONS[0], text="4 x V100 spot <b>not bold</b>.\n\nSecond paragraph.",
                  table=[{"group": "4xV100 spot", "USD/h": 3.68, "nodes": 4}])
    cands = [{"label": f"c{i}", "duration_s": 3600 * (2 + i % 7), "cost_usd": 10 + (i * 37) % 23} for i in range(40)]
    r.add_section(SYNTHETIC_SECTIONS[1], plots=[pareto_plot(
        cands,
        pareto=[{"label": "a", "duration_s": 7200, "cost_usd": 20}, {"label": "b", "duration_s": 14400, "cost_usd": 11}],
        baselines=[{"label": "on-demand", "duration_s": 9000, "cost_usd": 40}, {"label": "skypilot", "duration_s": 16000, "cost_usd": 15}],
        chosen={"label": "b", "duration_s": 14400, "cost_usd": 11},
        deadline_s=6 * 3600,
    )])
    r.add_section(SYNTHETIC_SECTIONS[2], plots=[throughput_plot(
        [{"gpu": g, "throughput": v, "low": v * 0.9, "high": v * 1.1} for g, v in (("K80", 80.0), ("V100", 420.0), ("T4", 150.0))],
        model="synthetic-mlp")])
    ts = [i * 1800.0 for i in range(49)]
    r.add_section(SYNTHETIC_SECTIONS[3], plots=[lifetime_plot([
        {"label": "empirical", "t_s": ts, "survival": [max(0.0, 1 - i / 50) for i in range(49)], "empirical": True},
        {"label": "exponential fit", "t_s": ts, "survival": [math.exp(-t / 40000) for t in ts]},
    ])])
    r.add_section(SYNTHETIC_SECTIONS[4], plots=[distribution_plot({
        "replace-same": {"cost_usd": [10 + (i % 5) for i in range(50)], "duration_s": [3600 * (3 + (i % 4) / 4) for i in range(50)]},
        "no-replace": {"cost_usd": [8 + (i % 3) for i in range(50)], "duration_s": [3600 * (4 + (i % 6) / 3) for i in range(50)]},
    }, deadline_s=5 * 3600)])
    r.add_section(SYNTHETIC_SECTIONS[5], plots=[timeline_plot(
        membership=[(0, 4), (20, 3), (27, 4)],
        progress=[(t, min(300, t * 5)) for t in range(0, 70, 2)],
        checkpoints_s=[10, 30, 50], revocations_s=[20], joins_s=[27], planned_revocations_s=[19.5], total_steps=300,
    )])
    r.add_unavailable(SYNTHETIC_SECTIONS[6], "this stage is deliberately skipped in the fixture")
    return r
