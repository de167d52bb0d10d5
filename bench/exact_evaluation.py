"""Speed of the planner's exact evaluation of a plan, before and after a change, in the same run.

    .venv/bin/python bench/exact_evaluation.py --before /tmp/base

The exact evaluation (``spottrain.planner.engine.evaluate_picks``: the performance model's mix
rule, the risk model of the whole cluster and, for a spot plan with a deadline, the deadline
policy's fallback with its run-time quantiles) is what the mix search, the Pareto sweep and the
brute-force tests call thousands of times. Each side evaluates the same plans (the first 1,500
plans of up to 2 kinds on a small AWS catalog: us-east-1, V100 / T4 / A10G, up to 6 nodes) in fresh
processes, alternating, 3 each; ``--before`` is a checkout of an earlier commit. A checksum of
every outcome's expected time, p95 time, P(deadline) and cost shows whether the answers moved.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PLANS = 1500
"""Plans evaluated a request (the first ones ``all_plans`` lists, the same on both sides)."""

REQUESTS = {
    "sync all-reduce, deadline 12 h": dict(deadline_s=12 * 3600.0),
    "async, 2 parameter servers, deadline 12 h": dict(deadline_s=12 * 3600.0, sync="async", ps=2),
    "sync all-reduce, budget $60 (no fallback)": dict(budget_usd=60.0),
}


def child(name: str) -> None:
    """Evaluate the request's plans in this process; print ms per plan and the checksum (JSON)."""
    import hashlib

    from spottrain.catalog import load_catalog
    from spottrain.perf.workload import Workload
    from spottrain.planner.engine import market_mask, prepare
    from spottrain.planner.exhaustive import all_plans

    w = Workload.from_zoo("resnet50", 64)
    ctx = prepare(w, samples=90 * 1_281_167 / 9, catalog=load_catalog(), clouds=["aws"], regions=["us-east-1"],
                  gpus=["V100", "T4", "A10G"], max_nodes=6, max_kinds=2, **REQUESTS[name])
    mask = market_mask(ctx)
    plans = all_plans(ctx, mask)
    outcomes = [next(plans)]  # the first one fills the lifetime-model and perf-model caches: not timed
    t = time.perf_counter()
    c0 = time.process_time()
    timed = list(itertools.islice(plans, PLANS))
    cpu = time.process_time() - c0
    wall = time.perf_counter() - t
    outcomes += timed
    digest = hashlib.sha256(json.dumps([(o.picks, o.time_mean_s, o.time_p95_s, o.p_deadline, o.cost_usd)
                                        for o in outcomes]).encode()).hexdigest()[:12]
    print(json.dumps({"plans": len(timed), "ms_wall": 1e3 * wall / len(timed),
                      "ms_cpu": 1e3 * cpu / len(timed), "checksum": digest}))


def run_side(name: str, code: str | None) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name], capture_output=True,
                       text=True, env=env, cwd=code or HERE.parent)
    if r.returncode != 0:
        raise SystemExit(f"{name} ({code or 'now'}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _commit(tree: str) -> str:
    r = subprocess.run(["git", "-C", tree, "log", "-1", "--format=commit %h"], capture_output=True, text=True)
    return r.stdout.strip() or "not a git checkout"


def main(argv: list[str]) -> int:
    if "--child" in argv:
        child(argv[argv.index("--child") + 1])
        return 0
    sys.path.insert(0, str(HERE))
    from _machine import machine
    from _pages import write_results

    before = argv[argv.index("--before") + 1] if "--before" in argv else None
    runs = 3
    head = ["| request | plans | before: ms CPU per plan | now: ms CPU per plan | before / now | same answers |",
            "| --- | ---: | ---: | ---: | ---: | --- |"]
    rows = []
    for name in REQUESTS:
        got: dict[str, list[dict]] = {"before": [], "now": []}
        for _ in range(runs):
            for side, code in (("before", before), ("now", None)):
                if code is None and side == "before":
                    continue
                got[side].append(run_side(name, code))
        now = got["now"]
        n_cpu = statistics.median(r["ms_cpu"] for r in now)
        if before is None:
            rows.append(f"| {name} | {now[0]['plans']:,} | - | {n_cpu:.2f} | - | - |")
        else:
            b_cpu = statistics.median(r["ms_cpu"] for r in got["before"])
            same = {r["checksum"] for r in got["before"]} == {r["checksum"] for r in now}
            rows.append(f"| {name} | {now[0]['plans']:,} | {b_cpu:.2f} | **{n_cpu:.2f}** | **{b_cpu / n_cpu:.2f}x** | "
                        f"{'yes' if same else 'NO'} |")
        print(rows[-1], flush=True)
    lines = ["# Exact evaluation of a plan: before and now", "",
             "Command: `.venv/bin/python bench/exact_evaluation.py"
             + (f" --before {before}" if before else "") + "`", "",
             f"Machine: {machine()} (shared; CPU seconds, medians of {runs} fresh processes a side, alternating).", "",
             f"The first {PLANS:,} plans (of up to 2 kinds) on AWS us-east-1 (V100 / T4 / A10G, up to 6 nodes, "
             "spot and on-demand), ResNet-50 at 64 a GPU, 10 ImageNet epochs; each evaluated exactly as the mix "
             "search and the Pareto sweep evaluate it. Same answers: the checksum of every outcome's expected "
             "and p95 time, P(deadline) and cost is the same on both sides."
             + (f" Before: the code of `{before}` ({_commit(before)})." if before else ""), "",
             *head, *rows]
    write_results(argv, __file__, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
