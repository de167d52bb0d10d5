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

**Learning-rate phases.** A step schedule (the LR divided at fixed global steps, as in most
image-classification recipes) makes the loss fall abruptly at each boundary, which one hyperbola
cannot follow. With ``lr_boundaries`` (global steps, or ``"auto"`` to find the abrupt drops in the
curves, see :func:`detect_lr_boundaries`) each phase p gets its own hyperbola in the steps since
the phase began::

    f_p(j) = (g2 b_w + g3_p) sqrt((R + g4_p) N) / (j - s_p + g1_p) + g5_p,   s_p <= j < s_{p+1}

and the steps to a target are found in the first phase whose curve reaches it. Each phase fits
its own worker dependence (g4_p, and g6_p below) when its points hold two or more worker counts:
what staleness costs differs between phases (at a high LR the curves of more workers are still
far from their floors when the LR drops, so the growth of the floor with workers shows only
after the drop).

**Staleness form** (``form="staleness"``). In asynchronous training with N equal workers an
update is computed on parameters about tau = N - 1 updates old (in general tau = N R^2, 0 for
synchronous training), and each global step is worth less. The shipped ResNet-32 curves show the
hyperbola's amplitude growing about linearly in tau (1 : 1.7 : 3 : 7 for 1, 2, 4, 8 workers), faster
than spotDNN's sqrt((R + g4) N), and, after the LR drop, the floor rising with it (0.069, 0.081,
0.089, 0.116), so this form uses::

    f_p(j) = (g2 b_w + g3_p) (1 + g4_p tau) / (j - s_p + g1_p) + g5_p (1 + g6_p tau)

A phase whose points have one worker count (a profile's single-worker curve) cannot fit g4_p and
g6_p; they default to the values fitted on the shipped ResNet-32 curves: progress slowed by
staleness in the first phase (:data:`DEFAULT_STALENESS`, g4 = 0.5, g6 = 0), a floor rising with
staleness after an LR drop (:data:`DEFAULT_STALENESS_LATER`, g4 = 0, g6 = 0.09).
"""

from __future__ import annotations

import csv
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from typing import NamedTuple

import numpy as np

from spottrain.errors import InputError, NotFittedError
from spottrain.perf.measurements import parse_number, read_table


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
    noise_scale: tuple[float, ...] | None = None
    """Gradient noise scale B_noise (samples) at each evaluation, when the run recorded it
    (:mod:`spottrain.perf.batch_scaling` uses it); None = not measured."""
    metric: str = "loss"
    """The column the values came from: ``loss`` or ``error`` (kept as they are), or a
    higher-is-better metric (``accuracy``, ``f1``, ``hit_rate``) kept as ``metric_full - value``."""
    metric_full: float = 1.0
    """The best possible value of a higher-is-better metric (1, or 100 for a percentage)."""

    @property
    def R(self) -> float:
        return homogeneous_R(self.workers) if self.staleness is None else float(self.staleness)

    @property
    def global_batch(self) -> float:
        """Samples per step of a synchronous run: ``workers x batch_size``."""
        return self.workers * self.batch_size

    def to_loss(self, value: float) -> float:
        """A target in the curve's own metric (accuracy 0.75, F1 88) as the lower-is-better value
        the curve holds (0.25, 12)."""
        return float(value) if self.metric in LOWER_IS_BETTER else self.metric_full - float(value)

    def from_loss(self, loss: float) -> float:
        """The inverse of :meth:`to_loss`."""
        return float(loss) if self.metric in LOWER_IS_BETTER else self.metric_full - float(loss)


LOWER_IS_BETTER = ("loss", "error")
HIGHER_IS_BETTER = ("accuracy", "f1", "hit_rate")
"""Value columns of a loss-curve table, by the direction their name declares."""
FORMS = ("spotdnn", "staleness")
DEFAULT_STALENESS = (0.5, 0.0)
"""(g4, g6) of the staleness form's first phase when the curves have one worker count there
(fitted on the shipped ResNet-32 curves, rounded): staleness slows progress, the floor is not
seen to move before the first LR drop."""
DEFAULT_STALENESS_LATER = (0.0, 0.09)
"""(g4, g6) of a phase after an LR drop when its points have one worker count (shipped ResNet-32
fit, rounded): the curves sit near their floors, which rise with staleness (about 1 + 0.09 tau)."""


class PhaseCoefficients(NamedTuple):
    """The fitted coefficients of one phase's hyperbola (the module docstring's g1 ... g6, in that
    order, so ``_f(X, *coef)`` reads the equation)."""

    step_offset: float
    """g1: steps added to the steps since the phase began (where the hyperbola starts)."""
    batch_slope: float
    """g2: the amplitude's growth per sample of batch (0 when the curves have one batch size)."""
    amplitude: float
    """g3: the amplitude at batch 0, before the worker factor."""
    worker_growth: float
    """g4: the worker dependence of the amplitude (spotDNN's sqrt((R + g4) N), or 1 + g4 tau)."""
    floor: float
    """g5: the loss the phase levels off at (one worker, no staleness)."""
    floor_staleness: float
    """g6: the floor's growth with staleness, 1 + g6 tau (staleness form; 0 otherwise)."""


