"""`spottrain run`: train on a local elastic cluster (with fault injection) or hand the job to
SkyPilot. Thin: parse, call :mod:`spottrain.runtime`, render."""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from spottrain.errors import InputError
from spottrain.units import format_interval, parse_duration_s, plural

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions

err = Console(stderr=True)

DEFAULT_INTERVAL_S = 60.0


def _interval(checkpoint_interval: str | None, plan: Any) -> tuple[float | None, str]:
    if checkpoint_interval is not None:
        return parse_duration_s(checkpoint_interval, option="--checkpoint-interval"), "--checkpoint-interval"
    if plan is not None and plan.checkpoint_interval_s and plan.checkpoint_interval_s > 0:
        return float(plan.checkpoint_interval_s), "the plan (optimal under the fitted lifetime model)"
    if plan is not None and plan.groups:
        try:  # optimal under the fitted lifetime law of the plan's market
            from spottrain.transience import lifetime_model, optimal_checkpoint_interval_s

            g = plan.groups[0]
            # Checkpoint cost: gradients-sized state x3 (weights + optimizer) at ~200 MB/s.
            cost_s = max(plan.workload.gradient_bytes * 3 / 200e6, 1.0)
            interval = optimal_checkpoint_interval_s(cost_s, lifetime_model(g.cloud, g.gpu, g.zone), plan.nodes)
            return float(interval), "the transience model"
        except Exception:  # noqa: BLE001 - fall back to the default below
            pass
    return DEFAULT_INTERVAL_S, "default"


