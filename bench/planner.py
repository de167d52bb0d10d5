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


SMALL = ["plan", "--model", "resnet50", "--batch-size", "32", "--epochs", "1", "--dataset-size", "1281167",
         "--deadline", "2h"]
"""The interactive request whose refined plan took 7.3 s before the array engine and racing."""
REQUESTS = {"ResNet-50, 90 epochs, 12 h": CLI[:-1], "ResNet-50, 1 epoch, 2 h": SMALL}


def cli_cold(runs: int = 3, cli: list[str] = CLI, cpu: list[float] | None = None, code: str | None = None,
             argv: list[str] | None = None) -> list[float]:
    """Wall time of whole `spottrain plan` processes (each one a cold start: imports, lifetime
    models, perf queries, solve, baselines, rendering); ``cpu`` gets each one's CPU s. ``code``: a
    checkout whose spottrain runs instead of this one (the before of a before/after); ``argv``: a
    command line instead of ``python -m spottrain.cli.main *cli``."""
    import os
    import resource
    import subprocess

    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = code
    out = []
    for _ in range(runs):
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run(argv or [sys.executable, "-m", "spottrain.cli.main", *cli], capture_output=True, text=True,
                           env=env, cwd=code)
        out.append(time.perf_counter() - t)
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        assert r.returncode == 0, r.stderr
    return out


def import_times(cli: list[str] = CLI) -> tuple[float, list[tuple[str, float]]]:
    """``python -X importtime`` of a `spottrain plan` process: total import time (s, sum of self
    times) and the heaviest top-level imports (cumulative s)."""
    import subprocess

    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "spottrain.cli.main", *cli],
                       capture_output=True, text=True)
    total, top = 0.0, []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].split("|")
        total += int(self_us) / 1e6
        if name.startswith(" ") and not name.startswith("   "):  # depth 1: imported by the command itself
            top.append((name.strip(), int(cum_us) / 1e6))
    return total, sorted(top, key=lambda x: -x[1])[:8]


def refine_ratio(w) -> list[str]:
    """The same refine on the same request, before (every candidate to 100 runs on the event
    engine) and now (racing on the array engine), in this process."""
    from spottrain.planner.refine import refine

    kw = dict(samples=SAMPLES, deadline_s=12 * 3600)
    r = plan(w, **kw)
    rows = []
    for name, opts in (("before: event engine, 100 runs each", dict(first_runs=100, engine="event")),
                       ("now: racing on the array engine", dict())):
        t0, c0 = time.perf_counter(), time.process_time()
        ref = refine(r, r.context, runs=100, workers=1, **opts)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        conf = "-" if ref.confidence_chosen is None else f"{100 * ref.confidence_chosen:.1f}%"
        rows.append((name, wall, cpu, ref.total_runs, ref.plan.label, ref.chosen.mean_cost_usd, conf))
    lines = ["| refine | wall s | CPU s | simulated runs | chosen | its mean simulated cost | confidence it is the best |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: |"]
    lines += [f"| {n} | {w_:.2f} | {c:.2f} | {k:,} | {lab} | ${cost:,.2f} | {conf} |"
              for n, w_, c, k, lab, cost, conf in rows]
    same = rows[0][4] == rows[1][4]
    lines += ["", f"Same chosen plan: **{'yes' if same else 'no'}**; CPU ratio before / now: "
              f"**{rows[0][2] / max(rows[1][2], 1e-9):.1f}x**."]
    return lines


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