class Phase(NamedTuple):
    """One learning-rate phase of a fitted model: where it begins and its hyperbola."""

    start_step: float
    """Global step at which the phase begins (0, or an LR boundary)."""
    coef: PhaseCoefficients


def _terms(R, N, g4, g6, form):
    """(amplitude factor, floor factor) of a cluster."""
    if form == "staleness":
        tau = np.asarray(N, float) * np.asarray(R, float) ** 2
        return 1.0 + g4 * tau, 1.0 + g6 * tau
    return np.sqrt(np.maximum((np.asarray(R, float) + g4) * N, 1e-12)), 1.0


def _f(X, g1, g2, g3, g4, g5, g6=0.0, form="spotdnn"):
    j, b, R, N = X
    amp, floor = _terms(R, N, g4, g6, form)
    return (g2 * b + g3) * amp / (j + g1) + g5 * floor


class ConvergenceModel:
    """spotDNN's loss model (estimator contract). ``fit(curves)`` then ``steps_to_target``.

    ``fit`` accepts :class:`LossCurve` objects, or a plain ``[[step, loss], ...]`` list (one
    worker, ``batch_size`` from ``__init__``), e.g. a profile's ``loss_curve``.

    >>> m = ConvergenceModel(batch_size=32).fit([[s, 2.0 / (s + 10) + 0.1] for s in range(0, 500, 10)])
    >>> round(m.loss_at(90, batch_size_global=32, workers=1), 3)
    0.12

    Parameters: ``batch_size`` (of a plain curve), ``min_step`` (points before it are ignored),
    ``lr_boundaries`` (``None``, ``"auto"`` or global steps of LR drops), ``form`` (``"spotdnn"``
    or ``"staleness"``, see the module docstring). Fitted: ``phases_`` (a :class:`Phase` per LR
    phase), ``coef_`` (the first phase's :class:`PhaseCoefficients`), ``lr_boundaries_``,
    ``residual_std_``.
    """

    def __init__(self, *, batch_size: float = 32.0, min_step: float = 1.0,
                 lr_boundaries: tuple[float, ...] | str | None = None, form: str = "spotdnn") -> None:
        self.batch_size = batch_size
        self.min_step = min_step
        self.lr_boundaries = lr_boundaries
        self.form = form

    def get_params(self, deep: bool = False) -> dict:
        return {"batch_size": self.batch_size, "min_step": self.min_step, "lr_boundaries": self.lr_boundaries,
                "form": self.form}

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
        """Fit on loss curves (see the class docstring); returns ``self``."""
        if self.form not in FORMS:
            raise InputError(f"expected form one of {', '.join(FORMS)}, got {self.form!r}")
        cs = self._curves(curves)
        for c in cs:
            if len(c.steps) != len(c.losses):
                raise InputError("steps and losses differ in length")
        if self.lr_boundaries == "auto":
            bounds = detect_lr_boundaries(cs)
        elif self.lr_boundaries:
            bounds = tuple(sorted(float(b) for b in self.lr_boundaries))
        else:
            bounds = ()
        edges = (0.0, *bounds, math.inf)
        phases = []
        for p in range(len(edges) - 1):
            lo, hi = edges[p], edges[p + 1]
            start = max(lo, self.min_step) if p == 0 else lo
            pts = [(s - lo, c.batch_size, c.R, c.workers, v) for c in cs for s, v in zip(c.steps, c.losses)
                   if start <= s < hi and math.isfinite(v) and (p == 0 or s > lo)]
            if len(pts) < 4:
                if p == 0:
                    raise InputError(f"need at least 4 points of the loss curve after step {self.min_step:g}, "
                                     f"got {len(pts)}")
                break  # too few points past this boundary: the curve ends in the previous phase
            coef = _fit_phase(np.array(pts, float), p > 0, self.form)
            phases.append(Phase(start_step=lo, coef=coef))
        self.phases_: tuple[Phase, ...] = tuple(phases)
        self.lr_boundaries_ = tuple(ph.start_step for ph in self.phases_[1:])
        self.coef_ = self.phases_[0].coef
        self.n_points_ = sum(len(c.steps) for c in cs)
        self.worker_counts_ = tuple(sorted({c.workers for c in cs}))
        self._curves_fitted = tuple(cs)
        self._log_q90: tuple[float, bool] | None = None
        res = [v - self.loss_at(s, batch_size_global=c.batch_size, workers=c.workers, staleness=c.R)
               for c in cs for s, v in zip(c.steps, c.losses) if s >= self.min_step and math.isfinite(v)]
        self.residual_std_ = float(np.std(res))
        return self

    def _check(self):
        if not hasattr(self, "coef_"):
            raise NotFittedError("ConvergenceModel used before fit()")

    def _phase(self, steps: float) -> Phase:
        """The phase that holds global step ``steps`` (the first one for steps before it)."""
        found = self.phases_[0]
        for ph in self.phases_:
            if steps >= ph.start_step:
                found = ph
        return found

    def loss_at(self, steps: float, *, batch_size_global: float, workers: int = 1, staleness: float | None = None) -> float:
        """Predicted loss after ``steps`` global steps."""
        self._check()
        R = homogeneous_R(workers) if staleness is None else staleness
        ph = self._phase(steps)
        X = np.array([[steps - ph.start_step], [batch_size_global], [R], [workers]], float)
        return float(_f(X, *ph.coef, form=self.form)[0])

    def steps_to_target(self, target_loss: float, *, batch_size_global: float, workers: int = 1,
                        staleness: float | None = None) -> float:
        """Global steps until the loss reaches ``target_loss`` (``inf`` if no phase's floor is below it).

        ``staleness`` is the convergence coefficient R (0 = synchronous; None = equal async workers).
        """
        self._check()
        R = homogeneous_R(workers) if staleness is None else staleness
        ends = [ph.start_step for ph in self.phases_[1:]] + [math.inf]
        for ph, end in zip(self.phases_, ends):
            c = ph.coef
            a, fl = _terms(R, workers, c.worker_growth, c.floor_staleness, self.form)
            floor = c.floor * float(fl)
            if target_loss <= floor:
                continue
            amp = (c.batch_slope * batch_size_global + c.amplitude) * float(a)
            j = ph.start_step + max(amp / (target_loss - floor) - c.step_offset, 0.0)
            if j < end:
                return j
        return math.inf

    def steps_interval(self, target_loss: float, *, batch_size_global: float, workers: int = 1,
                       staleness: float | None = None) -> tuple[float, float]:
        """A ~90 % interval (low, high) around :meth:`steps_to_target` (``inf`` bounds pass through).

        Its half-width in log steps is :meth:`steps_log_error_q90`: the 90th percentile of the
        model's own errors on worker counts it did not see, not the fit residual (the error of a
        steps prediction comes from carrying the worker dependence to another count, and from
        targets near a plateau, where a small change in loss moves the crossing far).
        """
        steps = self.steps_to_target(target_loss, batch_size_global=batch_size_global, workers=workers,
                                     staleness=staleness)
        if not math.isfinite(steps):
            return steps, steps
        q = self.steps_log_error_q90()
        return steps * math.exp(-q), steps * math.exp(q)

    def steps_log_error_q90(self) -> float:
        """90th percentile of |log(predicted / measured steps)| on held-out worker counts.

        With curves of three or more worker counts: leave each count out, fit on the others and
        predict its steps to targets spread over its loss range (:func:`calibration_targets`);
        computed on first use and kept. With fewer counts (a profile's single curve):
        :data:`DEFAULT_STEPS_LOG_Q90`.
        """
        return self._steps_q90()[0]

    def steps_interval_is_calibrated(self) -> bool:
        """Whether :meth:`steps_log_error_q90` comes from the model's own held-out worker counts
        (else it is :data:`DEFAULT_STEPS_LOG_Q90`)."""
        return self._steps_q90()[1]

    def _steps_q90(self) -> tuple[float, bool]:
        self._check()
        if self._log_q90 is None:
            errs = held_out_log_errors(self._curves_fitted, self.get_params())
            own = len(errs) >= 5
            self._log_q90 = (float(np.quantile(errs, 0.9)) if own else DEFAULT_STEPS_LOG_Q90, own)
        return self._log_q90


