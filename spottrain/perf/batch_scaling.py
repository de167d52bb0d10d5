"""Steps to a target when the global batch changes (synchronous data parallelism).

In synchronous training a step consumes the global batch ``B`` (per-worker batch x workers), so
adding workers at a fixed per-worker batch grows ``B``; a larger batch needs fewer steps, but not
proportionally fewer. :class:`BatchScalingModel` learns how many, from curves of past runs at
several global batch sizes, and combines two estimates:

**Gradient noise scale** (Pollux, OSDI'21; McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training"). With the noise scale ``phi`` (``tr(Sigma) / |G|^2``, in samples) a step at
batch ``B`` is worth ``B / (1 + B / phi)`` samples of an infinitely small batch: Pollux's
efficiency ``E(B) = (phi + B0) / (phi + B)`` against a base batch ``B0``. ``phi`` grows as training
progresses, so the curve of a run at batch ``B_k`` with its measured ``phi(i)`` carries over to
batch ``B`` step by step::

    S_B(target) = integral over the run's steps i up to S_k(target) of (B_k / B) (phi(i) + B) / (phi(i) + B_k)

Each measured curve gives such an estimate; they are averaged in log steps with equal weights.
(Weighting the curves of batches nearer ``B`` more was no more accurate on the Pollux curves, and
weights that move with ``B`` can make the steps rise with the batch; equal weights keep the two
properties the planner relies on: steps never rise and samples never fall as ``B`` grows, since
each curve's estimate has them.)

**The large-batch law per target**: ``S(B) = S_min (1 + B_noise / B)``, linear in ``1 / B``,
fitted (``S_min, B_noise >= 0``, relative least squares) on the measured steps of the curves that
reach the target. It needs no gradient statistics, only two or more batch sizes.

With both (noise scale recorded, three or more batch sizes reaching the target) the prediction is
their geometric mean; otherwise whichever is available. With one batch size and no noise scale
the steps are kept constant (samples grow linearly with ``B``: the conservative end), unless a
``critical_batch`` (a known ``B_noise``) is given.

**Uncertainty**: the ~90 % interval's half-width in log steps is the 90th percentile of the
model's own errors when each batch size of its curves is left out and predicted from the others
(:meth:`BatchScalingModel.steps_log_error_q90`); it widens per doubling of ``B`` beyond the
measured range by the rate the model's held-out end batches show, at least
:data:`EXTRAPOLATION_WIDENING`, and such a prediction warns once (:class:`ExtrapolationWarning`).
"""

from __future__ import annotations

import math
import warnings
from importlib import resources

import numpy as np

from spottrain.errors import InputError, NotFittedError
from spottrain.perf.convergence import LossCurve, first_crossing, read_loss_curves
from spottrain.perf.throughput import ExtrapolationWarning

DEFAULT_STEPS_LOG_Q90 = 0.20
"""Half-width (log steps) of the interval inside the measured batch range when the curves hold
too few batch sizes to calibrate it (fewer than three, or fewer than five held-out targets): the
90th percentile of the leave-one-batch-size-out errors of the four shipped Pollux models pooled
(0.09-0.34 per model; a test recomputes it)."""
EXTRAPOLATION_WIDENING = 0.10
"""Least half-width (log steps) added per doubling of the batch beyond the measured range. The
shipped Pollux curves, held out at their end batches (one doubling out), show no more error than
inside (pooled rate ~0); beyond that the data cannot say, so the interval widens at least by this
(x 1.1 per doubling), more when the model's own held-out end batches show a higher rate."""
CALIBRATION_FRACTIONS = (0.5, 0.7, 0.85, 0.95)


def is_synchronous(curve: LossCurve) -> bool:
    """A run without staleness: one worker, or several with ``staleness`` 0 (a curve of several
    workers with no staleness given is an asynchronous parameter-server run)."""
    return curve.workers == 1 or curve.staleness == 0


