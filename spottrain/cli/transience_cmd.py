"""`spottrain transience`: fitted revocation models, availability, replacement delay, prices."""

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
from spottrain.units import format_duration, parse_duration_s

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions

CLOUDS = ("aws", "gcp", "azure")
COST_RUNS = 2000
"""Monte Carlo runs of the job figures (transience_cost)."""


def _price_spread(cloud: str, gpu: str) -> dict | None:
    """Spot $/h of the cheapest 1-GPU-type instance per zone, from the catalog (None if absent)."""
    try:
        from spottrain.catalog import load_catalog

        offers = load_catalog().query(cloud=cloud, gpu=gpu, spot=True)
    except Exception:  # the catalog is optional for this command
        return None
    offers = [o for o in offers if o.spot_price_usd_per_hour is not None]
    if not offers:
        return None
    fewest = min(o.gpu_count for o in offers)
    itype = min((o for o in offers if o.gpu_count == fewest), key=lambda o: o.price_usd_per_hour).instance_type
    prices = {}
    for o in offers:
        if o.instance_type == itype:
            key = o.zone or o.region
            prices[key] = min(prices.get(key, math.inf), o.spot_price_usd_per_hour)
    vals = sorted(prices.values())
    cheapest = min(prices, key=prices.get)
    return {"instance_type": itype, "zones": len(prices), "min_usd_per_hour": vals[0],
            "median_usd_per_hour": vals[len(vals) // 2], "max_usd_per_hour": vals[-1],
            "cheapest_zone": cheapest}


def _check_gpu(gpu: str) -> None:
    """Refuse a name that is neither a known GPU nor an instance type (near miss suggested)."""
    try:
        from spottrain.catalog import canonical_gpu, load_catalog
    except ImportError:  # no catalog: any name is pooled and says so
        return
    try:
        canonical_gpu(gpu)
        return
    except UnknownNameError as gpu_err:
        try:
            if load_catalog().instance(gpu):
                return
        except UnknownNameError:
            pass
        raise gpu_err from None


def _summary(cloud: str, gpu: str, zone: str | None, nodes: int, duration_s: float,
             checkpoint_cost_s: float) -> tuple[dict, object]:
    from spottrain.transience import (
        availability,
        expected_revocations,
        group_outage,
        lifetime_model,
        optimal_checkpoint_interval_s,
        replacement_delay,
        transience_cost,
        young_daly_interval_s,
    )

    m = lifetime_model(cloud, gpu, zone)
    mtbf = m.mean_lifetime_s()
    delay = replacement_delay(cloud, m.gpu)
    avail = availability(cloud, m.gpu, zone)
    outage = group_outage(cloud, m.gpu)
    restart = delay.mean_s
    opt = optimal_checkpoint_interval_s(checkpoint_cost_s, m, nodes, restart_s=restart)
    yd = young_daly_interval_s(checkpoint_cost_s, mtbf / nodes)
    runs = _cost_runs(nodes, expected_revocations(m, nodes, duration_s, replacement_delay_s=restart))
    cost = transience_cost(duration_s, nodes, m, checkpoint_cost_s, restart, opt, runs=runs, seed=0)
    cost["runs"] = runs
    from spottrain.planner.risk import revocation, state_loss

    # spottrain's runtime keeps the model on the survivors: the share of revocations that lose it
    cost["model_lost_share"] = state_loss([(nodes, revocation(cloud, m.gpu))], nodes)
    out = {
        "cloud": m.cloud, "gpu": m.gpu, "zone": zone, "pooled_from": m.pooled_from,
        "sources": list(m.sources), "nodes_observed": m.n_nodes, "revocations_observed": m.n_revocations,
        "max_lifetime_s": m.max_lifetime_s,
        "models": m.table(), "chosen": m.name,
        "mtbf_s": mtbf,
        "revocations_per_node_hour": expected_revocations(m, 1, 24 * 3600.0) / 24.0,
        "p_revoked_within_1h": float(m.cdf(3600.0)),
        "replacement_delay": {"mean_s": delay.mean_s, "p95_s": delay.p95_s,
                              "mean_wait_s": delay.mean_wait_s, "mean_startup_s": delay.mean_startup_s,
                              "pooled_from": delay.pooled_from},
        "group_outage": {"share": outage.share, "revocations": outage.revocations, "traces": list(outage.traces),
                         "pooled_from": outage.pooled_from},
        "availability": {"p_obtain_1": avail.p_obtain(1), f"p_obtain_{nodes}": avail.p_obtain(nodes),
                         "basis": avail.note, "pooled_from": avail.pooled_from},
        "price_spread": _price_spread(cloud, m.gpu),
        "job": {"nodes": nodes, "duration_s": duration_s, "checkpoint_cost_s": checkpoint_cost_s,
                "expected_revocations": expected_revocations(m, nodes, duration_s,
                                                             replacement_delay_s=restart),
                "optimal_interval_s": opt, "young_daly_interval_s": yd, **cost},
    }
    return out, m


COST_CELLS = 2e9
"""Work budget of the job figures: runs x nodes x (revocations + 1) failure times scanned (a few
seconds of numpy); beyond it the runs are lowered, down to MIN_COST_RUNS."""
MIN_COST_RUNS = 200


def _cost_runs(nodes: int, revocations: float) -> int:
    """Monte Carlo runs for the job figures that fit :data:`COST_CELLS`; refuses a job that does
    not fit even with :data:`MIN_COST_RUNS` runs, with the estimate."""
    per_run = nodes * (2.0 * revocations + 1.0)
    runs = int(min(COST_RUNS, COST_CELLS / per_run))
    if runs < MIN_COST_RUNS:
        raise InputError(f"{nodes:,} nodes with about {revocations:,.0f} expected revocations would take "
                         f"{MIN_COST_RUNS * per_run:.2g} steps of simulation even at {MIN_COST_RUNS} runs "
                         f"(budget {COST_CELLS:.0e}); lower --nodes or --duration", column="--nodes")
    return runs


def _plot(m, path: Path, force: bool) -> None:
    if path.exists() and not force:
        raise InputError("file exists; pass --force to overwrite it", column="--plot", file=str(path))
    if path.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise InputError(f"expected a .png, .pdf or .svg file name, got {path.name!r}", column="--plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    km = m.kaplan_meier
    top = m.max_lifetime_s or float(np.quantile(m.data.durations_s, 0.99))
    t = np.linspace(0.0, top * 0.999, 600)
    lo, hi = km.confidence_band(t)
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    ax.step(t / 3600, km.survival(t), where="post", color="black", lw=1.5, label="Kaplan-Meier (data)")
    ax.fill_between(t / 3600, lo, hi, step="post", color="grey", alpha=0.3, label="95% band (Greenwood)")
    colors = {"exponential": "tab:blue", "weibull": "tab:orange", "bathtub": "tab:green"}
    for name, model in m.candidates.items():
        if name == "kaplan-meier":
            continue
        chosen = name == m.name
        label = f"{name} (AIC {model.aic_:.0f}{', chosen' if chosen else ''})"
        ax.plot(t / 3600, model.survival(t), color=colors.get(name), lw=2.5 if chosen else 1.2,
                ls="-" if chosen else "--", label=label)
    where = f" {m.zone}" if m.zone else ""
    pooled = f"\n(pooled: {m.pooled_from})" if m.pooled_from else ""
    ax.set_title(f"{m.cloud.upper()} spot {m.gpu}{where}: {m.n_nodes} nodes, "
                 f"{m.n_revocations} revocations{pooled}", fontsize=10)
    ax.set_xlabel("node age (hours)")
    ax.set_ylabel("P(not yet revoked)")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def transience(
    gpu: Annotated[str, typer.Option(help="GPU (V100, K80, T4, A100 ...) or instance type.")],
    cloud: Annotated[str, typer.Option(help="aws, gcp or azure.")] = "aws",
    zone: Annotated[str | None, typer.Option(help="Zone (e.g. us-east-1a, us-west1-b).")] = None,
    nodes: Annotated[int, typer.Option(help="Cluster size for the job figures.")] = 1,
    duration: Annotated[str, typer.Option(help="Failure-free job length (e.g. 8h).")] = "8h",
    checkpoint_cost: Annotated[str, typer.Option(help="Time to write one checkpoint (e.g. 60s).")] = "60s",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON to stdout.")] = False,
    plot: Annotated[Path | None, typer.Option(help="Write survival curves to this .png/.pdf/.svg.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --plot file.")] = False,
) -> None:
    """Revocation models fitted on real spot traces: lifetimes, availability, replacement, prices.

    Example: spottrain transience --gpu V100 --cloud gcp --nodes 8 --plot v100.png
    """
    from spottrain.cli import options

    cloud = options.choice(options.name(cloud, "--cloud"), "--cloud", CLOUDS, kind="cloud")
    options.count(nodes, "--nodes", high=options.MAX_NODES, why="no cloud grants one account more GPU nodes")
    # The job figures simulate COST_RUNS runs x nodes failure times (float64), a few arrays of them.
    need = 4 * COST_RUNS * nodes * 8 / 2**30
    avail = options.available_memory_bytes()
    options.estimate(f"simulating {nodes:,} nodes x {COST_RUNS} runs", need, None if avail is None else avail / 2**30,
                     "--nodes", hint="lower --nodes")
    gpu = options.name(gpu, "--gpu")
    options.name(zone, "--zone")
    _check_gpu(gpu)
    duration_s = options.duration(duration, "--duration")
    ckpt_s = options.duration(checkpoint_cost, "--checkpoint-cost")
    if ckpt_s >= duration_s:
        raise InputError(f"a checkpoint ({checkpoint_cost}) must take less than the job ({duration})",
                         column="--checkpoint-cost")
    if plot is not None:
        options.output(plot, "--plot", force=force, suffixes=(".png", ".pdf", ".svg"))
    err = Console(stderr=True)
    with err.status("fitting lifetime models ..."):
        out, m = _summary(cloud.lower(), gpu, zone, nodes, duration_s, ckpt_s)
        if plot is not None:
            _plot(m, plot, force)
            out["plot"] = str(plot)
    if as_json:
        print(json.dumps(out, indent=1, default=float))
        return
    _render(out)


def _render(out: dict) -> None:
    con = Console()
    where = f" {out['zone']}" if out["zone"] else ""
    con.print(f"[bold]{out['cloud'].upper()} spot {out['gpu']}{where}[/]: {out['nodes_observed']} nodes, "
              f"{out['revocations_observed']} revocations in {len(out['sources'])} trace(s)")
    if out["pooled_from"]:
        con.print(f"[yellow]pooled estimate:[/] {out['pooled_from']}")
    tab = Table(box=box.SIMPLE_HEAD, title="lifetime models (lowest AIC chosen)")
    for c in ("model", "loglik", "AIC", "mean lifetime", "parameters", ""):
        tab.add_column(c, justify="right" if c in ("loglik", "AIC", "mean lifetime") else "left")
    for r in out["models"]:
        params = _params(r["params"])
        fmt = (lambda v: "-" if v != v else f"{v:.1f}")
        tab.add_row(r["model"], fmt(r["loglik"]), fmt(r["aic"]), format_duration(r["mean_lifetime_s"]),
                    params, "[bold green]chosen[/]" if r["chosen"] else "")
    con.print(tab)
    rd, av, job = out["replacement_delay"], out["availability"], out["job"]
    n = job["nodes"]
    lines = [
        ("MTBF (mean node lifetime)", format_duration(out["mtbf_s"])
         + (" (24 h cap)" if out["max_lifetime_s"] else "")),
        ("revocation rate", f"{out['revocations_per_node_hour']:.3f} per node-hour (first 24 h)"),
        ("P(revoked within 1 h)", f"{out['p_revoked_within_1h']:.1%}"),
        ("replacement delay", f"mean {format_duration(rd['mean_s'])}, p95 {format_duration(rd['p95_s'])} "
         f"(wait {format_duration(rd['mean_wait_s'])} + start-up {format_duration(rd['mean_startup_s'])})"),
        ("P(obtain now)", f"1 node {av['p_obtain_1']:.0%}"
         + (f", {n} nodes {av[f'p_obtain_{n}']:.0%}" if n > 1 else "") + f" ({av['basis']})"),
        ("revocations that empty the group", f"{out['group_outage']['share']:.0%} of "
         f"{out['group_outage']['revocations']:,} in traces of several nodes"
         + (f" (pooled: {out['group_outage']['pooled_from']})" if out["group_outage"]["pooled_from"] else "")),
    ]
    ps = out["price_spread"]
    lines.append(("spot price across zones", "catalog not available" if ps is None else
                  f"{ps['instance_type']}: ${ps['min_usd_per_hour']:.3f}-${ps['max_usd_per_hour']:.3f}/h "
                  f"over {ps['zones']} zones (median ${ps['median_usd_per_hour']:.3f}, cheapest {ps['cheapest_zone']})"))
    lines += [
        (f"job: {n} node(s) x {format_duration(job['duration_s'])}",
         f"{job['expected_revocations']:.2f} expected revocations (over the run a checkpoint-restart job takes)"),
        (f"checkpoint interval (C={format_duration(job['checkpoint_cost_s'])})",
         f"optimal {format_duration(job['optimal_interval_s'])} under the fitted law; "
         f"Young/Daly sqrt(2CM) {format_duration(job['young_daly_interval_s'])}"),
        ("expected slowdown", f"{job['expected_slowdown']:.3f}x (p5 {job['quantiles']['p5']:.3f}, "
         f"p95 {job['quantiles']['p95']:.3f}); lost work {format_duration(job['expected_lost_work_s'])}, "
         f"restarts {format_duration(job['expected_restart_s'])} (a checkpoint-restart job)"),
        ("revocations that lose the model", f"{job['model_lost_share']:.1%} with spottrain's runtime, whose "
         f"survivors keep it (`spottrain plan` counts lost work only for these)"),
    ]
    if out["availability"]["pooled_from"]:
        lines.append(("availability pooled", out["availability"]["pooled_from"]))
    if rd["pooled_from"]:
        lines.append(("replacement pooled", rd["pooled_from"]))
    summ = Table(box=None, show_header=False, pad_edge=False)
    summ.add_column(style="bold")
    summ.add_column()
    for k, v in lines:
        summ.add_row(k, v)
    con.print(summ)
    if "plot" in out:
        con.print(f"plot written to {out['plot']}")


def _params(p: dict) -> str:
    """Short human form of fitted parameters: shapes k, scales in hours."""
    if "rate_per_s_" in p:
        return f"1/rate={format_duration(1 / p['rate_per_s_'])}"
    if "early_shape_" in p:
        return (f"k1={p['early_shape_']:.2f} s1={format_duration(p['early_scale_s_'])} "
                f"ramp {p['wearout_hazard_at_anchor_per_s_'] * 3600:.3f}/h at "
                f"{format_duration(p['wearout_anchor_s_'])} (g={p['wearout_steepness_']:.1f})")
    if "shape_" in p:
        return f"k={p['shape_']:.2f} s={format_duration(p['scale_s_'])}"
    return ""


def register(app: typer.Typer) -> None:
    """Add ``spottrain transience``."""
    app.command(name="transience")(transience)