DEFAULT_STEPS_LOG_Q90 = 0.78
"""Half-width (log steps) of :meth:`ConvergenceModel.steps_interval` when the curves hold fewer
than three worker counts: the 90th percentile of |log(predicted / measured)| when one curve (the
fewest workers of each shipped set: 1 K80, or 2 K80 / V100 with 1 or 2 PS) predicts the others'
steps to the :func:`calibration_targets` of their curves; a test recomputes it. Wide (x / 2.2),
as it should be: the steps of more workers vary from set to set (8 vs 2 workers to 0.2 error:
x1.6 to x3.5) and one curve cannot tell which."""


def first_crossing(curve: LossCurve, target: float) -> float | None:
    """Measured global steps at which ``curve`` first falls to ``target`` (linear between
    evaluations), or None when it never does."""
    pts = list(zip(curve.steps, curve.losses))
    for (s0, l0), (s1, l1) in zip(pts, pts[1:]):
        if l0 > target >= l1:
            return s0 + (l0 - target) / (l0 - l1) * (s1 - s0)
    return None


def calibration_targets(curve: LossCurve) -> tuple[float, ...]:
    """Targets spread over a curve's reach: 25, 50, 75 and 90 % of the way (in log loss) from its
    second evaluation down to its lowest loss (the last one on its final plateau)."""
    vals = [v for v in curve.losses if math.isfinite(v) and v > 0]
    if len(vals) < 3:
        return ()
    top, low = math.log(vals[1]), math.log(min(vals))
    if top <= low:
        return ()
    return tuple(math.exp(low + f * (top - low)) for f in (0.75, 0.5, 0.25, 0.1))