def applies_to(curves) -> bool:
    """Whether synchronous predictions from ``curves`` use this model: synchronous runs at two or
    more global batch sizes, or with a recorded gradient noise scale (one run of one batch without
    it says nothing about other batches)."""
    cs = list(curves)
    return (bool(cs) and all(isinstance(c, LossCurve) and is_synchronous(c) for c in cs)
            and (len({c.global_batch for c in cs}) >= 2 or all(c.noise_scale is not None for c in cs)))


def batch_targets(curves, fractions=CALIBRATION_FRACTIONS) -> tuple[float, ...]:
    """Targets (lower-is-better values) that every curve reaches after its first evaluation:
    ``fractions`` of the way from the worst first evaluation to the worst best value."""
    firsts = [c.losses[0] for c in curves if c.losses]
    bests = [min(c.losses) for c in curves if c.losses]
    if not firsts:
        return ()
    start, floor = min(firsts), max(bests)
    if not start > floor:
        return ()
    return tuple(start - f * (start - floor) for f in fractions)


def _translate(curve: LossCurve, measured: float, batch: float) -> float:
    """Steps at ``batch`` equivalent to ``measured`` steps of ``curve`` (noise scale per interval)."""
    bk = curve.global_batch
    total, prev = 0.0, 0.0
    for s, phi in zip(curve.steps, curve.noise_scale):
        hi = min(s, measured)
        if hi > prev:
            total += (hi - prev) * (bk / batch) * (phi + batch) / (phi + bk)
        prev = max(prev, s)
        if prev >= measured:
            break
    if measured > prev:  # past the last evaluation: its noise scale
        phi = curve.noise_scale[-1]
        total += (measured - prev) * (bk / batch) * (phi + batch) / (phi + bk)
    return total


def _law_fit(batches: np.ndarray, steps: np.ndarray) -> tuple[float, float]:
    """(S_min, S_min x B_noise) of S = a + c / B, a, c >= 0, least squares relative to S."""
    x, w = 1.0 / batches, 1.0 / steps
    A = np.vstack([np.ones_like(x), x]).T * w[:, None]
    (a, c), *_ = np.linalg.lstsq(A, steps * w, rcond=None)
    if a < 0:
        a, c = 0.0, float(np.sum(x * steps * w * w) / np.sum(x * x * w * w))
    if c < 0:
        a, c = float(np.sum(steps * w * w) / np.sum(w * w)), 0.0
    return float(a), float(c)


