"""`spottrain converge`: steps (and samples) to a target loss, from the loss curves of past runs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spottrain.errors import InputError

err = Console(stderr=True)


def _boundaries(text: str) -> tuple[float, ...] | str | None:
    if text == "auto":
        return "auto"
    if text == "none":
        return None
    try:
        steps = tuple(float(s) for s in text.split(","))
    except ValueError:
        raise InputError(f"expected auto, none or global steps such as 32000,48000; got {text!r}",
                         column="--lr-boundaries") from None
    if any(not math.isfinite(s) or s <= 0 for s in steps):
        raise InputError(f"expected steps > 0, got {text!r}", column="--lr-boundaries")
    return steps


def converge(
    curves: Annotated[Path, typer.Option(help="Loss-curve CSV of past runs: step, loss|error|accuracy [, workers, batch_size, staleness, run].")],
    target_loss: Annotated[list[float], typer.Option("--target-loss", help="Loss (or error) to reach; repeat for several.")],
    workers: Annotated[list[int] | None, typer.Option("--workers", help="Worker counts to predict; repeat (default: those in the curves).")] = None,
    batch_size: Annotated[float | None, typer.Option(help="Per-worker batch of the curves without a batch_size column, and of the predictions.")] = None,
    sync: Annotated[str, typer.Option(help="async (parameter server: N - 1 updates stale) or sync (global batch N x b, no staleness).")] = "async",
    form: Annotated[str, typer.Option(help="staleness (default) or spotdnn (the published loss model).")] = "staleness",
    lr_boundaries: Annotated[str, typer.Option(help="auto (find learning-rate drops), none, or global steps 32000,48000.")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON to stdout.")] = False,
) -> None:
    """Predict global steps and samples to reach a target loss for other worker counts.

    Fits the convergence model (spotDNN's loss model, or its staleness form per learning-rate
    phase) on the curves, then answers for each target and worker count.

    Example:
      spottrain converge --curves runs.csv --target-loss 0.15 --workers 8 --workers 16
    """
    from spottrain.perf.convergence import FORMS, ConvergenceModel, read_loss_curves

    if sync not in ("sync", "async"):
        raise InputError(f"expected sync or async, got {sync!r}", column="--sync")
    if form not in FORMS:
        raise InputError(f"expected one of {', '.join(FORMS)}, got {form!r}", column="--form")
    if not target_loss or any(not math.isfinite(t) or t <= 0 for t in target_loss):
        raise InputError(f"expected losses > 0, got {target_loss}", column="--target-loss")
    if workers and any(n < 1 for n in workers):
        raise InputError(f"expected worker counts >= 1, got {workers}", column="--workers")
    if batch_size is not None and not batch_size > 0:
        raise InputError(f"expected a batch size > 0, got {batch_size:g}", column="--batch-size")
    bounds = _boundaries(lr_boundaries)
    data = read_loss_curves(curves, batch_size=batch_size)
    with err.status("fitting the convergence model ...", spinner="dots"):
        model = ConvergenceModel(lr_boundaries=bounds, form=form).fit(data)
    b = batch_size or data[0].batch_size
    counts = sorted(set(workers or [c.workers for c in data]))
    fitted_n = model.worker_counts_
    far = [n for n in counts if n > 2 * fitted_n[-1] or n < fitted_n[0] / 2]
    if far and not as_json:
        err.print(f"[yellow]warning:[/] extrapolating to {', '.join(map(str, far))} worker(s); the curves have "
                  f"{', '.join(map(str, fitted_n))}", highlight=False)
    out = []
    for t in target_loss:
        for n in counts:
            if sync == "sync":
                steps = model.steps_to_target(t, batch_size_global=b * n, workers=n, staleness=0.0)
                per_step = b * n
            else:
                steps = model.steps_to_target(t, batch_size_global=b, workers=n)
                per_step = b
            low, high = model.steps_interval(t, batch_size_global=per_step if sync == "sync" else b, workers=n,
                                             staleness=0.0 if sync == "sync" else None)
            out.append({"target_loss": t, "workers": n, "batch_size": b, "sync": sync,
                        "steps": None if math.isinf(steps) else steps,
                        "steps_low": None if math.isinf(low) else low,
                        "steps_high": None if math.isinf(high) else high,
                        "samples": None if math.isinf(steps) else steps * per_step,
                        "at_lr_drop": any(abs(steps - lo) < 1e-6 for lo in model.lr_boundaries_),
                        "extrapolated": n in far})
    fitted = {"lr_boundaries": list(model.lr_boundaries_), "residual_std": model.residual_std_,
              "steps_log_error_q90": model.steps_log_error_q90(),
              "phases": [{"start_step": lo, "coef": dict(zip(("g1", "g2", "g3", "g4", "g5", "g6"), c))}
                         for lo, c in model.phases_]}
    if as_json:
        print(json.dumps({"curves": str(curves), "form": form, **fitted, "predictions": out}, indent=1))
        return
    where = ", ".join(f"{c.workers} worker(s), batch {c.batch_size:g}: {len(c.steps)} points" for c in data)
    bound_text = ", ".join(f"{s:,.0f}" for s in model.lr_boundaries_) or "none"
    t = Table(box=box.SIMPLE_HEAD, title=f"steps to target ({form} form, {sync}; LR drops at {bound_text}; "
                                         f"fit residual {model.residual_std_:.3g})",
              caption=f"fitted on {where}")
    q = model.steps_log_error_q90()
    how = ("its own errors on held-out worker counts" if model.steps_interval_is_calibrated()
           else "the shipped curves' errors from one worker count (give curves of 3+ counts to calibrate it)")
    t.caption += f"\n~90 % interval: x/{math.exp(q):.2f}, from {how}"
    for c in ("target", "workers", "batch/worker", "global steps", "~90 % interval", "samples", "note"):
        t.add_column(c, justify="left" if c == "note" else "right")
    for r in out:
        reach = r["steps"] is not None
        note = ("reached by the LR drop" if r["at_lr_drop"] else "") + (" (extrapolated)" if r["extrapolated"] else "")
        t.add_row(f"{r['target_loss']:g}", str(r["workers"]), f"{r['batch_size']:g}",
                  f"{r['steps']:,.0f}" if reach else "not reached",
                  f"{r['steps_low']:,.0f} - {r['steps_high']:,.0f}" if reach else "-",
                  f"{r['samples']:,.0f}" if reach else "-", note.strip())
    Console().print(t)


def register(app: typer.Typer) -> None:
    """Add `converge` to the app."""
    app.command()(converge)
