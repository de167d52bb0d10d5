"""``spottrain plan --report plan.html``: a small self-contained HTML page (inline PNG).

The headline is the same computation the terminal prints (:func:`spottrain.planner.evidence.headline`):
the analytical model's figures and, when the plan was refined, the simulation's beside them, each
cell carrying its raw value (``data-key``/``data-value``) so that a test can check the page
against the plan JSON.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from spottrain.plan_file import Plan
from spottrain.perf.throughput import explain_bottleneck
from spottrain.planner.evidence import headline, headline_lines, headline_rows
from spottrain.report.document import Report
from spottrain.report.plots import pareto_plot
from spottrain.units import format_duration, format_interval, format_probability, format_usd


def headline_html(hl: dict[str, Any]) -> str:
    """The headline table (a column per source) and its sentences, as trusted HTML."""
    cols, rows = headline_rows(hl)
    keys = {"expected time": "duration_s", "expected cost": "cost_usd", "P(meet deadline)": "p_meet_deadline",
            "revocations": "expected_revocations", "moved to on-demand": "p_on_demand"}
    sim_keys = {"duration_s": "duration_s", "cost_usd": "cost_usd", "p_meet_deadline": "deadline_met_rate",
                "expected_revocations": "mean_revocations", "p_on_demand": "on_demand_rate"}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        key = keys[r[0]]
        cells = [f"<th>{html.escape(r[0])}</th>"]
        a = hl["analytical"][key]
        cells.append(f'<td data-key="analytical.{key}" data-value="{_raw(a)}">{html.escape(r[1])}</td>')
        if hl.get("simulated"):
            s = hl["simulated"][sim_keys[key]]
            cells.append(f'<td data-key="simulated.{sim_keys[key]}" data-value="{_raw(s)}">{html.escape(r[2])}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    lines = headline_lines(hl)
    source = html.escape(hl["source"])
    return (f'<div class="headline" data-source="{source}" data-label="{html.escape(hl["label"], quote=True)}">'
            f"<p><strong>{html.escape(lines[0])}</strong></p>"
            f'<table class="headline-figures"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="evidence" data-kind="{html.escape(hl["evidence"]["kind"])}">{html.escape(lines[1])}</p>'
            f"{''.join(f'<p>{html.escape(x)}</p>' for x in lines[2:])}</div>")


def _raw(v: Any) -> str:
    return "" if v is None else repr(float(v))


def write_report(result: Any, path: str | Path, *, force: bool = False, refinement: Any = None) -> Path:
    data = result.to_dict()
    best = result.best
    p = best.prediction
    mixed = ", mixed precision (fp16)" if best.workload.precision == "fp16" else ""
    r = Report("spottrain plan", subtitle=f"{best.workload.model}{mixed}, {best.workload.samples_total:,.0f} samples")
    hl = headline(result, refinement)
    rows = [{"quantity": k, "value": v} for k, v in (
        ("cluster", best.label),
        ("throughput (performance model)", f"{p.throughput_samples_per_s:,.0f} samples/s "
                                           f"({p.throughput_low:,.0f}-{p.throughput_high:,.0f})"),
        ("bottleneck", explain_bottleneck(p.bottleneck)),
        ("checkpoint interval", format_interval(best.checkpoint_interval_s)),
        ("recovery policy", best.policy))]
    r.add_section("Chosen plan", html_fragment=headline_html(hl), table=rows)
    r.add_section("How the planner explains it", text=result.explanation)
    alt = []
    for name, b in [("runner-up", x) for x in result.runners_up] + list(result.baselines.items()):
        if isinstance(b, Plan):
            alt.append({"plan": name, "cluster": b.label, "expected time": format_duration(b.prediction.duration_s),
                        "expected cost": format_usd(b.prediction.cost_usd),
                        "P(meet deadline)": format_probability(b.prediction.p_meet_deadline)})
        else:
            alt.append({"plan": name, "cluster": b, "expected time": None, "expected cost": None,
                        "P(meet deadline)": None})
    r.add_section("Alternatives (analytical model, evaluated like the chosen plan)", table=alt)
    baselines = [b["_point"] for b in data["baselines"] if b.get("_point")]
    plot = pareto_plot(data["runners_up"], pareto=data["pareto"], baselines=baselines, chosen=data["chosen"],
                       deadline_s=best.deadline_s)
    r.add_section("Cost vs time", plots=[plot])
    return r.save(path, force=force)
