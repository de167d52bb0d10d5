"""`spottrain converge`: steps (and samples) to a target loss, from the loss curves of past runs."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from spottrain.errors import InputError
from spottrain.units import plural

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions

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
    curves: Annotated[Path | None, typer.Option(help="Loss-curve CSV of past runs: step, loss|error|accuracy [, workers, batch_size, staleness, run]. Without it: the training-loss curves your runs of --model stored.")] = None,
    target_loss: Annotated[list[float] | None, typer.Option("--target-loss", help="Loss (or error = 1 - accuracy) to reach; repeat for several.")] = None,
    target: Annotated[list[float] | None, typer.Option("--target", help="Instead of --target-loss: a value of the curves' own metric to reach (accuracy 0.75, F1 88, loss 0.2); repeat for several.")] = None,
    workers: Annotated[list[int] | None, typer.Option("--workers", help="Worker counts to predict; repeat (default: those in the curves).")] = None,
    global_batch: Annotated[list[int] | None, typer.Option("--global-batch", help="With --sync sync: global batch sizes to predict; repeat (default: --workers x --batch-size, else the curves' own).")] = None,
    batch_size: Annotated[float | None, typer.Option(help="Per-worker batch of the curves without a batch_size column, and of the predictions.")] = None,
    sync: Annotated[str | None, typer.Option(help="async (parameter server: N - 1 updates stale) or sync (global batch N x b, no staleness); default: async for --curves, sync for your runs' curves (spottrain run trains synchronously).")] = None,
    form: Annotated[str, typer.Option(help="staleness (default) or spotdnn (the published loss model).")] = "staleness",
    lr_boundaries: Annotated[str, typer.Option(help="auto (find learning-rate drops), none, or global steps 32000,48000.")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON to stdout.")] = False,
    model: Annotated[str | None, typer.Option(help="The model your runs (spottrain run) trained: their stored training-loss curves are fitted when --curves is not given.")] = None,
    from_store: Annotated[bool | None, typer.Option("--from-store/--no-from-store", help="Use the training-loss curves your runs of --model stored (default: when --model is given); never mixed with --curves.")] = None,
) -> None:
    """Predict global steps and samples to reach a target loss for other worker counts or batch sizes.

    Asynchronous (parameter-server) training: fits the convergence model (spotDNN's loss model,
    or its staleness form per learning-rate phase) and answers per worker count. Synchronous
    training with curves at two or more global batch sizes, or with a noise_scale column: fits the
    batch-size model (gradient noise scale + large-batch law, spottrain.perf.batch_scaling) and
    answers per global batch (more workers at the same per-worker batch = a larger global batch).

    Your own runs: `spottrain run` stores each run's training loss (the chief's mean over windows
    of steps); without --curves, --model M fits the curves of M's runs (steps to a training loss).

    Example:
      spottrain converge --curves runs.csv --target-loss 0.15 --workers 8 --workers 16
      spottrain converge --curves pollux_cifar10.csv --sync sync --target 0.85 --global-batch 768
      spottrain converge --model resnet50 --target-loss 2.0 --global-batch 512
    """
    from spottrain.perf.batch_scaling import applies_to
    from spottrain.perf.convergence import read_loss_curves
    from spottrain.perf.own_runs import cli_own_curves

    sync = sync or ("async" if curves is not None else "sync")  # spottrain run trains synchronously
    _check_flags(curves, sync=sync, form=form, target_loss=target_loss, target=target, workers=workers,
                 global_batch=global_batch, batch_size=batch_size)
    bounds = _boundaries(lr_boundaries)
    own = cli_own_curves(from_store, model, curves_given=curves is not None,
                         echo=lambda text, warning: err.print(("[yellow]warning:[/] " if warning else "")
                                                              + escape(text), highlight=False, soft_wrap=True))
    if curves is not None:
        data, source = read_loss_curves(curves, batch_size=batch_size), str(curves)
    elif own is not None:
        data, source = own.curves, f"{own.store_path} (runs {', '.join(own.runs)})"
    else:
        raise InputError("give --curves FILE (loss curves of past runs), or --model M whose runs (spottrain run) "
                         "stored loss curves", column="--curves")
    if target is not None:
        target_loss = _targets_as_losses(data, target)
    if curves is None and workers and not global_batch and batch_size is None:
        raise InputError(f"your runs' curves are at global batch {', '.join(f'{c.batch_size:g}' for c in data)}: "
                         "with --workers give --batch-size (per worker; global batch = workers x it), or give "
                         "--global-batch", column="--workers")
    if sync == "sync" and (applies_to(data) or curves is None):
        _converge_batch(source, data, target_loss, workers, global_batch, batch_size, as_json)
        return
    if applies_to(data) and not as_json:
        err.print("[yellow]note:[/] these are synchronous runs at several global batch sizes: --sync sync predicts "
                  "per global batch with the batch-size model; --sync async (the default) fits the parameter-server "
                  "staleness model", highlight=False)
    _converge_workers(source, data, target_loss, workers, batch_size, sync=sync, form=form, bounds=bounds,
                      as_json=as_json)


def _check_flags(curves: Path | None, *, sync: str, form: str, target_loss: list[float] | None, target: list[float] | None,
                 workers: list[int] | None, global_batch: list[int] | None, batch_size: float | None) -> None:
    """Every flag checked before the curves are read; the first wrong one is named (exit 2)."""
    from spottrain.cli import options
    from spottrain.perf.convergence import FORMS

    if sync not in ("sync", "async"):
        raise InputError(f"expected sync or async, got {sync!r}", column="--sync")
    if form not in FORMS:
        raise InputError(f"expected one of {', '.join(FORMS)}, got {form!r}", column="--form")
    if (target_loss is None) == (target is None):
        raise InputError("give --target-loss L (loss or error) or --target V (a value of the curves' metric)",
                         column="--target-loss")
    if target_loss is not None and any(not math.isfinite(t) or t <= 0 for t in target_loss):
        raise InputError(f"expected losses > 0, got {target_loss}", column="--target-loss")
    if target is not None and any(not math.isfinite(t) for t in target):
        raise InputError(f"expected finite values, got {target}", column="--target")
    if workers and any(n < 1 for n in workers):
        raise InputError(f"expected worker counts >= 1, got {workers}", column="--workers")
    if global_batch and any(b < 1 for b in global_batch):
        raise InputError(f"expected global batch sizes >= 1, got {global_batch}", column="--global-batch")
    if global_batch and sync != "sync":
        raise InputError("--global-batch applies to synchronous training: add --sync sync", column="--global-batch")
    if batch_size is not None and not batch_size > 0:
        raise InputError(f"expected a batch size > 0, got {batch_size:g}", column="--batch-size")
    for n in workers or ():
        options.count(n, "--workers", high=options.MAX_NODES)
    for b in global_batch or ():
        options.count(b, "--global-batch", high=options.MAX_BATCH * options.MAX_NODES)
    options.positive(batch_size, "--batch-size", high=options.MAX_BATCH)
    if len(workers or ()) + len(global_batch or ()) + len(target_loss or ()) + len(target or ()) > 1000:
        raise InputError("more than 1000 worker counts, batch sizes and targets: give fewer", column="--workers")
    if curves is not None:
        options.input_file(curves, "--curves")


def _targets_as_losses(data: list, target: list[float]) -> list[float]:
    """--target values of the curves' own metric (accuracy, F1, loss) as the losses the models fit."""
    first = data[0]
    for v in target:
        if not v > 0:
            raise InputError(f"the curves' metric is {first.metric}: expected a target > 0, got {v:g}",
                             column="--target")
    losses = [first.to_loss(v) for v in target]
    if any(not v > 0 for v in losses):
        best = first.from_loss(0.0)
        raise InputError(f"expected targets short of the perfect {first.metric} {best:g}, got {target}",
                         column="--target")
    return losses


