"""The demo's HTML report, rendered from the plain data :func:`spottrain.demo.run_demo` returns.

Sections, in order: summary, profile, plan and why, cost vs time (Pareto + baselines),
throughput per GPU type, node lifetimes, simulated outcomes per policy, local run timeline,
predicted vs actual. A stage that did not run yields a section marked "not available" with the
reason, never a plot of invented numbers.
"""

from __future__ import annotations

from typing import Any

from spottrain.perf.throughput import explain_bottleneck
from spottrain.report.document import Report, table_html
from spottrain.report.plots import distribution_plot, lifetime_plot, pareto_plot, throughput_plot, timeline_plot
from spottrain.units import format_count, format_duration, format_interval, format_probability, format_rate, format_usd

SECTION_TITLES = {
    "summary": "Summary",
    "profile": "Profile on this machine",
    "plan": "The plan and why",
    "pareto": "Cost vs time: candidates, Pareto front and baselines",
    "predict": "Predicted throughput per GPU type",
    "transience": "Node lifetimes",
    "simulate": "Simulated cost and makespan per policy",
    "run": "Local elastic run: timeline",
    "compare": "Predicted vs actual (local run)",
}
"""Every demo report has exactly these sections (tests and the browser check rely on it)."""

HOUR_S = 3600.0


