"""Simulator benchmark: speed, fidelity (ICAC'19 reproduction) and policies vs baselines.

    .venv/bin/python bench/simulator.py [--quick] [--write bench/results/simulator.md]

1. Speed: Monte Carlo runs of a 24-hour job on 16 x p3.2xlarge spot, replayed over the 45-day
   SkyPilot availability trace of each zone (AWS, Feb-Mar 2023), one policy: the event engine
   (one run at a time, the reference) against the array engine (all runs at once) in the same
   run, in runs per CPU-second; goals: >= 10x on the busiest zone, 10,000 runs in <= 5 s.
2. Fidelity: `spottrain reproduce icac19` (predicted vs measured duration and cost per cluster).
3. Policies: our deadline-aware policy vs the literature's baselines on every real V100 trace
   that fits the plan: mean cost and deadline-met rate (deadline 36 h for a 24 h job).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pages import write_page  # noqa: E402
from sim_plans import make_plan  # noqa: E402

from spottrain.sim import reproduce  # noqa: E402
from spottrain.sim.montecarlo import simulate  # noqa: E402
from spottrain.transience import list_traces  # noqa: E402

SPEED_TRACE = "skypilot-availability-1-node-aws-02-15-2023-{zone}_v100_1"
SPEED_ZONES = ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f", "us-east-2a", "us-east-2b",
               "us-west-2a", "us-west-2b", "us-west-2c")
OURS = "deadline-margin"
OURS_NEW = "deadline-return"
"""Ours too: on-demand only while spot is away (compared with the baselines like OURS)."""
OURS_CROSS = "deadline-cheapest"
"""Ours too: deadline-margin's slack, replacing across instance types (the catalog's 4 alternatives)."""
LOAD = [0.0]
BASELINES = ("uniform-progress", "replace-same", "checkpoint-restart", "skypilot-managed", "deepvm-anchor",
             "replan-on-price", "on-demand")


def speed(runs: int, big: int) -> list[str]:
    """Per zone: ``runs`` runs on the event engine (one worker) and on the array engine, then
    ``big`` runs on the array engine; runs per CPU-second and the ratio, measured in this run."""
    import resource

    def cpu() -> float:
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + c.ru_utime + c.ru_stime

    lines = [f"| trace zone | revocations/run | event: runs per CPU-s | array: runs per CPU-s | array / event | "
             f"mean cost event / array $ | {big:,} runs (array): wall s | CPU s | goal <= 5 s |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |"]
    ratios = {}
    for zone in SPEED_ZONES:
        plan = make_plan(zone=zone)
        trace = SPEED_TRACE.format(zone=zone)
        c0 = cpu()
        ev = simulate(plan, trace=trace, policies=["replace-same"], runs=runs, workers=1, engine="event")
        c_ev = cpu() - c0
        c0 = cpu()
        ar = simulate(plan, trace=trace, policies=["replace-same"], runs=runs, engine="vector")
        c_ar = cpu() - c0
        c0 = cpu()
        t0 = time.perf_counter()
        many = simulate(plan, trace=trace, policies=["replace-same"], runs=big, engine="vector")
        wall, c_big = time.perf_counter() - t0, cpu() - c0
        r_ev, r_ar = runs / c_ev, runs / c_ar
        ratios[zone] = (ev.summaries[0].revocations.mean, r_ar / r_ev)
        lines.append(f"| {zone} | {ev.summaries[0].revocations.mean:.0f} | {r_ev:.0f} | {r_ar:,.0f} | "
                     f"**{r_ar / r_ev:.1f}x** | {ev.summaries[0].cost_usd.mean:,.2f} / {ar.summaries[0].cost_usd.mean:,.2f} | "
                     f"{wall:.2f} | {c_big:.2f} | {'yes' if wall <= 5.0 * big / 10_000 else 'no (wall; see CPU s)'} |")
        print(lines[-1], flush=True)
    busiest = max(ratios, key=lambda z: ratios[z][0])
    lines += ["", f"Busiest zone ({busiest}, {ratios[busiest][0]:.0f} revocations per run): the array engine runs "
              f"**{ratios[busiest][1]:.1f}x** the event engine's runs per CPU-second (goal >= 10x)."]
    return lines


def fidelity(runs: int) -> list[str]:
    rep = reproduce.reproduce_icac19(runs=runs)
    lines = ["| cluster | runs | measured s | predicted s | error | measured $ | predicted $ | error | prices |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rep.clusters + rep.ps_rows:
        ce = "-" if r.cost_error is None else f"{100 * r.cost_error:+.1f}%"
        mc = "-" if r.measured_cost_usd is None else f"{r.measured_cost_usd:.3f}"
        lines.append(f"| {r.cluster} | {r.measured_runs} | {r.measured_duration_s:,.0f} | {r.predicted_duration_s:,.0f} | "
                     f"{100 * r.duration_error:+.1f}% | {mc} | {r.predicted_cost_usd:.3f} | {ce} | {r.price_source} |")
    k80 = [r for r in rep.clusters if r.gpu == "K80"]
    cal = reproduce.reproduce_icac19(runs=runs, calibrate=True)
    lines += ["", "With `--calibrate` (workload calibrated with CM-DARE's single-worker step time per GPU):", "",
              "| cluster | measured s | predicted s | error | measured $ | predicted $ | error |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in cal.clusters:
        ce = "-" if r.cost_error is None else f"{100 * r.cost_error:+.1f}%"
        lines.append(f"| {r.cluster} | {r.measured_duration_s:,.0f} | {r.predicted_duration_s:,.0f} | "
                     f"{100 * r.duration_error:+.1f}% | {r.measured_cost_usd:.3f} | {r.predicted_cost_usd:.3f} | {ce} |")
    ck80 = [r for r in cal.clusters if r.gpu == "K80"]
    lines += ["", "Calibrated: " + cal.headline_lines()[0],
              f"Calibrated: duration within 10% on {sum(abs(r.duration_error) <= 0.1 for r in ck80)}/{len(ck80)} K80 "
              f"clusters, {sum(abs(r.duration_error) <= 0.1 for r in cal.ps_rows)}/{len(cal.ps_rows)} PS-experiment rows.",
              "", "Default (uncalibrated):"]
    lines += ["", *rep.headline_lines(),
              f"Duration within 10%: {sum(abs(r.duration_error) <= 0.1 for r in k80)}/{len(k80)} K80 clusters, "
              f"{sum(abs(r.duration_error) <= 0.1 for r in rep.clusters)}/{len(rep.clusters)} clusters, "
              f"{sum(abs(r.duration_error) <= 0.1 for r in rep.ps_rows)}/{len(rep.ps_rows)} PS-experiment rows. "
              f"Cost within 10%: {sum(r.cost_error is not None and abs(r.cost_error) <= 0.1 for r in k80)}/{len(k80)} K80 "
              f"clusters, {sum(r.cost_error is not None and abs(r.cost_error) <= 0.1 for r in rep.clusters)}/"
              f"{len(rep.clusters)} clusters.",
              "", *[f"- {n}" for n in rep.notes]]
    print("\n".join(lines), flush=True)
    return lines


def policies(runs: int) -> list[str]:
    traces = [t for t in list_traces() if ("v100" in t and t.startswith("skypilot")) or t == "bamboo-aws-p3"]
    names = (OURS, OURS_NEW, OURS_CROSS) + BASELINES
    per_trace: dict[str, dict[str, tuple[float, float]]] = {}
    for trace in traces:
        zone = next((z for z in SPEED_ZONES if z in trace), "us-east-1a")
        plan = make_plan(zone=zone)
        res = simulate(plan, trace=trace, policies=list(names), runs=runs)
        per_trace[trace] = {s.policy: (s.cost_usd.mean, s.deadline_met_rate or 0.0) for s in res.summaries}
        print(trace, {k: (round(c), round(d, 2)) for k, (c, d) in per_trace[trace].items()}, flush=True)
    lines = [f"| policy | mean cost $ (all traces) | deadline met (all traces) | cost per deadline met $ | "
             f"traces where {OURS} is cheaper | traces where {OURS} meets the deadline as often or more | "
             f"{OURS} dominates on | {OURS} lower cost per deadline met on |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def per_met(v: tuple[float, float]) -> float:
        return v[0] / v[1] if v[1] > 0 else float("inf")

    n = len(per_trace)
    for p in names:
        cost = sum(v[p][0] for v in per_trace.values()) / n
        met = sum(v[p][1] for v in per_trace.values()) / n
        if p == OURS:
            lines.append(f"| **{p}** (ours) | {cost:,.0f} | {100 * met:.1f}% | {cost / met:,.0f} | - | - | - | - |")
            continue
        if p == OURS_NEW:
            p_label = f"**{p}** (ours, returns to spot)"
        elif p == OURS_CROSS:
            p_label = f"**{p}** (ours, other instance types)"
        else:
            p_label = p
        cheaper = sum(v[OURS][0] <= v[p][0] for v in per_trace.values())
        safer = sum(v[OURS][1] >= v[p][1] - 1e-9 for v in per_trace.values())
        dom = sum(v[OURS][0] <= v[p][0] and v[OURS][1] >= v[p][1] - 1e-9 for v in per_trace.values())
        better = sum(per_met(v[OURS]) <= per_met(v[p]) for v in per_trace.values())
        cpm = f"{cost / met:,.0f}" if met > 0 else "inf"
        lines.append(f"| {p_label} | {cost:,.0f} | {100 * met:.1f}% | {cpm} | {cheaper}/{n} | {safer}/{n} | {dom}/{n} | "
                     f"{better}/{n} |")
    lines += ["", "Per trace (mean cost $ / deadline met):", "",
              "| trace | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for trace, v in per_trace.items():
        lines.append(f"| {trace} | " + " | ".join(f"{v[p][0]:,.0f} / {100 * v[p][1]:.0f}%" for p in names) + " |")
    print("\n".join(lines), flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer runs (smoke test)")
    ap.add_argument("--write", default=None, help="write the markdown results here")
    ap.add_argument("--only-speed", action="store_true",
                    help="run only the speed section and replace it in the page given by --write (the other "
                         "sections keep their last figures, and the page says so)")
    args = ap.parse_args()
    LOAD[0] = os.getloadavg()[0]
    t0 = time.time()
    sp = speed(200 if args.quick else 1000, 2_000 if args.quick else 10_000)
    if args.only_speed:
        if args.write:
            _replace_speed(args.write, sp, time.time() - t0, args.quick)
        return
    fi = fidelity(200 if args.quick else 2000)
    po = policies(50 if args.quick else 300)
    if args.write:
        out = [
            "# Simulator benchmark", "",
            f"Command: `.venv/bin/python bench/simulator.py{' --quick' if args.quick else ''} --write {args.write}`  ",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
            f"took {time.time() - t0:.0f} s; load average at the start {LOAD[0]:.1f} / at the end "
            f"{os.getloadavg()[0]:.1f} (the machine is shared: other work was running).", "",
            "## Speed", "",
            "Runs of one policy (replace-same) of a 24-hour, 16 x p3.2xlarge spot job replayed over the 45-day "
            "SkyPilot availability trace of each zone (random offset per run). Anchor: the event engine "
            "(`spottrain.sim.job`, one run at a time, one worker) on the same runs in the same process; the array "
            "engine (`spottrain.sim.vector`) replays the same offsets, so the mean costs agree run for run. "
            "CPU seconds count this process and its workers; wall seconds depend on the load of the shared "
            "machine (load average above).", "", *sp, "",
            "## Fidelity: ICAC'19 reproduction (`spottrain reproduce icac19`)", "", *fi, "",
            "## Policies vs baselines on the real traces", "",
            f"16 x p3.2xlarge spot, 24 h of work, deadline 36 h, {300 if not args.quick else 50} runs per policy and "
            "trace (common random numbers). Traces: every shipped SkyPilot V100 availability/preemption trace and "
            "Bamboo's p3 cluster trace. `replan-on-price` sees no price events in these traces and acts as "
            "replace-cheapest.", "", *po, "",
        ]
        write_page(args.write, out)


SPEED_INTRO = ("Runs of one policy (replace-same) of a 24-hour, 16 x p3.2xlarge spot job replayed over the 45-day "
               "SkyPilot availability trace of each zone (random offset per run). Anchor: the event engine "
               "(`spottrain.sim.job`, one run at a time, one worker) on the same runs in the same process; the array "
               "engine (`spottrain.sim.vector`) replays the same offsets, so the mean costs agree run for run. "
               "CPU seconds count this process and its workers; wall seconds depend on the load of the shared "
               "machine (load average above).")


def _replace_speed(path: str, sp: list[str], took_s: float, quick: bool) -> None:
    """Replace the Speed section of the page at ``path`` (the other sections stay as they were)."""
    page = Path(path).read_text()
    start = page.index("## Speed")
    end = page.index("\n## ", start + 1)
    section = ["## Speed", "",
               f"Re-run alone: `.venv/bin/python bench/simulator.py{' --quick' if quick else ''} --only-speed --write "
               f"{path}` ({platform.machine()}, {os.cpu_count()} cores; took {took_s:.0f} s; load average at the start "
               f"{LOAD[0]:.1f} / at the end {os.getloadavg()[0]:.1f}). The sections below it are from the last full "
               "run (command at the top of the page).", "", SPEED_INTRO, "", *sp, ""]
    Path(path).write_text(page[:start] + "\n".join(section) + page[end:])


if __name__ == "__main__":
    main()