def racing_vs_full(runs: int = 200) -> list[str]:
    """bench/plan_quality.py's requests and held-out zones: the refine of before (every candidate
    to 100 runs) against racing (a quarter of the runs, more for those in contention), both on the
    array engine, each choice scored on the held-out zone's trace like plan_quality scores it."""
    import plan_quality as pq

    from spottrain.planner.refine import refine
    from spottrain.sim.hindsight import simulate_plans

    lines = ["| request | deadline | held out | full refine: plan | $ | met | s | racing: plan | $ | met | s | runs "
             "(racing / full) | confidence | racing no worse |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    same = better = 0
    n = 0
    for req in pq.REQUESTS:
        w = Workload.from_zoo(req.model, req.batch_size)
        result = plan(w, samples=req.samples, deadline_s=req.deadline_h * 3600, confidence=pq.CONFIDENCE,
                      clouds=["aws"], regions=["us-west-2"], instance_types=list(pq.TYPES), max_nodes=pq.MAX_NODES)
        for zs in pq.TRACE_SETS:
            got = []
            for opts in (dict(first_runs=100), dict()):
                t0 = time.perf_counter()
                ref = refine(result, result.context, runs=100, seed=1, exclude=[zs], **opts)
                dt = time.perf_counter() - t0
                scored = simulate_plans([ref.plan if not ref.timed_out else result.best], trace_for=pq.trace_for(zs),
                                        runs=runs)[0]
                got.append((ref, dt, scored))
            (rf, tf_, sf), (rr, tr, sr) = got
            n += 1
            same += rf.plan.label == rr.plan.label
            ok = sr.mean_cost_usd <= sf.mean_cost_usd * (1 + 1e-9) and sr.met_rate >= min(sf.met_rate, pq.CONFIDENCE)
            better += ok
            conf = "-" if rr.confidence_chosen is None else f"{100 * rr.confidence_chosen:.0f}%"
            lines.append(f"| {req.name} | {req.deadline_h:g} h | {zs} | {rf.plan.label} | {sf.mean_cost_usd:,.1f} | "
                         f"{100 * sf.met_rate:.0f}% | {tf_:.1f} | {rr.plan.label} | {sr.mean_cost_usd:,.1f} | "
                         f"{100 * sr.met_rate:.0f}% | {tr:.1f} | {rr.total_runs:,} / {rf.total_runs:,} | {conf} | "
                         f"{'yes' if ok else '**no**'} |")
            print(lines[-1], flush=True)
    lines += ["", f"Same plan as the full refine on **{same}/{n}** rows; racing's choice costs the same or less on "
              f"the held-out trace, with the deadline met as often (or >= 95%), on **{better}/{n}**."]
    return lines


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


def before_after(before: str | None, runs: int = 3) -> list[str]:
    """The same cold `spottrain plan` commands on the code of ``before`` (a checkout of an earlier
    commit) and on this one, alternating, with the start-up floors measured beside them."""
    import statistics as st

    cases = [("ResNet-50, 1 epoch, 2 h, --no-refine", SMALL + ["--no-refine"]),
             ("ResNet-50, 1 epoch, 2 h (refined)", SMALL),
             ("ResNet-50, 90 epochs, 12 h, --no-refine", CLI),
             ("ResNet-50, 90 epochs, 12 h (refined)", CLI[:-1])]
    lines = ["| command | before: median wall s | CPU s | now: median wall s | CPU s | before / now (CPU) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, cli in cases:
        got = {}
        for side, code in (("before", before), ("now", None)):
            if side == "before" and before is None:
                continue
            cpu: list[float] = []
            wall = cli_cold(runs, cli, cpu, code=code)
            got[side] = (st.median(wall), st.median(cpu))
        b = got.get("before")
        n = got["now"]
        lines.append(f"| `{' '.join(cli[1:])}` | {b[0]:.2f} | {b[1]:.2f} | **{n[0]:.2f}** | **{n[1]:.2f}** | "
                     f"**{b[1] / n[1]:.2f}x** |" if b else
                     f"| `{' '.join(cli[1:])}` | - | - | **{n[0]:.2f}** | **{n[1]:.2f}** | - |")
        print(lines[-1], flush=True)
    floors = []
    for name, argv in (("python -c pass", [sys.executable, "-c", "pass"]),
                       ("spottrain --help", [sys.executable, "-m", "spottrain.cli.main", "--help"]),
                       ("import spottrain.planner.api", [sys.executable, "-c", "import spottrain.planner.api"]),
                       ("import scipy.special, scipy.optimize",
                        [sys.executable, "-c", "import scipy.special, scipy.optimize"])):
        cpu = []
        wall = cli_cold(runs, [], cpu, argv=argv)
        floors.append(f"{name}: {st.median(wall):.2f} s wall, {st.median(cpu):.2f} s CPU")
    lines += ["", "Start-up floors in the same run (median of 3 processes): " + "; ".join(floors) + "."]
    print(lines[-1], flush=True)
    return lines


def main() -> int:
    import argparse
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default=None, help="a checkout of an earlier commit: its cold `plan` commands are "
                    "timed beside this one's")
    args = ap.parse_args()
    # byte-compile both trees first, as an installed package is (this machine sets
    # PYTHONDONTWRITEBYTECODE, so every process would otherwise compile spottrain's sources again)
    import compileall

    for tree in filter(None, (str(HERE.parent), args.before)):
        compileall.compile_dir(str(Path(tree) / "spottrain"), quiet=2)
    load0 = os.getloadavg()[0]
    ba = before_after(args.before)
    cli_cpu: list[float] = []
    cli = cli_cold(cpu=cli_cpu)
    print(f"cold CLI wall: {', '.join(f'{t:.2f}' for t in cli)} s")
    refined = {}
    for name, req in REQUESTS.items():  # the default: refined by simulation
        cpu: list[float] = []
        refined[name] = (cli_cold(3, req, cpu), cpu)
        print(f"cold CLI wall, refined (default), {name}: {', '.join(f'{t:.2f}' for t in refined[name][0])} s")
    imp_total, imp_top = import_times()
    catalog = load_catalog()
    w = Workload.from_zoo("resnet50", 64)
    rr = refine_ratio(w)
    print("\n".join(rr))
    rq = racing_vs_full()
    cold, times, rows = latency(catalog, w)
    base, full, n_front, n_mix = pareto_latency(catalog, w)
    print(f"pareto: {base:.3f} s without, {full:.3f} s with the front ({n_front} points, {n_mix} mixes)")
    med = statistics.median(times)
    print(f"cold {cold:.2f} s; warm median {med:.3f} s over {len(times)} queries")
    lines = ["| query | best plan | expected cost | expected time | columns | after pruning | mixes: enumerated / MILP solves | proven optimal | latency (s) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for q, t, r in rows:
        s = r.stats
        p = r.best.prediction
        lines.append(f"| {q} | {r.best.cluster} ({', '.join(g.instance_type for g in r.best.groups)}) | "
                     f"${p.cost_usd:,.2f} | {p.duration_s / 3600:.2f} h | {s['columns']:,} | {s['columns_after_pruning']} | "
                     f"{s['plans_enumerated']:,} / {s['milp_calls']} | "
                     f"{'yes' if s['proven_optimal'] else 'no (' + '; '.join(s.get('notes') or ['best found']) + ')'} | {t:.3f} |")
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
        "Command: `.venv/bin/python bench/planner.py" + (f" --before {args.before}" if args.before else "") + "`", "",
        f"Machine: {machine()} (shared with other work while measured).", "",
        f"Catalog: shipped catalog, {len(catalog.offers):,} GPU offers; workload ResNet-50, batch 64 per GPU, "
        f"90 ImageNet epochs ({SAMPLES:,} samples); sync all-reduce; spot and on-demand; mixes of up to 3 types.", "",
        "## Latency on the full catalog", "",
        f"- cold (first request in the process: lifetime-model fits and perf-model queries): **{cold:.2f} s**",
        f"- warm median over {len(times)} different requests (best of 3 each): **{med:.3f} s** "
        "(goal <= 0.1 s; anchors: spotDNN 0.2-0.3 s at 70 instances, Srifty's exhaustive search up to 1,500 s)", "",
        *lines, "",
        "## Cold start of the command", "",
        f"Load average when this script started: {load0:.1f} (2 cores, shared with other engineers' tests and "
        "benchmarks): wall seconds include waiting for a core; CPU seconds do not.", "",
        "Before and after, same run, alternating fresh processes (3 each, medians)"
        + (f"; before = the code of `{args.before}`:" if args.before else ":"), "",
        *ba, "",
        f"`spottrain plan {' '.join(CLI[1:])}` as a fresh process, {len(cli)} runs: "
        f"**{statistics.median(cli):.2f} s** median wall ({', '.join(f'{t:.2f}' for t in cli)} s; CPU "
        f"{', '.join(f'{t:.2f}' for t in cli_cpu)} s), goal <= 1 s.", "",
        "Default (refined by simulation: racing on the array engine, see docs/simulate.md), 3 fresh processes each, "
        "goal <= 2 s wall (median):", "",
        "| request | median wall s | walls s | CPU s |", "| --- | ---: | --- | --- |",
        *[f"| {name} | **{statistics.median(ws):.2f}** | {', '.join(f'{t:.2f}' for t in ws)} | "
          f"{', '.join(f'{t:.2f}' for t in cs)} |" for name, (ws, cs) in refined.items()], "",
        f"Imports (`python -X importtime`, the `--no-refine` command): {imp_total:.2f} s in all; heaviest "
        "top-level imports (cumulative): " + ", ".join(f"{n} {t:.2f} s" for n, t in imp_top) + ".", "",
        "## Refine: before and now, same request, same process", "",
        "ResNet-50, 90 epochs, deadline 12 h, every shipped trace; up to 100 runs per candidate.", "",
        *rr, "",
        "## Racing against the full refine on the plan-quality requests", "",
        "bench/plan_quality.py's 10 rows (requests x held-out zone, its planner restrictions): refine with every "
        "candidate at 100 runs (today's refine before racing) and racing (25 runs each, doubling for those in "
        "contention, up to 100), both on the array engine, seed 1, every trace of the held-out zone excluded; each "
        "choice then scored on the held-out zone's trace (200 runs) as plan_quality.py scores it.", "",
        *rq, "",
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
