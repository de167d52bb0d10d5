"""`spottrain plan`: choose the cluster (thin: parse, call :func:`spottrain.planner.plan`, render)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from spottrain.catalog import CLOUDS, load_catalog
from spottrain.errors import InputError, UnknownNameError
from spottrain.units import (
    format_duration, format_probability, format_rate, format_usd, parse_count, parse_money_usd, plural,
)

# lazy: cli.main loads every command module at start-up, so the planner, perf, profiler and the
# plan file load inside the functions of this command, when it is the one taken


def _split(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [t.strip() for t in text.split(",") if t.strip()]


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan_cmd(
        profile: Optional[Path] = typer.Option(None, "--profile", help="Profile JSON from `spottrain profile`."),
        model: Optional[str] = typer.Option(None, "--model", help="Zoo model name (instead of --profile)."),
        batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Per-GPU batch size."),
        precision: Optional[str] = typer.Option(None, "--precision", help="fp32 (default) or fp16 (mixed precision; amp and bf16 mean fp16) for --model; a profile carries the precision it was timed in."),
        samples: Optional[str] = typer.Option(None, "--samples", help="Samples to train (e.g. 115M)."),
        epochs: Optional[float] = typer.Option(None, "--epochs", "--target-epochs", help="Epochs (with --dataset-size)."),
        dataset_size: Optional[str] = typer.Option(None, "--dataset-size", help="Samples per epoch (e.g. 1.28M)."),
        target_loss: Optional[float] = typer.Option(None, "--target-loss", help="Train until this loss (needs --curves, your runs' stored loss curves of the model, or a profile with a loss curve)."),
        curves: Optional[Path] = typer.Option(None, "--curves", help="With --target-loss: past runs' loss-curve CSV (as `spottrain converge` reads) to fit the convergence model on, instead of the profile's curve."),
        critical_batch: Optional[str] = typer.Option(None, "--critical-batch", help="With --target-loss: gradient noise scale (samples) for the large-batch rule; default: samples grow with the global batch."),
        deadline: Optional[str] = typer.Option(None, "--deadline", help="Finish within (e.g. 8h): cheapest plan meeting it."),
        budget: Optional[str] = typer.Option(None, "--budget", help="Spend at most (USD): fastest plan within it."),
        hard_cap: Optional[str] = typer.Option(None, "--hard-cap", help="Cap on the 95th-percentile cost (USD)."),
        quota: Optional[list[str]] = typer.Option(None, "--quota", help="TYPE=N: at most N nodes of an instance type or GPU (repeatable)."),
        zones: Optional[str] = typer.Option(None, "--zones", help="Comma-separated zone allow-list."),
        ps: Optional[int] = typer.Option(None, "--ps", help="Parameter servers (default: 1 with --sync async, 0 = all-reduce with sync)."),
        on_demand_share: Optional[float] = typer.Option(None, "--on-demand-share", help="Least share of nodes on demand, in [0, 1) (DeepVM's anchor)."),
        confidence: float = typer.Option(0.95, "--confidence", help="Required P(finish by deadline)."),
        spot_only: bool = typer.Option(False, "--spot-only", help="Spot / preemptible servers only."),
        allow_on_demand: bool = typer.Option(True, "--allow-on-demand/--no-on-demand", help="Allow on-demand servers."),
        on_demand_anchor: bool = typer.Option(False, "--on-demand-anchor", help="Keep one on-demand node (checkpoints; DeepVM)."),
        clouds: Optional[str] = typer.Option(None, "--clouds", help="Comma-separated: aws,gcp,azure."),
        regions: Optional[str] = typer.Option(None, "--regions", help="Comma-separated region allow-list."),
        gpus: Optional[str] = typer.Option(None, "--gpus", help="Comma-separated GPU allow-list (V100,T4)."),
        max_nodes: int = typer.Option(64, "--max-nodes", help="Most nodes in the cluster."),
        max_types: int = typer.Option(3, "--max-types", help="Most instance types in a mix."),
        sync: str = typer.Option("sync", "--sync", help="sync (all-reduce) or async (parameter servers)."),
        catalog_path: Optional[Path] = typer.Option(None, "--catalog", help="A SkyPilot-schema vms.csv instead of the shipped catalog."),
        baselines: bool = typer.Option(True, "--baselines/--no-baselines", help="Also show what other systems would pick."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
        out: Optional[Path] = typer.Option(None, "--out", help="Save the plan (JSON) for simulate / run."),
        report: Optional[Path] = typer.Option(None, "--report", help="Write an HTML report with the Pareto front."),
        refine: Optional[bool] = typer.Option(None, "--refine/--no-refine", help="Re-choose among the best candidates by simulating each on real revocation traces (a few seconds). Default: on with --deadline."),
        refine_runs: int = typer.Option(100, "--refine-runs", help="Most simulated runs a candidate gets when refining (racing: a quarter for every candidate, more only for those still in contention)."),
        refine_budget: float = typer.Option(20.0, "--refine-budget", help="Seconds the refine may take; past them the analytical plan is returned, and the output says so."),
        exclude_traces: Optional[str] = typer.Option(None, "--exclude-traces", help="With --refine: comma-separated trace names or zones to leave out."),
        force: bool = typer.Option(False, "--force", help="Overwrite --out / --report files."),
        include_outliers: bool = typer.Option(False, "--include-outliers", help="Also plan on spot prices `spottrain catalog` flags as implausible (a zone far below the type's other zones and its on-demand price)."),
        evidence: str = typer.Option("any", "--evidence", help="any: every spot type (a type without revocation traces is priced with a pooled lifetime law, shown with its range); traced: only spot types with revocation traces of their own."),
        from_store: Optional[bool] = typer.Option(None, "--from-store/--no-from-store", help="Calibrate on the measured rows of your own runs (spottrain run) of this model, and with --target-loss fit their stored loss curves (unless --curves); default: on when the store has some."),
    ) -> None:
        """Choose the cheapest cluster that meets a deadline (or the fastest within a budget): checks,
        workload, work, the analytical plan, the refine by simulation, the output."""
        from spottrain.cli import options

        sync, precision = _check_flags(batch_size=batch_size, precision=precision, max_nodes=max_nodes,
                                       max_types=max_types, ps=ps, sync=sync, confidence=confidence,
                                       on_demand_share=on_demand_share, epochs=epochs, target_loss=target_loss,
                                       refine_runs=refine_runs, model=model, clouds=clouds, gpus=gpus,
                                       regions=regions, zones=zones, profile=profile, curves=curves,
                                       catalog_path=catalog_path, out=out, report=report, force=force)
        deadline_s = options.duration(deadline, "--deadline", require_unit=True)
        budget_usd = parse_money_usd(budget, option="--budget") if budget is not None else None
        cap_usd = parse_money_usd(hard_cap, option="--hard-cap") if hard_cap is not None else None
        quotas = _quotas(quota)
        n_ps = _ps(ps, sync)
        share = _share(on_demand_share, spot_only, allow_on_demand)
        crit = parse_count(critical_batch, option="--critical-batch") if critical_batch is not None else None
        refine = _check_combinations(deadline_s=deadline_s, budget_usd=budget_usd, crit=crit, curves=curves,
                                     target_loss=target_loss, spot_only=spot_only, on_demand_anchor=on_demand_anchor,
                                     refine_runs=refine_runs, refine_budget=refine_budget, refine=refine,
                                     exclude_traces=exclude_traces, out=out, force=force, profile=profile,
                                     model=model)
        workload, prof = _workload(profile, model, batch_size, from_store, precision)
        loss_curves = None
        if curves is not None:
            from spottrain.perf.convergence import read_loss_curves  # lazy: only with --curves

            loss_curves = read_loss_curves(curves, batch_size=workload.batch_size)
        elif target_loss is not None:
            from spottrain.perf.own_runs import cli_own_curves

            own = cli_own_curves(from_store, workload.model, echo=_echo, curves_given=False,
                                 used="steps to the target loss from the")
            loss_curves = own.curves if own else None
        n_samples = _samples(samples, epochs, dataset_size, target_loss, workload)
        work = {"samples": n_samples} if target_loss is None else {"target_loss": target_loss, "critical_batch": crit,
                                                                   "loss_curves": loss_curves}
        catalog = load_catalog(str(catalog_path)) if catalog_path else None
        result = _analytical_plan(workload, work, deadline_s=deadline_s, budget_usd=budget_usd,
                                  confidence=confidence, catalog=catalog, spot_only=spot_only,
                                  allow_on_demand=allow_on_demand, clouds=_split(clouds), regions=_split(regions),
                                  zones=_split(zones), gpus=_split(gpus), max_nodes=max_nodes, max_kinds=max_types,
                                  sync=sync, ps=n_ps, on_demand_anchor=on_demand_anchor, anchor_share=share,
                                  hard_cap_usd=cap_usd, quotas=quotas, baselines=baselines, profile=prof,
                                  include_outliers=include_outliers, evidence=evidence,
                                  pareto=as_json or report is not None)
        refinement = None
        if refine:
            refinement = _refine(result, runs=refine_runs, budget_s=refine_budget, exclude=_split(exclude_traces) or (),
                                 on_demand=allow_on_demand and not spot_only)
            result = dataclasses.replace(result, best=refinement.plan,
                                         explanation=refinement.plan.explanation or result.explanation)
        if target_loss is not None and sync == "sync" and loss_curves:
            _batch_extrapolation_note(loss_curves, workload.batch_size, result.best)
        _output(result, refinement, out=out, report=report, force=force, as_json=as_json)


def _check_flags(*, batch_size, precision, max_nodes, max_types, ps, sync, confidence, on_demand_share, epochs,
                 target_loss, refine_runs, model, clouds, gpus, regions, zones, profile, curves, catalog_path, out, report,
                 force) -> tuple[str, str]:
    """Each flag's own range and form (one-line errors naming the flag); returns the checked --sync
    and --precision (fp32 when not given)."""
    from spottrain.cli import options

    options.count(batch_size, "--batch-size", high=options.MAX_BATCH)
    if precision is not None:
        precision = options.precision(precision)
        if profile is not None:
            raise InputError("--precision is for --model: a profile was timed in its own precision "
                             "(spottrain profile --precision amp times mixed precision)", column="--precision")
    options.count(max_nodes, "--max-nodes", high=options.MAX_NODES, why="no cloud grants one account more")
    options.count(max_types, "--max-types", high=10)
    options.count(ps, "--ps", low=0, high=1000)
    sync = options.choice(sync, "--sync", ("sync", "async"))
    if sync == "sync" and ps:
        raise InputError(f"--sync sync is all-reduce without parameter servers; --ps {ps} needs --sync async",
                         column="--ps")
    options.fraction(confidence, "--confidence", low_open=True, closed_high=False)
    options.fraction(on_demand_share, "--on-demand-share", closed_high=False)
    options.number(epochs, "--epochs", low=0, low_open=True, high=1e6)
    options.number(target_loss, "--target-loss", low=0, low_open=True)
    options.count(refine_runs, "--refine-runs", high=options.MAX_RUNS)
    options.name(model, "--model")
    if clouds is not None:
        options.names_list(clouds, "--clouds", known=CLOUDS)
    if gpus is not None:
        for g in options.names_list(gpus, "--gpus"):
            options.gpu(g, "--gpus")
    options.names_list(regions, "--regions")
    options.names_list(zones, "--zones")
    options.input_file(profile, "--profile")
    options.input_file(curves, "--curves")
    options.input_file(catalog_path, "--catalog")
    options.output(out, "--out", force=force)
    options.output(report, "--report", force=force)
    return sync, precision or "fp32"


def _check_combinations(*, deadline_s, budget_usd, crit, curves, target_loss, spot_only, on_demand_anchor, refine_runs,
                        refine_budget, refine, exclude_traces, out, force, profile, model) -> bool:
    """Flags that contradict or need each other; returns whether to refine (default: with --deadline)."""
    if crit is not None and target_loss is None:
        raise InputError("--critical-batch only applies with --target-loss")
    if curves is not None and target_loss is None:
        raise InputError("--curves only applies with --target-loss")
    if deadline_s is None and budget_usd is None:
        raise InputError("give --deadline (e.g. 8h) or --budget (e.g. 200)")
    if spot_only and on_demand_anchor:
        raise InputError("--spot-only contradicts --on-demand-anchor (the anchor is an on-demand server)")
    if spot_only and "--allow-on-demand" in sys.argv:
        raise InputError("--spot-only contradicts --allow-on-demand")
    if refine_runs < 1:
        raise InputError(f"--refine-runs: expected a run count >= 1, got {refine_runs}")
    if not refine_budget > 0:
        raise InputError(f"--refine-budget: expected a positive number of seconds, got {refine_budget}")
    if refine is None:
        refine = deadline_s is not None
    if exclude_traces and not refine:
        raise InputError("--exclude-traces only applies when refining (--refine, the default with --deadline)")
    if out is not None and out.exists() and not force:
        raise InputError("file exists; pass --force to overwrite it", file=str(out))
    if (profile is None) == (model is None):
        raise InputError("give exactly one of --profile FILE or --model NAME")
    return bool(refine)


def _workload(profile, model, batch_size, from_store, precision="fp32"):
    """The workload of --profile or --model, calibrated on the store's own runs of it when asked
    (or by default when there are some); returns it and the loaded profile (None with --model)."""
    from spottrain.perf import Workload, default_model
    from spottrain.perf.own_runs import calibrated_workload, cli_own_runs
    from spottrain.perf.workload import published_architecture, published_names
    from spottrain.profiler.schema import load_profile
    from spottrain.profiler.zoo_info import canonical_model, zoo_names

    prof = None
    if profile is not None:
        prof = load_profile(str(profile))
        workload = Workload.from_profile(prof) if batch_size is None else Workload.from_profile(prof, batch_size)
    else:
        names = zoo_names()
        if names and model.lower() not in {n.lower() for n in names} and published_architecture(model) is None:
            try:
                canonical_model(model)
            except Exception:
                raise UnknownNameError("model", model, [*names, *published_names()]) from None
        workload = Workload.from_zoo(model, batch_size, precision=precision)
    own = cli_own_runs(from_store, workload.model, echo=_echo, batch_size=workload.batch_size,
                       precision=workload.precision, how="; they calibrate the model's speed, as a profile does")
    if own:
        workload = calibrated_workload(workload, own, default_model())
    return workload, prof


def _analytical_plan(workload, work, **kwargs):
    """:func:`spottrain.planner.plan` behind a status line on stderr."""
    from spottrain.planner.api import plan as run_plan

    with Console(stderr=True).status("planning: catalog, throughput and revocation models, MILP ..."):
        return run_plan(workload, **work, **kwargs)


def _output(result, refinement, *, out, report, force, as_json) -> None:
    """Save the plan (--out), write the report (--report), print JSON (--json) or the tables."""
    if out is not None:
        result.best.save(out, overwrite=force)
    if report is not None:
        from spottrain.planner.html import write_report  # lazy: spottrain.report only for --report

        write_report(result, report, force=force, refinement=refinement)
    if as_json:
        from spottrain.planner.evidence import headline

        d = result.to_dict()
        if refinement is not None:
            d["refinement"] = refinement.to_dict()
        d["headline"] = headline(result, refinement)
        print(json.dumps(d, indent=2, default=float))
        return
    _render(result, out, report, refinement)


def _batch_extrapolation_note(curves, batch_size, plan) -> None:
    """One warning on stderr when a synchronous plan's global batch (per-GPU batch x GPUs) lies
    outside the batch sizes of the past runs its steps to target were learnt from."""
    from spottrain.perf.batch_scaling import BatchScalingModel, applies_to

    if plan is None or not applies_to(curves):
        return
    model = BatchScalingModel().fit(curves)
    gpus = sum(g.count * g.gpus_per_node for g in plan.groups)
    big = batch_size * gpus
    if model.extrapolation_doublings(big) > 0:
        lo, hi = model.batch_sizes_[0], model.batch_sizes_[-1]
        Console(stderr=True).print(f"[yellow]warning:[/] the plan's global batch {big:g} ({gpus} GPUs x {batch_size:g}) "
                                   f"is outside the past runs' batch sizes {lo:g}-{hi:g}: its steps to target are "
                                   "extrapolated and their interval widened", highlight=False)


def _echo(text: str, warning: bool) -> None:
    Console(stderr=True).print(("[yellow]warning:[/] " if warning else "") + escape(text), highlight=False, soft_wrap=True)


def _refine(result, *, runs: int, exclude: list[str] | tuple[str, ...], on_demand: bool, budget_s: float | None = None):
    """:func:`spottrain.planner.refine.refine` with a progress bar on stderr."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from spottrain.planner.refine import refine

    with Progress(TextColumn("simulating candidates on real traces"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("refine", total=None)
        return refine(result, result.context, runs=runs, exclude=exclude, on_demand=on_demand, time_budget_s=budget_s,
                      progress=lambda done, total: bar.update(task, completed=done, total=total))


def _samples(samples, epochs, dataset_size, target_loss, workload) -> float | None:
    """Samples to train, or None with --target-loss (the planner turns the target into samples per
    cluster, and says when there is no loss curve to fit)."""
    given = [x is not None for x in (samples, epochs, target_loss)]
    if sum(given) != 1:
        raise InputError("give exactly one of --samples N, --epochs E --dataset-size D, or --target-loss L")
    if samples is not None:
        return parse_count(samples, option="--samples")
    if epochs is not None:
        if not epochs > 0:
            raise InputError(f"--epochs: must be positive, got {epochs!r}")
        if dataset_size is None:
            try:
                from spottrain.profiler.zoo_info import zoo_info

                size = (zoo_info(workload.model).get("dataset") or {}).get("train_samples")
            except Exception:
                size = None
            if not size:
                raise InputError("--epochs needs --dataset-size (samples per epoch)")
            return float(epochs) * float(size)
        return float(epochs) * parse_count(dataset_size, option="--dataset-size")
    return None


def _quotas(items: list[str] | None) -> dict[str, int] | None:
    if not items:
        return None
    out: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--quota: expected TYPE=N (an instance type or GPU and a node count), got {item!r}")
        try:
            n = int(value.strip())
        except ValueError:
            raise InputError(f"--quota: expected a whole number of nodes after '=', got {item!r}") from None
        if n < 0:
            raise InputError(f"--quota: must be >= 0 nodes, got {item!r}")
        out[name.strip()] = n
    return out


def _ps(ps: int | None, sync: str) -> int | None:
    if ps is None:
        return None
    if ps < 0:
        raise InputError(f"--ps: must be >= 0, got {ps}")
    if ps == 0 and sync == "async":
        raise InputError("--ps: asynchronous training needs at least one parameter server")
    return ps


def _share(share: float | None, spot_only: bool, allow_on_demand: bool) -> float:
    if share is None:
        return 0.0
    if not 0.0 <= share < 1.0:
        raise InputError(f"--on-demand-share: expected a share in [0, 1), got {share!r}")
    if share > 0 and (spot_only or not allow_on_demand):
        raise InputError("--on-demand-share: --spot-only contradicts --on-demand-share")
    return share


def _render(result, out, report, refinement=None) -> None:
    from spottrain.plan_file import Plan

    console = Console()
    best = result.best
    p = best.prediction
    t = Table(title="Chosen plan", show_header=True)
    for col in ("nodes", "instance type", "GPU", "market", "zone", "$/h per node"):
        t.add_column(col)
    for g in best.groups:
        t.add_row(str(g.count), g.instance_type, f"{g.gpus_per_node}x {g.gpu}", "spot" if g.spot else "on-demand",
                  g.zone or g.region, f"{g.price_usd_per_hour:.3f}")
    console.print(t)
    from spottrain.planner.evidence import headline, headline_lines, headline_rows
    from spottrain.perf.throughput import explain_bottleneck

    hl = headline(result, refinement)
    console.print(f"throughput {p.throughput_samples_per_s:,.0f} samples/s ({p.throughput_low:,.0f}-"
                  f"{p.throughput_high:,.0f}, performance model"
                  + (", mixed precision" if best.workload.precision == "fp16" else "") + "), "
                  f"bottleneck [bold]{explain_bottleneck(p.bottleneck)}[/]")
    lines = headline_lines(hl)
    console.print(f"[bold]{lines[0]}[/]", highlight=False)
    cols, rows = headline_rows(hl)
    ht = Table(show_header=True, box=None, pad_edge=False)
    for c in cols:
        ht.add_column(c)
    for r in rows:
        ht.add_row(*r)
    console.print(ht)
    for line in lines[1:]:
        console.print(line, highlight=False)
    console.print(f"[dim]{result.explanation}[/]")
    rows = [("runner-up", r) for r in result.runners_up] + list(result.baselines.items())
    if rows:
        bt = Table(title="Alternatives (analytical model, evaluated like the chosen plan)")
        for col in ("", "cluster", "expected time", "expected cost", "P(deadline)"):
            bt.add_column(col)
        for name, b in rows:
            if isinstance(b, Plan):
                q = b.prediction
                bt.add_row(name, b.label, format_duration(q.duration_s), format_usd(q.cost_usd),
                           format_probability(q.p_meet_deadline))
            else:
                bt.add_row(name, f"[dim]{b}[/]", "", "", "")
        console.print(bt)
    if refinement is not None:
        _render_refinement(console, refinement)
    s = result.stats
    console.print(f"[dim]solver: {s.get('columns', 0):,} columns, {s.get('columns_after_pruning', 0)} after pruning, "
                  f"{_search_words(s)}, {s.get('seconds', 0):.3f} s[/]")
    if out is not None:
        console.print(f"plan saved to {out}")
    if report is not None:
        console.print(f"report written to {report}")


def _render_refinement(console, ref, top: int = 8) -> None:
    chosen = ref.plan.label
    t = Table(title=f"Simulated candidates (up to {ref.runs} runs each, {ref.total_runs:,} in all, {ref.seconds:.1f} s): "
                    "cheapest meeting the request in simulation is chosen")
    for col in ("cluster", "from", "analytical model $", "simulated $ (mean / p95)", "simulated mean time",
                "deadline met (simulated)", "runs",
                "replayed on"):
        t.add_column(col)
    ranked = sorted(ref.candidates, key=lambda c: (not c.eligible, c.mean_cost_usd))[:top]
    for c in ranked:
        name = f"[bold]{c.label}[/] (chosen)" if c.label == chosen else c.label
        met = format_rate(c.met_rate)
        t.add_row(name, c.origin, format_usd(c.predicted_cost_usd), f"{format_usd(c.mean_cost_usd)} / {format_usd(c.p95_cost_usd)}",
                  format_duration(c.mean_duration_s) if c.mean_duration_s < float("inf") else "-", met, str(c.runs),
                  c.availability)
    console.print(t)
    verdict = ("refine ran out of its time budget: the analytical plan is kept" if ref.timed_out
               else f"simulation changed the plan: {ref.analytical.label} -> {chosen}" if ref.changed
               else "simulation confirms the planner's choice")
    if not ref.timed_out and any(c.label == chosen and c.availability.startswith("no trace") for c in ref.candidates):
        verdict += " -- on the fitted lifetime model, not on traces of its type (see the evidence line)"
    console.print(verdict)
    for note in ref.notes:
        console.print(f"[dim]{note}[/]")


def _search_words(s: dict) -> str:
    """How the mixes were searched: plans enumerated against the MILP's rows, MILP solves, or both."""
    parts = []
    if s.get("plans_enumerated"):
        parts.append(plural(s["plans_enumerated"], "mix", "mixes") + " enumerated")
    if s.get("milp_calls") or not parts:
        parts.append(plural(s.get("milp_calls", 0), "MILP solve"))
    return ", ".join(parts) + f", {plural(s.get('exact_evaluations', 0), 'exact evaluation')}"
