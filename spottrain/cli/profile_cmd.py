"""`spottrain profile` (measure a model) and `spottrain profiles list/show/rm` (the store)."""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spottrain.errors import InputError
from spottrain.units import format_interval, format_probability, format_step_time, plural

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions

StoreOpt = Annotated[
    Path | None,
    typer.Option("--store", help="SQLite store file (default: $SPOTTRAIN_STORE or the user data directory)."),
]

profiles_app = typer.Typer(help="Stored profiles: list, show, rm.", no_args_is_help=True, add_completion=False)


def _fmt_si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _fmt_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for factor, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if value >= factor:
            return f"{value / factor:.3g} {unit}"
    return f"{value:.0f} B"


def _ms(seconds: float) -> str:
    return format_step_time(seconds * 1e3)


def render_profile(p: Any, console: Console, *, title: str | None = None) -> None:
    """Readable summary of a :class:`~spottrain.profiler.schema.Profile`."""
    dev = p.device
    table = Table(title=title or f"profile of {p.model} (batch {p.batch_size})", box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("device", f"{dev.get('kind')}: {dev.get('name')} ({p.precision}, {p.optimizer})")
    table.add_row("parameters", f"{p.param_count:,}  (gradients {_fmt_bytes(p.gradient_bytes)} per step)")
    table.add_row("FLOPs / sample", f"forward {_fmt_si(p.flops_per_sample_forward, 'FLOP')}, backward {_fmt_si(p.flops_per_sample_backward, 'FLOP')}")
    table.add_row("step time", f"{_ms(p.step_time_s)} median over {plural(p.iterations, 'iteration')}")
    for phase in ("forward", "backward", "optimizer", "total"):
        t = p.timing.get(phase)
        if t is not None:
            table.add_row(f"  {phase}", f"{_ms(t.median_s)}  (IQR {_ms(t.iqr_s)}, p10-p90 {_ms(t.p10_s)}-{_ms(t.p90_s)})")
    table.add_row("throughput", f"{p.samples_per_s:,.1f} samples/s")
    peak = dev.get("peak_tflops")
    frac = (f", {format_probability(p.fraction_of_peak)} of peak {_fmt_si(peak * 1e12, 'FLOP/s')}"
            if p.fraction_of_peak is not None and peak else ", peak unknown")
    table.add_row("achieved", f"{_fmt_si(p.achieved_tflops * 1e12, 'FLOP/s')}{frac}" if p.achieved_tflops is not None else "-")
    mem = p.memory
    if mem:
        table.add_row(
            "memory",
            f"peak {_fmt_bytes(mem.get('peak_bytes'))}, static {_fmt_bytes(mem.get('static_bytes'))}, "
            f"activations {_fmt_bytes(mem.get('activation_bytes_per_sample'))}/sample",
        )
    if p.loss_curve:
        first, last = p.loss_curve[0][1], p.loss_curve[-1][1]
        table.add_row("loss curve", f"{len(p.loss_curve)} steps, {first:.4g} -> {last:.4g} ({p.loss_curve_source})")
    for note in p.notes:
        table.add_row("note", note)
    console.print(table)


def _progress_bar(console: Console):  # -> (callback, Progress)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done, total=total)

    return update, bar


CPU_ITERATIONS, CPU_WARMUP = 5, 1
"""Defaults on a CPU: a CPU step of a real model takes seconds, and its time varies little."""
GPU_ITERATIONS, GPU_WARMUP = 20, 3


def _progress_lines(console: Console):
    """Progress as plain lines (output is not a terminal: a log, a pipe, CI): one line per step
    of the costly phases, with the elapsed time."""
    t0 = time.perf_counter()

    def update(phase: str, done: int, total: int) -> None:
        if phase == "probe" and done == 0:
            console.print("profile: probing FLOPs and memory on a 2-sample batch ...", highlight=False)
            return
        if phase == "probe":
            return
        console.print(f"profile: {phase} {done}/{total} ({format_interval(time.perf_counter() - t0)} elapsed)",
                      highlight=False)

    return update


def _estimate_printer(console: Console):
    """Says what the run will cost before its costly part starts."""

    def show(info: dict[str, Any]) -> None:
        if info["step_s"] is None:
            text = (f"profile: {plural(info['steps'], 'step')} of batch {info['batch_size']} to run on "
                    f"{info['device']}, {_fmt_si(info['flops_per_step'], 'FLOP')} each, peak memory about "
                    f"{_fmt_bytes(info['memory_bytes'])}; the time follows after the first step "
                    "(--batch-size, --iterations or --max-time make it shorter)")
        else:
            text = (f"profile: first step {format_step_time(1e3 * info['step_s'])}: expected about "
                    f"{format_interval(info['remaining_s'])} more for the remaining steps")
        console.print(text, highlight=False, soft_wrap=True)

    return show


def profile(
    model: Annotated[str, typer.Option("--model", "-m", help="Zoo name (see `spottrain profile --list-models`) or module:function returning (model, batch).")] = "",
    batch_size: Annotated[int | None, typer.Option("--batch-size", "-b", help="Samples per step (default: the zoo model's reference batch, or the entry point's).")] = None,
    iterations: Annotated[int | None, typer.Option(help="Measured iterations after warm-up (default: 5 on CPU, 20 on a GPU).")] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up iterations, not measured (default: 1 on CPU, 3 on a GPU).")] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda (cuda:N).")] = "cpu",
    precision: Annotated[str, typer.Option(help="fp32, or amp (autocast: fp16 + GradScaler on CUDA, bf16 on CPU).")] = "fp32",
    optimizer: Annotated[str, typer.Option(help="Optimizer stepped: sgd (momentum 0.9), adam or adamw.")] = "sgd",
    lr: Annotated[float | None, typer.Option(help="Learning rate (default 0.01 for sgd, 1e-3 for adam).")] = None,
    loss_steps: Annotated[int, typer.Option("--loss-steps", help="Also train K steps and record the loss curve (0: none).")] = 0,
    data: Annotated[str | None, typer.Option("--data", help="module:function returning an iterable of batches for --loss-steps.")] = None,
    max_time: Annotated[float | None, typer.Option("--max-time", help="Stop measuring after this many seconds (at least 3 iterations).")] = None,
    name: Annotated[str | None, typer.Option(help="Name to store the profile under (default: the model).")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the profile JSON to this file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile JSON to stdout.")] = False,
    store: StoreOpt = None,
    no_store: Annotated[bool, typer.Option("--no-store", help="Do not save the profile in the store.")] = False,
    list_models: Annotated[bool, typer.Option("--list-models", help="List the built-in zoo and exit.")] = False,
) -> None:
    """Measure a training step of a model: FLOPs, memory, forward/backward/optimizer time.

    Example: spottrain profile --model resnet50 --batch-size 64 --device cuda --precision amp
    """
    if list_models:
        _list_models(as_json)
        return
    precision, optimizer = _check_flags(model=model, batch_size=batch_size, iterations=iterations, warmup=warmup,
                                        lr=lr, loss_steps=loss_steps, max_time=max_time, device=device,
                                        precision=precision, optimizer=optimizer, name=name, out=out, force=force,
                                        data=data)
    from spottrain.store import Store

    db = None if no_store else Store(store)  # fail on a bad --store before measuring
    result = _measure(model, batch_size, device=device, precision=precision, optimizer=optimizer, lr=lr,
                      iterations=iterations, warmup=warmup, loss_steps=loss_steps, max_time=max_time, data=data,
                      name=name)
    _save_and_report(result, db, out=out, force=force, as_json=as_json)


