"""Catalog load time: cold (fresh interpreter) and warm (cached), against a plain csv read.

    .venv/bin/python bench/catalog_load.py

The baseline is the time to merely read the three shipped vms.csv files with the csv module
in the same fresh interpreter: the floor any loader pays.
"""

from __future__ import annotations

from pathlib import Path

import datetime as dt
import platform
import statistics
import subprocess
import sys
import time

COLD = ("import time; t = time.perf_counter(); from spottrain.catalog import load_catalog; "
        "c = load_catalog(); print(time.perf_counter() - t, len(c.offers))")
BASELINE = ("import time; t = time.perf_counter(); import csv, spottrain; from importlib import resources; "
            "d = resources.files('spottrain').joinpath('data', 'catalog'); "
            "n = sum(len(list(csv.DictReader(d.joinpath(f).read_text().splitlines()))) "
            "for f in ('aws_vms.csv', 'gcp_vms.csv', 'azure_vms.csv')); print(time.perf_counter() - t, n)")


def _run(code: str, repeats: int = 7) -> tuple[float, str]:
    times, extra = [], ""
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        times.append(float(out[0]))
        extra = out[1]
    return statistics.median(times), extra


def main() -> None:
    base, rows = _run(BASELINE)
    cold, offers = _run(COLD)
    from spottrain.catalog import load_catalog

    load_catalog()
    t = time.perf_counter()
    for _ in range(1000):
        load_catalog().query(gpu="V100", spot=True)
    warm_query = (time.perf_counter() - t) / 1000
    table = "\n".join([
        "| measurement | median | ratio to baseline |",
        "| --- | --- | --- |",
        f"| baseline: csv read of {rows} raw rows (cold interpreter) | {base * 1e3:.1f} ms | 1.00 |",
        f"| load_catalog() cold, {offers} offers | {cold * 1e3:.1f} ms | {cold / base:.2f} |",
        f"| warm query(gpu='V100', spot=True) | {warm_query * 1e3:.2f} ms | {warm_query / base:.3f} |",
    ])
    print(table)
    page = (
        "# catalog_load\n\n"
        "Command: `.venv/bin/python bench/catalog_load.py` (medians of 7 fresh interpreters).\n"
        f"Machine: {platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}. "
        f"Date: {dt.date.today()}.\n"
        "Anchor: reading the same three shipped vms.csv files with the csv module in a fresh interpreter.\n\n"
        f"{table}\n\nTarget: cold load < 0.3 s (the planner loads the catalog once per process; "
        "later calls hit the in-process cache).\n"
    )
    out = Path(__file__).resolve().parent / "results" / "catalog_load.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(page)


if __name__ == "__main__":
    main()
