"""Reading at data speed: a 100k-row measurement table and trace, against the csv module.

    .venv/bin/python bench/input_speed.py [--rows 100000] [--write bench/results/input_speed.md]

The measurement table is the shipped transient_dl.csv (real, 34 rows) repeated to --rows rows
(the repeats stand for repeated measurements; the file is synthetic in that sense). The trace is
synthetic: --rows start/revoke events of nodes. The baseline reads the same file with
csv.reader in the same process, the floor any reader pays; `validate` runs the whole command
(read, 5-fold cross-validation) in process, once.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import io
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _machine import machine  # noqa: E402
from _pages import write_page  # noqa: E402


def _time(fn, repeats: int = 3) -> tuple[float, float]:
    """Best wall and CPU seconds of ``repeats`` calls (the machine is shared: CPU time is steadier)."""
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--write", default=None)
    args = ap.parse_args(argv)
    from importlib import resources

    from spottrain.cli.main import main as cli
    from spottrain.perf.measurements import read_measurements
    from spottrain.transience.events import load_user_trace

    src = Path(str(resources.files("spottrain").joinpath("data", "measurements", "transient_dl.csv")))
    lines = src.read_text().splitlines()
    body = lines[1:]
    tmp = Path(tempfile.mkdtemp(prefix="spottrain-speed-"))
    table = tmp / "m.csv"
    table.write_text("\n".join([lines[0]] + [body[i % len(body)] for i in range(args.rows)]) + "\n")
    trace = tmp / "t.csv"
    events = ["time_s,source,event,value"]
    for i in range(args.rows // 2):
        events += [f"{2 * i},n{i},start,", f"{2 * i + 1},n{i},revoke,"]
    trace.write_text("\n".join(events) + "\n")

    def csv_read(path: Path):
        with open(path, newline="") as fh:
            return list(csv.reader(fh))

    def validate():
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                cli(["validate", "--measurements", str(table), "--json"])
            except SystemExit as exc:
                if exc.code:
                    raise RuntimeError(err.getvalue()) from None

    base_m = _time(lambda: csv_read(table))
    read_m = _time(lambda: read_measurements(table))
    base_t = _time(lambda: csv_read(trace))
    read_t = _time(lambda: load_user_trace(trace))
    val = _time(validate, repeats=1)
    rows = [
        (f"baseline: csv.reader of the {args.rows:,}-row measurement table", base_m, base_m),
        ("read_measurements (parse + validate every cell)", read_m, base_m),
        ("spottrain validate on it (read + 5-fold cross-validation)", val, base_m),
        (f"baseline: csv.reader of the {args.rows:,}-row trace", base_t, base_t),
        ("load_user_trace (parse + validate every event)", read_t, base_t),
    ]
    print(f"{'measurement':<62} {'wall s':>7} {'CPU s':>7} {'CPU ratio':>9}")
    for label, (w, c), (_, bc) in rows:
        print(f"{label:<62} {w:7.2f} {c:7.2f} {c / bc:9.1f}")
    if args.write:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        write_page(args.write, [
            "# input_speed", "",
            f"Command: `.venv/bin/python bench/input_speed.py --rows {args.rows}` (best of 3; validate once).",
            f"Machine: {machine()}, load average {load:.1f} during the run. Date: {dt.date.today().isoformat()}.",
            "Anchor: csv.reader reading the same file in the same process (ratio 1.0, CPU time).", "",
            "| measurement | wall s | CPU s | CPU ratio to csv |", "| --- | ---: | ---: | ---: |",
            *[f"| {label} | {w:.2f} | {c:.2f} | {c / bc:.1f} |" for label, (w, c), (_, bc) in rows], "",
            "Target: `validate` on a 100k-row measurement table in <= 5 s on this machine.",
        ])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