def _check_flags(*, model: str, batch_size: int | None, iterations: int | None, warmup: int | None, lr: float | None,
                 loss_steps: int, max_time: float | None, device: str, precision: str, optimizer: str,
                 name: str | None, out: Path | None, force: bool, data: str | None) -> tuple[str, str]:
    """Every flag checked before torch is imported; the first wrong one is named (exit 2). Returns
    ``precision`` and ``optimizer`` as spelled by the profiler."""
    if not model:
        raise InputError("expected --model NAME (a zoo model) or module:function", column="--model")
    from spottrain.cli import options

    options.name(model, "--model")
    options.count(batch_size, "--batch-size", high=options.MAX_BATCH)
    options.count(iterations, "--iterations", high=100_000)
    options.count(warmup, "--warmup", low=0, high=10_000)
    options.positive(lr, "--lr", high=1e3)
    options.count(loss_steps, "--loss-steps", low=0, high=1_000_000)
    options.positive(max_time, "--max-time", high=options.MAX_DURATION_S)
    options.name(device, "--device")
    if not (device.strip().lower() == "cpu" or device.strip().lower().split(":")[0] == "cuda"):
        raise InputError(f"expected cpu, cuda or cuda:N, got {device!r}", column="--device")
    precision = options.choice(precision, "--precision", ("fp32", "amp"))
    optimizer = options.choice(optimizer, "--optimizer", ("sgd", "adam", "adamw"), kind="optimizer")
    options.name(name, "--name")
    options.output(out, "--out", force=force)
    if data is not None and not loss_steps:
        raise InputError("--data feeds the loss curve: pass --loss-steps K as well", column="--data")
    from spottrain.profiler.entry import is_entry_point
    from spottrain.profiler.zoo_info import canonical_model

    if not is_entry_point(model):
        canonical_model(model)  # near-miss error before torch is even imported
    return precision, optimizer


