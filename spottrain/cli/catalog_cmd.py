"""`spottrain catalog`: list GPU instance offers with prices, network and FLOPP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich import box
from rich.table import Table

from spottrain.catalog import CLOUDS, load_catalog, sort_offers
from spottrain.catalog.offers import offer_key
from spottrain.errors import InputError, UnknownNameError
from spottrain.units import plural

# lazy: cli.main loads every command module at start-up, so what only this command needs (the
# models, the simulator, the runtime, rich.progress) is imported inside its functions


def _outlier_reason(outliers: dict, offer) -> str | None:
    f = outliers.get(offer_key(offer))
    return None if f is None else f.reason()


def _fmt_price(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def catalog(
    cloud: Annotated[str | None, typer.Option(help="Only this cloud: aws, gcp or azure.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Only this GPU (e.g. V100, A100-80GB; aliases accepted).")] = None,
    region: Annotated[str | None, typer.Option(help="Only this region (e.g. us-east-1, us-central1).")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Only offers with a spot price; sort by spot price.")] = False,
    sort: Annotated[str, typer.Option(help="Sort by 'price' (cheapest first) or 'flopp' (TFLOPS per $/h).")] = "price",
    limit: Annotated[int, typer.Option(help="Show at most N offers (0: all).")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of offers to stdout.")] = False,
    catalog_file: Annotated[
        Path | None, typer.Option("--catalog", help="A SkyPilot vms.csv file to use instead of the shipped catalog.")
    ] = None,
) -> None:
    """List GPU instance offers per region and zone, with on-demand and spot prices.

    Example: spottrain catalog --gpu V100 --spot --sort flopp
    """
    from spottrain.cli import options

    options.count(limit, "--limit", low=0, high=1_000_000)
    sort = options.choice(sort, "--sort", ("price", "flopp"), kind="sort key")
    cloud = options.choice(options.name(cloud, "--cloud"), "--cloud", CLOUDS, kind="cloud")
    gpu = options.gpu(gpu, "--gpu")
    region = options.name(region, "--region")
    options.input_file(catalog_file, "--catalog")
    cat = load_catalog(catalog_file)
    if region is not None and region not in {o.region for o in cat.offers}:
        raise UnknownNameError("region", region, {o.region for o in cat.offers})
    offers = sort_offers(cat.query(cloud=cloud, gpu=gpu, region=region, spot=spot), by=sort, spot=spot)
    total = len(offers)
    if limit:
        offers = offers[:limit]
    outliers = cat.spot_outliers
    if as_json:
        print(json.dumps([{**o.to_dict(), "spot_price_outlier": _outlier_reason(outliers, o)} for o in offers],
                         indent=1))
        return
    console = Console()
    price_col = "spot $/h" if spot else "$/h"
    shown = f", showing {len(offers)}" if len(offers) < total else ""
    table = Table(title=f"{plural(total, 'offer')}{shown}", box=box.SIMPLE_HEAD, pad_edge=False)
    for col, justify in [("cloud", "left"), ("instance", "left"), ("GPUs", "left"), ("vCPU", "right"),
                         ("GiB", "right"), ("region", "left"), ("zone", "left"), ("$/h", "right"),
                         ("spot $/h", "right"), ("Gbps", "right"), ("FLOPP", "right")]:
        table.add_column(col, justify=justify, no_wrap=True, style="bold" if col == price_col else None)
    for o in offers:
        flopp = o.flopp(spot)
        table.add_row(
            o.cloud, o.instance_type, f"{o.gpu_count}x{o.gpu}", f"{o.vcpus:g}", f"{o.memory_gib:g}",
            o.region, o.zone or "-", _fmt_price(o.price_usd_per_hour),
            _fmt_price(o.spot_price_usd_per_hour) + (" !" if offer_key(o) in outliers else ""),
            f"{o.network_gbps:g}{'*' if o.network_estimated else ''}", "-" if flopp != flopp else f"{flopp:.1f}",
        )
    console.print(table)
    flagged = [outliers[offer_key(o)] for o in offers if offer_key(o) in outliers]
    if flagged:
        console.print(f"! implausible spot price ({plural(len(flagged), 'offer')} shown): against the same type's "
                      "other zones of the region and its on-demand price (docs/catalog.md); plans leave them out "
                      "unless --include-outliers.", style="yellow", highlight=False)
        for f in flagged[:10]:
            console.print(f"  {f.reason()}", style="yellow", highlight=False)
    ages = ", ".join(f"{s.name} {s.date_kind} {s.date} ({s.age_days()} days old)" for s in cat.snapshots)
    console.print(f"FLOPP: peak FP32 TFLOPS per {price_col}. * network estimated from documented caps.", style="dim")
    console.print(f"Data: {ages}.", style="dim", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `spottrain catalog` to the app."""
    app.command(name="catalog")(catalog)