def held_out_log_errors(curves, params: dict) -> list[float]:
    """|log(predicted / measured)| steps when each worker count of ``curves`` is left out and
    predicted by a model with ``params`` fitted on the others (empty with fewer than 3 counts)."""
    by_n: dict[int, list[LossCurve]] = {}
    for c in curves:
        by_n.setdefault(c.workers, []).append(c)
    if len(by_n) < 3:
        return []
    errs = []
    for n_out, held in sorted(by_n.items()):
        try:
            m = ConvergenceModel(**params).fit([c for n, cs in by_n.items() if n != n_out for c in cs])
        except InputError:
            continue
        for c in held:
            for t in calibration_targets(c):
                meas = first_crossing(c, t)
                if meas is None or meas <= 0:
                    continue
                pred = m.steps_to_target(t, batch_size_global=c.batch_size, workers=c.workers, staleness=c.staleness)
                errs.append(abs(math.log(max(pred, 1.0) / meas)) if math.isfinite(pred) else 5.0)
    return errs


def _fit_phase(pts: np.ndarray, later: bool, form: str) -> PhaseCoefficients:
    """Fit one phase on rows (j, b_w, R, N, loss) -> its coefficients (g1, g2, g3, g4, g5, g6).

    ``later``: the phase follows an LR drop (its default worker dependence is
    :data:`DEFAULT_STALENESS_LATER`, used when its rows hold one worker count).
    """
    # lazy: scipy.optimize only when a curve is fitted (a plain plan does not)
    from scipy.optimize import OptimizeWarning, curve_fit

    X = pts[:, :4].T
    y = pts[:, 4]
    fix_g2 = len(set(X[1])) < 2
    one_n = len(set(X[3])) < 2
    fix_g4 = one_n
    if form == "staleness":
        g4_value, g6_value = DEFAULT_STALENESS_LATER if later else DEFAULT_STALENESS
    else:
        g4_value, g6_value = 1.0, 0.0
    fix_g6 = fix_g4 or form != "staleness"
    jmax = float(X[0].max())

    def model(X, g1, g2, g3, g4, g5, g6):
        return _f(X, g1, 0.0 if fix_g2 else g2, g3, g4_value if fix_g4 else g4, g5,
                  g6_value if fix_g6 else g6, form=form)

    first = y[X[0] <= X[0].min()]
    amp0 = max((float(first.mean()) - y.min()) * (X[0].min() + 0.05 * jmax), 1e-6)
    p0 = [0.05 * jmax, 0.0, amp0, g4_value, max(float(y.min()) * 0.9, 0.0), max(g6_value, 1e-3)]
    lower = [1e-6, -np.inf, -np.inf, 0.0 if form == "staleness" else 1e-6, 0.0, 0.0]
    upper = [10 * jmax, np.inf, np.inf, 1e3, max(float(y.max()), 1e-9), 10.0]
    try:
        with warnings.catch_warnings():  # the parameters' covariance is not used
            warnings.simplefilter("ignore", OptimizeWarning)
            popt, _ = curve_fit(model, X, y, p0=p0, bounds=(lower, upper), maxfev=20000, sigma=np.maximum(y, 1e-9))
    except RuntimeError as exc:
        raise InputError(f"the loss curve could not be fitted: {exc}") from None
    fitted = PhaseCoefficients(*(float(v) for v in popt))
    return fitted._replace(batch_slope=0.0 if fix_g2 else fitted.batch_slope,
                           worker_growth=g4_value if fix_g4 else fitted.worker_growth,
                           floor_staleness=g6_value if fix_g6 else fitted.floor_staleness)