def _measure(model: str, batch_size: int | None, *, device: str, precision: str, optimizer: str, lr: float | None,
             iterations: int | None, warmup: int | None, loss_steps: int, max_time: float | None, data: str | None,
             name: str | None) -> Any:
    """Profile a zoo model or an entry point, with a progress bar (a line per step when piped)."""
    from spottrain.profiler import profiler as prof
    from spottrain.profiler.entry import is_entry_point

    on_cpu = device.strip().lower() == "cpu"
    if iterations is None:
        iterations = CPU_ITERATIONS if on_cpu else GPU_ITERATIONS
    if warmup is None:
        warmup = CPU_WARMUP if on_cpu else GPU_WARMUP
    err = Console(stderr=True)
    if err.is_terminal:
        update, bar = _progress_bar(err)
    else:
        update, bar = _progress_lines(err), contextlib.nullcontext()
    kwargs: dict[str, Any] = dict(
        device=device, precision=precision, iterations=iterations, warmup=warmup, optimizer=optimizer, lr=lr,
        loss_steps=loss_steps, max_time_s=max_time, progress=update, estimate=_estimate_printer(err),
    )
    with bar:
        if is_entry_point(model):
            return prof.profile_entry_point(model, batch_size, data_spec=data, **kwargs,
                                            **({"name": name} if name else {}))
        if data is not None:
            from spottrain.profiler.entry import load_data

            kwargs["data"] = load_data(data)
            kwargs["data_description"] = f"user data from {data}"
        result = prof.profile_zoo(model, batch_size, **kwargs)
    return replace(result, model=name) if name else result


def _save_and_report(result: Any, db: Any, *, out: Path | None, force: bool, as_json: bool) -> None:
    """Store the profile and write --out; print it (a table, or JSON with --json) and where it went."""
    stored = None
    if db is not None:
        stored = db.add_profile(result)
        db.close()
    if out is not None:
        result.save(out, overwrite=force)
    if as_json:
        print(result.to_json())
        return
    render_profile(result, Console())
    where = []
    if stored is not None:
        where.append(f"stored as profile {stored} in {db.path}")
    if out is not None:
        where.append(f"written to {out}")
    if where:
        Console(stderr=True).print("; ".join(where), highlight=False)


def _list_models(as_json: bool) -> None:
    from spottrain.profiler.zoo_info import ZOO, zoo_info

    if as_json:
        print(json.dumps([zoo_info(n) for n in ZOO], indent=1))
        return
    table = Table(title="built-in models", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("name", "params", "GFLOP/sample", "input", "data set", "batch"):
        table.add_column(col, justify="right" if col in ("params", "GFLOP/sample", "batch") else "left", no_wrap=True)
    for e in ZOO.values():
        flops = f"{e.flops_per_sample / 1e9:.3g}" if e.flops_per_sample else "-"
        table.add_row(e.name, f"{e.param_count:,}", flops, "x".join(map(str, e.input_shape)), e.dataset.name,
                      str(e.default_batch_size))
    table.caption = "GFLOP/sample: forward + backward; aliases and details: --list-models --json"
    Console().print(table)


@profiles_app.command("list")
def profiles_list(
    model: Annotated[str | None, typer.Option(help="Only profiles of this model.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list to stdout.")] = False,
    store: StoreOpt = None,
) -> None:
    """List stored profiles, newest first."""
    from spottrain.store import Store

    with Store(store) as db:
        rows = db.list_profiles(model=model)
        path = db.path
    if as_json:
        print(json.dumps([asdict(r) for r in rows], indent=1))
        return
    table = Table(title=f"{len(rows)} profile(s) in {path}", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("id", "created (UTC)", "model", "batch", "device", "prec.", "step", "samples/s"):
        table.add_column(col, justify="right" if col in ("id", "batch", "step", "samples/s") else "left",
                         no_wrap=col not in ("model", "device"))
    for r in rows:
        table.add_row(str(r.id), r.created_at[:16].replace("T", " "), r.model, str(r.batch_size),
                      f"{r.device_kind}: {r.device_name}", r.precision or "-", _ms(r.step_time_s), f"{r.samples_per_s:,.1f}")
    Console().print(table)


@profiles_app.command("show")
def profiles_show(
    key: Annotated[str, typer.Argument(help="Profile id, or a model name (its newest profile).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the profile JSON to stdout.")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the profile JSON to this file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    store: StoreOpt = None,
) -> None:
    """Show one stored profile (or export it with --out for `spottrain predict --profile`)."""
    from spottrain.store import Store

    with Store(store) as db:
        p = db.get_profile(key)
    if out is not None:
        p.save(out, overwrite=force)
    if as_json:
        print(p.to_json())
    elif out is None:
        render_profile(p, Console())


@profiles_app.command("rm")
def profiles_rm(
    ids: Annotated[list[int], typer.Argument(help="Profile id(s) to delete.")],
    store: StoreOpt = None,
) -> None:
    """Delete stored profiles by id (all or none)."""
    from spottrain.store import Store

    with Store(store) as db:
        n = db.remove_profiles(list(ids))
    Console(stderr=True).print(f"removed {n} profile(s)")


def register(app: typer.Typer) -> None:
    """Add `profile` and the `profiles` group to the app."""
    app.command("profile")(profile)
    app.add_typer(profiles_app, name="profiles")
