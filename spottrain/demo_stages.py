"""The stages of ``spottrain demo``; each calls one part's public API and returns plain data.

A stage raises :class:`StageUnavailable` when the part it needs is not installed or does not
offer the function; it never substitutes invented numbers. Heavy imports (torch) happen inside
the stages that need them (profile, run).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spottrain.catalog import load_catalog
from spottrain.profiler.zoo_info import zoo_info
from spottrain.units import format_count, plural

HOUR_S = 3600.0

# (cloud, GPU) pairs with shipped revocation traces (see spottrain/data/traces/*/SOURCE.md).
LIFETIME_PAIRS = (("gcp", "K80"), ("gcp", "P100"), ("gcp", "V100"), ("aws", "V100"), ("aws", "K80"))


class StageUnavailable(Exception):
    """A part the stage needs is not there; the message says which."""


@dataclass(kw_only=True)
class StageContext:
    """What stages share: the config, earlier results and live objects (not serialised)."""

    config: Any
    results: dict[str, Any] = field(default_factory=dict)
    objects: dict[str, Any] = field(default_factory=dict)

    def ok(self, key: str) -> bool:
        res = self.results.get(key)
        return res is not None and res.status == "ok"


def _need(module: str, *names: str) -> list[Any]:
    """Import ``names`` from ``module`` or raise :class:`StageUnavailable` naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise StageUnavailable(f"{module} is not available ({exc})") from None
    out = []
    for name in names:
        try:
            out.append(getattr(mod, name))
        except (AttributeError, ImportError):
            raise StageUnavailable(f"{module}.{name} is not available") from None
    return out


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# --------------------------------------------------------------------------- 1. profile


def stage_profile(ctx: StageContext) -> dict[str, Any]:
    cfg = ctx.config
    (profile_zoo,) = _need("spottrain.profiler", "profile_zoo")
    detail = ctx.objects.get("detail")
    prof = profile_zoo(cfg.model, batch_size=cfg.profile_batch_size, iterations=cfg.profile_iterations,
                       warmup=2, device="cpu", max_time_s=60.0,
                       progress=(lambda phase, done, total: detail(f"{phase} {done}/{total}")) if detail else None)
    ctx.objects["profile"] = prof
    d = prof.to_dict()
    return {
        "profile": d,
        "summary": {
            "model": d["model"],
            "batch_size": d["batch_size"],
            "param_count": d["param_count"],
            "gflops_per_sample": (d["flops_per_sample_forward"] + d["flops_per_sample_backward"]) / 1e9,
            "step_time_s": d["step_time_s"],
            "samples_per_s": d["samples_per_s"],
            "device": (d.get("device") or {}).get("name"),
        },
    }


# --------------------------------------------------------------------------- 2. predict


def _workload(ctx: StageContext) -> tuple[Any, str]:
    (Workload,) = _need("spottrain.perf", "Workload")
    cfg = ctx.config
    prof = ctx.objects.get("profile")
    if prof is not None:
        return Workload.from_profile(prof, batch_size=cfg.plan_batch_size), "this machine's profile"
    return Workload.from_zoo(cfg.model, cfg.plan_batch_size), "the zoo's FLOPs table (the profile stage did not run)"


def _catalog_gpus() -> list[str]:
    try:
        gpus = {o.gpu for o in load_catalog().offers}
    except (ImportError, AttributeError):
        (known_gpus,) = _need("spottrain.catalog", "known_gpus")
        return list(known_gpus())
    (known_gpus,) = _need("spottrain.catalog", "known_gpus")
    return [g for g in known_gpus() if g in gpus]