def run(
    ctx: typer.Context,
    backend: Annotated[str, typer.Option(help="local (processes on this machine) or skypilot (write/launch a task YAML).")] = "local",
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Plan file from `spottrain plan` (nodes, policy, checkpoint interval).")] = None,
    workers: Annotated[int | None, typer.Option(help="Worker processes (local); default: the plan's node count, else 4.")] = None,
    example: Annotated[str | None, typer.Option(help="Built-in example job: cifar-resnet or mlp (else give -- COMMAND).")] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps to train.")] = None,
    global_batch: Annotated[int | None, typer.Option("--global-batch", help="Samples per step (kept across world-size changes).")] = None,
    precision: Annotated[str | None, typer.Option(help="What your command trains in, for the run's measured rows: fp32 or fp16 (mixed precision; amp and bf16 mean fp16). Default: the plan's, else fp32.")] = None,
    rescale: Annotated[str, typer.Option(help="On a world-size change: accumulate (keep the global batch) or scale-lr.")] = "accumulate",
    inject: Annotated[str | None, typer.Option(help="Faults: kill:1@20s,sigterm:2@40s,kill:chief@step50,kill:0@ckpt.")] = None,
    inject_trace: Annotated[Path | None, typer.Option("--inject-trace", help="JSON list of {time_s, worker, kind} (a simulator schedule).")] = None,
    policy: Annotated[str | None, typer.Option(help="Recovery policy (default: the plan's, else replace-same).")] = None,
    replacement_delay: Annotated[str, typer.Option("--replacement-delay", help="Time to acquire a replacement (local).")] = "2s",
    checkpoint_dir: Annotated[Path | None, typer.Option("--checkpoint-dir", help="Checkpoint directory (default: RUN_DIR/checkpoints).")] = None,
    checkpoint_interval: Annotated[str | None, typer.Option("--checkpoint-interval", help="Override the checkpoint interval (e.g. 30s).")] = None,
    checkpoint_every: Annotated[int | None, typer.Option("--checkpoint-every", help="Checkpoint every N steps instead.")] = None,
    keep: Annotated[int, typer.Option(help="Keep the newest K checkpoints.")] = 3,
    job_id: Annotated[str | None, typer.Option("--job-id", help="Job id (checkpoints of another job are refused). Default: new.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Logs and events (default: ./spottrain-runs/JOB_ID).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the model init and the data order.")] = 0,
    timeout: Annotated[str, typer.Option(help="Give up after this long.")] = "30m",
    liveness_timeout: Annotated[str, typer.Option("--liveness-timeout", help="local: a worker silent this long (stopped, cut off) is declared lost.")] = "3s",
    tick: Annotated[str, typer.Option(help="local: period of the policy's tick events.")] = "5s",
    stop_grace: Annotated[str, typer.Option("--stop-grace", help="local: when the run is stopped (SIGTERM, Ctrl-C), how long the workers get to checkpoint and exit before they are killed.")] = "15s",
    deadline: Annotated[str | None, typer.Option(help="local: deadline the policy sees (default: the plan's).")] = None,
    hosts: Annotated[int, typer.Option(help="local: run each worker on its own host, a Linux network namespace (needs root); enables linkdown/vanish/loss/delay faults.")] = 0,
    store: Annotated[Path | None, typer.Option("--store", help="SQLite store for the run record (default: $SPOTTRAIN_STORE or the user data directory).")] = None,
    no_record: Annotated[bool, typer.Option("--no-record", help="Do not write the run record.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="skypilot: where to write the task YAML.")] = None,
    bucket: Annotated[str | None, typer.Option(help="skypilot: checkpoint bucket (s3://name, gs://name or a SkyPilot storage name).")] = None,
    launch: Annotated[bool, typer.Option("--launch", help="skypilot: run `sky jobs launch` after writing the YAML.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --output file.")] = False,
    skypilot_mode: Annotated[str, typer.Option("--skypilot-mode", help="skypilot: elastic (each plan group's nodes join one elastic job run from here) or managed-torchrun (fallback: one managed job, torchrun, whole-cluster restarts).")] = "elastic",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="skypilot elastic: print the SkyPilot calls and task YAMLs, launch nothing.")] = False,
    controller: Annotated[str | None, typer.Option("--controller", help="skypilot elastic: HOST:PORT at which the cloud nodes reach this machine's controller.")] = None,
    controller_port: Annotated[int | None, typer.Option("--controller-port", help="skypilot elastic: port the controller listens on, every interface (default: --controller's port; differs behind port forwarding).")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="skypilot: your code directory, uploaded to every node (default: the current directory; none for --example).")] = None,
    spottrain_wheel: Annotated[Path | None, typer.Option("--spottrain-wheel", help="skypilot: spottrain wheel to install on the nodes (default: one built from this checkout).")] = None,
    spottrain_source: Annotated[str | None, typer.Option("--spottrain-source", help="skypilot: pip requirement for spottrain on the nodes instead of a wheel (e.g. git+https://...@COMMIT).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON to stdout.")] = False,
) -> None:
    """Run a training job that survives revocations.

    Examples:

      spottrain run --backend local --workers 4 --inject kill:1@20s,sigterm:2@40s --example cifar-resnet --steps 200

      spottrain run --plan plan.json --backend local -- python train.py

      spottrain run --plan plan.json --backend skypilot --dry-run -- python train.py

      spottrain run --plan plan.json --backend skypilot --controller 203.0.113.7:29400 --bucket s3://my-ckpts -- python train.py

      spottrain run --plan plan.json --backend skypilot --skypilot-mode managed-torchrun --bucket s3://my-ckpts -o task.yaml -- python train.py
    """
    flags = {name: value for name, value in locals().items() if name != "ctx"}  # before any other name is bound
    from spottrain.plan_file import Plan

    request = _read_request(list(ctx.args), flags)
    plan = Plan.load(request.plan_file) if request.plan_file else None
    policy = _policy_name(request.policy, plan)
    if request.backend == "local":
        _check_job_checkpoints(request)
    job_id = request.job_id or time.strftime("run-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    interval_s, interval_src = _interval(request.checkpoint_interval, plan)
    settings = _job_settings(request, job_id, interval_s)
    command, steps, builtin = _what_to_run(request)
    if request.backend == "skypilot":
        _skypilot(request, plan, command, job_id, settings, policy=policy, steps=steps)
        return
    job = _local_job(request, plan, command, job_id, settings, policy=policy, steps=steps, builtin=builtin)
    checkpoints = (f"every {request.checkpoint_every} steps" if request.checkpoint_every
                   else f"every {format_interval(interval_s)} ({interval_src})")
    summary = _launch_local(job, request, checkpoints=checkpoints)
    _report_local(summary, request, plan, job)


@dataclass(frozen=True, kw_only=True)
class _Request:
    """What `spottrain run` was asked: the command after ``--`` and every flag as given (the flags'
    help is on :func:`run`)."""

    command: list[str]
    backend: str
    plan_file: Path | None
    workers: int | None
    example: str | None
    steps: int | None
    global_batch: int | None
    precision: str | None
    rescale: str
    inject: str | None
    inject_trace: Path | None
    policy: str | None
    replacement_delay: str
    checkpoint_dir: Path | None
    checkpoint_interval: str | None
    checkpoint_every: int | None
    keep: int
    job_id: str | None
    run_dir: Path | None
    seed: int
    timeout: str
    liveness_timeout: str
    tick: str
    stop_grace: str
    deadline: str | None
    hosts: int
    store: Path | None
    no_record: bool
    output: Path | None
    bucket: str | None
    launch: bool
    force: bool
    skypilot_mode: str
    dry_run: bool
    controller: str | None
    controller_port: int | None
    workdir: Path | None
    spottrain_wheel: Path | None
    spottrain_source: str | None
    as_json: bool


def _read_request(command: list[str], flags: dict[str, Any]) -> _Request:
    """The request with every flag checked before anything is read or started; the first wrong one
    is named (exit 2)."""
    from spottrain.cli import options

    r = _Request(command=command, **flags)
    backend = options.choice(r.backend, "--backend", ("local", "skypilot"), kind="backend")
    options.processes(r.workers, "--workers")
    options.count(r.steps, "--steps", high=10**9)
    options.count(r.global_batch, "--global-batch", high=options.MAX_BATCH * options.MAX_NODES)
    if r.global_batch is not None and r.workers is not None and r.global_batch < r.workers:
        raise InputError(f"a global batch of {r.global_batch} cannot give each of {r.workers} workers a sample per "
                         "step", column="--global-batch")
    precision = options.precision(r.precision)
    if precision == "fp16" and r.example:
        raise InputError("the built-in examples train in fp32; --precision labels the rows of your own command",
                         column="--precision")
    options.count(r.keep, "--keep", high=1000)
    options.count(r.checkpoint_every, "--checkpoint-every", high=10**9)
    options.count(r.seed, "--seed", low=0, high=options.MAX_SEED)
    options.count(r.hosts, "--hosts", low=0, high=options.max_processes())
    options.count(r.controller_port, "--controller-port", high=65535)
    options.exclusive({"--checkpoint-interval": r.checkpoint_interval, "--checkpoint-every": r.checkpoint_every})
    for flag, text in (("--checkpoint-interval", r.checkpoint_interval), ("--timeout", r.timeout),
                       ("--liveness-timeout", r.liveness_timeout), ("--tick", r.tick), ("--deadline", r.deadline),
                       ("--stop-grace", r.stop_grace)):
        options.duration(text, flag)
    options.duration(r.replacement_delay, "--replacement-delay", allow_zero=True)
    options.name(r.example, "--example")
    options.name(r.policy, "--policy")
    options.name(r.job_id, "--job-id")
    options.input_file(r.plan_file, "--plan")
    options.input_file(r.inject_trace, "--inject-trace")
    if r.example and r.command:
        raise InputError("give either --example NAME or -- COMMAND, not both", column="--example")
    if not r.example and not r.command:
        raise InputError("nothing to run: pass --example cifar-resnet (or mlp), or -- python train.py",
                         column="--example")
    if r.rescale not in ("accumulate", "scale-lr"):
        raise InputError(f"expected accumulate or scale-lr, got {r.rescale!r}", column="--rescale")
    return replace(r, backend=backend, precision=precision)


def _policy_name(policy: str | None, plan: Any) -> str:
    """--policy, else the plan's, else replace-same; an unknown name fails here with a near-miss
    suggestion."""
    from spottrain.policies import get_policy

    name = policy or (plan.policy if plan else "replace-same")
    get_policy(name)
    return name


def _run_dir(request: _Request, job_id: str) -> Path:
    return request.run_dir or Path("spottrain-runs") / job_id


def _checkpoint_dir(request: _Request, job_id: str) -> Path:
    return request.checkpoint_dir or _run_dir(request, job_id) / "checkpoints"


def _check_job_checkpoints(request: _Request) -> None:
    """Before any worker starts: refuse checkpoints of another job, or none of which is readable."""
    from spottrain.cli import options

    options.job_checkpoints(request.job_id, _checkpoint_dir(request, request.job_id or "-"))


def _job_settings(request: _Request, job_id: str, interval_s: float | None) -> dict[str, str]:
    """The SPOTTRAIN_* environment from which every worker reads its configuration."""
    settings = {"SPOTTRAIN_JOB_ID": job_id, "SPOTTRAIN_SEED": str(request.seed), "SPOTTRAIN_RESCALE": request.rescale,
                "SPOTTRAIN_KEEP_CHECKPOINTS": str(request.keep)}
    if request.steps is not None:
        settings["SPOTTRAIN_STEPS"] = str(request.steps)
    if request.global_batch is not None:
        settings["SPOTTRAIN_GLOBAL_BATCH_SIZE"] = str(request.global_batch)
    if request.checkpoint_every is not None:
        settings["SPOTTRAIN_CHECKPOINT_EVERY_STEPS"] = str(request.checkpoint_every)
    elif interval_s:
        settings["SPOTTRAIN_CHECKPOINT_INTERVAL_S"] = f"{interval_s:g}"
    return settings


def _what_to_run(request: _Request) -> tuple[list[str], int | None, Any]:
    """A worker's command, the steps to train and the built-in example (None for a user's command)."""
    if not request.example:
        return request.command, request.steps, None
    from spottrain.runtime.examples import get_example

    ex = get_example(request.example)
    return [sys.executable, "-m", "spottrain.runtime.examples", ex.name], request.steps or ex.steps, ex


def _local_job(request: _Request, plan: Any, command: list[str], job_id: str, settings: dict[str, str], *,
               policy: str, steps: int | None, builtin: Any) -> Any:
    """The local job: its workers, the faults to inject, its directories and the plan's nodes and prices."""
    from spottrain.runtime.faults import load_injection_trace, parse_injections
    from spottrain.runtime.local import LocalJob

    n = request.workers or (plan.nodes if plan else 4)
    injections = parse_injections(request.inject, workers=n) if request.inject else []
    if request.inject_trace:
        injections += load_injection_trace(request.inject_trace, workers=n)
    ckdir = _checkpoint_dir(request, job_id).resolve()
    env = {**settings, "SPOTTRAIN_CHECKPOINT_DIR": str(ckdir)}
    if plan is not None:
        env["SPOTTRAIN_PLANNED_WORLD_SIZE"] = str(plan.nodes)
    delay_s = parse_duration_s(request.replacement_delay, option="--replacement-delay")
    batch = request.global_batch or (builtin.global_batch_size if builtin else
                                     (plan.workload.batch_size if plan else 1))
    deadline_s = (parse_duration_s(request.deadline, option="--deadline") if request.deadline
                  else (plan.deadline_s if plan else None))
    return LocalJob(command=command, workers=n, run_dir=_run_dir(request, job_id).resolve(), job_id=job_id, env=env,
                    injections=injections, policy=policy, replacement_delay_s=delay_s, steps=steps,
                    checkpoint_dir=ckdir, timeout_s=parse_duration_s(request.timeout, option="--timeout"),
                    instance_type=plan.groups[0].instance_type if plan else "local",
                    price_usd_per_hour=plan.price_usd_per_hour / max(plan.nodes, 1) if plan else 0.0,
                    samples_per_step=int(batch), deadline_s=deadline_s,
                    tick_s=parse_duration_s(request.tick, option="--tick"),
                    liveness_timeout_s=parse_duration_s(request.liveness_timeout, option="--liveness-timeout"),
                    stop_grace_s=parse_duration_s(request.stop_grace, option="--stop-grace"),
                    **_local_market(plan, n, delay_s))


def _launch_local(job: Any, request: _Request, *, checkpoints: str) -> Any:
    """Start the workers (each on its own network-namespace host with --hosts) and train to the end;
    the run's summary."""
    from spottrain.runtime.faults import needs_hosts

    if needs_hosts(job.injections) and not request.hosts:
        raise InputError(f"fault kinds {', '.join(needs_hosts(job.injections))} need --hosts N (network namespaces)",
                         column="--inject")
    network = _make_hosts(request.hosts, job) if request.hosts else None
    if not request.as_json:
        err.print(f"job {job.job_id}: {job.workers} workers" + (f" on {request.hosts} hosts" if request.hosts else "")
                  + f", policy {job.policy}, checkpoint {checkpoints}", highlight=False)
    try:
        return _run_with_progress(job, quiet=request.as_json)
    finally:
        if network is not None:
            network.close()


def _report_local(summary: Any, request: _Request, plan: Any, job: Any) -> None:
    """Store the run record, print the summary (a table, or JSON with --json) and exit 1 on a failure."""
    where = setup = None
    if not request.no_record:
        from spottrain.runtime.record import local_setup, record_run

        setup = local_setup(job, example=request.example, plan=plan, precision=request.precision)
        where = record_run(summary, _EVENTS, store_path=str(request.store) if request.store else None,
                           plan=plan.to_dict() if plan else None, backend="local", setup=setup)
    if request.as_json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        _render(summary)
    if where is not None and setup is not None:
        _say_recorded(where, summary.job_id, setup.model)
    if not summary.ok:
        if not request.as_json:
            err.print(f"resume: run the same command with --job-id {job.job_id} (checkpoints in "
                      f"{_checkpoint_dir(request, job.job_id)})", highlight=False)
        raise typer.Exit(1)


def _say_recorded(where: str, job_id: str, model: str) -> None:
    """One line on stderr: what the run left in the store for ``predict``, ``plan`` and ``converge``."""
    from spottrain.store import Store

    try:
        with Store(where, read_only=True) as store:
            rows = store.measurements(run_id=job_id)
            points = store.loss_points(run_id=job_id)
    except Exception:  # noqa: BLE001 - the summary matters more than this line
        return
    if not rows and not points:
        return
    parts = []
    if rows:
        parts.append(f"{plural(len(rows), 'measured row')} ({', '.join(str(r['cluster']) for r in rows)})")
    if points:
        from spottrain.perf.own_runs import records_noise_scale

        noise = " with the gradient noise scale" if records_noise_scale(points) else ""
        parts.append(f"a training-loss curve of {plural(len(points), 'point')}{noise} "
                     f"(spottrain converge --model {model} reads it)")
    err.print(f"recorded in {where}: {' and '.join(parts)}", highlight=False, soft_wrap=True)


def _local_market(plan: Any, n: int, delay_s: float) -> dict[str, Any]:
    """The nodes the local workers stand for, what the policy may buy and the on-demand fallback,
    with the plan's instance types, zones and prices (spot and on-demand)."""
    if plan is None:
        return {}
    from spottrain.policies import NodeOption

    per_node = plan.prediction.throughput_samples_per_s / max(plan.nodes, 1)
    planned, fallback = [], []
    for g in plan.groups:
        for _ in range(g.count):
            planned.append(NodeOption(instance_type=g.instance_type, gpu=g.gpu, spot=g.spot, zone=g.zone,
                                      price_usd_per_hour=g.price_usd_per_hour, throughput=per_node, delay_s=delay_s))
            fallback.append(NodeOption(instance_type=g.instance_type, gpu=g.gpu, spot=False, zone=g.zone,
                                       price_usd_per_hour=g.on_demand_price_usd_per_hour, throughput=per_node,
                                       delay_s=delay_s))
    # --workers other than the plan's: the plan's nodes in turn
    planned = [planned[i % len(planned)] for i in range(n)]
    fallback = [fallback[i % len(fallback)] for i in range(n)]
    return {"planned": tuple(planned), "options": tuple(dict.fromkeys(planned + fallback)),
            "on_demand_fallback": tuple(fallback)}


def _make_hosts(count: int, job: Any) -> Any:
    from spottrain.runtime.netns import Network, available

    ok, why = available()
    if not ok:
        raise InputError(f"cannot make hosts here: {why}", column="--hosts")
    network = Network(hosts=count)
    job.hosts, job.network, job.controller_address = network.hosts, network, network.address
    return network


_EVENTS: list[dict[str, Any]] = []


def _run_with_progress(job: Any, *, quiet: bool) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from spottrain.runtime.local import run_local

    shown = ("inject", "exit", "notice", "joined", "membership", "decision", "refused", "release", "host", "impair",
             "formation_failed", "stopping")
    with Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=quiet) as bar:
        task = bar.add_task("train", total=job.steps)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "progress":
                bar.update(task, completed=data["step"])
                return
            _EVENTS.append(data)
            if not quiet and kind in shown:
                detail = ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("t", "time_s", "kind"))
                bar.console.print(f"[dim]{data['time_s']:7.2f}s[/] {kind}: {detail}", highlight=False)

        return run_local(job, on_event=on_event)


