"""Planner latency on the full shipped catalog, and the MILP against exhaustive search.

    .venv/bin/python bench/planner.py

1. Latency: every GPU instance type x region/zone x 1..64 nodes x spot/on-demand, mixes of up to
   3 types, for several deadlines and budgets (ResNet-50, 90 ImageNet epochs). Cold = first
   request of the process (fits lifetime models, queries the perf model); warm = later requests.
2. Exactness and speed-up: on a small catalog (AWS us-east-1, V100/T4/A10G, up to 8 nodes, a quota
   that makes mixes matter) exhaustive search over all plans of up to 3 types vs our solver; both
   must find the same optimum.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _machine import machine  # noqa: E402  (bench/ is on sys.path when this script runs)
from _pages import write_page  # noqa: E402
from spottrain.catalog import load_catalog  # noqa: E402
from spottrain.perf.workload import Workload  # noqa: E402
from spottrain.planner import plan  # noqa: E402
from spottrain.planner.engine import market_mask, prepare, solve  # noqa: E402
from spottrain.planner.exhaustive import all_plans  # noqa: E402

SAMPLES = 90 * 1_281_167


def latency(catalog, w):
    t = time.perf_counter()
    r = plan(w, samples=SAMPLES, deadline_s=8 * 3600, catalog=catalog, baselines=False, pareto=False)
    cold = time.perf_counter() - t
    queries = [dict(deadline_s=h * 3600) for h in (3, 4, 6, 8, 12, 24)] + \
              [dict(budget_usd=b) for b in (20, 50, 100)] + \
              [dict(deadline_s=6 * 3600, quotas={"Standard_NC96ads_A100_v4": 1, "Standard_ND96amsr_A100_v4": 1})]
    rows, times = [], []
    for q in queries:
        best = None
        for _ in range(3):
            t = time.perf_counter()
            r = plan(w, samples=SAMPLES, catalog=catalog, baselines=False, pareto=False, **q)
            dt = time.perf_counter() - t
            best = dt if best is None else min(best, dt)
        times.append(best)
        rows.append((q, best, r))
    return cold, times, rows


CLI = ["plan", "--model", "resnet50", "--batch-size", "64", "--epochs", "90", "--dataset-size", "1.28M",
       "--deadline", "12h", "--no-refine"]


def cli_cold(runs: int = 3, cli: list[str] = CLI) -> list[float]:
    """Wall time of whole `spottrain plan` processes (each one a cold start: imports, lifetime
    models, perf queries, solve, baselines, Pareto front, rendering)."""
    import subprocess

    out = []
    for _ in range(runs):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "spottrain.cli.main", *cli], capture_output=True, text=True)
        out.append(time.perf_counter() - t)
        assert r.returncode == 0, r.stderr
    return out


def pareto_latency(catalog, w, runs: int = 3) -> tuple[float, float, int, int]:
    """Warm latency with and without the Pareto front (mixes swept), and its size / mixes."""
    base, full = [], []
    for _ in range(runs):
        t = time.perf_counter()
        plan(w, samples=SAMPLES, deadline_s=8 * 3600, catalog=catalog, baselines=False, pareto=False)
        base.append(time.perf_counter() - t)
        t = time.perf_counter()
        r = plan(w, samples=SAMPLES, deadline_s=8 * 3600, catalog=catalog, baselines=False, pareto=True)
        full.append(time.perf_counter() - t)
    mixes = sum(" + " in p["label"] for p in r.pareto)
    return min(base), min(full), len(r.pareto), mixes


def exhaustive(ctx, mask):
    best, n_eval = None, 0
    for o in all_plans(ctx, mask):
        n_eval += 1
        if o.feasible and (best is None or o.cost_usd < best.cost_usd):
            best = o
    return best, n_eval


def small(catalog, w):
    out = []
    for deadline_h, quotas in ((30, None), (12, {"p3.2xlarge": 3}), (8, {"p3.2xlarge": 2, "g5.xlarge": 2})):
        ctx = prepare(w, samples=SAMPLES / 9, deadline_s=deadline_h * 3600, catalog=catalog, clouds=["aws"],
                      regions=["us-east-1"], gpus=["V100", "T4", "A10G"], max_nodes=8, quotas=quotas)
        mask = market_mask(ctx)
        t = time.perf_counter()
        ex, n_eval = exhaustive(ctx, mask)
        t_ex = time.perf_counter() - t
        t = time.perf_counter()
        ours = solve(ctx, mask=mask)
        t_ours = time.perf_counter() - t
        same = (ex is None and ours is None) or (ex is not None and ours is not None
                                                 and abs(ex.cost_usd - ours.cost_usd) <= 1e-9 * ex.cost_usd)
        out.append((deadline_h, quotas, len(ctx.cands), n_eval, t_ex, t_ours, ex, ours, same, ctx))
    return out


def main() -> int:
    cli = cli_cold()
    print(f"cold CLI wall: {', '.join(f'{t:.2f}' for t in cli)} s")
    cli_refined = cli_cold(1, CLI[:-1])  # the default: refined by simulation
    print(f"cold CLI wall, refined (default): {cli_refined[0]:.2f} s")
    catalog = load_catalog()
    w = Workload.from_zoo("resnet50", 64)
    cold, times, rows = latency(catalog, w)
    base, full, n_front, n_mix = pareto_latency(catalog, w)
    print(f"pareto: {base:.3f} s without, {full:.3f} s with the front ({n_front} points, {n_mix} mixes)")
    med = statistics.median(times)
    print(f"cold {cold:.2f} s; warm median {med:.3f} s over {len(times)} queries")
    lines = ["| query | best plan | expected cost | expected time | columns | after pruning | MILP solves | proven optimal | latency (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for q, t, r in rows:
        s = r.stats
        p = r.best.prediction
        lines.append(f"| {q} | {r.best.cluster} ({', '.join(g.instance_type for g in r.best.groups)}) | "
                     f"${p.cost_usd:,.2f} | {p.duration_s / 3600:.2f} h | {s['columns']:,} | {s['columns_after_pruning']} | "
                     f"{s['milp_calls']} | {'yes' if s['proven_optimal'] else 'no (MILP time limit; best found)'} | {t:.3f} |")
    print("\n".join(lines))
    res = small(catalog, w)
    sl = ["| deadline | quotas | candidates | plans enumerated | exhaustive (s) | ours (s) | speed-up | exhaustive optimum | ours | same |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for d, q, nc, ne, te, to, ex, ours, same, ctx in res:
        from spottrain.planner.engine import describe

        sl.append(f"| {d} h | {q} | {nc} | {ne:,} | {te:.2f} | {to:.3f} | {te / max(to, 1e-9):,.0f}x | "
                  f"{describe(ctx, ex) if ex else '-'} ${ex.cost_usd if ex else 0:,.2f} | "
                  f"{describe(ctx, ours) if ours else '-'} ${ours.cost_usd if ours else 0:,.2f} | {'yes' if same else 'NO'} |")
    print("\n".join(sl))
    md = [
        "# Planner", "",
        "Command: `.venv/bin/python bench/planner.py`", "",
        f"Machine: {machine()} (shared with other work while measured).", "",
        f"Catalog: shipped catalog, {len(catalog.offers):,} GPU offers; workload ResNet-50, batch 64 per GPU, "
        f"90 ImageNet epochs ({SAMPLES:,} samples); sync all-reduce; spot and on-demand; mixes of up to 3 types.", "",
        "## Latency on the full catalog", "",
        f"- cold (first request in the process: lifetime-model fits and perf-model queries): **{cold:.2f} s**",
        f"- warm median over {len(times)} different requests (best of 3 each): **{med:.3f} s** "
        "(goal <= 0.1 s; anchors: spotDNN 0.2-0.3 s at 70 instances, Srifty's exhaustive search up to 1,500 s)", "",
        *lines, "",
        "## Cold start of the command", "",
        f"`spottrain plan {' '.join(CLI[1:])}` as a fresh process, {len(cli)} runs: "
        f"**{statistics.median(cli):.2f} s** median wall ({', '.join(f'{t:.2f}' for t in cli)} s), "
        "goal < 3 s. Before the shipped lifetime fits (tools/fit_lifetimes.py) the same command took 5.6 s "
        "on this machine, 4.3 s of it in bathtub-model fits. The same command without `--no-refine` (the default: "
        "the best candidates simulated on real traces, see docs/plan.md) took "
        f"**{cli_refined[0]:.2f} s** in the same run.", "",
        "## Pareto front", "",
        f"Warm plan without the front: {base:.3f} s; with the front (homogeneous columns of both markets "
        f"plus the fastest plan within {4} budgets swept over the front, mixes included): **{full:.3f} s**; "
        f"{n_front} points, {n_mix} of them mixes.", "",
        "## Solver vs exhaustive search (small catalog)", "",
        "AWS us-east-1, V100/T4/A10G, up to 8 nodes, spot and on-demand, mixes of up to 3 types in one "
        "placement group; both sides use the same exact evaluation.", "",
        *sl, "",
        "Plan quality against the hindsight-optimal plan and the 95%-of-deadlines goal are measured by the "
        "simulator benchmark (bench/simulator.py), which calls `spottrain.planner.plan`.", "",
    ]
    write_page(HERE / "results" / "planner.md", md)
    return 0 if all(r[8] for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
