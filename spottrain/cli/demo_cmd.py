"""`spottrain demo`: every stage end to end on embedded defaults, with an optional HTML report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from spottrain.errors import InputError
from spottrain.units import format_duration, format_probability, format_usd, parse_duration_s

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions


def register(app: typer.Typer) -> None:
    """Add ``spottrain demo`` to the app."""

    @app.command()
    def demo(
        report: Optional[Path] = typer.Option(None, "--report", help="Write a self-contained HTML report here (FILE.html)."),
        workers: int = typer.Option(4, "--workers", min=2, max=16, help="Workers of the local elastic run."),
        steps: Optional[int] = typer.Option(None, "--steps", min=10, help="Training steps of the local run (default 400; 100 with --quick)."),
        deadline: str = typer.Option("30m", "--deadline", help="Deadline of the planned cloud job (e.g. 30m, 2h)."),
        quick: bool = typer.Option(False, "--quick", help="Smaller profile, fewer simulated runs, a shorter local run."),
        seed: int = typer.Option(0, "--seed", help="Random seed of the simulation and the revocation schedule."),
        as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout."),
        force: bool = typer.Option(False, "--force", help="Overwrite --report even if it is not a spottrain report."),
    ) -> None:
        """Profile, predict, plan, simulate and run a small job on this machine, and compare.

        Finishes in a few minutes on 2 CPU cores; needs no cloud account and no network.
        """
        from spottrain.demo import DemoConfig, run_demo
        from spottrain.report import is_spottrain_report

        err = Console(stderr=True)
        if report is not None:
            # Refuse before minutes of work, not after.
            if report.suffix.lower() not in (".html", ".htm"):
                raise InputError("--report: expected a file name ending in .html", file=str(report))
            if report.exists() and not force and not is_spottrain_report(report):
                raise InputError("file exists and is not a spottrain report; pass --force to overwrite it", file=str(report))
        deadline_s = parse_duration_s(deadline, option="--deadline", require_unit=True)
        if deadline_s <= 0:
            raise InputError(f"--deadline: expected a positive duration, got {deadline!r}")
        kwargs = {"workers": workers, "quick": quick, "seed": seed, "deadline_s": deadline_s}
        if steps is not None:
            kwargs["steps"] = steps
        config = DemoConfig(**kwargs)

        total = 6
        counter = {"n": 0, "title": ""}
        status = err.status("starting", spinner="dots")
        status.start()

        def progress(key, title, res):
            if res is None:
                counter["n"] += 1
                counter["title"] = title
                status.update(f"[{counter['n']}/{total}] {title} ...")
                return
            mark = {"ok": "[green]done[/]", "not available": "[yellow]not available[/]"}.get(res.status, "[red]failed[/]")
            note = f" ({res.reason})" if res.reason else ""
            err.print(f"[{counter['n']}/{total}] {title}: {mark} in {res.seconds:.1f} s{note}", highlight=False)

        def detail(msg):
            status.update(f"[{counter['n']}/{total}] {counter['title']} ... {msg}")

        try:
            result = run_demo(config, progress=progress, detail=detail)
        finally:
            status.stop()

        if report is not None:
            from spottrain.report.demo_report import build_demo_report

            path = build_demo_report(result).save(report, force=force)
            err.print(f"report written to {path}")
            result["report"] = str(path)
        if as_json:
            slim = json.loads(json.dumps(result, default=str))
            for st in slim["stages"].values():
                st["data"].pop("traceback", None)
            print(json.dumps(slim, indent=2))
        else:
            _print_summary(result)


def _print_summary(result: dict) -> None:

    console = Console()
    cfg = result.get("config", {})
    table = Table(title=f"spottrain demo: {cfg.get('model')}, {cfg.get('epochs', 0):g} epochs, deadline "
                        f"{format_duration(cfg.get('deadline_s', 0))} at {format_probability(cfg.get('confidence'))}")
    for col in ("stage", "status", "seconds", "result"):
        table.add_column(col)
    for st in result["stages"].values():
        table.add_row(st["title"], st["status"], f"{st['seconds']:.1f}", _headline(st))
    console.print(table)
    run = result["stages"].get("run", {})
    if run.get("status") == "ok":
        cmp = Table(title="local run: predicted vs actual")
        for col in ("quantity", "predicted", "actual"):
            cmp.add_column(col)
        for row in run["data"]["compare"]:
            cmp.add_row(str(row["quantity"]), _fmt(row["predicted"]), _fmt(row["actual"]))
        console.print(cmp)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return str(v)


def _headline(st: dict) -> str:
    if st["status"] != "ok":
        return st["reason"][:90]
    d = st["data"]
    key = st["key"]
    if key == "profile":
        s = d["summary"]
        return f"{s['samples_per_s']:.1f} samples/s at batch {s['batch_size']} ({s['device']})"
    if key == "predict":
        best = max(d["rows"], key=lambda r: r["throughput"])
        return f"{len(d['rows'])} GPU types; fastest {best['gpu']} {best['throughput']:.0f} samples/s"
    if key == "transience":
        return f"{len(d['rows'])} lifetime models fitted"
    if key == "plan":
        c = d.get("chosen") or {}
        ev = (d.get("headline") or {}).get("evidence", {}).get("title", "")
        return (f"{d.get('label')}: {format_duration(c.get('duration_s', 0))}, {format_usd(c.get('cost_usd', 0))}, "
                f"P(deadline {format_duration(d.get('deadline_s', 0))}) {format_probability(c.get('p_meet_deadline'))} "
                f"(analytical model" + (f"; evidence {ev})" if ev else ")"))
    if key == "simulate":
        return d.get("headline", "")
    if key == "run":
        return d.get("headline", "")
    return ""
