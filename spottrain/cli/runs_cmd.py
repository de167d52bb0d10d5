"""`spottrain runs list/show/rm`: what your runs left in the store for the models."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spottrain.cli.profile_cmd import StoreOpt

runs_app = typer.Typer(help="Your recorded runs and what they measured: list, show, rm.", no_args_is_help=True,
                       add_completion=False)


def _summary(run, rows: list[dict], points: list[dict]) -> dict:
    """One run's line: its record and what it left for the models (its measured ``rows`` and loss ``points``)."""
    from spottrain.perf.own_runs import records_noise_scale

    models = sorted({str(r["model"]) for r in rows} | {str(p["model"]) for p in points})
    return {"run_id": run.run_id, "created_at": run.created_at, "updated_at": run.updated_at, "status": run.status,
            "backend": (run.meta or {}).get("backend"), "models": models, "measured_rows": len(rows),
            "loss_points": len(points), "noise_scale": records_noise_scale(points)}


def _open(store):
    """The store, read-only (these commands never create or upgrade one); ``None`` when there is none."""
    from spottrain.perf.own_runs import store_location
    from spottrain.store import Store

    path = store_location(store)
    if not path.is_file():
        Console(stderr=True).print(f"no runs recorded in {path} yet (spottrain run writes them)", highlight=False)
        return None
    return Store(path, read_only=True)


@runs_app.command("list")
def runs_list(
    model: Annotated[str | None, typer.Option(help="Only runs that measured this model.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list to stdout.")] = False,
    store: StoreOpt = None,
) -> None:
    """List recorded runs, newest first, with the measured rows and loss curve each left."""
    db = _open(store)
    if db is None:
        if as_json:
            print("[]")
        return
    with db:
        out = [_summary(r, db.measurements(run_id=r.run_id), db.loss_points(run_id=r.run_id)) for r in db.list_runs()]
        path = db.path
    if model is not None:
        out = [r for r in out if model in r["models"]]
    if as_json:
        print(json.dumps(out, indent=1))
        return
    table = Table(title=f"{len(out)} run(s) in {path}", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("run", "updated (UTC)", "status", "backend", "model", "rows", "loss points"):
        table.add_column(col, justify="right" if col in ("rows", "loss points") else "left")
    for r in out:
        points = f"{r['loss_points']}" + (" + noise scale" if r["noise_scale"] else "") if r["loss_points"] else "-"
        table.add_row(r["run_id"], r["updated_at"][:16].replace("T", " "), r["status"], r["backend"] or "-",
                      ", ".join(r["models"]) or "-", str(r["measured_rows"] or "-"), points)
    table.caption = "their rows and loss curves inform predict, plan and converge (spottrain runs rm RUN: no longer)"
    Console().print(table)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id (spottrain runs list).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the run, its rows and its loss curve as JSON.")] = False,
    store: StoreOpt = None,
) -> None:
    """Show one run: its measured rows and its loss curve."""
    from spottrain.errors import InputError

    db = _open(store)
    if db is None:
        raise InputError(f"no run {run_id}: nothing is recorded yet")
    with db:
        run = db.get_run(run_id)
        rows = db.measurements(run_id=run_id)
        points = db.loss_points(run_id=run_id)
        line = _summary(run, rows, points)
    if as_json:
        print(json.dumps({**line, "meta": run.meta, "rows": rows, "loss_curve": points}, indent=1))
        return
    console = Console()
    console.print(f"run {run_id}: {run.status}, {line['backend'] or 'backend not recorded'}, updated "
                  f"{run.updated_at[:16].replace('T', ' ')} UTC", highlight=False)
    if rows:
        t = Table(title="measured rows", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("model", "cluster", "batch/GPU", "samples/s", "step", "all-reduce wait", "steps"):
            t.add_column(col, justify="left" if col in ("model", "cluster") else "right")
        for r in rows:
            sync = f"{1000 * r['sync_time_s']:.1f} ms" if r["sync_time_s"] is not None else "-"
            t.add_row(str(r["model"]), str(r["cluster"]), str(r["batch_size"]), f"{r['throughput']:,.1f}",
                      f"{1000 * r['step_time_s']:.1f} ms", sync, str(r["steps"]))
        console.print(t)
    if points:
        t = Table(title="training-loss curve", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("step", "loss", "global batch", "workers", "|G|^2", "tr(Sigma)"):
            t.add_column(col, justify="right")
        shown = points if len(points) <= 12 else points[:6] + points[-6:]
        for p in shown:
            t.add_row(str(p["step"]), f"{p['loss']:.4g}", str(p["global_batch_size"]), str(p["workers"]),
                      "-" if p["grad_sqr"] is None else f"{p['grad_sqr']:.4g}",
                      "-" if p["grad_var"] is None else f"{p['grad_var']:.4g}")
        if len(points) > 12:
            t.caption = f"first and last 6 of {len(points)} points (--json: all)"
        console.print(t)
    if not rows and not points:
        console.print("it left no measured row and no loss curve", highlight=False)


@runs_app.command("rm")
def runs_rm(
    run_ids: Annotated[list[str], typer.Argument(help="Run id(s) to delete, with their rows and loss curves.")],
    store: StoreOpt = None,
) -> None:
    """Delete recorded runs (all or none): their rows and curves stop informing the models."""
    from spottrain.errors import InputError
    from spottrain.perf.own_runs import store_location
    from spottrain.store import Store

    path = store_location(store)
    if not path.is_file():
        raise InputError("no store here (nothing has been recorded yet)", file=str(path))
    with Store(path) as db:
        n = db.remove_runs(list(run_ids))
    Console(stderr=True).print(f"removed {n} run(s) from {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the `runs` group to the app."""
    app.add_typer(runs_app, name="runs")
