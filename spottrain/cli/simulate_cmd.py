"""`spottrain simulate` and `spottrain reproduce`: registered in :mod:`spottrain.cli.main`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spottrain.errors import InputError, UnknownNameError
from spottrain.units import format_count, format_rate, format_usd, plural

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions

err = Console(stderr=True)


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def simulate(
    plan: Annotated[Path, typer.Option("--plan", help="Plan file written by `spottrain plan`.")],
    trace: Annotated[str | None, typer.Option(help="Replay this trace (name from `spottrain transience --list`, or a CSV).")] = None,
    model: Annotated[str | None, typer.Option(help="'fitted': sample lifetimes from the fitted lifetime model (the default without --trace).")] = None,
    prices: Annotated[str | None, typer.Option(help="Replay spot prices from this price trace (e.g. aws-spot-prices-2022-05).")] = None,
    runs: Annotated[int, typer.Option(help="Monte Carlo runs per policy.")] = 1000,
    policy: Annotated[list[str] | None, typer.Option("--policy", help="Policy to simulate (repeat); default: the plan's and the baselines.")] = None,
    seed: Annotated[int, typer.Option(help="Seed: the same seed gives the same results.")] = 0,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: up to 4 for large runs).")] = None,
    alternatives: Annotated[int | None, typer.Option(
        "--alternatives", help="Other instance types a policy that buys them (replace-cheapest, deadline-cheapest: "
        "add them with --policy) is offered: the N best of the plan's alternatives or of the catalog, at most 2x the "
        "price of the plan's spot node (default 4; 0: only the plan's types). No effect on the other policies.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON to stdout.")] = False,
    report: Annotated[Path | None, typer.Option(help="Write an HTML report (distributions, timeline).")] = None,
    timeline: Annotated[Path | None, typer.Option(help="Write a PNG timeline of one run of the first policy.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --timeline file.")] = False,
) -> None:
    """Replay a plan against real revocation traces (or the fitted lifetime model) many times,
    under several recovery policies, and compare makespan, cost and deadline-met rate.

    Example: spottrain simulate --plan plan.json --trace skypilot-availability-16-node-aws-08-27-2023-us-west-2a_v100_1 --runs 1000
    """
    from spottrain.plan_file import Plan
    from spottrain.sim import montecarlo
    from spottrain.sim.setup import SimParams
    from spottrain.sim.timeline import timeline_png

    _check_flags(plan, model=model, runs=runs, workers=workers, alternatives=alternatives, seed=seed, trace=trace,
                 prices=prices, policy=policy, report=report, timeline=timeline, force=force)
    the_plan = Plan.load(plan)
    params = SimParams(price_trace=prices)
    if alternatives is not None:
        params = SimParams(price_trace=prices, max_alternatives=alternatives,
                           alternatives=() if alternatives == 0 else None)
    res = _simulate_with_progress(the_plan, trace=trace, fitted=model == "fitted", policies=policy or None, runs=runs,
                                  seed=seed, workers=workers, params=params)
    first = res.summaries[0].policy
    one = None
    if timeline is not None or report is not None:
        one = montecarlo.timeline_run(the_plan, trace=trace, model=model == "fitted", policy=first, seed=seed,
                                      params=params)
    if timeline is not None:
        timeline.parent.mkdir(parents=True, exist_ok=True)
        timeline.write_bytes(timeline_png(one, title=f"{the_plan.cluster}, policy {first}, run 0 (seed {seed})"))
    if report is not None:
        _write_report(report, the_plan, res, one, force)
    if as_json:
        print(json.dumps(res.to_dict(), indent=1))
        return
    _print_summary(res, the_plan, alternatives=alternatives, timeline=timeline, report=report)


def _check_flags(plan: Path, *, model: str | None, runs: int, workers: int | None, alternatives: int | None,
                 seed: int, trace: str | None, prices: str | None, policy: list[str] | None, report: Path | None,
                 timeline: Path | None, force: bool) -> None:
    """Every flag checked before the plan is read or a run starts; the first wrong one is named (exit 2)."""
    from spottrain.cli import options

    if model is not None and model != "fitted":
        raise UnknownNameError("lifetime model source", model, ("fitted",))
    if runs <= 0:
        raise InputError(f"expected a run count >= 1, got {runs}", column="--runs")
    options.count(runs, "--runs", high=options.MAX_RUNS)
    options.processes(workers, "--workers")
    options.count(alternatives, "--alternatives", low=0, high=100)
    options.count(seed, "--seed", low=0, high=options.MAX_SEED)
    options.name(trace, "--trace")
    options.name(prices, "--prices")
    for p in policy or ():
        options.name(p, "--policy")
    options.input_file(plan, "--plan")
    if report is not None:
        options.output(report, "--report", force=force, suffixes=(".html", ".htm"))
    if timeline is not None:
        options.output(timeline, "--timeline", force=force, suffixes=(".png",))


def _simulate_with_progress(plan, *, trace: str | None, fitted: bool, policies: list[str] | None, runs: int,
                            seed: int, workers: int | None, params):
    """The Monte Carlo runs of every policy (default: the plan's and the baselines), with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from spottrain.sim import montecarlo

    total = runs * len(policies or ([plan.policy] + [p for p in montecarlo.DEFAULT_POLICIES if p != plan.policy]))
    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("runs", total=total)
        return montecarlo.simulate(plan, trace=trace, model=fitted, policies=policies, runs=runs, seed=seed,
                                   workers=workers, params=params, progress=lambda n: bar.advance(task, n))


def _print_summary(res, plan, *, alternatives: int | None, timeline: Path | None, report: Path | None) -> None:
    """The policies side by side, the notes, and where the timeline and report went."""
    console = Console()
    table = Table(title=f"{res.runs} runs per policy of {res.plan_cluster}", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("policy", "makespan h mean", "p50", "p95", "cost mean", "p50", "p95", "deadline met",
                "finished", "revocations", "lost work h", "replaced", "other types"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for s in res.summaries:
        table.add_row(
            s.policy, _f(s.makespan_h.mean), _f(s.makespan_h.p50), _f(s.makespan_h.p95),
            format_usd(s.cost_usd.mean), format_usd(s.cost_usd.p50), format_usd(s.cost_usd.p95),
            format_rate(s.deadline_met_rate), format_rate(s.finished_rate), format_count(s.revocations.mean),
            _f(s.lost_work_h.mean, ".2f"),
            _f(s.replacements.mean),
            "-" if s.other_type_nodes is None else _f(s.other_type_nodes.mean),
        )
    console.print(table)
    for note in res.notes:
        console.print(note, style="dim", highlight=False)
    if alternatives is not None:
        console.print(_alternatives_note(plan, [s.policy for s in res.summaries], alternatives), highlight=False)
    console.print(f"{res.runs * len(res.summaries)} runs in {res.elapsed_s:.1f} s (seed {res.seed}).", style="dim")
    if timeline is not None:
        console.print(f"timeline: {timeline}", style="dim")
    if report is not None:
        console.print(f"report: {report}", style="dim")


def _alternatives_note(plan, policies: list[str], n: int) -> str:
    """What ``--alternatives N`` did: which policies it reached and which types they were offered."""
    from spottrain.policies import get_policy
    from spottrain.sim.markets import PRICE_SCALE, resolve_alternatives

    buyers = [p for p in policies if getattr(get_policy(p), "buys_other_types", False)]
    if not buyers:
        return (f"--alternatives {n} had no effect: none of the simulated policies ({', '.join(policies)}) buys other "
                "instance types; add --policy replace-cheapest or --policy deadline-cheapest")
    if not any(g.spot for g in plan.groups):
        return f"--alternatives {n} had no effect: the plan has no spot nodes to replace"
    alts = resolve_alternatives(plan, () if n == 0 else None, n)
    if not alts:
        return (f"--alternatives {n}: no other instance type of the plan's region at most {PRICE_SCALE:g}x the price of "
                f"its spot node; {', '.join(buyers)} bought only the plan's types")
    names = ", ".join(f"{a['instance_type']} (${a['price_usd_per_hour']:.2f}/h)" for a in alts)
    return f"--alternatives {n}: {', '.join(buyers)} could buy {plural(len(alts), 'other type')}: {names}"


def _write_report(path: Path, plan, res, one, force: bool) -> None:
    from spottrain.report import Plot, Report, distribution_plot
    from spottrain.sim.timeline import timeline_png

    rep = Report(f"Simulation of {plan.cluster}", subtitle=res.source)
    rows = [{
        "policy": s.policy, "makespan h (mean)": _f(s.makespan_h.mean), "makespan h (p95)": _f(s.makespan_h.p95),
        "cost $ (mean)": _f(s.cost_usd.mean, ",.0f"), "cost $ (p95)": _f(s.cost_usd.p95, ",.0f"),
        "deadline met": "-" if s.deadline_met_rate is None else f"{100 * s.deadline_met_rate:.0f}%",
        "revocations": _f(s.revocations.mean), "lost work h": _f(s.lost_work_h.mean, ".2f"),
    } for s in res.summaries]
    rep.add_section("Policies side by side", text="\n\n".join(res.notes), table=rows)
    per = {p: {"cost_usd": [r.cost_usd for r in rs], "duration_s": [r.makespan_s for r in rs]}
           for p, rs in res.results.items()}
    rep.add_section("Distributions", plots=[distribution_plot(per, deadline_s=plan.deadline_s, budget_usd=plan.budget_usd)])
    if one is not None:
        rep.add_section("One run", plots=[Plot(png=timeline_png(one), alt="Progress, checkpoints, revocations and "
                                               "live nodes of one simulated run against hours since launch.")])
    rep.save(path, force=force)


def reproduce(
    study: Annotated[str, typer.Argument(help="Which study to reproduce: icac19.")],
    runs: Annotated[int, typer.Option(help="Monte Carlo runs per spot cluster.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="Calibrate the workload with CM-DARE's single-worker step time per GPU.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print rows as JSON to stdout.")] = False,
) -> None:
    """Predict a published study's measured clusters with our models and show the error.

    Example: spottrain reproduce icac19
    """
    from spottrain.sim import reproduce as rp

    if study != "icac19":
        raise UnknownNameError("study", study, ("icac19",))
    from spottrain.cli import options

    options.count(runs, "--runs", high=100_000)
    options.count(seed, "--seed", low=0, high=options.MAX_SEED)
    with err.status("simulating the ICAC'19 clusters"):
        result = rp.reproduce_icac19(runs=runs, seed=seed, calibrate=calibrate)
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    console = Console()
    for title, rows in (("Clusters (ResNet-32, CIFAR-10, 64k steps)", result.clusters),
                        ("1 vs 2 parameter servers", result.ps_rows)):
        table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("cluster", "runs", "measured s", "predicted s", "error", "measured $", "predicted $", "error"):
            table.add_column(col, justify="left" if col == "cluster" else "right", no_wrap=True)
        for r in rows:
            table.add_row(
                r.cluster, str(r.measured_runs), f"{r.measured_duration_s:,.0f}", f"{r.predicted_duration_s:,.0f}",
                f"{100 * r.duration_error:+.1f}%", _f(r.measured_cost_usd, ".3f"), _f(r.predicted_cost_usd, ".3f"),
                "-" if r.cost_error is None else f"{100 * r.cost_error:+.1f}%",
            )
        console.print(table)
    for line in result.headline_lines():
        console.print(line, highlight=False)
    for note in result.notes:
        console.print(note, style="dim", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `spottrain simulate` and `spottrain reproduce` to the app."""
    app.command(name="simulate")(simulate)
    app.command(name="reproduce")(reproduce)
