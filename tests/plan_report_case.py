"""One refined plan with its JSON and HTML report, shared by the report tests (computed once)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from pathlib import Path


@functools.cache
def refined_plan_with_report() -> tuple[dict, Path]:
    """``spottrain plan ... --refine-runs 10 --json --report``: (its JSON, the report path)."""
    d = Path(tempfile.mkdtemp(prefix="spottrain-plan-report-"))
    report = d / "plan.html"
    r = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "plan", "--model", "resnet50", "--batch-size", "64",
                        "--epochs", "90", "--dataset-size", "1.28M", "--deadline", "8h", "--refine-runs", "10",
                        "--json", "--report", str(report)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), report


def expected_cells(data: dict) -> dict[str, tuple[float | None, str]]:
    """What the headline must show for the plan JSON: raw value and text, by data-key."""
    from spottrain.units import format_count, format_duration, format_probability, format_rate, format_usd

    hl = data["headline"]
    a, s = hl["analytical"], hl["simulated"]
    out = {
        "analytical.duration_s": (a["duration_s"], f"{format_duration(a['duration_s'])} (p95 "
                                                   f"{format_duration(a['duration_p95_s'])})"),
        "analytical.cost_usd": (a["cost_usd"], f"{format_usd(a['cost_usd'])} (p95 {format_usd(a['cost_p95_usd'])})"),
        "analytical.p_meet_deadline": (a["p_meet_deadline"], format_probability(a["p_meet_deadline"])),
        "analytical.expected_revocations": (a["expected_revocations"], format_count(a["expected_revocations"])),
    }
    if a.get("p_on_demand") is not None:  # a deadline and spot nodes: the policy's fallback
        out["analytical.p_on_demand"] = (a["p_on_demand"], format_probability(a["p_on_demand"]))
    if s:
        out.update({
            "simulated.duration_s": (s["duration_s"], f"{format_duration(s['duration_s'])} (p95 "
                                                      f"{format_duration(s['duration_p95_s'])})"),
            "simulated.cost_usd": (s["cost_usd"], f"{format_usd(s['cost_usd'])} (p95 {format_usd(s['cost_p95_usd'])})"),
            "simulated.deadline_met_rate": (s["deadline_met_rate"], format_rate(s["deadline_met_rate"], runs=s["runs"])),
            "simulated.mean_revocations": (s["mean_revocations"], format_count(s["mean_revocations"])),
        })
        if s.get("on_demand_rate") is not None:
            out["simulated.on_demand_rate"] = (s["on_demand_rate"], format_rate(s["on_demand_rate"], runs=s["runs"]))
    return out