def _stage(result: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    st = result.get("stages", {}).get(key)
    if st is None:
        return None, "stage was not run"
    if st["status"] != "ok":
        return None, f"stage '{st['title']}' {st['status']}: {st['reason']}"
    return st["data"], ""


def build_demo_report(result: dict[str, Any]) -> Report:
    """A :class:`Report` of one demo run."""
    cfg = result.get("config", {})
    r = Report("spottrain demo report",
               subtitle=f"{cfg.get('model', '?')}: profile, predict, plan, simulate and run, end to end on this machine")
    _summary(r, result)
    _profile(r, result)
    _plan(r, result)
    _pareto(r, result)
    _predict(r, result)
    _transience(r, result)
    _simulate(r, result)
    _run(r, result)
    return r


def _summary(r: Report, result: dict[str, Any]) -> None:
    rows = [{"stage": st["title"], "status": st["status"], "seconds": round(st["seconds"], 1),
             "note": st["reason"]} for st in result.get("stages", {}).values()]
    cfg = result.get("config", {})
    text = (f"Model {cfg.get('model')} ({cfg.get('epochs'):g} epochs), deadline "
            f"{cfg.get('deadline_s', 0) / HOUR_S:g} h at {cfg.get('confidence', 0):.0%} confidence; "
            f"local run of {cfg.get('steps')} steps on {cfg.get('workers')} workers. "
            f"Whole demo: {result.get('wall_s', 0):.0f} s.")
    r.add_section(SECTION_TITLES["summary"], text=text, table=rows)


def _profile(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "profile")
    if data is None:
        r.add_unavailable(SECTION_TITLES["profile"], why)
        return
    s = data["summary"]
    rows = [{"quantity": k, "value": v} for k, v in (
        ("model", s["model"]), ("batch size (samples)", s["batch_size"]), ("parameters", s["param_count"]),
        ("GFLOPs per sample (fwd+bwd)", s["gflops_per_sample"]), ("median step time (s)", s["step_time_s"]),
        ("throughput (samples/s)", s["samples_per_s"]), ("device", s["device"]))]
    r.add_section(SECTION_TITLES["profile"], text="A short measurement of one training step on this CPU.", table=rows)


def _plan(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "plan")
    if data is None:
        r.add_unavailable(SECTION_TITLES["plan"], why)
        return

    plan = data.get("plan") or {}
    pred = plan.get("prediction", {})
    frag = ""
    hl = data.get("headline")
    if hl:
        # lazy: the planner only when a demo report shows a plan
        from spottrain.planner.html import headline_html

        frag += headline_html(hl)
    sim, _ = _stage(result, "simulate")
    revs = (sim or {}).get("revocations")
    if revs:
        frag += ("<h3>Revocations: analytical model and simulation side by side</h3>"
                 + table_html([
                     {"source": "analytical model (planner)", "expected revocations": format_count(revs["analytical"]),
                      "how": "each spot node revoked at the constant rate 1 / mean lifetime of its fitted law"},
                     {"source": f"simulation, plan's policy {revs['policy']}",
                      "expected revocations": format_count(revs["simulated_plan_policy"]),
                      "how": f"{revs['runs']} runs; node lifetimes drawn from the fitted laws themselves"},
                     {"source": "simulation, every policy",
                      "expected revocations": f"{format_count(revs['simulated_low'])}-{format_count(revs['simulated_high'])}",
                      "how": "mean per policy, same runs (replacements are revoked too)"}])
                 + "<p>The two differ for a reason: the planner prices revocations at a law's mean rate, "
                   "while the simulator draws each node's lifetime from the fitted law, whose hazard is not "
                   "constant (and a policy that replaces revoked nodes exposes more nodes). The plan was chosen "
                   "on the analytical model; the simulation is the check.</p>")
    rows = [{"quantity": k, "value": v} for k, v in (
        ("cluster", data.get("label")),
        ("samples to train", f"{data['samples_total']:,.0f}"),
        ("deadline", f"{format_duration(data['deadline_s'])} at {format_probability(data.get('confidence'))}"),
        ("bottleneck", explain_bottleneck(pred["bottleneck"]) if pred.get("bottleneck") else None),
        ("checkpoint interval", format_interval(plan["checkpoint_interval_s"]) if plan.get("checkpoint_interval_s") else None),
        ("recovery policy (plan, simulation and local run)", plan.get("policy")))]

    baselines = [{k: v for k, v in b.items() if not k.startswith("_")} for b in data.get("baselines", [])]
    if baselines and not any(b.get("note") for b in baselines):
        baselines = [{k: v for k, v in b.items() if k != "note"} for b in baselines]
    for b in baselines:
        if "P(meet deadline)" in b:
            b["P(meet deadline)"] = format_probability(b["P(meet deadline)"]) if b["P(meet deadline)"] is not None else None
        if b.get("expected cost (USD)") is not None:
            b["expected cost (USD)"] = format_usd(b["expected cost (USD)"])
    frag += table_html(rows)
    if baselines:
        frag += ("<h3>Baselines</h3><p>The same job as other systems would run it, assessed with the same "
                 "throughput and revocation models.</p>" + table_html(baselines))
    r.add_section(SECTION_TITLES["plan"], text=data.get("explanation") or "", html_fragment=frag)


def _pareto(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "plan")
    if data is None or not data.get("chosen"):
        r.add_unavailable(SECTION_TITLES["pareto"], why or "the planner returned no cost/time figures")
        return
    baselines = [b["_point"] for b in data.get("baselines", []) if b.get("_point")]
    plot = pareto_plot(data.get("runners_up") or [], pareto=data.get("pareto") or [],
                       baselines=baselines, chosen=data["chosen"], deadline_s=data["deadline_s"],
                       candidates_label="runner-up plans")
    text = (f"Every point is a cluster assessed by the planner for {data['samples_total']:,.0f} samples: expected "
            f"training time (including expected revocation losses) against expected cost. The Pareto front holds "
            f"the clusters no other cluster beats on both; the baselines are other systems' choices for the same "
            f"job, assessed with the same models. Both axes are logarithmic when the points span a wide range.")

    rows = [{"plan": p["label"], "expected time": format_duration(p["duration_s"]),
             "expected cost": format_usd(p["cost_usd"]), "P(meet deadline)": format_probability(p.get("p_meet_deadline"))}
            for p in [data["chosen"], *(data.get("runners_up") or [])]]
    r.add_section(SECTION_TITLES["pareto"], text=text, plots=[plot], table=rows)


def _predict(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "predict")
    if data is None:
        r.add_unavailable(SECTION_TITLES["predict"], why)
        return
    w = data["workload"]
    text = (f"{w['model']} at {w['batch_size']} samples per GPU, {w['flops_per_sample'] / 1e9:.2f} GFLOPs per sample, "
            f"from {w['source']}. One GPU of each type; bars show the model's uncertainty interval.")
    rows = [{"GPU": x["gpu"], "samples/s": x["throughput"], "low": x["low"], "high": x["high"],
             "step time (s)": x["iteration_time_s"], "bottleneck": x["bottleneck"]} for x in data["rows"]]
    r.add_section(SECTION_TITLES["predict"], text=text, plots=[throughput_plot(data["rows"], model=w["model"])], table=rows)


def _transience(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "transience")
    if data is None:
        r.add_unavailable(SECTION_TITLES["transience"], why)
        return
    rows = [{"cloud": x["cloud"], "GPU": x["gpu"], "best law (AIC)": x["model"], "nodes": x.get("nodes"),
             "revocations": x.get("revocations"), "mean lifetime (h)": x.get("mean_lifetime_h"),
             "P(survive 1 h)": x.get("p_survive_1h"), "P(survive 8 h)": x.get("p_survive_8h"),
             "pooled from": x.get("pooled_from")} for x in data["rows"]]
    text = ("Lifetime laws fitted on the shipped revocation traces (best of exponential, Weibull and bathtub by "
            "AIC), drawn against the traces' Kaplan-Meier estimate. GCP preemptible VMs live at most 24 h.")
    r.add_section(SECTION_TITLES["transience"], text=text, plots=[lifetime_plot(data["curves"], horizon_h=26)],
                  table=rows)


def _simulate(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "simulate")
    if data is None or not data.get("per_policy"):
        r.add_unavailable(SECTION_TITLES["simulate"], why or "the simulator returned no per-policy distributions")
        return

    plan, _ = _stage(result, "plan")
    deadline = plan["deadline_s"] if plan else None
    runs = (data.get("revocations") or {}).get("runs")
    table = []
    for row in data.get("table") or []:
        row = dict(row)
        for k in ("deadline met", "finished"):
            if row.get(k) is not None:
                row[k] = format_rate(row[k], runs=runs)
        for k in ("cost mean (USD)", "cost p95 (USD)"):
            if row.get(k) is not None:
                row[k] = format_usd(row[k])
        for k in ("revocations (mean)", "replacements (mean)"):
            if row.get(k) is not None:
                row[k] = format_count(row[k])
        table.append(row)
    r.add_section(SECTION_TITLES["simulate"], text=data.get("note", ""),
                  plots=[distribution_plot(data["per_policy"], deadline_s=deadline)], table=table)


def _run(r: Report, result: dict[str, Any]) -> None:
    data, why = _stage(result, "run")
    if data is None:
        r.add_unavailable(SECTION_TITLES["run"], why)
        r.add_unavailable(SECTION_TITLES["compare"], why)
        return
    tl = data["timeline"]
    plot = timeline_plot(membership=tl["membership"], progress=tl["progress"], checkpoints_s=tl.get("checkpoints_s", []),
                         revocations_s=tl.get("revocations_s", []), joins_s=tl.get("joins_s", []),
                         planned_revocations_s=[e["at_s"] for e in data.get("schedule", []) if e.get("at_s") is not None],
                         total_steps=data.get("steps"))
    sched = [{"worker slot": e["worker"], "signal": "SIGTERM (notice)" if e["kind"] == "sigterm" else "SIGKILL",
              "at step": e.get("at_step"), "injected at (s, local)": e.get("at_s"),
              "simulated node": e.get("sim_node"), "simulated time (h)": e.get("sim_time_s", 0) / HOUR_S}
             for e in data.get("schedule", [])]
    r.add_section(SECTION_TITLES["run"], text=data.get("note", ""), plots=[plot], table=sched or None)
    r.add_section(SECTION_TITLES["compare"], text=data.get("compare_note", ""), table=data["compare"])