def detect_lr_boundaries(curves: list[LossCurve], *, min_drop: float = 0.25) -> tuple[float, ...]:
    """Global steps where the loss falls abruptly in the curves (a learning-rate step).

    In each curve, a boundary lies between two evaluations when the loss falls by at least
    ``min_drop`` (relative) and by more than three times the relative fall just before (so the
    fast start of training is not one). The intervals found in several curves are intersected
    (the schedule counts global steps, the same in every run).

    A curve with an evaluation inside the drop may not pass that test: a run-averaged evaluation
    mixes runs evaluated just before and just after the boundary (or one run is evaluated while the
    loss is still falling), which splits the fall over two intervals. Each boundary found is
    therefore narrowed by every curve that falls faster there than just before: its largest
    relative fall (at least ``min_drop / 2``) among its intervals that overlap the boundary's says
    on which side of its evaluation the boundary lies (to within the few steps the drop takes).
    The boundary is placed in the middle of what is left.
    """
    found: list[tuple[float, float]] = []
    series = []
    for c in curves:
        pts = [(s, v) for s, v in sorted(zip(c.steps, c.losses)) if math.isfinite(v)]
        # (s1, s2, relative fall from s1 to s2, relative fall over the interval just before)
        falls = [(s1, s2, (v1 - v2) / max(v1, 1e-12), (v0 - v1) / max(v0, 1e-12))
                 for (_, v0), (s1, v1), (s2, v2) in zip(pts, pts[1:], pts[2:])]
        series.append(falls)
        for s1, s2, drop, before in falls[1:]:
            if drop >= min_drop and drop > 3 * max(before, 0.0):
                found.append((s1, s2))
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(found):
        if out and lo < out[-1][1] and hi > out[-1][0]:  # overlaps the previous cluster: intersect
            out[-1] = (max(out[-1][0], lo), min(out[-1][1], hi))
        else:
            out.append((lo, hi))
    narrowed = []
    for lo, hi in out:
        for falls in series:
            near = [(drop, s1, s2) for s1, s2, drop, before in falls
                    if s1 < hi and s2 > lo and drop >= min_drop / 2 and drop > before]
            if not near:
                continue
            _, s1, s2 = max(near)
            if max(lo, s1) < min(hi, s2):
                lo, hi = max(lo, s1), min(hi, s2)
        narrowed.append((lo, hi))
    return tuple((lo + hi) / 2.0 for lo, hi in narrowed)


