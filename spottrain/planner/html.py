"""``spottrain plan --report plan.html``: a small self-contained HTML page (inline PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spottrain.plan import Plan


def write_report(result: Any, path: str | Path, *, force: bool = False) -> Path:
    from spottrain.planner.engine import plan_label
    from spottrain.report.document import Report
    from spottrain.report.plots import pareto_plot

    data = result.to_dict()
    best = result.best
    p = best.prediction
    r = Report("spottrain plan", subtitle=f"{best.workload.model}, {best.workload.samples_total:,.0f} samples")
    rows = [{"quantity": k, "value": v} for k, v in (
        ("cluster", plan_label(best)),
        ("expected time (h)", p.duration_s / 3600), ("95th percentile time (h)", p.duration_p95_s / 3600),
        ("expected cost (USD)", p.cost_usd), ("95th percentile cost (USD)", p.cost_p95_usd),
        ("P(meet deadline)", p.p_meet_deadline), ("bottleneck", p.bottleneck),
        ("expected revocations", p.expected_revocations), ("checkpoint interval (s)", best.checkpoint_interval_s),
        ("recovery policy", best.policy))]
    r.add_section("Chosen plan", text=result.explanation, table=rows)
    alt = []
    for name, b in [("runner-up", x) for x in result.runners_up] + list(result.baselines.items()):
        if isinstance(b, Plan):
            alt.append({"plan": name, "cluster": plan_label(b), "expected time (h)": b.prediction.duration_s / 3600,
                        "expected cost (USD)": b.prediction.cost_usd, "P(meet deadline)": b.prediction.p_meet_deadline})
        else:
            alt.append({"plan": name, "cluster": b, "expected time (h)": None, "expected cost (USD)": None,
                        "P(meet deadline)": None})
    r.add_section("Alternatives, evaluated with the same models", table=alt)
    baselines = [b["_point"] for b in data["baselines"] if b.get("_point")]
    plot = pareto_plot(data["runners_up"], pareto=data["pareto"], baselines=baselines, chosen=data["chosen"],
                       deadline_s=best.deadline_s)
    r.add_section("Cost vs time", plots=[plot])
    return r.save(path, force=force)
