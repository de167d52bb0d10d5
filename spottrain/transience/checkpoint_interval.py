"""What transience costs a job: lost work, restarts, checkpoint interval, slowdown.

Periodic checkpointing: compute for tau seconds, then write a checkpoint for C seconds. A
failure (any node of the cluster revoked) loses the work since the last completed checkpoint
and stalls the job for the restart time R (detection + replacement + start-up + restore).

**Young/Daly**: tau ~ sqrt(2 C M) for an exponential law with mean time between failures M.

**Exact optimum under the fitted law** (renewal-reward; a cycle runs from one restart to the
next): with S_c the survival of the cluster's time to failure after a restart, the number of
checkpoints completed before the failure is K = sum_k 1[L_c > k (tau + C)], so

    E[K] = sum_{k>=1} S_c(k (tau + C)),
    progress per unit time = tau E[K] / (E[L_c] + R),
    overhead(tau) = (E[L_c] + R) / (tau E[K]) - 1,

which we minimise numerically over tau (log grid, then a golden-section search in log tau
between the best grid point's neighbours; no scipy.optimize on the planning path). For an exponential law this
reduces to Young/Daly to first order. S_c comes from
:func:`spottrain.transience.renewal.cluster_survival`.

**Distribution of the slowdown**: :func:`transience_cost` replays the job by Monte Carlo
(numpy, vectorised over runs, seeded): every node slot draws lifetimes from the fitted law and
is replaced after a restart; the job advances in checkpointed segments.
"""

from __future__ import annotations

import math

import numpy as np

from spottrain.errors import InputError
from spottrain.transience.renewal import cluster_survival


def young_daly_interval_s(checkpoint_cost_s, mtbf_s):
    """Young's first-order optimum sqrt(2 C M) (Young 1974, Daly 2006).

    Numbers give a float; numpy arrays give an array, element by element (the planner sizes many
    clusters at once; an infinite MTBF, no revocations, gives an infinite interval).
    """
    c, m = np.asarray(checkpoint_cost_s, float), np.asarray(mtbf_s, float)
    if np.any(c <= 0) or np.any(m <= 0):
        raise InputError("checkpoint cost and MTBF must be positive")
    interval = np.sqrt(2.0 * c * m)
    return float(interval) if interval.ndim == 0 else interval