def load_accuracy_curves(experiment: str | None = "k80_on_demand") -> list[dict]:
    """The shipped transient-dl ResNet-32 accuracy curves as rows (see SOURCE.md).

    ``experiment``: ``"k80_on_demand"`` (1/2/4/8 K80 workers, 1 PS; the default), ``"1ps_vs_2ps"``
    (2-8 K80 or V100 workers, 1 or 2 PS), or ``None`` for all; :func:`curve_sets` splits them.
    """
    text = resources.files("spottrain").joinpath("data", "measurements", "curves", "transient_dl_accuracy.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    return rows if experiment is None else [r for r in rows if r["experiment"] == experiment]


def curve_sets(rows: list[dict]) -> dict[tuple[str, str, int], dict[int, LossCurve]]:
    """Rows split by (experiment, GPU, parameter servers), each set as :func:`curves_from_rows` gives it."""
    groups: dict[tuple[str, str, int], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["experiment"], r["gpu"], int(r["ps"]))].append(r)
    return {k: curves_from_rows(v) for k, v in sorted(groups.items())}


def curves_from_rows(rows: list[dict]) -> dict[int, LossCurve]:
    """Error (1 - accuracy) curves per worker count, the runs (``curve`` column) pooled per
    evaluation as :func:`pool_runs` does."""
    pts: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    bs: dict[int, float] = {}
    for r in rows:
        n = int(r["workers"])
        pts[n].append((float(r["step"]), 1.0 - float(r["accuracy"]), r.get("curve", "")))
        bs[n] = float(r["batch_size"])
    out = {}
    for n, p in pts.items():
        steps, losses = pool_runs(p)
        out[n] = LossCurve(steps=steps, losses=losses, batch_size=bs[n], workers=n)
    return out


