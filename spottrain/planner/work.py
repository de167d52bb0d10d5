"""How much training a cluster needs: fixed samples, or samples to reach a target loss.

With a sample count (``--samples``, ``--epochs``) the work is the same on every cluster. With a
target loss it depends on the cluster, because more workers change what one sample is worth:

- **Synchronous data parallelism** (all-reduce or sync PS): a step consumes the global batch
  ``B = b x G`` (per-GPU batch ``b``, ``G`` GPUs) and has no staleness. The steps to the target
  come from :class:`spottrain.perf.ConvergenceModel` at ``batch_size_global = B``, ``workers = 1``,
  ``staleness = 0``; samples = steps x B. A curve recorded at one batch size cannot tell how the
  steps fall as the batch grows, so the model keeps them constant and the samples grow linearly
  with ``G`` (the conservative end). With ``critical_batch`` (the gradient noise scale
  ``B_noise`` of McCandlish et al., "An Empirical Model of Large-Batch Training", 2018) the steps
  follow their large-batch law instead: ``S(B) = S_min (1 + B_noise / B)``, i.e. samples
  ``E(B) = E_min (1 + B / B_noise)``: nearly constant below the critical batch, linear above it.
  The model's steps at the profiled batch ``b`` fix ``S_min``. With past runs' curves at two or
  more global batch sizes (or recording the gradient noise scale), the steps come from
  :class:`spottrain.perf.batch_scaling.BatchScalingModel` at ``B`` instead, learnt from those
  runs, with its calibrated interval (wider outside the measured batches) as the steps' spread.
- **Asynchronous parameter servers**: every node's update is a global step of ``b x g`` samples
  (``g`` GPUs per node); ``N`` nodes make the updates about ``N - 1`` steps stale. The steps come
  from the model at ``workers = N`` (equal workers), samples = steps x b x (G / N).

Samples never fall as GPUs are added (more GPUs never make a sample worth more), which keeps the
optimizer's linear relaxation of a mix valid: a mix needs at least the samples of each of its
parts (:mod:`spottrain.planner.formulation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.errors import InputError
from spottrain.perf import ConvergenceModel
from spottrain.perf.batch_scaling import BatchScalingModel, applies_to
from spottrain.planner.risk import Z90


@dataclass(frozen=True, kw_only=True, eq=False)
class TargetLoss:
    """Samples to reach ``target_loss`` as a function of the cluster (see the module docstring)."""

    model: Any
    """A fitted :class:`spottrain.perf.ConvergenceModel`."""
    target_loss: float
    batch_size: int
    """Per-GPU batch size."""
    critical_batch: float | None = None
    """Gradient noise scale B_noise (samples); None = the convergence model's own batch rule."""
    batch_model: Any = None
    """A fitted :class:`spottrain.perf.batch_scaling.BatchScalingModel` for synchronous clusters
    (past runs at several global batch sizes); None = the rules above."""

    def samples(self, nodes: np.ndarray, gpus: np.ndarray, sync: str) -> np.ndarray:
        """Samples to the target for clusters of ``nodes`` nodes holding ``gpus`` GPUs in all."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=float))
        gpus = np.broadcast_to(np.atleast_1d(np.asarray(gpus, dtype=float)), nodes.shape)
        out = np.empty(nodes.shape)
        cache: dict[tuple[float, float], float] = {}
        for k, (n, g) in enumerate(zip(nodes.tolist(), gpus.tolist())):
            key = (n, g) if sync == "async" else (0.0, g)
            hit = cache.get(key)
            if hit is None:
                hit = cache[key] = self._one(int(n), int(g), sync)
            out[k] = hit
        return out

    def log_sd(self, nodes: np.ndarray, gpus: np.ndarray, sync: str) -> np.ndarray:
        """Log-sd of :meth:`samples`: the convergence model's ~90 % steps interval read as a lognormal
        (``steps_log_error_q90 / 1.645``) for asynchronous clusters whose node count no curve
        measured (the staleness dependence carried to another count, where the steps are
        uncertain); for synchronous clusters with a :attr:`batch_model`, its ~90 % half-width at the
        cluster's global batch (wider outside the measured batches); 0 otherwise (a measured count
        repeats a recorded run; a synchronous cluster keeps the steps of the profiled batch, the
        conservative end of the batch-size rule)."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=float))
        if sync != "async":
            if self.batch_model is None:
                return np.zeros(nodes.shape)
            gpus = np.broadcast_to(np.atleast_1d(np.asarray(gpus, dtype=float)), nodes.shape)
            return np.array([self.batch_model.steps_log_error_q90(self.batch_size * max(g, 1.0)) / Z90
                             for g in gpus.tolist()])
        seen = np.isin(nodes, np.asarray(self.model.worker_counts_, dtype=float))
        return np.where(seen, 0.0, self.model.steps_log_error_q90() / Z90)

    def _one(self, nodes: int, gpus: int, sync: str) -> float:
        b = float(self.batch_size)
        if sync == "async":
            per_update = b * gpus / max(nodes, 1)
            steps = self.model.steps_to_target(self.target_loss, batch_size_global=per_update, workers=max(nodes, 1))
            return float(steps) * per_update
        big = b * max(gpus, 1)
        if self.batch_model is not None:
            return float(self.batch_model.steps_to_target(self.target_loss, batch_size_global=big)) * big
        if self.critical_batch is None:
            steps = self.model.steps_to_target(self.target_loss, batch_size_global=big, workers=1, staleness=0.0)
            return float(steps) * big
        s_b = self.model.steps_to_target(self.target_loss, batch_size_global=b, workers=1, staleness=0.0)
        if not math.isfinite(s_b):
            return math.inf
        bn = float(self.critical_batch)
        s_min = s_b / (1.0 + bn / b)
        return s_min * (1.0 + bn / big) * big

    def floor_message(self) -> str | None:
        """Why no cluster can reach the target, or None when one GPU can."""
        if math.isfinite(self._one(1, 1, "sync")):
            return None
        if self.batch_model is not None:
            best = min(min(c.losses) for c in self.batch_model.curves_)
            return f"no run in the curves reaches {self.target_loss:g} (the lowest they reach is {best:.4g}); give a higher target"
        floors = [ph.coef.floor for ph in getattr(self.model, "phases_", ())]
        lowest = f" (the fitted curve levels off at {min(floors):.4g})" if floors else ""
        return f"the loss curve never reaches {self.target_loss:g}{lowest}; give a higher target"