def stage_predict(ctx: StageContext) -> dict[str, Any]:
    (predict_throughput,) = _need("spottrain.perf", "predict_throughput")
    workload, source = _workload(ctx)
    ctx.objects["workload"] = workload
    rows = []
    for gpu in _catalog_gpus():
        try:
            p = predict_throughput(workload, f"1x{gpu}")
        except Exception as exc:  # noqa: BLE001 - one GPU the model cannot handle is not fatal
            rows.append({"gpu": gpu, "error": str(exc)})
            continue
        rows.append({"gpu": gpu, "throughput": p.throughput, "low": p.low, "high": p.high,
                     "iteration_time_s": p.iteration_time_s, "bottleneck": p.bottleneck,
                     "extrapolated": bool(getattr(p, "extrapolated", False))})
    good = [r for r in rows if "throughput" in r]
    if not good:
        raise RuntimeError("the performance model predicted no GPU type: " + "; ".join(r.get("error", "") for r in rows[:3]))
    return {"workload": {"model": workload.model, "batch_size": workload.batch_size,
                         "flops_per_sample": workload.flops_per_sample, "param_count": workload.param_count,
                         "gradient_bytes": workload.gradient_bytes, "source": source},
            "rows": good, "failed": [r for r in rows if "error" in r]}


# --------------------------------------------------------------------------- 3. transience