def pool_runs(points: list[tuple[float, float, str]]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(steps, values) of one configuration from its evaluations ``(step, value, run label)``.

    Evaluations of different runs within 1 % of the run length of each other are averaged, the
    pooled point at their mean step (not a rounded one: a few steps can straddle a learning-rate
    boundary). A single run is kept as it is.
    """
    pts = sorted(points)
    span = pts[-1][0] - pts[0][0] if pts else 0.0
    tol = 0.01 * span if len({p[2] for p in pts}) > 1 else 0.0
    buckets: list[list[tuple[float, float]]] = []
    for step, value, _ in pts:
        if buckets and step - buckets[-1][0][0] <= tol:
            buckets[-1].append((step, value))
        else:
            buckets.append([(step, value)])
    return (tuple(float(np.mean([p[0] for p in bk])) for bk in buckets),
            tuple(float(np.mean([p[1] for p in bk])) for bk in buckets))


def read_loss_curves(path, *, batch_size: float | None = None) -> list[LossCurve]:
    """Read a loss-curve CSV: one row per evaluation of a past run (see docs/formats.md).

    Columns: ``step`` (global steps) and one value column whose name declares its direction:
    ``loss`` or ``error`` (lower is better), or ``accuracy`` (a fraction; fitted as error =
    1 - accuracy), ``f1`` or ``hit_rate`` (a fraction, or a percentage when a value exceeds 1;
    higher is better, kept as the shortfall from 1 or 100). Optional: ``workers`` (default 1),
    ``batch_size`` (per-worker batch of one update; default ``batch_size``; a synchronous step
    takes ``workers x batch_size`` samples), ``staleness`` (convergence coefficient R; default:
    equal asynchronous workers), ``noise_scale`` (gradient noise scale in samples at that
    evaluation, as Pollux / AdaptDL or McCandlish et al.'s B_simple measure it), ``run`` (a label:
    runs of one configuration are pooled by :func:`pool_runs`). Other columns are ignored.

    A curve whose values move against the declared direction overall (an ``accuracy`` that falls
    from its first evaluations to its last: the column is probably mislabelled) is refused.
    Errors name the file, line and column.
    """

    header, table = read_table(path)
    names = LOWER_IS_BETTER + HIGHER_IS_BETTER
    value_col = next((c for c in names if c in header), None)
    if "step" not in header or value_col is None:
        missing = "step" if "step" not in header else "loss"
        raise InputError(f"expected columns step and one of {', '.join(names)}; got {', '.join(header) or 'none'}",
                         file=str(path), line=1, column=missing)
    has_noise = "noise_scale" in header
    groups: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    noise: dict[tuple, list[tuple[float, float, str]]] = defaultdict(list)
    last_line: dict[tuple, int] = {}
    full = 1.0
    for i, row in table:
        where = (str(path), i)
        step = _cell(row, "step", where, allow_zero=True)
        value = _cell(row, value_col, where, allow_zero=True)
        if value_col == "accuracy" and value > 1.0:
            raise InputError(f"expected an accuracy between 0 and 1, got {value:g}", file=str(path), line=i,
                             column="accuracy")
        if value_col in HIGHER_IS_BETTER and value > 1.0:
            full = 100.0
            if value > 100.0:
                raise InputError(f"expected a fraction or a percentage, got {value:g}", file=str(path), line=i,
                                 column=value_col)
        workers = _cell(row, "workers", where, 1.0, integer=True)
        if "batch_size" in header and (row.get("batch_size") or "").strip():
            b = _cell(row, "batch_size", where)
        elif batch_size is not None:
            b = float(batch_size)
        else:
            raise InputError("expected a per-worker batch size here or a default (--batch-size)", file=str(path),
                             line=i, column="batch_size")
        r = _cell(row, "staleness", where, -1.0, allow_zero=True) if "staleness" in header else -1.0  # -1: none given
        key = (int(workers), float(b), r)
        label = (row.get("run") or "").strip()
        groups[key].append((step, value, label))
        if has_noise:
            noise[key].append((step, _cell(row, "noise_scale", where), label))
        last_line[key] = i
    if not groups:
        raise InputError("the table has no data rows", file=str(path))
    curves = []
    for key, pts in sorted(groups.items()):
        n, b, r = key
        steps, values = pool_runs(pts)
        _check_direction(values, value_col, file=str(path), line=last_line[key])
        losses = values if value_col in LOWER_IS_BETTER else tuple(full - v for v in values)
        curves.append(LossCurve(steps=steps, losses=losses, batch_size=b, workers=n,
                                staleness=None if r < 0 else r,
                                noise_scale=pool_runs(noise[key])[1] if has_noise else None,
                                metric=value_col, metric_full=full))
    return curves


def _check_direction(values: tuple[float, ...], column: str, *, file: str, line: int) -> None:
    """Refuse a curve that moves against the direction its column declares: the median of its
    last third of evaluations is worse than the median of its first third (the whole curve when
    it has fewer than three)."""
    if len(values) < 2:
        return
    k = max(1, len(values) // 3)
    first, last = float(np.median(values[:k])), float(np.median(values[-k:]))
    higher = column in HIGHER_IS_BETTER
    if (last < first) if higher else (last > first):
        trend = "falls" if higher else "rises"
        want = "higher" if higher else "lower"
        raise InputError(f"this curve's {column} {trend} from {first:g} to {last:g} over the run, but {column} is "
                         f"{want}-is-better: is the column mislabelled (loss vs accuracy)?", file=file, line=line,
                         column=column)


def _cell(row: dict, col: str, where: tuple[str, int], default: float | None = None, **rule) -> float:
    """The number in ``row[col]`` (``default`` when empty), checked as the measurement table checks
    its cells (:func:`~spottrain.perf.measurements.parse_number` with ``rule``)."""
    file, line = where
    text = (row.get(col) or "").strip()
    if not text:
        if default is None:
            raise InputError("expected a number, got an empty value", file=file, line=line, column=col)
        return default
    return float(parse_number(text, file=file, line=line, column=col, **rule))