def _converge_workers(path: str, data: list, target_loss: list[float], workers: list[int] | None,
                      batch_size: float | None, *, sync: str, form: str, bounds: tuple[float, ...] | str | None,
                      as_json: bool) -> None:
    """Predictions per worker count from the convergence model (spotDNN's loss model, or its
    staleness form per learning-rate phase)."""
    from spottrain.perf.convergence import ConvergenceModel

    with err.status("fitting the convergence model ...", spinner="dots"):
        model = ConvergenceModel(lr_boundaries=bounds, form=form).fit(data)
    b = batch_size or data[0].batch_size
    counts = sorted(set(workers or [c.workers for c in data]))
    fitted_n = model.worker_counts_
    far = [n for n in counts if n > 2 * fitted_n[-1] or n < fitted_n[0] / 2]
    if far and not as_json:
        noun = "worker" if len(far) == 1 and far[0] == 1 else "workers"
        err.print(f"[yellow]warning:[/] extrapolating to {', '.join(map(str, far))} {noun}; the curves have "
                  f"{', '.join(map(str, fitted_n))}", highlight=False)
    out = [_workers_row(model, t, n, b, sync=sync, extrapolated=n in far) for t in target_loss for n in counts]
    if as_json:
        fitted = {"lr_boundaries": list(model.lr_boundaries_), "residual_std": model.residual_std_,
                  "steps_log_error_q90": model.steps_log_error_q90(),
                  "phases": [{"start_step": lo, "coef": dict(zip(("g1", "g2", "g3", "g4", "g5", "g6"), c))}
                             for lo, c in model.phases_]}
        print(json.dumps({"curves": str(path), "form": form, **fitted, "predictions": out}, indent=1))
        return
    _print_workers_table(model, data, out, form=form, sync=sync)


