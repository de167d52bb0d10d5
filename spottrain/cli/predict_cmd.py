"""`spottrain predict` and `spottrain validate`: cluster throughput from the performance model."""

from __future__ import annotations

import dataclasses
import json
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


def _fit(measurements: Path | None, *, folds: int = 5, own=None):
    """The model fitted on a user table and/or the own runs' rows (with the shipped calibration
    as prior), or the shipped one."""
    from spottrain.perf import ThroughputModel, default_model, read_measurements

    with err.status("calibrating the performance model ...", spinner="dots"):
        base = default_model()
        if measurements is None and not own:
            return base
        rows = read_measurements(measurements) if measurements is not None else []
        if own:
            from spottrain.perf.own_runs import refit_with_own_rows

            return refit_with_own_rows(base, own, rows, folds=folds)
        return ThroughputModel(prior=base, folds=folds if len(rows) >= 10 else 0).fit(rows)


def _echo(text: str, warning: bool) -> None:
    err.print(("[yellow]warning:[/] " if warning else "") + escape(text), highlight=False, soft_wrap=True)


def predict(
    measurements: Annotated[Path | None, typer.Option(help="Measurement table to fit on (default: shipped real tables).")] = None,
    queries: Annotated[Path | None, typer.Option(help="Query table (same columns, throughput empty) to predict.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the queries with predictions to this CSV.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    profile: Annotated[Path | None, typer.Option(help="A profile JSON written by `spottrain profile`.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="A zoo model name instead of a profile.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Per-GPU batch size (default: the profile's / zoo default).")] = None,
    cluster: Annotated[str | None, typer.Option(help="Cluster, e.g. 4xV100, 1xV100+2xK80, 2xA100:8, 4xp3.2xlarge.")] = None,
    ps: Annotated[int, typer.Option(help="Parameter servers (0 = ring all-reduce).")] = 0,
    sync: Annotated[str, typer.Option(help="sync or async.")] = "sync",
    network_gbps: Annotated[float | None, typer.Option(help="Per-node network bandwidth (default: the GPU's usual instance).")] = None,
    cloud: Annotated[str | None, typer.Option(help="aws, gcp or azure: whose network the nodes cross (instance types say their own).")] = None,
    precision: Annotated[str, typer.Option(help="fp32 or fp16 (mixed precision; amp and bf16 mean fp16) for --model.")] = "fp32",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON to stdout.")] = False,
    from_store: Annotated[bool | None, typer.Option("--from-store/--no-from-store", help="Add the measured rows of your own runs (spottrain run) of this model to the fit; default: on when the store has some.")] = None,
) -> None:
    """Predict training throughput (samples/s) of a cluster, with interval and bottleneck.

    Examples:
      spottrain predict --model resnet50 --batch-size 64 --cluster 4xV100 --ps 1 --sync async
      spottrain predict --measurements M.csv --queries Q.csv --out P.csv
    """
    sync, precision = _check_flags(measurements=measurements, queries=queries, out=out, force=force, profile=profile,
                                   model=model, batch_size=batch_size, cluster=cluster, ps=ps,
                                   network_gbps=network_gbps, sync=sync, precision=precision, cloud=cloud)
    if queries is not None:
        _predict_queries(queries, measurements, out=out, as_json=as_json, from_store=from_store)
        return
    if cluster is None:
        raise InputError("give --cluster (with --profile or --model), or --queries", column="--cluster")
    if (profile is None) == (model is None):
        raise InputError("give exactly one of --profile or --model", column="--profile")
    workload = _workload(profile, model, batch_size, precision)
    _predict_cluster(workload, cluster, measurements, ps=ps, sync=sync, network_gbps=network_gbps, as_json=as_json,
                     from_store=from_store, cloud=cloud.lower() if cloud else None)


