"""Reproduce ICAC'19 ("Speeding up Deep Learning with Transient Servers") with our models.

The study trained ResNet-32 on CIFAR-10 (Tensor2Tensor, batch 128 per worker, 64,000 global
steps, asynchronous parameter-server training) on Google Compute Engine in February 2019: one
on-demand K80 against clusters of 2, 4 and 8 preemptible K80 workers (and P100/V100), and 1 vs
2 parameter servers. The measured side comes from ``spottrain/data/icac19`` (see its SOURCE.md).

What predicts, and what it was fitted on (none of it on the measured cluster runs):

- **Throughput**: :class:`spottrain.perf.ThroughputModel` fitted on the CM-DARE (ICDCS'20)
  measurement table only (``cmdare.csv``: single-worker speeds of 20 models and 1-8 worker
  clusters of K80 / P100, 1 and 2 PS). The ICAC'19 table (``transient_dl.csv``) is excluded.
  The workload carries CM-DARE's features of ResNet-32 (FLOPs, parameters, 104 parameter
  tensors), the same values the model saw for it in fitting.
  With ``calibrate=True`` the workload is also calibrated per GPU with CM-DARE's single-worker
  ResNet-32 step time on that GPU - the "profile" a user would measure before planning. That
  step time was measured with one PS, so the calibration solves for the GPU-alone step time
  that reproduces it with one PS (not the raw figure, which would count the PS twice).
- **Revocations** (preemptible clusters): lifetimes fitted (best of exponential / Weibull /
  bathtub by AIC, 24 h cap) on the *standalone* preemptible-VM lifetimes of ``lifetime.csv``
  (a separate experiment of idle and stressed VMs), not on the training clusters' ``vm_data``.
  Each spot cluster is simulated ``runs`` times with the study's recovery: none (a revoked
  worker is not replaced; the job goes on with the others; a revoked chief ends the run,
  and such runs are left out as the study left them out).
- **Prices**: the per-second rates the study charged. K80 workers and the PS: the rates in the
  authors' cost script. P100 and V100 workers: the script is not in the data, but its rule is
  visible in every ``cost.csv``: cost = duration x (workers x worker rate + PS rate), the PS
  billed only for clusters of 2 or more workers, so cost / duration is the same to 8 digits for
  every run of a folder. The single-worker folders give the preemptible P100 and V100 rates
  directly (``STUDY_SPOT_USD_PER_S``; ``study_rate_usd_per_s`` recomputes them from the files).
  These are price inputs, like a catalog; the model never sees a measured duration.
- **Duration** is measured as the study measured it: from step 0 to step 64,000 (no VM start-up).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from spottrain.clouds import GCP_PREEMPTIBLE_CAP_S
from spottrain.perf import ThroughputModel, Workload, load_shipped, predict_throughput
from spottrain.plan_file import Plan, PlanGroup, PlanPrediction, PlanWorkload
from spottrain.sim.job import run_setup
from spottrain.sim.montecarlo import run_seed
from spottrain.sim.setup import SimParams, SimSetup
from spottrain.sim.sources import LifetimeSource
from spottrain.transience import load_trace, node_lifetimes
from spottrain.transience.select import best_by_aic, fit_models

STEPS = 64_000
BATCH = 128
SAMPLES = STEPS * BATCH
RESNET32_FLOPS = 1_658_696_889.0  # fwd+bwd per sample, CM-DARE feature table
RESNET32_PARAMS = 1_857_722
# Parameter tensors of Tensor2Tensor's ResNet-32, as in CM-DARE's feature table. The throughput
# model charges the parameter server a cost per tensor; left out, it falls back to a size-based
# estimate (~84 tensors at 1.86 M parameters) and predicts the very clusters it was fitted on ~10%
# too fast.
RESNET32_TENSORS = 104

# USD per second, from the authors' data/training/code/data_processor.py (commit 95c2714)
K80_ON_DEMAND_USD_PER_S = 0.00020083
K80_PREEMPTIBLE_USD_PER_S = 0.000071
PS_USD_PER_S = 0.0000397
# Preemptible worker rates per GPU. K80: the cost script above. P100 / V100: cost / duration of
# the single-worker folders training/p100_v100_spot/{p100,v100} (identical for all their runs);
# the 4-worker and 1-vs-2-PS folders agree: (4 x 0.00015306 + PS) and (N x 0.00023917 + PS).
STUDY_SPOT_USD_PER_S = {"K80": K80_PREEMPTIBLE_USD_PER_S, "P100": 0.00015306, "V100": 0.00023917}
PAPER_SPEEDUP = 7.7
PAPER_SAVINGS = 0.629


@dataclass(frozen=True, kw_only=True)
class Row:
    cluster: str
    gpu: str
    workers: int
    spot: bool
    ps: int
    measured_runs: int
    measured_duration_s: float
    predicted_duration_s: float
    measured_cost_usd: float | None
    predicted_cost_usd: float | None
    predicted_failed_rate: float = 0.0
    """Share of simulated runs whose chief was revoked (left out of the prediction)."""
    price_source: str = "paper"

    @property
    def duration_error(self) -> float:
        return self.predicted_duration_s / self.measured_duration_s - 1.0

    @property
    def cost_error(self) -> float | None:
        if self.measured_cost_usd is None or self.predicted_cost_usd is None:
            return None
        return self.predicted_cost_usd / self.measured_cost_usd - 1.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["duration_error"] = self.duration_error
        d["cost_error"] = self.cost_error
        return d


@dataclass(kw_only=True)
class Reproduction:
    clusters: list[Row]
    ps_rows: list[Row]
    notes: list[str] = field(default_factory=list)

    def _row(self, name: str) -> Row:
        return next(r for r in self.clusters if r.cluster == name)

    def headline(self) -> dict[str, float]:
        base, fast = self._row("1xK80 on-demand"), self._row("8xK80 spot")
        return {
            "measured_speedup": base.measured_duration_s / fast.measured_duration_s,
            "predicted_speedup": base.predicted_duration_s / fast.predicted_duration_s,
            "measured_savings": 1 - fast.measured_cost_usd / base.measured_cost_usd,
            "predicted_savings": 1 - fast.predicted_cost_usd / base.predicted_cost_usd,
            "paper_speedup": PAPER_SPEEDUP, "paper_savings": PAPER_SAVINGS,
        }

    def headline_lines(self) -> list[str]:
        h = self.headline()
        return [
            f"8 spot K80 vs 1 on-demand K80: speedup predicted {h['predicted_speedup']:.2f}x, measured "
            f"{h['measured_speedup']:.2f}x (paper {PAPER_SPEEDUP}x); cost savings predicted "
            f"{100 * h['predicted_savings']:.1f}%, measured {100 * h['measured_savings']:.1f}% (paper {100 * PAPER_SAVINGS:.1f}%)",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"clusters": [r.to_dict() for r in self.clusters], "ps": [r.to_dict() for r in self.ps_rows],
                "headline": self.headline(), "notes": self.notes}


# ---------------------------------------------------------------- measured side
def _data_root() -> Path:
    return Path(str(resources.files("spottrain") / "data" / "icac19"))


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return [{k.strip(): (v or "").strip() for k, v in r.items() if k} for r in csv.DictReader(fh)]


def _zone(text: str) -> str:
    parts = text.split("-")
    # "spot2-us-east1-c" / "demand8-us-east1-c" -> "us-east1-c"
    return "-".join(parts[1:]) if parts and (parts[0].startswith("spot") or parts[0].startswith("demand")) else text


def measured(folder: str) -> tuple[int, float, float | None]:
    """(runs, mean duration s, mean cost USD) of the completed runs (accuracy >= 0.5) in ``folder``."""
    root = _data_root() / folder
    runs = [r for r in _csv(root / "train_data_processed.csv") if float(r["Accuracy"]) >= 0.5]
    keys = {(_zone(r.get("Zone", "")), r["Run"]) for r in runs}
    cost_path = root / "cost.csv"
    costs = None
    if cost_path.exists():
        costs = [float(c["Cost"]) for c in _csv(cost_path) if (_zone(c.get("Zone", "")), c["Run"]) in keys]
    return (len(runs), float(np.mean([float(r["Duration"]) for r in runs])),
            float(np.mean(costs)) if costs else None)


def measured_1ps_k80(workers: int) -> tuple[int, float]:
    rows = _csv(_data_root() / "training/experiment_1ps_vs_2ps/1ps_k80" / f"{workers}_data.csv")
    t0 = float(rows[0]["Wall Time"])
    end = next(float(r["Wall Time"]) for r in rows if int(r["Step"]) >= STEPS)
    return 1, end - t0


# ---------------------------------------------------------------- predicted side
class _Predictor:
    def __init__(self, calibrate: bool = False) -> None:
        rows = load_shipped(("cmdare",))
        self.model = ThroughputModel(folds=0, correction="none").fit(rows)
        # The "profile" of ResNet-32 on each GPU: CM-DARE's single-worker measurement (1 worker +
        # 1 PS, processed_data/speed_data), as a user would profile the model on one GPU.
        self.profiles: dict[str, float] = {}
        for m in rows:
            c = m.cluster.groups
            if (m.model == "t2t-res32" and len(c) == 1 and c[0].count == 1 and m.ps == 1
                    and str(m.extra.get("source", "")).endswith("speed_data")):
                self.profiles[c[0].gpu] = BATCH / float(m.throughput)
        self.calibrate = calibrate
        base = Workload(model="t2t-res32", batch_size=BATCH, flops_per_sample=RESNET32_FLOPS,
                        param_count=RESNET32_PARAMS, gradient_bytes=4.0 * RESNET32_PARAMS,
                        tensor_count=RESNET32_TENSORS)
        self._workloads = {
            gpu: self._calibrated(base, gpu, step) if calibrate else base for gpu, step in self.profiles.items()
        }
        self._cache: dict[tuple, float] = {}
        self._lifetimes: dict[str, Any] = {}

    def _calibrated(self, base: Any, gpu: str, step_s: float) -> Any:
        """``base`` calibrated so that one ``gpu`` worker with one PS (async) runs at ``step_s`` a step.

        The profile was measured with a parameter server, while ``Workload.step_time_s_ref`` is the
        step time of the GPU alone: passing the profile as is would count the PS round trip twice.
        Solve (bisection on the log scale) for the standalone step time that reproduces the profile.
        """
        def step_with_ps(ref_s: float) -> float:
            w = dataclasses.replace(base, step_time_s_ref=ref_s, ref_gpu=gpu)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return BATCH / float(predict_throughput(w, f"1x{gpu}", ps=1, sync="async", model=self.model).throughput)

        lo, hi = math.log(step_s * 0.05), math.log(step_s)
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if step_with_ps(math.exp(mid)) < step_s else (lo, mid)
        return dataclasses.replace(base, step_time_s_ref=math.exp(0.5 * (lo + hi)), ref_gpu=gpu)

    def throughput(self, gpu: str, workers: int, ps: int) -> float:
        key = (gpu, workers, ps)
        if key not in self._cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._cache[key] = float(predict_throughput(self._workloads[gpu], f"{workers}x{gpu}", ps=ps,
                                                            sync="async", model=self.model).throughput) if workers else 0.0
        return self._cache[key]

    def lifetimes(self, gpu: str) -> tuple[Any, str]:
        if gpu not in self._lifetimes:
            trace = load_trace(f"transient-dl-lifetime-{gpu.lower()}")
            lt = node_lifetimes(trace)
            fits = fit_models(lt.durations_s, lt.observed, max_lifetime_s=GCP_PREEMPTIBLE_CAP_S)
            best = best_by_aic(fits)
            self._lifetimes[gpu] = (fits[best], f"{best} fitted on {trace.name} ({len(lt.durations_s)} VMs)")
        return self._lifetimes[gpu]


def _plan(gpu: str, workers: int, ps: int, tp: float, price_usd_per_hour: float) -> Plan:
    return Plan(
        workload=PlanWorkload(model="t2t-res32", batch_size=BATCH, samples_total=float(SAMPLES),
                              flops_per_sample=RESNET32_FLOPS, param_count=RESNET32_PARAMS,
                              gradient_bytes=4.0 * RESNET32_PARAMS),
        groups=(PlanGroup(cloud="gcp", instance_type=f"n1-{gpu.lower()}", gpu=gpu, gpus_per_node=1, count=workers,
                          spot=True, region="us-east1", zone="us-east1-c", price_usd_per_hour=price_usd_per_hour,
                          on_demand_price_usd_per_hour=price_usd_per_hour, network_gbps=10.0),),
        ps=ps, sync="async",
        prediction=PlanPrediction(throughput_samples_per_s=tp, throughput_low=tp, throughput_high=tp,
                                  duration_s=SAMPLES / tp, duration_p95_s=SAMPLES / tp, cost_usd=0.0,
                                  cost_p95_usd=0.0, p_meet_deadline=None, bottleneck="compute",
                                  expected_revocations=0.0),
        checkpoint_interval_s=0.0, policy="no-replace",
    )


def study_rate_usd_per_s(folder: str, workers: int, ps: int = 1) -> float:
    """One worker's rate in USD/s that the study's cost files imply for ``folder``.

    Every ``cost.csv`` row is duration x (workers x rate + PS rate), the PS billed from two
    workers up; returns the median over the folder's runs (they agree to rounding).
    """
    root = _data_root() / folder
    durations = {(_zone(r.get("Zone", "")), r["Run"]): float(r["Duration"])
                 for r in _csv(root / "train_data_processed.csv")}
    rates = []
    for c in _csv(root / "cost.csv"):
        d = durations.get((_zone(c.get("Zone", "")), c["Run"]))
        if d:
            rates.append((float(c["Cost"]) / d - (ps * PS_USD_PER_S if workers > 1 else 0.0)) / workers)
    if not rates:
        raise ValueError(f"{root}: no run has both a duration and a cost")
    return float(np.median(rates))


def _predict_spot(pred: _Predictor, gpu: str, workers: int, ps: int, usd_per_s: float, runs: int,
                  seed: int) -> tuple[float, float, float]:
    """(mean duration s, mean cost USD, failed share) over simulated runs that kept their chief."""
    model, desc = pred.lifetimes(gpu)
    source = LifetimeSource(lambda n, rng: np.asarray(model.sample(n, rng), float), desc,
                            GCP_PREEMPTIBLE_CAP_S)
    tp = pred.throughput(gpu, workers, ps)

    def f(key: tuple[tuple[str, int, int], ...]) -> float:
        return pred.throughput(gpu, sum(n for _, _, n in key), ps) if key else 0.0

    setup = SimSetup(plan=_plan(gpu, workers, ps, tp, usd_per_s * 3600.0), policy_name="no-replace", source=source,
                     params=SimParams(fail_on_chief_loss=True, relaunch_when_empty=False, startup_s=0.0,
                                      checkpoint_cost_s=0.0, restart_s=0.0, horizon_s=10 * SAMPLES / tp),
                     throughput_override=(f, "CM-DARE-fitted throughput model"))
    ok_d, ok_c, failed = [], [], 0
    for i in range(runs):
        r = run_setup(setup, run_seed(seed, i))
        if r.failed or not r.finished:
            failed += 1
            continue
        d = r.makespan_s - r.started_s
        ok_d.append(d)
        ok_c.append(r.cost_usd + (d * ps * PS_USD_PER_S if workers > 1 else 0.0))
    return float(np.mean(ok_d)), float(np.mean(ok_c)), failed / runs


CLUSTERS = (
    ("1xK80 on-demand", "training/k80_on_demand/k80-demand", "K80", 1, False),
    ("2xK80 on-demand", "training/k80_on_demand/2-demand", "K80", 2, False),
    ("4xK80 on-demand", "training/k80_on_demand/4-demand", "K80", 4, False),
    ("8xK80 on-demand", "training/k80_on_demand/8-demand", "K80", 8, False),
    ("2xK80 spot", "training/k80_spot/2-spot", "K80", 2, True),
    ("4xK80 spot", "training/k80_spot/4-spot", "K80", 4, True),
    ("8xK80 spot", "training/k80_spot/8-spot", "K80", 8, True),
    ("1xP100 spot", "training/p100_v100_spot/p100", "P100", 1, True),
    ("1xV100 spot", "training/p100_v100_spot/v100", "V100", 1, True),
    ("4xP100 spot", "training/p100_v100_spot/4p100", "P100", 4, True),
    ("4xV100 spot", "training/p100_v100_spot/4v100", "V100", 4, True),
)


def reproduce_icac19(*, runs: int = 2000, seed: int = 0, calibrate: bool = False) -> Reproduction:
    """Predict every measured ICAC'19 cluster (see the module docstring for what is fitted on what).

    ``calibrate``: also calibrate the workload with CM-DARE's single-worker step time per GPU.
    """
    pred = _Predictor(calibrate)
    rows: list[Row] = []
    for name, folder, gpu, workers, spot in CLUSTERS:
        n, dur, cost = measured(folder)
        rows.append(_predict_row(pred, name, gpu, workers, spot, 1, n, dur, cost, runs, seed))
    ps_rows: list[Row] = []
    for gpu, letter in (("K80", "k"), ("V100", "v")):
        for workers in range(2, 9):
            for ps in (1, 2):
                if gpu == "K80" and ps == 1:
                    n, dur = measured_1ps_k80(workers)
                    cost = None
                else:
                    n, dur, cost = measured(f"training/experiment_1ps_vs_2ps/{ps}ps{workers}{letter}")
                ps_rows.append(_predict_row(pred, f"{workers}x{gpu} {ps}PS", gpu, workers, True, ps, n, dur, cost,
                                            runs, seed))
    notes = [
        "throughput: spottrain.perf ThroughputModel fitted on CM-DARE (ICDCS'20) cmdare.csv only (the ICAC'19 "
        "table transient_dl.csv is not used)" + (
            ", workload calibrated per GPU with CM-DARE's single-worker ResNet-32 step time ("
            + ", ".join(f"{g} {t * 1000:.0f} ms" for g, t in sorted(pred.profiles.items())) + ")"
            if calibrate else ""),
        "revocations: " + "; ".join(pred.lifetimes(g)[1] for g in ("K80", "P100", "V100"))
        + " (standalone preemptible VMs, not the training clusters); no replacement, runs that lost the chief left out",
        "prices: the study's rates: K80 workers and PS from the authors' cost script (0.00020083 on-demand / "
        "0.000071 preemptible / 0.0000397 PS USD/s); preemptible P100 0.00015306 and V100 0.00023917 USD/s, "
        "recovered from the single-worker cost files (cost / duration, identical across runs)",
        "durations from step 0 to step 64,000, as measured; 1-PS K80 clusters have no cost file (one run each)",
        "billing: we bill a revoked worker until its revocation, as the study's 4- and 8-worker K80 cost files do; its "
        "2-worker K80 folder bills every run at the full cluster rate to the end (e.g. us-east1-c run 3 lost worker-0 "
        "at 4,602 s of 9,651 s and is billed 9,651 s x 2 workers), so that row's predicted cost is low by the "
        "revoked workers' idle share",
    ]
    return Reproduction(clusters=rows, ps_rows=ps_rows, notes=notes)


def _predict_row(pred: _Predictor, name: str, gpu: str, workers: int, spot: bool, ps: int, n: int, dur: float,
                 cost: float | None, runs: int, seed: int) -> Row:
    rate = STUDY_SPOT_USD_PER_S[gpu] if spot else K80_ON_DEMAND_USD_PER_S
    price_source = "paper" if gpu == "K80" else "paper (cost files)"
    if spot:
        p_dur, p_cost, failed = _predict_spot(pred, gpu, workers, ps, rate, runs, seed)
    else:
        p_dur = SAMPLES / pred.throughput(gpu, workers, ps)
        p_cost = p_dur * (workers * rate + (ps * PS_USD_PER_S if workers > 1 else 0.0))
        failed = 0.0
    return Row(cluster=name, gpu=gpu, workers=workers, spot=spot, ps=ps, measured_runs=n, measured_duration_s=dur,
               predicted_duration_s=p_dur, measured_cost_usd=cost, predicted_cost_usd=p_cost,
               predicted_failed_rate=failed, price_source=price_source)


def within(rows: list[Row], tolerance: float = 0.10) -> float:
    """Share of rows whose duration error is within ``tolerance``."""
    return sum(abs(r.duration_error) <= tolerance for r in rows) / max(len(rows), 1) if rows else math.nan