def _render(s: Any) -> None:
    console = Console()
    table = Table(title=f"run {s.job_id}: {'completed' if s.ok else 'FAILED'}", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("steps", f"{s.completed_steps} / {s.target_steps}")
    table.add_row("revocations", f"{s.revocations} ({s.notices} with notice), {s.replacements} replacements joined")
    table.add_row("lost steps", str(s.lost_steps))
    table.add_row("max stall", f"{s.max_stall_s:.2f} s (median step {s.median_step_s or 0:.3f} s)")
    if s.max_recovery_s is not None:
        table.add_row("max recovery", f"{s.max_recovery_s:.2f} s (death to next completed step)")
    table.add_row("checkpoints", f"{len(s.checkpoints)}; final: {s.final_checkpoint}")
    table.add_row("wall time", f"{s.wall_s:.1f} s")
    if s.failure:
        table.add_row("failure", s.failure)
    console.print(table)
    console.print(f"logs: {s.run_dir}", style="dim", highlight=False)


def _skypilot(request: _Request, plan: Any, command: list[str], job_id: str, settings: dict[str, str], *,
              policy: str, steps: int | None) -> None:
    """Hand the job to SkyPilot: the nodes of one elastic job run from here, or one managed torchrun
    job (--skypilot-mode)."""
    from spottrain.runtime import skypilot as sk
    from spottrain.runtime.cloud import check_launchable, groups_from_plan

    wheel, source = request.spottrain_wheel, request.spottrain_source
    if plan is None:
        raise InputError("the skypilot backend needs --plan (resources come from the plan)", column="--plan")
    if request.skypilot_mode not in ("elastic", "managed-torchrun"):
        raise InputError(f"expected elastic or managed-torchrun, got {request.skypilot_mode!r}",
                         column="--skypilot-mode")
    if wheel is not None and source is not None:
        raise InputError("give either --spottrain-wheel or --spottrain-source, not both", column="--spottrain-wheel")
    if wheel is not None and not (wheel.is_file() and wheel.name.endswith(".whl")):
        raise InputError("not a wheel file (*.whl)", file=str(wheel))
    install = sk.SpottrainInstall(wheel=str(wheel.resolve()) if wheel else None, source=source)
    if request.example is not None:
        command, workdir = ["python", "-m", "spottrain.runtime.examples", command[-1]], None
    else:
        code_dir = (request.workdir or Path.cwd()).resolve()
        if not code_dir.is_dir():
            raise InputError("not a directory", column="--workdir")
        workdir = str(code_dir)
    from platformdirs import user_cache_dir

    dist_dir = str(Path(user_cache_dir("spottrain")) / "wheels" / job_id)  # outside the uploaded workdir
    check_launchable(groups_from_plan(plan))  # before any file is written or node started
    if request.skypilot_mode == "elastic":
        _skypilot_elastic(request, plan, command, job_id, settings, workdir=workdir, install=install,
                          dist_dir=dist_dir, policy=policy, steps=steps)
    else:
        _skypilot_managed(request, plan, command, job_id, settings, workdir=workdir, install=install,
                          dist_dir=dist_dir, policy=policy)


def _skypilot_managed(request: _Request, plan: Any, command: list[str], job_id: str, settings: dict[str, str], *,
                      workdir: str | None, install: Any, dist_dir: str, policy: str) -> None:
    """Write the managed-job task YAML (torchrun, whole-cluster restarts) and launch it with --launch."""
    from spottrain.runtime import skypilot as sk

    if request.dry_run or request.controller or request.controller_port:
        raise InputError("--dry-run and --controller apply to --skypilot-mode elastic; managed-torchrun writes "
                         "the task YAML (and launches it with --launch)", column="--skypilot-mode")
    task = sk.task_from_plan(plan, name=job_id, command=command, bucket=request.bucket, env=settings,
                             workdir=workdir, install=install, dist_dir=dist_dir)
    path = request.output or Path(f"{job_id}.sky.yaml")
    if path.exists() and not request.force:
        raise InputError("file exists; pass --force to overwrite it", file=str(path))
    if not install.wheel and not install.source:
        sk.build_wheel(dist_dir)  # the YAML uploads it: it must exist when the task is launched
    path = sk.write_task(task, path, overwrite=request.force)
    how = " ".join(sk.launch_command(path, job_id))
    assumes = sk.assumptions(install, workdir=workdir, dist_dir=dist_dir)
    if request.as_json:
        print(json.dumps({"task_yaml": str(path), "launch": how, "launched": request.launch, "assumes": assumes}))
    else:
        err.print(f"wrote {path}", highlight=False)
        err.print("assumes: " + assumes, highlight=False)
        if not request.bucket:
            err.print("note: no --bucket: checkpoints stay on the nodes and do not survive a cluster recovery",
                      highlight=False)
        err.print(f"note: managed-torchrun: SkyPilot's managed-job recovery restarts the whole cluster after a "
                  f"preemption; the policy ({policy}) is not used", highlight=False)
    if request.launch:
        code = sk.launch(path, job_id)
        if code != 0:
            raise typer.Exit(code)
    elif not request.as_json:
        err.print(f"launch it with: {how}", highlight=False)


def _skypilot_elastic(request: _Request, plan: Any, command: list[str], job_id: str, settings: dict[str, str], *,
                      workdir: str | None, install: Any, dist_dir: str, policy: str, steps: int | None) -> None:
    """Launch each planned node as a one-node SkyPilot cluster joined to one elastic job whose
    controller runs here (--dry-run: print the calls and task YAMLs instead)."""
    from spottrain.runtime import sky_job
    from spottrain.sim.plan_transforms import PLAN_TRANSFORMS

    if request.output is not None or request.launch:
        raise InputError("--output and --launch apply to --skypilot-mode managed-torchrun; the elastic mode "
                         "launches from here (see its tasks with --dry-run)",
                         column="--output" if request.output else "--launch")
    transform = PLAN_TRANSFORMS.get(policy)
    if transform is not None:  # e.g. on-demand: the plan's cluster bought on-demand; deepvm-anchor: + an anchor node
        plan = transform(plan)[0]
    if steps is None and plan.workload.samples_total and settings.get("SPOTTRAIN_GLOBAL_BATCH_SIZE"):
        steps = int(plan.workload.samples_total // int(settings["SPOTTRAIN_GLOBAL_BATCH_SIZE"]))
    job = sky_job.SkyJob(plan=plan, job_id=job_id, command=command, env=settings, policy=policy, steps=steps,
                         controller=request.controller, controller_port=request.controller_port, workdir=workdir,
                         bucket=request.bucket, install=install, dist_dir=dist_dir)
    if request.dry_run:
        result = sky_job.dry_run(job)
        if request.as_json:
            print(json.dumps(result, indent=2))
        else:
            sys.stdout.write(sky_job.render_dry_run(result))
        return
    result = sky_job.run(job, on_event=_sky_events(bucket=request.bucket, quiet=request.as_json))
    where = setup = None
    if not request.no_record:
        from spottrain.runtime.record import record_fleet_run

        setup = _fleet_setup(plan, settings, request.example, request.precision)
        where = record_fleet_run(job_id, result, plan=plan.to_dict(), setup=setup,
                                 store_path=str(request.store) if request.store else None)
    if request.as_json:
        print(json.dumps({"ok": result.ok, "steps": result.steps_done, "failure": result.failure,
                          "decisions": result.decisions}, indent=2))
    else:
        err.print(f"job {job_id}: {'completed' if result.ok else 'FAILED'} at step {result.steps_done}"
                  + (f" ({result.failure})" if result.failure else ""), highlight=False)
    if where is not None and setup is not None:
        _say_recorded(where, job_id, setup.model)
    if not result.ok:
        raise typer.Exit(1)


def _fleet_setup(plan: Any, settings: dict[str, str], example: str | None, precision: str | None = None) -> Any:
    """What a cloud run's measurement rows describe: the plan's workload on its GPU (one worker per
    node). Plan groups of different GPU types give no GPU (a loss curve only: which node trained
    at which world size is not in the reports)."""
    from spottrain.runtime.record import RunSetup, run_precision

    gpus = {g.gpu for g in plan.groups}
    gpu = next(iter(gpus)) if len(gpus) == 1 and next(iter(gpus)).lower() != "cpu" else ""
    w = plan.workload
    model, flops, params, tensors = w.model, w.flops_per_sample, w.param_count, None
    if example:
        from spottrain.runtime.record import example_figures

        model, flops, params, tensors = example_figures(example)
    nets = {g.network_gbps for g in plan.groups}
    return RunSetup(model=model, global_batch_size=int(settings.get("SPOTTRAIN_GLOBAL_BATCH_SIZE") or 0), gpu=gpu,
                    flops_per_sample=flops, param_count=params, tensor_count=tensors,
                    precision=run_precision(precision, plan, example or None), network_gbps=nets.pop() if len(nets) == 1 else None, source="spottrain run --backend skypilot")


def _sky_events(*, bucket: str | None, quiet: bool) -> Any:
    """The elastic job's events as lines on stderr (none with --json)."""
    noted: list[bool] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "launch" and not bucket and not noted and not quiet:  # every check passed: say it once
            noted.append(True)
            err.print("note: no --bucket: no checkpoints; a node that joins gets the state from a live peer, a rerun "
                      "after losing every node starts over", highlight=False)
        if not quiet and kind in ("launch", "membership", "decision", "lost", "joined", "release", "finished"):
            detail = ", ".join(f"{k}={v}" for k, v in data.items() if k not in ("time_s", "kind"))
            err.print(f"{data['time_s']:8.1f}s {kind}: {detail}", highlight=False)

    return on_event


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run)