def _check_flags(*, measurements: Path | None, queries: Path | None, out: Path | None, force: bool,
                 profile: Path | None, model: str | None, batch_size: int | None, cluster: str | None, ps: int,
                 network_gbps: float | None, sync: str, precision: str, cloud: str | None = None) -> tuple[str, str]:
    """Every flag checked before anything is read; the first wrong one is named (exit 2). Returns
    ``sync`` and ``precision`` as spelled in the model."""
    from spottrain.cli import options

    options.count(batch_size, "--batch-size", high=options.MAX_BATCH)
    options.count(ps, "--ps", low=0, high=1000)
    options.positive(network_gbps, "--network-gbps", high=options.MAX_NETWORK_GBPS)
    sync = options.choice(sync, "--sync", ("sync", "async"))
    precision = options.precision(precision)
    if cloud is not None:
        from spottrain.perf.measurements import CLOUDS

        options.choice(cloud, "--cloud", CLOUDS, kind="cloud")
    options.name(model, "--model")
    options.cluster(cluster, "--cluster")
    options.exclusive({"--profile": profile, "--model": model})
    options.exclusive({"--queries": queries, "--cluster": cluster})
    options.exclusive({"--queries": queries, "--cloud": cloud})  # a query table says it in its cloud column
    for flag, path in (("--measurements", measurements), ("--queries", queries), ("--profile", profile)):
        options.input_file(path, flag)
    if out is not None and queries is None:
        raise InputError("--out writes the predictions of --queries; give --queries", column="--out")
    options.output(out, "--out", force=force)
    return sync, precision


def _predict_queries(queries: Path, measurements: Path | None, *, out: Path | None, as_json: bool,
                     from_store: bool | None) -> None:
    """Predict every row of a query table: a table, JSON, and with --out the rows and predictions as CSV."""
    from spottrain.perf import read_measurements, write_measurements
    from spottrain.perf.own_runs import cli_own_runs
    from spottrain.perf.throughput import ExtrapolationWarning

    qrows = read_measurements(queries, query=True)
    fitted = _fit(measurements, own=cli_own_runs(from_store, [q.model for q in qrows], echo=_echo))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        preds = fitted.predict(qrows)
    far = [(q, p) for q, p in zip(qrows, preds) if p.extrapolated]
    if far:  # one line, however many queries: the --out table marks each (column extrapolated)
        q, p = far[0]
        _echo(f"{len(far)} of {len(preds)} queries are outside the fitted data, their intervals widened "
              f"(line {q.line}: {'; '.join(p.notes)})", True)
    cols = {"throughput_pred": [round(p.throughput, 3) for p in preds],
            "throughput_low": [round(p.low, 3) for p in preds],
            "throughput_high": [round(p.high, 3) for p in preds],
            "step_time_s_pred": [round(p.iteration_time_s, 6) for p in preds],
            "sync_time_s_pred": ["" if p.sync_time_s is None else round(p.sync_time_s, 6) for p in preds],
            "bottleneck": [p.bottleneck for p in preds],
            "extrapolated": [int(p.extrapolated) for p in preds]}
    if out is not None:
        write_measurements(qrows, out, extra_columns=cols)
    if as_json:
        print(json.dumps([{"model": q.model, "cluster": str(q.cluster), "ps": q.ps, "sync": q.sync, **p.to_dict()}
                          for q, p in zip(qrows, preds)], indent=1))
        return
    _table(qrows, preds, title=f"{len(preds)} prediction(s)" + (f", written to {out}" if out else ""))


def _workload(profile: Path | None, model: str | None, batch_size: int | None, precision: str):
    """The workload of a profile file or of a zoo model."""
    from spottrain.perf import Workload

    if profile is None:
        return Workload.from_zoo(model, batch_size, precision=precision)
    from spottrain.files import read_json
    from spottrain.profiler.schema import Profile

    Profile.load(profile)  # the file reader and the profile schema: one-line errors
    return Workload.from_profile(read_json(profile, what="profile file"), batch_size)