def target_loss_work(loss_curve: Any, target_loss: float, batch_size: int, *,
                     critical_batch: float | None = None) -> TargetLoss:
    """Fit the convergence model on a profile's loss curve ([[step, loss], ...] at the profiled
    per-GPU batch) or on past runs' curves (:class:`~spottrain.perf.convergence.LossCurve` objects,
    e.g. from :func:`~spottrain.perf.convergence.read_loss_curves`) and return the work rule.
    Synchronous runs at two or more global batch sizes (or with a noise scale) also fit the
    batch-size model, which synchronous clusters then use.
    Raises :class:`InputError` naming ``--target-loss`` when the curve is missing, cannot be
    fitted, or never reaches the target."""
    if not loss_curve:
        raise InputError("--target-loss: needs a loss curve: a --profile that has one (spottrain profile "
                         "--loss-steps N records one), past runs' curves (--curves runs.csv), or a run of "
                         "this model by spottrain run (its loss curve is stored)")
    if not (target_loss > 0 and math.isfinite(target_loss)):
        raise InputError(f"--target-loss: must be a positive loss, got {target_loss!r}")
    if critical_batch is not None and not critical_batch > 0:
        raise InputError(f"--critical-batch: must be a positive batch size, got {critical_batch!r}")
    batch_model = None
    if not isinstance(loss_curve[0], (list, tuple)) and applies_to(loss_curve):
        if critical_batch is not None:
            raise InputError("--critical-batch: the curves hold several batch sizes or a noise scale, from which "
                             "the batch-size model learns it; leave --critical-batch out")
        batch_model = BatchScalingModel().fit(loss_curve)
    try:
        model = ConvergenceModel(batch_size=float(batch_size), lr_boundaries="auto", form="staleness").fit(loss_curve)
    except InputError as exc:
        raise InputError(f"--target-loss: the loss curve cannot be fitted: {exc}") from None
    rule = TargetLoss(model=model, target_loss=float(target_loss), batch_size=int(batch_size),
                      critical_batch=critical_batch, batch_model=batch_model)
    why = rule.floor_message()
    if why:
        raise InputError(f"--target-loss: {why}")
    return rule
