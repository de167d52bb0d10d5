"""The stages of ``spottrain demo``; each calls one part's public API and returns plain data.

A stage raises :class:`StageUnavailable` when the part it needs is not installed or does not
offer the function; it never substitutes invented numbers. Heavy imports (torch) happen inside
the stages that need them (profile, run).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

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
    import importlib

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


def call_with_supported(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments its signature accepts (parts grow options)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(*args, **kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **kwargs)
    return fn(*args, **{k: v for k, v in kwargs.items() if k in params})


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
    prof = profile_zoo(cfg.model, batch_size=cfg.profile_batch_size, iterations=cfg.profile_iterations,
                       warmup=2, device="cpu", max_time_s=60.0)
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
        from spottrain.catalog import load_catalog

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


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    """First attribute / key of ``names`` that ``obj`` has (plain data or dataclass)."""
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def plan_point(plan: Any, label: str | None = None) -> dict[str, Any] | None:
    """``{"label", "duration_s", "cost_usd", ...}`` of a plan (or plan-like result)."""
    pred = _get(plan, "prediction", default=plan)
    dur = _num(_get(pred, "duration_s", "makespan_s", "time_s"))
    cost = _num(_get(pred, "cost_usd", "expected_cost_usd"))
    if dur is None or cost is None:
        return None
    cluster = _get(plan, "cluster", default=None)
    return {"label": label or _plan_label(plan) or str(cluster), "duration_s": dur, "cost_usd": cost,
            "duration_p95_s": _num(_get(pred, "duration_p95_s")), "cost_p95_usd": _num(_get(pred, "cost_p95_usd")),
            "p_meet_deadline": _num(_get(pred, "p_meet_deadline"))}


def _plan_label(plan: Any) -> str | None:
    groups = _get(plan, "groups")
    if not groups:
        return None
    return " + ".join(f"{g.count}x {g.instance_type} ({'spot' if g.spot else 'on-demand'}, {g.zone or g.region})"
                      for g in groups)


def stage_plan(ctx: StageContext) -> dict[str, Any]:
    (plan_fn,) = _need("spottrain.planner", "plan")
    cfg = ctx.config
    workload = ctx.objects.get("workload")
    if workload is None:
        workload, _ = _workload(ctx)
    from spottrain.profiler.zoo_info import zoo_info

    dataset = zoo_info(cfg.model)["dataset"]["train_samples"]
    samples = cfg.epochs * dataset
    result = call_with_supported(plan_fn, workload, samples_total=samples, epochs=cfg.epochs, dataset_size=dataset,
                                 deadline_s=cfg.deadline_s, confidence=cfg.confidence)
    best = _get(result, "best", "plan")
    ctx.objects["plan"] = best
    ctx.objects["plan_result"] = result
    chosen = plan_point(best)
    runners = [p for p in (plan_point(r) for r in (_get(result, "runners_up", default=()) or ())) if p]
    pareto = [p for p in (plan_point(r) for r in (_get(result, "pareto", default=()) or ())) if p]
    candidates = [p for p in (plan_point(r) for r in (_get(result, "candidates", "evaluated", default=()) or ())) if p]
    baselines = []
    raw = _get(result, "baselines", default={}) or {}
    items = raw.items() if isinstance(raw, dict) else [(_get(b, "name", "policy", default="baseline"), b) for b in raw]
    for name, b in items:
        inner = _get(b, "plan", default=b)
        pt = plan_point(inner, label=str(name)) if inner is not None else None
        row = {"baseline": str(name), "cluster": _plan_label(inner) if inner is not None else None,
               "note": _get(b, "reason", "note", "error", default="")}
        if pt:
            row.update(duration_h=pt["duration_s"] / HOUR_S, cost_usd=pt["cost_usd"], p_meet_deadline=pt["p_meet_deadline"])
            baselines.append({**row, "_point": pt})
        else:
            baselines.append(row)
    return {
        "samples_total": samples, "deadline_s": cfg.deadline_s, "confidence": cfg.confidence,
        "plan": best.to_dict() if hasattr(best, "to_dict") else None,
        "chosen": chosen, "label": _plan_label(best), "explanation": _get(best, "explanation", default=""),
        "runners_up": runners, "pareto": pareto, "candidates": candidates, "baselines": baselines,
    }


# --------------------------------------------------------------------------- 5. simulate


def stage_simulate(ctx: StageContext) -> dict[str, Any]:
    (simulate,) = _need("spottrain.sim", "simulate")
    plan = ctx.objects.get("plan")
    if plan is None:
        raise StageUnavailable("no plan to simulate (the plan stage did not run)")
    cfg = ctx.config
    result = call_with_supported(simulate, plan, runs=cfg.sim_runs, seed=cfg.seed)
    ctx.objects["sim_result"] = result
    return {"raw": _jsonable(result)}


# --------------------------------------------------------------------------- 6. run


def stage_run(ctx: StageContext) -> dict[str, Any]:
    _need("spottrain.runtime", "run_local")
    raise StageUnavailable("spottrain.runtime.run_local is not available")


def _jsonable(obj: Any) -> Any:
    import dataclasses

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
    ("simulate", "Simulate the plan over real traces per policy", stage_simulate),
    ("run", "Train on a local elastic cluster with injected revocations", stage_run),
)