def _predict_cluster(workload, cluster: str, measurements: Path | None, *, ps: int, sync: str,
                     network_gbps: float | None, as_json: bool, from_store: bool | None, cloud: str | None = None) -> None:
    """Predict one workload on one cluster (with the own runs' rows of it when the store has some)."""
    from spottrain.perf import predict_throughput
    from spottrain.perf.own_runs import cli_own_runs
    from spottrain.perf.throughput import OTHER_MACHINE_SHARE, ExtrapolationWarning, explain_bottleneck

    own = cli_own_runs(from_store, workload.model, echo=_echo, cluster=cluster, batch_size=workload.batch_size,
                       precision=workload.precision)
    if own and workload.step_time_s_ref:  # the runs' rows are fitted; a profile's one step time would override them
        workload = dataclasses.replace(workload, step_time_s_ref=None, ref_gpu=None)
    fitted = _fit(measurements, own=own)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ExtrapolationWarning)
        pred = predict_throughput(workload, cluster, ps=ps, sync=sync, network_gbps=network_gbps, model=fitted,
                                  cloud=cloud)
    if as_json:
        print(json.dumps({"model": workload.model, "batch_size": workload.batch_size, "cluster": cluster, "ps": ps,
                          "sync": sync, **pred.to_dict(), **({"from_store": own.to_dict()} if own else {})}, indent=1))
        return
    notes = list(pred.notes) or [str(w.message) for w in caught]
    if notes:  # one line
        _echo("extrapolating, interval widened: " + "; ".join(notes), True)
    t = Table(box=box.SIMPLE_HEAD, title=f"{workload.model}, batch {workload.batch_size}/GPU on {cluster}"
              f" ({'ps=' + str(ps) + ', ' + sync if ps else 'all-reduce, ' + sync})")
    for c in ("samples/s", "90% interval", "step time", "bottleneck"):
        t.add_column(c, justify="right")
    t.add_row(f"{pred.throughput:,.1f}", f"{pred.low:,.1f} - {pred.high:,.1f}",
              f"{pred.iteration_time_s * 1000:.1f} ms", pred.bottleneck + (" (extrapolated)" if pred.extrapolated else ""))
    console = Console()
    console.print(t)
    console.print(f"bottleneck {explain_bottleneck(pred.bottleneck)}", highlight=False)
    if pred.measured_step:
        gpus = " / ".join(sorted({g["gpu"] for g in pred.per_group}))
        console.print(f"compute step as your rows measured it on one {gpus} at batch "
                      f"{workload.batch_size}; the gradient exchange is modelled", highlight=False)
    if pred.stack_borrowed:
        console.print("fp16 off the shipped calibration: the interval holds how much mixed precision gains on other "
                      "software stacks (NVIDIA's tuned scripts 1.3-1.7x Lambda's runs of the same networks); "
                      "`spottrain profile` of your own step narrows it", highlight=False)
    if pred.profiled_on:
        console.print(f"your profile timed the model on a {pred.profiled_on}: another GPU type is another machine, "
                      f"so it takes {OTHER_MACHINE_SHARE:.0%} of what the profile says, the rest the shipped "
                      "calibration's", highlight=False)


def _table(rows, preds, title: str) -> None:
    console = Console()
    t = Table(box=box.SIMPLE_HEAD, title=title)
    for c in ("model", "batch", "cluster", "ps", "sync", "measured", "predicted", "interval", "bottleneck"):
        t.add_column(c, justify="left" if c in ("model", "cluster", "sync", "bottleneck") else "right")
    for r, p in zip(rows, preds):
        t.add_row(r.model, str(r.batch_size), str(r.cluster), str(r.ps), r.sync,
                  "-" if r.throughput is None else f"{r.throughput:,.1f}", f"{p.throughput:,.1f}",
                  f"{p.low:,.0f}-{p.high:,.0f}", p.bottleneck + ("*" if p.extrapolated else ""))
    console.print(t)
    if any(p.extrapolated for p in preds):
        console.print("* outside the fitted data: the interval is widened (the warning above says why)", highlight=False)
    scored = [(r.throughput, p) for r, p in zip(rows, preds) if r.throughput]
    if scored:  # queries that carry a measured throughput: how far off, how often inside
        ape = [abs(p.throughput - y) / y for y, p in scored]
        inside = sum(p.low <= y <= p.high for y, p in scored)
        console.print(f"{plural(len(scored), 'query', 'queries')} with a measured throughput: mean error "
                      f"{100 * sum(ape) / len(ape):.1f} %, {inside} inside their ~90 % interval "
                      f"({100 * inside / len(scored):.0f} %)", highlight=False)