def daly_interval_s(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (Daly 2006, eq. 37); = M when C >= 2 M."""
    c, m = checkpoint_cost_s, mtbf_s
    if c >= 2 * m:
        return m
    r = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(r) / 3 + r / 9) - c


def _cycle_terms(model, nodes: int, replace: str):
    horizon = model.max_lifetime_s or _horizon(model)
    grid = np.linspace(0.0, horizon, 8192)
    sc = cluster_survival(model, nodes, grid, replace=replace)
    cum = np.concatenate(([0.0], np.cumsum((sc[1:] + sc[:-1]) * np.diff(grid) / 2.0)))
    return grid, sc, cum


def _horizon(model) -> float:
    grid = np.geomspace(1.0, 1e9, 600)
    s = np.asarray(model.survival(grid), float)
    idx = int(np.searchsorted(-s, -1e-6))
    return float(grid[min(idx, len(grid) - 1)])


def expected_overhead(interval_s: float, checkpoint_cost_s: float, model, nodes: int = 1, *,
                      restart_s: float = 0.0, replace: str = "node", _terms=None) -> float:
    """Expected wall time lost per unit of useful work with a periodic interval (see module)."""
    grid, sc, cum = _terms or _cycle_terms(model, nodes, replace)
    mean_life = float(cum[-1])
    work = float(interval_s) * _expected_checkpoints(interval_s + checkpoint_cost_s, grid, sc, cum)
    if work <= 0:
        return math.inf
    return (mean_life + float(restart_s)) / work - 1.0  # Python floats: inf, not a numpy warning


def _expected_checkpoints(seg: float, grid: np.ndarray, sc: np.ndarray, cum: np.ndarray) -> float:
    """E[K] = sum_{k>=1} S_c(k seg) for the piecewise-linear S_c on the uniform ``grid``
    (``cum``: its integral from 0 to each grid point).

    Summed term by term while a segment spans at least a grid cell. Below that (many terms per
    cell: millions for a short interval on a long-tailed law) the terms within the first
    ``_HEAD`` cells, where S_c bends most, are summed directly and the rest by Euler-Maclaurin,
    sum_{k=a..n} f(k h) = (1/h) int_{ah}^{nh} f + (f(ah) + f(nh)) / 2 + h / 12 (f'(nh) - f'(ah)).
    """
    n = int(grid[-1] / seg)
    if n <= len(grid):
        return float(np.interp(np.arange(1, n + 1) * seg, grid, sc, right=0.0).sum())
    dt = grid[1] - grid[0]
    a = int(_HEAD * dt / seg) + 1
    head = float(np.interp(np.arange(1, a) * seg, grid, sc).sum())
    x = np.array([a * seg, n * seg])
    f = np.interp(x, grid, sc)
    integral = float(np.diff(np.interp(x, grid, cum))[0])
    cell = np.minimum((x / dt).astype(int), len(grid) - 2)
    slope = (sc[cell + 1] - sc[cell]) / dt
    return head + integral / seg + float(f.sum()) / 2.0 + seg / 12.0 * float(slope[1] - slope[0])


_HEAD = 64


def optimal_checkpoint_interval_s(checkpoint_cost_s: float, lifetime_model, nodes: int = 1, *,
                                  restart_s: float = 0.0, replace: str = "node") -> float:
    """Checkpoint interval (s of compute between checkpoints) minimising expected overhead.

    Exact under the fitted (possibly non-exponential, capped) lifetime law; see the module.

    >>> from spottrain.transience import ExponentialLifetime
    >>> m = ExponentialLifetime().fit([36000.0] * 50)
    >>> round(optimal_checkpoint_interval_s(60.0, m) / young_daly_interval_s(60.0, 36000.0), 1)
    1.0
    """
    if checkpoint_cost_s <= 0:
        raise InputError(f"checkpoint cost must be positive, got {checkpoint_cost_s!r}")
    terms = _cycle_terms(lifetime_model, nodes, replace)
    top = terms[0][-1]
    cands = np.geomspace(max(checkpoint_cost_s / 20, 1.0), max(top, 10.0), 120)
    vals = np.array([expected_overhead(c, checkpoint_cost_s, lifetime_model, nodes,
                                       restart_s=restart_s, replace=replace, _terms=terms)
                     for c in cands])
    i = int(np.argmin(vals))
    lo, hi = cands[max(i - 1, 0)], cands[min(i + 1, len(cands) - 1)]
    x, fx = _golden_section(
        lambda x: expected_overhead(math.exp(x), checkpoint_cost_s, lifetime_model, nodes,
                                    restart_s=restart_s, replace=replace, _terms=terms),
        math.log(lo), math.log(hi), xtol=1e-4)
    best = math.exp(x) if fx <= vals[i] else float(cands[i])
    return float(best)


_INV_PHI = (math.sqrt(5.0) - 1.0) / 2.0


def _golden_section(f, a: float, b: float, *, xtol: float) -> tuple[float, float]:
    """Minimum of ``f`` on ``[a, b]`` by golden-section search, to ``xtol`` in x (f unimodal there:
    the bracket is the best grid point's two neighbours). Returns (x, f(x))."""
    c, d = b - _INV_PHI * (b - a), a + _INV_PHI * (b - a)
    fc, fd = f(c), f(d)
    while b - a > xtol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _INV_PHI * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _INV_PHI * (b - a)
            fd = f(d)
    return (c, fc) if fc <= fd else (d, fd)


def transience_cost(duration_s: float, nodes: int, lifetime_model, checkpoint_cost_s: float,
                    restart_s: float, interval_s: float | None = None, *, runs: int = 2000,
                    seed: int = 0, restart_sampler=None,
                    quantiles: tuple[float, ...] = (0.05, 0.5, 0.95)) -> dict:
    """Monte Carlo cost of revocations for a job of ``duration_s`` seconds of failure-free work.

    Returns a dict: ``interval_s``, ``expected_revocations``, ``expected_lost_work_s``,
    ``expected_restart_s``, ``expected_checkpoint_s``, ``expected_wall_s``,
    ``expected_slowdown`` (wall / failure-free time, >= 1) and ``quantiles`` of the slowdown
    ({"p5": ..., "p50": ..., "p95": ...}). ``restart_sampler`` (e.g. a
    :class:`~spottrain.transience.availability.ReplacementDelay`) adds a random replacement
    delay to the fixed ``restart_s`` (detection + restore).
    """
    if duration_s <= 0 or nodes < 1:
        raise InputError("job duration must be positive and the cluster must have >= 1 node")
    if interval_s is None:
        interval_s = optimal_checkpoint_interval_s(checkpoint_cost_s, lifetime_model, nodes,
                                                   restart_s=restart_s)
    tau, C = float(interval_s), float(checkpoint_cost_s)
    rng = np.random.default_rng(seed)
    R = runs
    fail = lifetime_model.sample(R * nodes, rng).reshape(R, nodes)  # absolute failure times
    t = np.zeros(R)  # time the current segment chain started (cluster up, work saved)
    saved = np.zeros(R)
    lost = np.zeros(R)
    restarts = np.zeros(R)
    n_rev = np.zeros(R)
    wall = np.full(R, np.nan)
    active = np.ones(R, bool)
    rows = np.arange(R)
    for _ in range(1_000_000):
        if not active.any():
            break
        j = np.argmin(fail, axis=1)
        f = fail[rows, j]
        remaining = duration_s - saved
        n_ck = np.maximum(np.ceil(remaining / tau) - 1, 0)
        need = remaining + C * n_ck
        done = active & (f >= t + need)
        wall[done] = (t + need)[done]
        active &= ~done
        hit = active
        if not hit.any():
            break
        e = np.maximum(f - t, 0.0)
        k = np.floor(e / (tau + C))
        k = np.minimum(k, n_ck)
        saved_now = np.where(hit, k * tau, 0.0)
        lost_now = np.where(hit, np.minimum(e - k * (tau + C), tau), 0.0)
        delay = np.full(R, float(restart_s))
        if restart_sampler is not None:
            delay += restart_sampler.sample(R, rng)
        saved += saved_now
        lost += np.maximum(lost_now, 0.0)
        # A node lost during an ongoing restart delays the resume until its replacement is up.
        resume = np.maximum(t, f + delay)
        restarts += np.where(hit, resume - np.maximum(t, f), 0.0)
        n_rev += hit
        t = np.where(hit, resume, t)
        new_life = lifetime_model.sample(R, rng)
        fail[rows[hit], j[hit]] = (np.maximum(f, 0.0) + delay + new_life)[hit]
    slow = wall / duration_s
    qs = np.quantile(slow, quantiles)
    return {
        "interval_s": tau,
        "runs": runs,
        "expected_revocations": float(n_rev.mean()),
        "expected_lost_work_s": float(lost.mean()),
        "expected_restart_s": float(restarts.mean()),
        "expected_checkpoint_s": float(np.mean(wall - duration_s - lost - restarts)),
        "expected_wall_s": float(wall.mean()),
        "expected_slowdown": float(slow.mean()),
        "quantiles": {f"p{round(q * 100):g}": float(v) for q, v in zip(quantiles, qs)},
    }