class BatchScalingModel:
    """Steps to a target as a function of the global batch (estimator contract; module docstring).

    ``fit(curves)`` takes :class:`~spottrain.perf.convergence.LossCurve` objects (a synchronous
    run's global batch is ``workers x batch_size``), e.g. from
    :func:`~spottrain.perf.convergence.read_loss_curves`; targets are lower-is-better values as
    the curves hold them (``LossCurve.to_loss`` converts an accuracy or F1).

    >>> from spottrain.perf.convergence import LossCurve
    >>> runs = [LossCurve(steps=tuple(k * 100 * (1 + 512 / b) for k in range(1, 9)),
    ...                   losses=tuple(1.0 / k for k in range(1, 9)), batch_size=b) for b in (128, 256, 1024)]
    >>> round(BatchScalingModel().fit(runs).steps_to_target(0.3, batch_size_global=512))
    680

    Parameters: ``critical_batch`` (a known noise scale B_noise in samples, the prior when the
    curves hold one batch size and no noise scale), ``use_noise_scale`` (False: the large-batch
    law alone, even when the curves record a noise scale).
    """

    def __init__(self, *, critical_batch: float | None = None, use_noise_scale: bool = True) -> None:
        self.critical_batch = critical_batch
        self.use_noise_scale = use_noise_scale

    def get_params(self, deep: bool = False) -> dict:
        return {"critical_batch": self.critical_batch, "use_noise_scale": self.use_noise_scale}

    def fit(self, curves) -> "BatchScalingModel":
        """Fit on curves of one model and task at one or more global batch sizes; returns ``self``."""
        cs = [curves] if isinstance(curves, LossCurve) else list(curves)
        if not cs or not all(isinstance(c, LossCurve) for c in cs):
            raise InputError("expected loss curves (LossCurve objects) of runs at one or more global batch sizes")
        for c in cs:
            if len(c.steps) != len(c.losses) or not c.steps:
                raise InputError("a curve has no points, or steps and losses differ in length")
            if not c.batch_size > 0:
                raise InputError(f"expected a batch size > 0, got {c.batch_size:g}")
            if not is_synchronous(c):
                raise InputError(f"a curve of {c.workers} workers with staleness "
                                 f"{'not given' if c.staleness is None else f'{c.staleness:g}'} is an asynchronous "
                                 "run; the batch-size model takes synchronous runs (one worker, or staleness 0)")
        if self.critical_batch is not None and not self.critical_batch > 0:
            raise InputError(f"expected a critical batch > 0, got {self.critical_batch!r}")
        self.curves_ = tuple(cs)
        self.batch_sizes_ = tuple(sorted({c.global_batch for c in cs}))
        self.uses_noise_scale_ = self.use_noise_scale and all(c.noise_scale is not None for c in cs)
        self._warned: set[str] = set()
        self._calibration: tuple[float, float, bool] | None = None
        return self

    def _check(self) -> None:
        if not hasattr(self, "curves_"):
            raise NotFittedError("BatchScalingModel used before fit()")

    # -- point prediction -------------------------------------------------------------------
    def steps_to_target(self, target_loss: float, *, batch_size_global: float) -> float:
        """Steps at global batch ``batch_size_global`` until the curve first reaches ``target_loss``
        (``inf`` when no curve reaches it)."""
        self._check()
        batch = float(batch_size_global)
        if not batch > 0:
            raise InputError(f"expected a global batch > 0, got {batch_size_global!r}")
        reached = [(c, s) for c in self.curves_ if (s := first_crossing(c, target_loss)) is not None and s > 0]
        if not reached:
            return math.inf
        by_batch: dict[float, list[float]] = {}
        for c, s in reached:
            by_batch.setdefault(c.global_batch, []).append(s)
        grad = None
        if self.uses_noise_scale_:
            grad = float(np.mean([math.log(_translate(c, s, batch)) for c, s in reached]))
        law = None
        if len(by_batch) >= 2:
            bs = np.array(sorted(by_batch))
            a, c = _law_fit(bs, np.array([float(np.exp(np.mean(np.log(by_batch[b])))) for b in bs]))
            law = math.log(max(a + c / batch, 1e-9))
        elif grad is None:
            (b0, steps), = by_batch.items()
            s0 = float(np.exp(np.mean(np.log(steps))))
            bn = self.critical_batch
            return s0 if bn is None else s0 * (1.0 + bn / batch) / (1.0 + bn / b0)
        if grad is not None and law is not None and len(by_batch) >= 3:
            return math.exp(0.5 * grad + 0.5 * law)
        return math.exp(grad if grad is not None else law)

    def samples_to_target(self, target_loss: float, *, batch_size_global: float) -> float:
        """Samples to the target: steps x the global batch."""
        return self.steps_to_target(target_loss, batch_size_global=batch_size_global) * float(batch_size_global)

    # -- uncertainty ------------------------------------------------------------------------
    def extrapolation_doublings(self, batch_size_global: float) -> float:
        """How far ``batch_size_global`` lies outside the measured batch range, in doublings (0 inside)."""
        self._check()
        lo, hi = self.batch_sizes_[0], self.batch_sizes_[-1]
        b = float(batch_size_global)
        return max(math.log2(b / hi), math.log2(lo / b), 0.0)

    def steps_log_error_q90(self, batch_size_global: float | None = None) -> float:
        """Half-width (log steps) of the ~90 % interval at ``batch_size_global`` (inside the measured
        range when None): the held-out 90th percentile, plus the widening per doubling outside."""
        q, widen, _ = self._calibrated()
        d = 0.0 if batch_size_global is None else self.extrapolation_doublings(batch_size_global)
        return q + widen * d

    def steps_interval_is_calibrated(self) -> bool:
        """Whether the interval width comes from this model's own held-out batch sizes (else
        :data:`DEFAULT_STEPS_LOG_Q90`)."""
        return self._calibrated()[2]

    def steps_interval(self, target_loss: float, *, batch_size_global: float, warn: bool = True) -> tuple[float, float]:
        """A ~90 % interval (low, high) around :meth:`steps_to_target`; wider outside the measured
        batch range, where the first such prediction warns (:class:`ExtrapolationWarning`)."""
        steps = self.steps_to_target(target_loss, batch_size_global=batch_size_global)
        if not math.isfinite(steps):
            return steps, steps
        d = self.extrapolation_doublings(batch_size_global)
        if d > 0 and warn and "range" not in self._warned:
            self._warned.add("range")
            lo, hi = self.batch_sizes_[0], self.batch_sizes_[-1]
            warnings.warn(f"global batch {batch_size_global:g} is outside the measured batch sizes {lo:g}-{hi:g}: "
                          f"steps to target extrapolated, interval widened", ExtrapolationWarning, stacklevel=2)
        q = self.steps_log_error_q90(batch_size_global)
        return steps * math.exp(-q), steps * math.exp(q)

    def held_out_errors(self) -> list[tuple[float, float]]:
        """(|log(predicted / measured)| steps, doublings outside the training range) when each batch
        size of the curves is left out and predicted by a model fitted on the others, at the
        :func:`batch_targets` of the training curves that the held-out curve reaches."""
        self._check()
        errs = []
        if len(self.batch_sizes_) < 3:
            return errs
        for b_out in self.batch_sizes_:
            train = [c for c in self.curves_ if c.global_batch != b_out]
            held = [c for c in self.curves_ if c.global_batch == b_out]
            sub = BatchScalingModel(**self.get_params()).fit(train)
            for t in batch_targets(train):
                for c in held:
                    meas = first_crossing(c, t)
                    if meas is None or meas <= 0:
                        continue
                    pred = sub.steps_to_target(t, batch_size_global=b_out)
                    err = abs(math.log(pred / meas)) if math.isfinite(pred) else 5.0
                    errs.append((err, sub.extrapolation_doublings(b_out)))
        return errs

    def _calibrated(self) -> tuple[float, float, bool]:
        self._check()
        if self._calibration is None:
            errs = self.held_out_errors()
            inside = [e for e, d in errs if d == 0]
            own = len(inside) >= 5
            q = float(np.quantile(inside, 0.9)) if own else DEFAULT_STEPS_LOG_Q90
            outside = [(e - q) / d for e, d in errs if d > 0]
            own_rate = float(np.quantile(outside, 0.9)) if len(outside) >= 4 else 0.0
            widen = max(own_rate, EXTRAPOLATION_WIDENING)
            self._calibration = (q, widen, own)
        return self._calibration


def load_pollux_curves(model: str) -> list[LossCurve]:
    """The shipped Pollux validation curves of ``model`` (``cifar10``, ``imagenet``, ``bert``,
    ``ncf``; see spottrain/data/measurements/SOURCE.md), one curve per global batch size."""

    names = ("bert", "cifar10", "imagenet", "ncf")
    if model not in names:
        raise InputError(f"expected one of {', '.join(names)}, got {model!r}")
    ref = resources.files("spottrain").joinpath("data", "measurements", "curves", f"pollux_{model}.csv")
    with resources.as_file(ref) as path:
        return read_loss_curves(path)


POLLUX_MODELS = ("bert", "cifar10", "imagenet", "ncf")