def validate(
    measurements: Annotated[Path, typer.Option(help="Measurement table to cross-validate on.")],
    folds: Annotated[int, typer.Option(help="Number of cross-validation folds.")] = 5,
    group_by: Annotated[str, typer.Option(help="Group rows by model, gpu, cluster, ps or sync in the table.")] = "model",
    prior: Annotated[str, typer.Option(help="'shipped' (calibration on the real tables as prior) or 'physics'.")] = "shipped",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON to stdout.")] = False,
) -> None:
    """Cross-validated MAPE of the throughput model on a measurement table, per group.

    Example: spottrain validate --measurements M.csv --folds 5 --group-by gpu
    """
    from spottrain.perf import ThroughputModel, default_model, read_measurements
    from spottrain.perf.validation import cross_validate

    groupers = {"model": lambda m: m.model, "gpu": lambda m: "+".join(sorted({g.gpu for g in m.cluster.groups})),
                "cluster": lambda m: str(m.cluster), "ps": lambda m: f"ps={m.ps}", "sync": lambda m: m.sync}
    from spottrain.cli import options

    group_by = options.choice(group_by, "--group-by", tuple(groupers), kind="grouping")
    options.count(folds, "--folds", low=2, high=100)
    prior = options.choice(prior, "--prior", ("shipped", "physics"), kind="prior")
    options.input_file(measurements, "--measurements")
    rows = _distinct_configurations(read_measurements(measurements))
    if len(rows) < folds:
        raise InputError(f"{len(rows)} rows cannot be split into {folds} folds; lower --folds", column="--folds")
    with err.status("fitting the shipped calibration ...", spinner="dots"):
        base = default_model() if prior == "shipped" else "physics"
    from rich.progress import Progress

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task("cross-validating", total=folds)

        def make():
            bar.advance(task)
            return ThroughputModel(prior=base, folds=0, correction="none")

        res = cross_validate(rows, make, folds=folds, group_of=groupers[group_by])
    if as_json:
        print(json.dumps({"folds": folds, "rows": len(rows), "mape": res["mape"],
                          "groups": {g: {"rows": n, "mape": v} for g, (n, v) in res["groups"].items()}}, indent=1))
        return
    t = Table(box=box.SIMPLE_HEAD, title=f"{folds}-fold cross-validated MAPE, {len(rows)} rows")
    t.add_column(group_by)
    t.add_column("rows", justify="right")
    t.add_column("MAPE %", justify="right")
    for g, (n, v) in res["groups"].items():
        t.add_row(g, str(n), f"{v:.1f}")
    t.add_row("[bold]all[/]", str(len(rows)), f"[bold]{res['mape']:.1f}[/]")
    Console().print(t)


def _distinct_configurations(rows):
    """One row per distinct configuration (everything but the measured figures), its throughput the
    mean of the repeats: repeated measurements of one configuration would otherwise land in both
    the training and the held-out folds, and a 100k-row table of repeats costs a fit per row.
    Says so on stderr when rows were merged."""
    groups: dict[tuple, list] = {}
    for r in rows:
        key = (r.model, r.batch_size, str(r.cluster), r.ps, r.sync, r.flops_per_sample, r.param_count, r.network_gbps,
               r.precision, r.tensor_count)
        groups.setdefault(key, []).append(r)
    if len(groups) == len(rows):
        return rows
    out = [g[0] if len(g) == 1 else dataclasses.replace(g[0], throughput=sum(x.throughput for x in g) / len(g))
           for g in groups.values()]
    _echo(f"{len(rows)} rows hold {len(out)} distinct configurations: repeated measurements are averaged "
          "and cross-validated together", False)
    return out


def register(app: typer.Typer) -> None:
    """Add `predict` and `validate` to the app."""
    app.command()(predict)
    app.command()(validate)
