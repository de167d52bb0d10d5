"""Revocations of an n-node cluster over a job: renewal theory under the fitted lifetime law.

Each of the n node slots is a renewal process: a node lives X = L + D (lifetime L from the
fitted law, then a replacement delay D before the next node starts its life). The expected
number of revocations of one slot in [0, T] is the renewal function

    M(T) = F(T) + integral_0^T M(T - s) dF(s),          F = law of X,

solved on a grid (discrete convolution), so E[revocations] = n M(T). Only for an exponential
law without delay is this T / MTBF; infant mortality (Weibull shape < 1) gives more early
revocations than T / MTBF, GCP's 24 h cap forces one every 24 h at least.

Without replacement (``replace=False``) a node is lost at most once: n F(T).

The cluster's time to next failure, right after one node was replaced, has survival
S(t) S_e(t)^(n-1): the new node is fresh, the others are of equilibrium age with residual-life
survival S_e(t) = integral_t^inf S(u) du / mu (exact for n = 1 and for exponential laws).
"""

from __future__ import annotations

import numpy as np

_GRID = 2000
_cache: dict[tuple, tuple[object, float]] = {}


def renewal_curve(model, duration_s: float, *, replacement_delay_s: float = 0.0,
                  grid: int = _GRID) -> tuple[np.ndarray, np.ndarray]:
    """(t, M(t)) on a uniform grid of ``grid`` steps over [0, ``duration_s``]: the renewal function
    of one node slot at every grid point, from one solve."""
    T = float(duration_s)
    dt = T / grid
    t = np.arange(grid + 1) * dt
    F = _delayed_cdf(model, t, replacement_delay_s)
    return t, _solve(F, F)


def _delayed_cdf(model, t: np.ndarray, delay_s: float) -> np.ndarray:
    """The CDF of a delay of ``delay_s`` then a life of ``model`` on the grid ``t``."""
    return np.where(t < delay_s, 0.0, np.asarray(model.cdf(np.maximum(t - delay_s, 0.0)), float))


def _solve(first: np.ndarray, law: np.ndarray) -> np.ndarray:
    """R on the grid of ``first`` for R = first + R * law (``first``, ``law``: CDFs on a uniform
    grid): the expected count by each grid point of a renewal process whose first event follows
    ``first`` and each later gap ``law``."""
    f = np.diff(law)  # f[j-1] = P(X in ((j-1) dt, j dt])
    n = len(first)
    R = np.zeros(n)
    # Trapezoid rule on the convolution: R_k = first_k + sum_j f_j (R_{k-j} + R_{k-j+1}) / 2,
    # solved for R_k (it appears on both sides through j = 1); error O(dt^2). Gathered by lag
    # d = k - i, R_i carries (f_{d-1} + f_d) / 2 (R_0 = 0 carries nothing): one dot product a step.
    lag = np.zeros(n)
    lag[1:n - 1] = 0.5 * (f[:n - 2] + f[1:n - 1])
    head = 1.0 - 0.5 * f[0]
    start = np.asarray(first, float).tolist()
    for k in range(1, n):
        R[k] = (start[k] + lag[1:k] @ R[k - 1:0:-1]) / head
    return R


def revocation_curve(model, duration_s: float, delays: tuple[tuple[float, float], ...],
                     grid: int = _GRID) -> tuple[np.ndarray, np.ndarray]:
    """(t, R(t)) on a uniform grid over [0, ``duration_s``]: expected revocations of one node slot
    by t, the first node up at the start, each later life starting a delay after the revocation
    before it, the delay ``d`` with probability ``p`` for ``(p, d)`` of ``delays`` (a delayed
    renewal process: R = F + R * G, G the law of delay + life). One delay (the mean of a mixture)
    holds a young node's next life back as long after an outage, whose group comes back at once
    in its training time, as after a single revocation: short runs miss the young lives' revocations."""
    T = float(duration_s)
    dt = T / grid
    t = np.arange(grid + 1) * dt
    G = sum(p * _delayed_cdf(model, t, d) for p, d in delays)
    return t, _solve(np.asarray(model.cdf(t), float), G)


def renewal_function(model, duration_s: float, *, replacement_delay_s: float = 0.0,
                     grid: int = _GRID) -> float:
    """M(T): expected renewals of one node slot in ``duration_s`` seconds."""
    key = (id(model), round(float(duration_s), 3), round(float(replacement_delay_s), 3), grid)
    hit = _cache.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if float(duration_s) <= 0:
        return 0.0
    value = float(renewal_curve(model, duration_s, replacement_delay_s=replacement_delay_s, grid=grid)[1][-1])
    if len(_cache) > 4096:
        _cache.clear()
    _cache[key] = (model, value)
    return value


def expected_revocations(model, nodes: int, duration_s: float, *, replace: bool = True,
                         replacement_delay_s: float = 0.0) -> float:
    """Expected revocations of an ``nodes``-node cluster over a job of ``duration_s`` seconds.

    With ``replace`` (default) a revoked node is replaced after ``replacement_delay_s`` and the
    replacement can be revoked too (renewal process under the fitted law); without, each node
    is lost at most once. Revocations include GCP's forced stop at 24 h.

    >>> from spottrain.transience import ExponentialLifetime
    >>> m = ExponentialLifetime().fit([3600.0] * 10)
    >>> round(expected_revocations(m, 4, 7200.0), 1)
    8.0
    """
    if nodes <= 0 or duration_s <= 0:
        return 0.0
    if not replace:
        return float(nodes * model.cdf(duration_s))
    inner = getattr(model, "model", model)
    rate = getattr(inner, "rate_per_s_", None)
    if rate is not None and inner.max_lifetime_s is None and replacement_delay_s == 0:
        return float(nodes * rate * duration_s)  # Poisson: exact
    return float(nodes * renewal_function(model, duration_s, replacement_delay_s=replacement_delay_s))


def equilibrium_survival(model, t, *, grid: int = 4096) -> np.ndarray:
    """S_e(t) = P(residual life > t) of a node of equilibrium (random) age."""
    horizon = model.max_lifetime_s or _survival_horizon(model)
    u = np.linspace(0.0, horizon, grid)
    s = np.asarray(model.survival(u), float)
    tail = np.concatenate([[0.0], np.cumsum((s[1:] + s[:-1]) / 2 * np.diff(u))])
    mu = tail[-1]
    remaining = (mu - tail) / mu
    return np.interp(np.asarray(t, float), u, remaining, right=0.0)


def _survival_horizon(model) -> float:
    grid = np.geomspace(1.0, 1e9, 600)
    s = np.asarray(model.survival(grid), float)
    idx = int(np.searchsorted(-s, -1e-9))
    return float(grid[min(idx, len(grid) - 1)])


def cluster_survival(model, nodes: int, t, *, replace: str = "node") -> np.ndarray:
    """P(no node of the cluster fails within t) after a restart.

    ``replace="node"``: only the failed node was replaced (others of equilibrium age);
    ``replace="cluster"``: the whole cluster was re-provisioned (all nodes fresh).
    """
    s = np.asarray(model.survival(t), float)
    if nodes <= 1:
        return s
    if replace == "cluster":
        return s**nodes
    return s * equilibrium_survival(model, t) ** (nodes - 1)
