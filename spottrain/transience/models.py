"""Lifetime (time-to-revocation) models with right censoring, as estimators.

Data: durations t_i > 0 and flags d_i (1 = revoked at t_i, 0 = censored: still alive, job done,
stopped by hand, or hit GCP's 24 h cap). Parametric models maximise the censored likelihood

    log L = sum_i [ d_i log h(t_i) - H(t_i) ],   H = cumulative hazard, S = exp(-H),

and report ``loglik_`` and ``aic_ = 2 k - 2 log L`` (k parameters) for model choice.

- :class:`KaplanMeier`: product-limit estimator S(t) = prod_{t_j <= t} (1 - d_j / n_j) with
  Greenwood's variance and a log(-log) confidence band (Kalbfleisch & Prentice).
- :class:`ExponentialLifetime`: constant hazard lambda; MLE lambda = sum d / sum t.
- :class:`WeibullLifetime`: H(t) = (t / scale)^shape; shape < 1 = infant mortality.
- :class:`BathtubLifetime`: competing risks, an early-failure Weibull (shape <= 1) plus a
  Gompertz wear-out term anchored at the cap A: h(t) = k1/a1 (t/a1)^(k1-1) + (b/A) e^{g(t/A-1)}.
  Captures GCP preemptible VMs: more revocations early in life and a ramp approaching the
  24 h cap (CM-DARE, ICDCS'20). A node stopped at the cap is censored there (not revoked).

All take ``max_lifetime_s``: a hard cap (GCP preemptible: 86 400 s) after which a node is
stopped whatever the fitted law says: S(t) = 0 for t >= cap and samples are clipped to the cap.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from spottrain.errors import InputError, NotFittedError

_TAIL_POINTS = 4096


class LifetimeModel:
    """Base class: estimator contract, cap handling, queries shared by every model."""

    name = "base"
    n_params = 0

    def __init__(self, *, max_lifetime_s: float | None = None) -> None:
        self.max_lifetime_s = max_lifetime_s

    # ------------------------------------------------------------ estimator contract
    def get_params(self, deep: bool = True) -> dict:
        """Constructor arguments (scikit-learn style)."""
        return {"max_lifetime_s": self.max_lifetime_s}

    def set_params(self, **params) -> LifetimeModel:
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def fit(self, durations_s, observed=None) -> LifetimeModel:
        """Fit on durations (s) and revoked flags (default: all revoked); returns ``self``."""
        t, d = _validate(durations_s, observed)
        self._fit(t, d)
        return self._finish(t, d)

    def fitted_params(self) -> dict[str, float]:
        """The law's own fitted parameters (what :meth:`from_fitted` needs to rebuild it)."""
        self._check()
        return {k: float(getattr(self, k)) for k in self._param_names}

    @classmethod
    def from_fitted(cls, params: dict[str, float], durations_s, observed=None, *,
                    max_lifetime_s: float | None = None) -> LifetimeModel:
        """The model as if ``fit(durations_s, observed)`` had found ``params`` (e.g. parameters
        saved by an earlier fit of the same data): sets them, then the data statistics, log-likelihood
        and AIC exactly as :meth:`fit` does, without the optimizer."""
        m = cls(max_lifetime_s=max_lifetime_s)
        missing = [k for k in cls._param_names if k not in params]
        if missing:
            raise InputError(f"{cls.name} parameters missing: {', '.join(missing)}")
        for k in cls._param_names:
            setattr(m, k, float(params[k]))
        t, d = _validate(durations_s, observed)
        return m._finish(t, d)

    _param_names: tuple[str, ...] = ()

    def _finish(self, t: np.ndarray, d: np.ndarray) -> LifetimeModel:
        self.n_ = int(len(t))
        self.n_events_ = int(d.sum())
        self.exposure_s_ = float(t.sum())
        if self.n_params:
            self.loglik_ = float(self.loglik(t, d))
            self.aic_ = 2 * self.n_params - 2 * self.loglik_
        else:
            self.loglik_ = math.nan
            self.aic_ = math.nan
        return self

    def _check(self) -> None:
        if not hasattr(self, "n_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(durations, observed)")

    # ------------------------------------------------------------ per-model maths
    def _fit(self, t: np.ndarray, d: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _cumhaz(self, t: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _hazard(self, t: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ queries
    def cumulative_hazard(self, t) -> np.ndarray:
        """H(t) of the fitted law (ignores the cap)."""
        self._check()
        return self._cumhaz(np.maximum(np.asarray(t, float), 0.0))

    def survival(self, t) -> np.ndarray | float:
        """P(lifetime > t), t in seconds (0 from the cap on)."""
        self._check()
        ta = np.asarray(t, float)
        s = np.exp(-self._cumhaz(np.maximum(ta, 0.0)))
        if self.max_lifetime_s is not None:
            s = np.where(ta >= self.max_lifetime_s, 0.0, s)
        return float(s) if np.ndim(t) == 0 else s

    def cdf(self, t) -> np.ndarray | float:
        """P(revoked or stopped within t seconds)."""
        return 1.0 - self.survival(t)

    def hazard(self, t) -> np.ndarray | float:
        """Instantaneous revocation rate (1/s) of a node of age t seconds."""
        self._check()
        ta = np.maximum(np.asarray(t, float), 1e-9)
        h = self._hazard(ta)
        return float(h) if np.ndim(t) == 0 else h

    def pdf(self, t) -> np.ndarray | float:
        """Density of the fitted law (1/s), before the cap."""
        return self.hazard(t) * self.survival(t)

    def conditional_survival(self, dt_s, age_s: float) -> np.ndarray | float:
        """P(alive at age + dt | alive at age)."""
        s0 = self.survival(age_s)
        return self.survival(np.asarray(dt_s, float) + age_s) / s0 if s0 > 0 else 0.0 * np.asarray(dt_s)

    def _horizon_s(self) -> float:
        if self.max_lifetime_s is not None:
            return float(self.max_lifetime_s)
        # Far enough that S is negligible: solve H(t) = 30 on a log grid.
        grid = np.geomspace(1.0, 1e9, 400)
        h = self._cumhaz(grid)
        idx = np.searchsorted(h, 30.0)
        return float(grid[min(idx, len(grid) - 1)])

    def mean_lifetime_s(self) -> float:
        """E[lifetime] in seconds (integral of S up to the cap or where S ~ 0)."""
        self._check()
        grid = np.linspace(0.0, self._horizon_s(), _TAIL_POINTS)
        s = self.survival(grid)
        return float(np.trapezoid(s, grid))

    def sample(self, n: int, rng: np.random.Generator | int | None = None, hazard_share: float = 1.0) -> np.ndarray:
        """``n`` lifetimes (s) drawn from the fitted law (inverse transform; clipped to the cap).

        ``hazard_share`` s draws from the law whose hazard is s x the fitted one (survival S^s): one
        of two competing causes that split the fitted hazard, the earlier of the two following the
        fitted law exactly (a node's own revocations and its group's outages, :mod:`spottrain.sim.sources`)."""
        self._check()
        if not 0.0 < hazard_share <= 1.0:
            raise ValueError(f"hazard_share must be in (0, 1], got {hazard_share}")
        rng = np.random.default_rng(rng)
        # S(T)^s = U  <=>  H(T) = -log(U) / s
        target = -np.log(rng.uniform(size=int(n))) / hazard_share
        return self._inverse_cumhaz(target)

    def _inverse_cumhaz(self, target: np.ndarray) -> np.ndarray:
        hi = self._horizon_s() if self.max_lifetime_s is None else float(self.max_lifetime_s)
        grid = np.concatenate([[0.0], np.geomspace(1e-3, hi, _TAIL_POINTS)])
        h = np.maximum.accumulate(self._cumhaz(grid))
        out = np.interp(target, h, grid, right=hi)
        if self.max_lifetime_s is None:
            # Beyond the grid: extend with the hazard at the horizon.
            beyond = target > h[-1]
            if beyond.any():
                rate = max(float(self._hazard(np.array([hi]))[0]), 1e-12)
                out[beyond] = hi + (target[beyond] - h[-1]) / rate
        return out

    def loglik(self, durations_s, observed=None) -> float:
        """Censored log-likelihood of data under the fitted law (held-out scoring)."""
        self._check()
        t, d = _validate(durations_s, observed)
        h = np.maximum(self._hazard(t[d]), 1e-300)
        return float(np.log(h).sum() - self._cumhaz(t).sum())

    def __repr__(self) -> str:
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")
                  and isinstance(v, (int, float))}
        inner = ", ".join(f"{k}={v:.4g}" for k, v in fitted.items())
        return f"{type(self).__name__}({inner})"


def _validate(durations_s, observed) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(durations_s, float).ravel()
    if t.size == 0:
        raise InputError("no lifetimes to fit")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise InputError("lifetimes must be finite and >= 0 seconds")
    d = np.ones(t.shape, bool) if observed is None else np.asarray(observed, bool).ravel()
    if d.shape != t.shape:
        raise InputError(f"{t.size} durations but {d.size} observed flags")
    return np.maximum(t, 1.0), d


# ====================================================================== Kaplan-Meier
class KaplanMeier(LifetimeModel):
    """Product-limit estimator with Greenwood confidence band (non-parametric: no AIC)."""

    name = "kaplan-meier"
    n_params = 0

    def __init__(self, *, max_lifetime_s: float | None = None, alpha: float = 0.05) -> None:
        self.max_lifetime_s = max_lifetime_s
        self.alpha = alpha

    def get_params(self, deep: bool = True) -> dict:
        return {"max_lifetime_s": self.max_lifetime_s, "alpha": self.alpha}

    def _fit(self, t: np.ndarray, d: np.ndarray) -> None:
        order = np.argsort(t, kind="stable")
        t, d = t[order], d[order]
        times = np.unique(t[d])
        at_risk = len(t) - np.searchsorted(t, times, side="left")
        deaths = np.array([np.count_nonzero(d & (t == u)) for u in times], float)
        s = np.cumprod(1.0 - deaths / at_risk)
        with np.errstate(divide="ignore", invalid="ignore"):
            gw = np.cumsum(deaths / (at_risk * (at_risk - deaths)))
        self.event_times_s_ = times
        self.survival_at_events_ = s
        self.at_risk_ = at_risk
        self.greenwood_ = gw
        self.last_time_s_ = float(t.max())
        # Beyond the data, extend with the average rate so that samples stay finite.
        self.tail_rate_ = max(d.sum(), 1) / t.sum()

    def _km(self, t: np.ndarray) -> np.ndarray:
        if len(self.event_times_s_) == 0:  # no revocation observed
            return np.ones(np.shape(t))
        idx = np.searchsorted(self.event_times_s_, t, side="right") - 1
        return np.where(idx >= 0, self.survival_at_events_[np.maximum(idx, 0)], 1.0)

    def _cumhaz(self, t: np.ndarray) -> np.ndarray:
        s = self._km(t)
        s_last = self._km(np.array([self.last_time_s_]))[0]
        beyond = t > self.last_time_s_
        s = np.where(beyond, s_last * np.exp(-self.tail_rate_ * (t - self.last_time_s_)), s)
        return -np.log(np.maximum(s, 1e-300))

    def _hazard(self, t: np.ndarray) -> np.ndarray:
        # Piecewise-constant hazard between event times (Nelson-Aalen increments / gap).
        times = np.concatenate([[0.0], self.event_times_s_])
        if len(times) < 2:
            return np.full(t.shape, self.tail_rate_)
        inc = np.diff(self._cumhaz(times))
        width = np.diff(times)
        rate = inc / np.maximum(width, 1.0)
        idx = np.searchsorted(times, t, side="right") - 1
        return np.where(idx < len(rate), rate[np.minimum(idx, len(rate) - 1)], self.tail_rate_)

    def confidence_band(self, t, alpha: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise (1 - alpha) band of S(t): Greenwood variance on the log(-log) scale."""
        self._check()
        alpha = self.alpha if alpha is None else alpha
        t = np.asarray(t, float)
        z = NormalDist().inv_cdf(1 - alpha / 2)
        s = self._km(t)
        idx = np.searchsorted(self.event_times_s_, t, side="right") - 1
        gw = (np.where(idx >= 0, self.greenwood_[np.maximum(idx, 0)], 0.0)
              if len(self.greenwood_) else np.zeros(np.shape(t)))
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(s)
            se = np.sqrt(gw) / np.abs(logs)
            lo = s ** np.exp(z * se)
            hi = s ** np.exp(-z * se)
        ok = (s > 0) & (s < 1) & np.isfinite(se)
        lo = np.where(ok, lo, s)
        hi = np.where(ok, hi, s)
        if self.max_lifetime_s is not None:
            cap = t >= self.max_lifetime_s
            lo, hi = np.where(cap, 0.0, lo), np.where(cap, 0.0, hi)
        return lo, hi

    def loglik(self, durations_s, observed=None) -> float:
        """Not defined for a step function (no density): NaN."""
        self._check()
        return math.nan


# ====================================================================== Exponential
class ExponentialLifetime(LifetimeModel):
    """Constant hazard (memoryless): the baseline every other model must beat."""

    name = "exponential"
    n_params = 1
    _param_names = ("rate_per_s_",)

    def _fit(self, t: np.ndarray, d: np.ndarray) -> None:
        # With no revocation at all, half an event keeps the rate finite and honest.
        self.rate_per_s_ = max(float(d.sum()), 0.5) / float(t.sum())

    def _cumhaz(self, t: np.ndarray) -> np.ndarray:
        return self.rate_per_s_ * t

    def _hazard(self, t: np.ndarray) -> np.ndarray:
        return np.full(np.shape(t), self.rate_per_s_)

    def survival_band(self, t, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
        """Exact (1 - alpha) band from the chi-square interval of the rate."""
        self._check()
        t = np.asarray(t, float)
        from scipy import special  # lazy: planning reads fitted laws, never their bands

        k = max(self.n_events_, 0)
        # chi-square quantiles: chi2.ppf(q, df) = 2 * gammaincinv(df / 2, q) (scipy.stats costs ~0.7 s to import)
        lo_rate = 2 * special.gammaincinv(k, alpha / 2) / (2 * self.exposure_s_) if k else 0.0
        hi_rate = 2 * special.gammaincinv(k + 1, 1 - alpha / 2) / (2 * self.exposure_s_)
        lo, hi = np.exp(-hi_rate * t), np.exp(-lo_rate * t)
        if self.max_lifetime_s is not None:
            cap = t >= self.max_lifetime_s
            lo, hi = np.where(cap, 0.0, lo), np.where(cap, 0.0, hi)
        return lo, hi


# ====================================================================== Weibull
class WeibullLifetime(LifetimeModel):
    """Weibull law H(t) = (t / scale)^shape, censored MLE (profile likelihood in the shape)."""

    name = "weibull"
    n_params = 2
    _param_names = ("shape_", "scale_s_")

    def _fit(self, t: np.ndarray, d: np.ndarray) -> None:
        k_events = max(float(d.sum()), 0.5)
        ref = float(np.median(t))
        x = t / ref
        logx_obs = np.log(x[d]).sum()

        def negll(log_shape: float) -> float:
            k = math.exp(log_shape)
            lam_k = (x**k).sum() / k_events  # profiled scale^shape
            return -(k_events * math.log(k) - k_events * math.log(lam_k) + (k - 1) * logx_obs - k_events)

        from scipy import optimize  # lazy: shipped fits (transience.select) need no optimizer

        res = optimize.minimize_scalar(negll, bounds=(-4.0, 4.0), method="bounded",
                                       options={"xatol": 1e-6})
        k = math.exp(res.x)
        self.shape_ = k
        self.scale_s_ = ref * ((x**k).sum() / k_events) ** (1.0 / k)

    def _cumhaz(self, t: np.ndarray) -> np.ndarray:
        return (t / self.scale_s_) ** self.shape_

    def _hazard(self, t: np.ndarray) -> np.ndarray:
        return self.shape_ / self.scale_s_ * (t / self.scale_s_) ** (self.shape_ - 1)


# ====================================================================== Bathtub
class BathtubLifetime(LifetimeModel):
    """Early-failure Weibull (shape k1 <= 1) plus a Gompertz wear-out ramp anchored at the cap.

    h(t) = k1/a1 (t/a1)^(k1-1) + b exp(g (t/A - 1)) / A,  A = cap (or 1.5 x the longest lifetime
    seen when there is no cap), so ``b`` is the wear-out hazard (per A) reached at the cap and
    ``g`` how steeply it rises approaching it. g -> 0 gives a constant extra hazard, so the
    model nests the Weibull law and wins on AIC only when the data show a ramp.
    """

    name = "bathtub"
    n_params = 4
    _param_names = ("early_shape_", "early_scale_s_", "wearout_anchor_s_", "wearout_hazard_at_anchor_per_s_",
                    "wearout_steepness_")

    def _fit(self, t: np.ndarray, d: np.ndarray) -> None:
        # Without a cap the anchor sits beyond the data: anchoring at the longest lifetime would
        # let the ramp put a spike on that one observation and "win" on noise.
        anchor = (float(self.max_lifetime_s) if self.max_lifetime_s is not None
                  else 1.5 * float(t.max()))
        x = t / anchor
        logx = np.log(x)
        lx_obs = logx[d]
        x_obs = x[d]

        def unpack(p: np.ndarray) -> tuple[float, float, float, float]:
            k1 = 0.05 + 0.95 / (1.0 + math.exp(-p[0]))  # (0.05, 1)
            g = 1e-3 + math.exp(min(p[3], 6.0))  # (0.001, ~400): ramp steepness
            return k1, p[1], p[2], g  # p[1] = log early scale, p[2] = log b (units of anchor)

        def negll(p: np.ndarray) -> float:
            k1, la1, lb, g = unpack(p)
            if abs(la1) > 40 or abs(lb) > 40:
                return 1e300
            z1 = k1 * (logx - la1)
            b = math.exp(lb)
            with np.errstate(over="ignore", invalid="ignore"):
                H = np.exp(z1) + b / g * (np.exp(np.minimum(g * (x - 1.0), 700.0)) - math.exp(-g))
                h_obs = k1 * np.exp(z1[d] - lx_obs) + b * np.exp(g * (x_obs - 1.0))
            val = -(np.log(np.maximum(h_obs, 1e-300)).sum() - H.sum())
            return val if np.isfinite(val) else 1e300

        from scipy import optimize  # lazy, as in WeibullLifetime._fit

        w = WeibullLifetime().fit(t, d)
        la_w = math.log(w.scale_s_ / anchor)
        k_w = math.log(max(w.shape_ - 0.05, 1e-3) / max(1.0 - w.shape_, 1e-3))
        # The steepness is poorly conditioned jointly with b: profile it on a log grid, then
        # polish all four parameters from the best grid point.
        best = None
        for lg in np.log(np.geomspace(0.05, 200.0, 13)):
            for lb in (-6.0, -2.0, 0.5):
                res = optimize.minimize(lambda q, lg=lg: negll(np.array([q[0], q[1], q[2], lg])),
                                        np.array([k_w, la_w, lb]), method="Nelder-Mead",
                                        options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 1500})
                if best is None or res.fun < best[0]:
                    best = (res.fun, np.array([*res.x, lg]))
        assert best is not None
        res = optimize.minimize(negll, best[1], method="Nelder-Mead",
                                options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 3000})
        p_best = res.x if res.fun < best[0] else best[1]
        k1, la1, lb, g = unpack(p_best)
        self.early_shape_ = k1
        self.early_scale_s_ = anchor * math.exp(la1)
        self.wearout_anchor_s_ = anchor
        self.wearout_hazard_at_anchor_per_s_ = math.exp(lb) / anchor
        self.wearout_steepness_ = g

    def _cumhaz(self, t: np.ndarray) -> np.ndarray:
        A, g = self.wearout_anchor_s_, self.wearout_steepness_
        b = self.wearout_hazard_at_anchor_per_s_ * A
        with np.errstate(over="ignore", invalid="ignore"):
            ramp = b / g * (np.exp(np.minimum(g * (t / A - 1.0), 700.0)) - math.exp(-g))
            return (t / self.early_scale_s_) ** self.early_shape_ + np.minimum(ramp, 1e300)

    def _hazard(self, t: np.ndarray) -> np.ndarray:
        a1, k1 = self.early_scale_s_, self.early_shape_
        A, g = self.wearout_anchor_s_, self.wearout_steepness_
        with np.errstate(over="ignore", invalid="ignore"):
            ramp = self.wearout_hazard_at_anchor_per_s_ * np.exp(np.minimum(g * (t / A - 1.0), 700.0))
            return k1 / a1 * (t / a1) ** (k1 - 1) + np.minimum(ramp, 1e300)


MODELS: dict[str, type[LifetimeModel]] = {
    m.name: m for m in (KaplanMeier, ExponentialLifetime, WeibullLifetime, BathtubLifetime)
}
"""Every lifetime model by name."""