def stage_transience(ctx: StageContext) -> dict[str, Any]:
    (lifetime_model,) = _need("spottrain.transience", "lifetime_model")
    grid_s = [i * 900.0 for i in range(0, 26 * 4 + 1)]
    palette = ("#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490")
    rows, curves = [], []
    for cloud, gpu in LIFETIME_PAIRS:
        try:
            m = lifetime_model(cloud, gpu)
        except Exception as exc:  # noqa: BLE001 - one pair without data is not fatal
            rows.append({"cloud": cloud, "gpu": gpu, "model": f"no fit: {exc}"})
            continue
        color = palette[len(curves) // 2 % len(palette)]
        mean = _num(m.mean_lifetime_s())
        rows.append({"cloud": cloud, "gpu": gpu, "model": getattr(m, "name", type(m).__name__),
                     "nodes": getattr(m, "n_nodes", None), "revocations": getattr(m, "n_revocations", None),
                     "mean_lifetime_h": mean / HOUR_S if mean else None,
                     "p_survive_1h": float(m.survival([HOUR_S])[0]), "p_survive_8h": float(m.survival([8 * HOUR_S])[0]),
                     "pooled_from": getattr(m, "pooled_from", None)})
        curves.append({"label": f"{cloud} {gpu}: {rows[-1]['model']} fit", "t_s": grid_s, "color": color,
                       "survival": [float(s) for s in m.survival(grid_s)]})
        km = getattr(m, "kaplan_meier", None)
        if km is not None:
            curves.append({"label": f"{cloud} {gpu}: Kaplan-Meier (traces)", "t_s": grid_s, "color": color,
                           "survival": [float(s) for s in km.survival(grid_s)], "empirical": True})
    if not curves:
        raise RuntimeError("no lifetime model could be fitted: " + "; ".join(str(r["model"]) for r in rows))
    return {"rows": rows, "curves": curves}


# --------------------------------------------------------------------------- 4. plan


def _point_row(name: str, p: dict[str, Any]) -> dict[str, Any]:
    return {"baseline": name, "cluster": p.get("label"), "expected time (h)": p["duration_s"] / HOUR_S,
            "expected cost (USD)": p["cost_usd"], "P(meet deadline)": p.get("p_meet_deadline"),
            "meets deadline": p.get("meets_deadline")}


def stage_plan(ctx: StageContext) -> dict[str, Any]:
    (plan_fn,) = _need("spottrain.planner", "plan")
    cfg = ctx.config
    workload = ctx.objects.get("workload")
    if workload is None:
        workload, _ = _workload(ctx)

    dataset = zoo_info(cfg.model)["dataset"]["train_samples"]
    samples = cfg.epochs * dataset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow of a hazard far in a model's tail
        result = plan_fn(workload, samples=samples, deadline_s=cfg.deadline_s, confidence=cfg.confidence,
                         max_nodes=cfg.max_nodes)
    ctx.objects["plan"] = result.best
    ctx.objects["plan_result"] = result
    d = result.to_dict()
    baselines = []
    for b in d["baselines"]:
        if b.get("label") is None:
            baselines.append({"baseline": b["name"], "cluster": None, "note": b.get("reason", "")})
        else:
            baselines.append({**_point_row(b["name"], b), "note": "", "_point": b["_point"]})
    best = result.best
    # lazy: each stage loads its layer when it runs (a missing part is a skipped stage)
    from spottrain.planner.evidence import headline

    return {
        "headline": _jsonable(headline(result)),
        "samples_total": samples, "epochs": cfg.epochs, "dataset_samples": dataset, "deadline_s": cfg.deadline_s,
        "confidence": cfg.confidence, "plan": best.to_dict(), "chosen": d["chosen"], "label": d["label"],
        "nodes": best.nodes, "explanation": d["explanation"], "runners_up": d["runners_up"], "pareto": d["pareto"],
        "baselines": baselines, "stats": _jsonable(d.get("stats", {})),
    }


# --------------------------------------------------------------------------- 5. simulate


SCHEDULE_POLICY = None
"""Policy of the simulated run replayed locally (and of the local run): None = the plan's own
recovery policy, so that the plan, the simulated run and the local run all run one policy."""


def stage_simulate(ctx: StageContext) -> dict[str, Any]:
    simulate, timeline_run = _need("spottrain.sim", "simulate", "timeline_run")
    plan = ctx.objects.get("plan")
    if plan is None:
        raise StageUnavailable("no plan to simulate (the plan stage did not run)")
    cfg = ctx.config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = simulate(plan, runs=cfg.sim_runs, seed=cfg.seed, workers=1)
        per_policy, table = {}, []
        for s in res.summaries:
            runs = res.results[s.policy]
            per_policy[s.policy] = {"cost_usd": [r.cost_usd for r in runs],
                                    "duration_s": [r.makespan_s for r in runs if r.finished]}
            table.append({"policy": s.policy, "makespan mean (h)": _num(s.makespan_h.mean),
                          "makespan p95 (h)": _num(s.makespan_h.p95), "cost mean (USD)": _num(s.cost_usd.mean),
                          "cost p95 (USD)": _num(s.cost_usd.p95), "deadline met": _num(s.deadline_met_rate),
                          "finished": _num(s.finished_rate), "revocations (mean)": _num(s.revocations.mean),
                          "lost work mean (h)": _num(s.lost_work_h.mean),
                          "replacements (mean)": _num(s.replacements.mean)})
        # The run replayed locally: among the first simulated runs, the first with the most
        # revocations while training (up to the cap), so that the local run exercises recovery;
        # the table above says how typical that is.
        policy = SCHEDULE_POLICY if SCHEDULE_POLICY in res.results else plan.policy
        if policy not in res.results:  # the simulator did not run the plan's policy: say which one replaces it
            policy = next(iter(res.results))
        runs = res.results[policy]
        cap = max(1, cfg.max_injected_revocations)
        best_i, best_n, one = 0, -1, None
        for i in range(min(len(runs), 100)):
            if runs[i].revocations == 0:
                continue
            cand = timeline_run(plan, trace=None, model=True, policy=policy, seed=cfg.seed, run=i)
            n = min(len(_training_revocations(cand)), cap)
            if n > best_n:
                best_i, best_n, one = i, n, cand
            if n >= cap:
                break
        if one is None:
            one = timeline_run(plan, trace=None, model=True, policy=policy, seed=cfg.seed, run=0)
        index = best_i
    ctx.objects["sim_result"] = res
    ctx.objects["sim_run"] = one

    revs = [r.revocations for r in runs]
    means = [float(row["revocations (mean)"]) for row in table if row["revocations (mean)"] is not None]
    analytical = float(plan.prediction.expected_revocations)
    simulated = sum(revs) / len(revs)
    revocations = {"analytical": analytical, "simulated_plan_policy": simulated, "policy": policy,
                   "simulated_low": min(means) if means else None, "simulated_high": max(means) if means else None,
                   "runs": res.runs, "source": res.source}
    headline = (f"{plural(len(per_policy), 'policy')} x {plural(res.runs, 'run')}; revocations: simulated "
                f"{format_count(simulated)} under the plan's policy {policy} (lifetime laws fitted on traces), "
                f"analytical model {format_count(analytical)}")
    return {
        "per_policy": per_policy, "table": table, "source": res.source, "notes": list(res.notes),
        "revocations": revocations,
        "note": "; ".join(res.notes) + f". {res.runs} runs per policy (seed {res.seed}); every policy sees the "
                "same runs. Makespan and cost per run; the dashed line is the deadline.", "headline": headline,
        "replayed": {"policy": policy, "run": index, "revocations": one.revocations, "makespan_s": one.makespan_s,
                     "started_s": one.started_s, "lost_work_s": one.lost_work_s, "stall_s": one.stall_s,
                     "replacements": one.replacements, "checkpoints": one.checkpoints,
                     "timeline": _jsonable(one.timeline)},
    }


def _training_revocations(run: Any) -> list[tuple[float, str]]:
    """Revocations of a recorded simulated run that hit the job while it trained."""
    tl = run.timeline or {}
    return [(float(t), str(n)) for t, n in tl.get("revocations", []) if run.started_s < float(t) < run.makespan_s]


# --------------------------------------------------------------------------- 6. run


def _progress_fraction(progress: list[list[float]], total: float, t: float) -> float:
    """Share of the job done at simulated time ``t`` (linear between recorded points)."""
    prev_t, prev_p = 0.0, 0.0
    for pt, pp in progress:
        if pt >= t:
            if pt == prev_t:
                return min(1.0, pp / total)
            return min(1.0, (prev_p + (pp - prev_p) * (t - prev_t) / (pt - prev_t)) / total)
        prev_t, prev_p = pt, pp
    return min(1.0, prev_p / total)


def revocation_schedule(replayed: dict[str, Any], *, workers: int, steps: int, cap: int) -> list[dict[str, Any]]:
    """Map one simulated run's revocations onto local injections.

    A revocation at simulated time *t* becomes an injection once the local run has done the
    same share of its steps as the simulated job had at *t* (so the schedule scales to the
    local run's length whatever this machine's speed). Only revocations while the simulated
    job trained count (one before training began cost boot time, not progress). A node that got
    a preemption notice is sent SIGTERM at the notice's share, otherwise SIGKILL. The k-th
    revoked node maps to worker slot ``(k + 1) mod workers`` (the chief, slot 0, last), so no
    injection targets a slot whose replacement may not have started yet.
    """
    tl = replayed["timeline"]
    total = float(tl.get("samples_total") or 0) or 1.0
    progress = tl.get("progress") or []
    noticed = {str(n): float(t) for t, n in (tl.get("notices") or [])}
    out: list[dict[str, Any]] = []
    used: set[tuple[int, int]] = set()
    started, end = float(replayed["started_s"]), float(replayed["makespan_s"])
    during = [(float(t), str(n)) for t, n in (tl.get("revocations") or []) if started < float(t) < end]
    for t, node in during[:cap]:
        kind, at = ("sigterm", noticed[node]) if node in noticed else ("kill", float(t))
        step = int(round(_progress_fraction(progress, total, at) * steps))
        step = min(max(step, 3), max(3, steps - 5))
        slot = (len(out) + 1) % workers
        while (step, slot) in used:
            slot = (slot + 1) % workers
        used.add((step, slot))
        out.append({"worker": slot, "kind": kind, "at_step": step, "sim_time_s": at, "sim_node": node})
    return sorted(out, key=lambda e: e["at_step"])


def stage_run(ctx: StageContext) -> dict[str, Any]:
    (LocalJob, run_local) = _need("spottrain.runtime.local", "LocalJob", "run_local")
    (Injection,) = _need("spottrain.runtime.faults", "Injection")
    (read_worker_events,) = _need("spottrain.runtime.summary", "read_worker_events")
    from spottrain.runtime.examples import get_example

    cfg = ctx.config
    sim = ctx.results.get("simulate")
    if sim is None or sim.status != "ok":
        raise StageUnavailable("no simulated revocation schedule to replay (the simulate stage did not run)")
    replayed = sim.data["replayed"]
    steps = int(cfg.steps)
    schedule = revocation_schedule(replayed, workers=cfg.workers, steps=steps, cap=cfg.max_injected_revocations)
    plan = ctx.objects.get("plan")
    train_s = max(1.0, replayed["makespan_s"] - replayed["started_s"])
    interval_s = float(getattr(plan, "checkpoint_interval_s", None) or 0.0)
    ckpt_every = max(5, int(round(steps * interval_s / train_s))) if interval_s > 0 else max(5, steps // 6)
    ex = get_example(cfg.example)
    run_dir = Path(tempfile.mkdtemp(prefix="spottrain-demo-run-"))
    job_id = f"demo-{cfg.seed}"
    env = {"SPOTTRAIN_JOB_ID": job_id, "SPOTTRAIN_SEED": str(cfg.seed), "SPOTTRAIN_STEPS": str(steps),
           "SPOTTRAIN_CHECKPOINT_DIR": str(run_dir / "checkpoints"), "SPOTTRAIN_CHECKPOINT_EVERY_STEPS": str(ckpt_every),
           "SPOTTRAIN_KEEP_CHECKPOINTS": "2"}
    job = LocalJob(command=[sys.executable, "-m", "spottrain.runtime.examples", ex.name], workers=cfg.workers,
                   run_dir=run_dir, job_id=job_id, env=env, policy=replayed["policy"], replacement_delay_s=2.0,
                   injections=[Injection(time_s=None, worker=e["worker"], kind=e["kind"], at_step=e["at_step"])
                               for e in schedule],
                   steps=steps, checkpoint_dir=run_dir / "checkpoints", timeout_s=600.0)
    events: list[tuple[str, dict[str, Any]]] = []
    detail = ctx.objects.get("detail")

    def on_event(kind: str, data: dict[str, Any]) -> None:
        events.append((kind, dict(data)))
        if detail and kind == "progress":
            detail(f"step {data['step']}/{steps}")

    try:
        summary = run_local(job, on_event=on_event)
        wev = read_worker_events(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    ctl = [d for k, d in events if k != "progress" and "t" in d]
    offset = (ctl[0]["t"] - ctl[0]["time_s"]) if ctl else 0.0
    progress, last = [[0.0, 0]], 0
    for e in wev:
        if e["kind"] == "step" and int(e["step"]) != last:
            last = int(e["step"])
            progress.append([round(e["t"] - offset, 3), last])
    checkpoints_s = sorted({round(e["t"] - offset, 3) for e in wev if e["kind"] == "ckpt"})
    injected = [d for d in ctl if d["kind"] == "inject"]
    for e in schedule:
        hit = next((d for d in injected if d["slot"] == e["worker"] and d["fault"] == e["kind"]), None)
        if hit is not None:
            injected.remove(hit)
        e["at_s"] = hit["time_s"] if hit else None
    timeline = {
        "membership": [[m["time_s"], m["world"]] for m in summary.membership],
        "progress": progress,
        "checkpoints_s": checkpoints_s,
        "revocations_s": [r["time_s"] for r in summary.recoveries],
        "joins_s": [d["time_s"] for d in ctl if d["kind"] == "joined"],
    }
    # Predictions for the local run, from the simulated run it replays: its revocations and
    # replacements as counted by the simulator, its lost work (rolled back to the last
    # checkpoint when no node survives, the simulator's job model) as a share of the steps, and its restart stall
    # converted to local time at the local run's own step pace.
    pace = (summary.median_step_s or 0.0) * steps / train_s
    restart_s = _restart_s(ctx)
    per_rev_stall = restart_s * pace if restart_s is not None else None
    compare = [
        {"quantity": "completed steps", "predicted": steps, "actual": summary.completed_steps},
        {"quantity": "revocations", "predicted": len(schedule), "actual": summary.revocations},
        {"quantity": "injections skipped (no live worker in the slot)", "predicted": 0,
         "actual": sum(1 for d in ctl if d["kind"] == "inject_skipped")},
        {"quantity": "of which with notice (SIGTERM)", "predicted": sum(e["kind"] == "sigterm" for e in schedule),
         "actual": summary.notices},
        {"quantity": "replacements joined", "predicted": min(replayed["replacements"], len(schedule)),
         "actual": summary.replacements},
        {"quantity": "lost steps", "predicted": round(replayed["lost_work_s"] / train_s * steps, 1),
         "actual": summary.lost_steps},
        {"quantity": "max stall (s)", "predicted": per_rev_stall, "actual": summary.max_stall_s},
        # periodic ones before the last step, one on each notice, the final one
        {"quantity": "checkpoints", "predicted": (steps - 1) // ckpt_every + sum(e["kind"] == "sigterm" for e in schedule) + 1,
         "actual": len(summary.checkpoints)},
    ]
    note = (f"{cfg.workers} worker processes on this machine train the built-in '{ex.name}' example for {steps} "
            f"steps with the '{replayed['policy']}' policy, checkpointing every {ckpt_every} steps (the plan's "
            f"{interval_s:.0f} s interval as a share of the simulated training time). The injected revocations come "
            f"from simulated run #{replayed['run']} ({replayed['revocations']} revocations in "
            f"{replayed['makespan_s'] / HOUR_S:.2f} h), placed at the same share of progress.")
    compare_note = ("Predicted: what the simulated run implies for this local run (lost work is the simulator's "
                    "roll-back to the last checkpoint, which it makes only when a revocation leaves no node; stall "
                    "is its restart time at the local step pace). Actual: what the local elastic runtime measured; "
                    "survivors keep their in-memory state, so only the step in flight is redone.")
    headline = (f"{summary.completed_steps}/{steps} steps, {summary.revocations} revocations, "
                f"{summary.lost_steps} lost steps, max stall {summary.max_stall_s:.2f} s")
    if not summary.ok:
        raise RuntimeError(f"local run did not complete: {summary.failure} ({headline})")
    return {"example": ex.name, "steps": steps, "workers": cfg.workers, "schedule": schedule, "timeline": timeline,
            "summary": _jsonable(summary.to_dict()), "compare": compare, "note": note, "compare_note": compare_note,
            "headline": headline, "checkpoint_every_steps": ckpt_every}


def _restart_s(ctx: StageContext) -> float | None:
    sim = ctx.results.get("simulate")
    for note in (sim.data.get("notes", []) if sim else []):
        m = re.search(r"restart (\d+(?:\.\d+)?) s", note)
        if m:
            return float(m.group(1))
    return None


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


STAGES = (
    ("profile", "Profile the model on this machine", stage_profile),
    ("predict", "Predict throughput on the catalog's GPUs", stage_predict),
    ("transience", "Fit lifetime models on the shipped traces", stage_transience),
    ("plan", "Plan the cheapest cluster that meets the deadline", stage_plan),
    ("simulate", "Simulate the plan per policy (lifetimes fitted on real traces)", stage_simulate),
    ("run", "Train on a local elastic cluster with injected revocations", stage_run),
)
