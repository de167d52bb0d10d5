"""Run every benchmark under bench/ and rewrite bench/RESULTS.md.

Each benchmark script prints its table and writes ``bench/results/<name>.md`` (the command,
the machine, the figures and the anchor they are compared with). This script runs them one
after another and concatenates their result pages into bench/RESULTS.md.
"""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
import sys
from pathlib import Path

from _machine import machine  # bench/ is on sys.path when this script runs

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


NEEDS_GPU = ("gpu_speeds.py", "gpu_power.py")
"""Scripts that run on a CUDA machine only (their output is data, kept in bench/data/, not a page)."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # --collect: only reassemble RESULTS.md from the pages the scripts last wrote.
    collect_only = "--collect" in argv
    scripts = sorted(p for p in HERE.glob("*.py")
                     if p.name not in ("run_all.py", *NEEDS_GPU) and not p.name.startswith("_"))
    failures = []
    for script in [] if collect_only else scripts:
        print(f"== {script.name}", flush=True)
        cmd = [sys.executable, str(script)]
        if '"--write"' in script.read_text():  # scripts that write their page only when asked
            cmd += ["--write", str((RESULTS / f"{script.stem}.md").relative_to(HERE.parent))]
        proc = subprocess.run(cmd, cwd=HERE.parent)
        if proc.returncode != 0:
            failures.append(script.name)
    parts = [
        "# Benchmark results\n",
        f"Rewritten by `make bench` (`python bench/run_all.py`) on {dt.date.today().isoformat()}. "
        "Each section below names the command that produced it; `python bench/run_all.py --collect` "
        "reassembles this page from the sections without re-running.\n",
        f"Machine: {machine()}, {platform.system()}. The machine is shared and noisy: figures are ratios against a "
        "baseline measured in the same run where possible.\n",
    ]
    for script in scripts:
        page = RESULTS / f"{script.stem}.md"
        if page.exists():
            parts.append(page.read_text().strip() + "\n")
        else:
            parts.append(f"## {script.stem}\n\nNo results page was written (the script failed).\n")
    (HERE / "RESULTS.md").write_text("\n".join(parts))
    if failures:
        print("failed:", ", ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
