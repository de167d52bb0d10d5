"""Convergence model: loss (or error) after j steps, and steps to a target, for a cluster.

spotDNN's loss model for asynchronous data-parallel training::

    f(b_w, R, N, j) = (g2 * b_w + g3) * sqrt((R + g4) * N) / (j + g1) + g5

* ``j``: global steps (every worker's update counts, as a PS's global step does);
* ``b_w``: weighted-average batch size of one update; ``N``: workers;
* ``R``: convergence coefficient = Euclidean distance between the workers' update shares
  ``w_i = v_i / v`` and the single-worker vector ``[1, 0, ..., 0]``; N equal workers give
  ``R = sqrt((N - 1) / N)``; synchronous training (no staleness) has ``R = 0``.

Fitted with :func:`scipy.optimize.curve_fit` on one or more loss curves. With curves of one
batch size only, ``g2`` is fixed at 0 (it is not identifiable); with one worker count only,
``g4`` is fixed at 1 and the sqrt(N) growth of spotDNN's model is assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spottrain.errors import InputError, NotFittedError


def convergence_coefficient(shares) -> float:
    """R for update shares ``w_i`` (normalised to sum 1): distance to [1, 0, ..., 0]."""
    w = np.asarray(shares, float)
    if w.size == 0 or w.sum() <= 0:
        raise InputError("expected at least one positive update share")
    w = np.sort(w / w.sum())[::-1]
    e = np.zeros_like(w)
    e[0] = 1.0
    return float(np.linalg.norm(w - e))


def homogeneous_R(workers: int) -> float:
    """R of ``workers`` equally fast workers."""
    return math.sqrt((workers - 1) / workers) if workers > 1 else 0.0


@dataclass(frozen=True, kw_only=True)
class LossCurve:
    """One measured curve: loss (or error = 1 - accuracy) at global steps."""

    steps: tuple[float, ...]
    losses: tuple[float, ...]
    batch_size: float
    """Weighted-average batch size b_w of one update (per worker for async PS)."""
    workers: int = 1
    staleness: float | None = None
    """Convergence coefficient R; None = homogeneous async workers."""

    @property
    def R(self) -> float:
        return homogeneous_R(self.workers) if self.staleness is None else float(self.staleness)


def _f(X, g1, g2, g3, g4, g5):
    j, b, R, N = X
    return (g2 * b + g3) * np.sqrt(np.maximum((R + g4) * N, 1e-12)) / (j + g1) + g5


class ConvergenceModel:
    """spotDNN's loss model (estimator contract). ``fit(curves)`` then ``steps_to_target``.

    ``fit`` accepts :class:`LossCurve` objects, or a plain ``[[step, loss], ...]`` list (one
    worker, ``batch_size`` from ``__init__``), e.g. a profile's ``loss_curve``.

    >>> m = ConvergenceModel(batch_size=32).fit([[s, 2.0 / (s + 10) + 0.1] for s in range(0, 500, 10)])
    >>> round(m.loss_at(90, batch_size_global=32, workers=1), 3)
    0.12
    """

    def __init__(self, *, batch_size: float = 32.0, min_step: float = 1.0) -> None:
        self.batch_size = batch_size
        self.min_step = min_step

    def get_params(self, deep: bool = False) -> dict:
        return {"batch_size": self.batch_size, "min_step": self.min_step}

    def _curves(self, data) -> list[LossCurve]:
        if isinstance(data, LossCurve):
            return [data]
        data = list(data)
        if data and isinstance(data[0], LossCurve):
            return data
        try:
            pts = [(float(s), float(v)) for s, v in data]
        except (TypeError, ValueError):
            raise InputError("expected a loss curve as [[step, loss], ...] or LossCurve objects") from None
        return [LossCurve(steps=tuple(p[0] for p in pts), losses=tuple(p[1] for p in pts), batch_size=self.batch_size)]

    def fit(self, curves) -> "ConvergenceModel":
        from scipy.optimize import curve_fit

        cs = self._curves(curves)
        j, b, R, N, y = [], [], [], [], []
        for c in cs:
            if len(c.steps) != len(c.losses):
                raise InputError("steps and losses differ in length")
            for s, v in zip(c.steps, c.losses):
                if s >= self.min_step and math.isfinite(v):
                    j.append(s); b.append(c.batch_size); R.append(c.R); N.append(c.workers); y.append(v)
        if len(y) < 4:
            raise InputError(f"need at least 4 points of the loss curve after step {self.min_step:g}, got {len(y)}")
        X = np.array([j, b, R, N], float)
        y = np.array(y, float)
        fix_g2 = len(set(b)) < 2
        fix_g4 = len(set(N)) < 2
        jmax = float(X[0].max())
        amp0 = max((y[0] - y.min()) * (X[0][0] + 0.05 * jmax), 1e-6)

        def model(X, g1, g2, g3, g4, g5):
            return _f(X, g1, 0.0 if fix_g2 else g2, g3, 1.0 if fix_g4 else g4, g5)

        p0 = [0.05 * jmax, 0.0, amp0, 1.0, max(float(y.min()) * 0.9, 0.0)]
        lower = [1e-6, -np.inf, -np.inf, 1e-6, 0.0]
        upper = [10 * jmax, np.inf, np.inf, 1e3, max(float(y.max()), 1e-9)]
        try:
            popt, _ = curve_fit(model, X, y, p0=p0, bounds=(lower, upper), maxfev=20000)
        except RuntimeError as exc:
            raise InputError(f"the loss curve could not be fitted: {exc}") from None
        if fix_g2:
            popt[1] = 0.0
        if fix_g4:
            popt[3] = 1.0
        self.coef_ = tuple(float(v) for v in popt)
        self.n_points_ = len(y)
        self.residual_std_ = float(np.std(y - _f(X, *self.coef_)))
        return self

    def _check(self):
        if not hasattr(self, "coef_"):
            raise NotFittedError("ConvergenceModel used before fit()")

    def loss_at(self, steps: float, *, batch_size_global: float, workers: int = 1, staleness: float | None = None) -> float:
        """Predicted loss after ``steps`` global steps."""
        self._check()
        R = homogeneous_R(workers) if staleness is None else staleness
        return float(_f(np.array([[steps], [batch_size_global], [R], [workers]], float), *self.coef_)[0])

    def steps_to_target(self, target_loss: float, *, batch_size_global: float, workers: int = 1,
                        staleness: float | None = None) -> float:
        """Global steps until the loss reaches ``target_loss`` (``inf`` if the fit's floor is above it).

        ``staleness`` is the convergence coefficient R (0 = synchronous; None = equal async workers).
        """
        self._check()
        g1, g2, g3, g4, g5 = self.coef_
        R = homogeneous_R(workers) if staleness is None else staleness
        if target_loss <= g5:
            return math.inf
        amp = (g2 * batch_size_global + g3) * math.sqrt(max((R + g4) * workers, 1e-12))
        return max(amp / (target_loss - g5) - g1, 0.0)


def load_accuracy_curves() -> list[dict]:
    """The shipped transient-dl ResNet-32 accuracy curves as rows (see SOURCE.md)."""
    import csv
    from importlib import resources

    text = resources.files("spottrain").joinpath("data", "measurements", "curves", "transient_dl_accuracy.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


def curves_from_rows(rows: list[dict], *, average: bool = True) -> dict[int, LossCurve]:
    """Error (1 - accuracy) curves per worker count, averaged over runs at each step (rounded to 1000)."""
    from collections import defaultdict

    acc: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    bs: dict[int, float] = {}
    for r in rows:
        n = int(r["workers"])
        acc[n][round(int(r["step"]) / 1000) * 1000].append(1.0 - float(r["accuracy"]))
        bs[n] = float(r["batch_size"])
    out = {}
    for n, by in acc.items():
        steps = sorted(by)
        out[n] = LossCurve(steps=tuple(float(s) for s in steps), losses=tuple(float(np.mean(by[s])) for s in steps),
                           batch_size=bs[n], workers=n)
    return out
