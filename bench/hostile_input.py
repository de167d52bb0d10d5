"""Hostile input: every case of tests/hostile_cases.py as a subprocess, with a time limit.

    .venv/bin/python bench/hostile_input.py [--only SUBSTRING] [--timeout 60] [--jobs 2] [--list-bad]

Each bad invocation (malformed, binary, duplicated-column files, hand-edited plans, out-of-range
and non-finite flags, unknown names, contradictory flags, unwritable outputs, usage errors) must
be refused in one line on stderr with exit code 2; each valid but unusual one (BOM, CRLF, quoted
fields) must succeed. The table counts tried / clean / tracebacks / accepted / hangs and writes
bench/results/hostile_input.md. The fast half of the cases also runs in `make test`
(tests/test_hostile_cli.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from _machine import machine  # noqa: E402
from _pages import write_page  # noqa: E402
from hostile_cases import build_fixtures, cases, cleanup, run_subprocess  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="Only cases whose id contains this text.")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--list-bad", action="store_true", help="Print every case that is not clean.")
    ap.add_argument("--write", default=None, help="Write the results page here.")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="spottrain-hostile-"))
    work = root / "cwd"
    work.mkdir()
    try:
        fixtures = build_fixtures(root / "files")
        todo = [c for c in cases() if args.only is None or args.only in c.id]
        # A fresh HOME and data directory: read-only commands must create nothing there.
        env = {"HOME": str(root / "home"), "XDG_DATA_HOME": str(root / "home" / "data"),
               "SPOTTRAIN_HOME": str(root / "home" / "spottrain")}
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda c: run_subprocess(c, fixtures, timeout_s=args.timeout, cwd=work,
                                                              env=env), todo))
        created = sorted(str(p.relative_to(root)) for p in (root / "home").rglob("*")) if (root / "home").exists() else []
    finally:
        cleanup(root)
    kinds = Counter(o.kind for o in outcomes)
    bad = [o for o in outcomes if o.kind not in ("clean", "ok")]
    refuse = [o for o in outcomes if o.case.expect == "refuse"]
    accept = [o for o in outcomes if o.case.expect == "accept"]
    secs = sorted(o.seconds for o in refuse)
    rows = [
        ("bad inputs tried", len(refuse)),
        ("refused cleanly: one line, exit 2", kinds["clean"]),
        ("Python traceback", sum(1 for o in outcomes if o.kind == "traceback")),
        ("nonsense silently accepted (exit 0)", kinds["accepted"]),
        ("exit 2 but more than one line", kinds["box"]),
        ("another exit code", kinds["other"]),
        (f"hang (over {args.timeout:g} s)", kinds["hang"]),
        ("valid but unusual inputs tried (BOM, CRLF, quoted)", len(accept)),
        ("... accepted", kinds["ok"]),
        ("... refused", kinds["refused-valid"]),
    ]
    print(f"{'outcome':<52} count")
    for label, n in rows:
        print(f"{label:<52} {n:>5}")
    if secs:
        print(f"answer time of bad inputs: median {statistics.median(secs):.2f} s, max {secs[-1]:.2f} s")
    if created:
        print("created under a fresh HOME:", ", ".join(created[:10]))
    if args.list_bad or bad:
        for o in bad:
            tail = " | ".join(ln for ln in o.stderr.strip().splitlines()[-2:])
            print(f"[{o.kind}] {o.case.id} rc={o.rc} {o.seconds:.1f}s: {tail[:300]}")
    if args.write:
        lines = [
            "# hostile_input", "",
            f"Command: `.venv/bin/python bench/hostile_input.py` ({len(outcomes)} cases of tests/hostile_cases.py, "
            f"each a `python -m spottrain.cli.main` subprocess, {args.jobs} at a time, limit {args.timeout:g} s).",
            f"Machine: {machine()}. Date: {dt.date.today().isoformat()}.",
            "Anchor: the project's promise for bad input: one line naming the file/line/column or flag, exit 2, "
            "no traceback, within a few seconds; valid but unusual files accepted.", "",
            "| outcome | count |", "| --- | ---: |",
            *[f"| {label} | {n} |" for label, n in rows], "",
        ]
        if secs:
            lines.append(f"Answer time of the bad inputs: median {statistics.median(secs):.2f} s, "
                         f"max {secs[-1]:.2f} s (interpreter start included).")
        lines.append("Files created under a fresh HOME by these commands: "
                     + (", ".join(created[:10]) if created else "none") + ".")
        if bad:
            lines += ["", "Cases not yet answered as promised:", ""]
            lines += [f"- `{o.case.id}`: {o.kind} (exit {o.rc})" for o in bad]
        write_page(args.write, lines)
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