def _workers_row(model, t: float, n: int, b: float, *, sync: str, extrapolated: bool) -> dict:
    """Steps, their ~90 % interval and samples to loss ``t`` on ``n`` workers of batch ``b``."""
    per_step = b * n if sync == "sync" else b
    if sync == "sync":
        steps = model.steps_to_target(t, batch_size_global=per_step, workers=n, staleness=0.0)
    else:
        steps = model.steps_to_target(t, batch_size_global=b, workers=n)
    low, high = model.steps_interval(t, batch_size_global=per_step, workers=n,
                                     staleness=0.0 if sync == "sync" else None)
    return {"target_loss": t, "workers": n, "batch_size": b, "sync": sync,
            "steps": None if math.isinf(steps) else steps,
            "steps_low": None if math.isinf(low) else low,
            "steps_high": None if math.isinf(high) else high,
            "samples": None if math.isinf(steps) else steps * per_step,
            "at_lr_drop": any(abs(steps - lo) < 1e-6 for lo in model.lr_boundaries_),
            "extrapolated": extrapolated}


def _print_workers_table(model, data: list, out: list[dict], *, form: str, sync: str) -> None:
    where = ", ".join(f"{plural(c.workers, 'worker')}, batch {c.batch_size:g}: {len(c.steps)} points" for c in data)
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


def _converge_batch(path, data, target_loss, workers, global_batch, batch_size, as_json) -> None:
    """Synchronous predictions per global batch from the batch-size model."""
    from spottrain.perf.batch_scaling import BatchScalingModel
    from spottrain.perf.throughput import ExtrapolationWarning

    model = BatchScalingModel().fit(data)
    if global_batch:
        batches = [(float(b), None) for b in global_batch]
    elif workers:
        b = batch_size or data[0].batch_size
        batches = [(b * n, n) for n in workers]
    else:
        batches = [(b, None) for b in model.batch_sizes_]
    batches = sorted(set(batches))
    out, notes = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ExtrapolationWarning)
        for t in target_loss:
            for b, n in batches:
                steps = model.steps_to_target(t, batch_size_global=b)
                low, high = model.steps_interval(t, batch_size_global=b)
                fin = math.isfinite(steps)
                out.append({"target_loss": t, "target": data[0].from_loss(t), "metric": data[0].metric,
                            "global_batch": b, "workers": n, "sync": "sync",
                            "steps": steps if fin else None, "steps_low": low if fin else None,
                            "steps_high": high if fin else None, "samples": steps * b if fin else None,
                            "extrapolated": model.extrapolation_doublings(b) > 0})
    notes = [str(w.message) for w in caught if issubclass(w.category, ExtrapolationWarning)]
    q = model.steps_log_error_q90()
    how = ("its own errors on held-out batch sizes" if model.steps_interval_is_calibrated()
           else "the shipped Pollux curves' errors (give curves of 3+ batch sizes to calibrate it)")
    basis = ("the gradient noise scale and the large-batch law" if model.uses_noise_scale_
             else "the large-batch law S(B) = S_min (1 + B_noise / B)")
    if as_json:
        print(json.dumps({"curves": str(path), "model": "batch_scaling", "batch_sizes": list(model.batch_sizes_),
                          "uses_noise_scale": model.uses_noise_scale_, "steps_log_error_q90": q,
                          "steps_interval_is_calibrated": model.steps_interval_is_calibrated(),
                          "warnings": notes, "predictions": out}, indent=1))
        return
    for note in notes:
        err.print(f"[yellow]warning:[/] {note}", highlight=False)
    metric = data[0].metric
    t = Table(box=box.SIMPLE_HEAD, title=f"steps to target (sync, batch-size model: {basis})",
              caption=f"fitted on global batches {', '.join(f'{b:g}' for b in model.batch_sizes_)}\n"
                      f"~90 % interval: x/{math.exp(q):.2f} inside the measured batches (wider outside), from {how}")
    for c in (metric, "global batch", "workers", "steps", "~90 % interval", "samples", "note"):
        t.add_column(c, justify="left" if c == "note" else "right")
    for r in out:
        reach = r["steps"] is not None
        t.add_row(f"{r['target']:g}", f"{r['global_batch']:g}", "-" if r["workers"] is None else str(r["workers"]),
                  f"{r['steps']:,.0f}" if reach else "not reached",
                  f"{r['steps_low']:,.0f} - {r['steps_high']:,.0f}" if reach else "-",
                  f"{r['samples']:,.0f}" if reach else "-", "extrapolated" if r["extrapolated"] else "")
    Console().print(t)


def register(app: typer.Typer) -> None:
    """Add `converge` to the app."""
    app.command()(converge)
