"""Lifetime models: recovery of known laws, censoring, Kaplan-Meier, renewal, checkpointing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spottrain.errors import InputError, NotFittedError
from spottrain.transience import (
    BathtubLifetime,
    ExponentialLifetime,
    KaplanMeier,
    WeibullLifetime,
    daly_interval_s,
    expected_revocations,
    fit_models,
    optimal_checkpoint_interval_s,
    transience_cost,
    young_daly_interval_s,
)


def _censored(sample: np.ndarray, cutoff: float) -> tuple[np.ndarray, np.ndarray]:
    return np.minimum(sample, cutoff), sample <= cutoff


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError):
        WeibullLifetime().survival(10.0)
    assert WeibullLifetime(max_lifetime_s=5.0).get_params() == {"max_lifetime_s": 5.0}


def test_bad_input_raises():
    with pytest.raises(InputError):
        ExponentialLifetime().fit([])
    with pytest.raises(InputError):
        ExponentialLifetime().fit([1.0, -2.0])
    with pytest.raises(InputError):
        ExponentialLifetime().fit([1.0, 2.0], [True])


def test_exponential_mle_with_censoring():
    rng = np.random.default_rng(1)
    t, d = _censored(rng.exponential(5000.0, 4000), 8000.0)
    m = ExponentialLifetime().fit(t, d)
    assert m.mean_lifetime_s() == pytest.approx(5000.0, rel=0.06)
    # Ignoring censoring (treating every end as a revocation) must underestimate the mean.
    naive = ExponentialLifetime().fit(t)
    assert naive.mean_lifetime_s() < 0.85 * m.mean_lifetime_s()


def test_weibull_recovers_shape_and_scale_under_censoring():
    rng = np.random.default_rng(2)
    life = 7200.0 * rng.weibull(0.6, 5000)
    t, d = _censored(life, 20000.0)
    m = WeibullLifetime().fit(t, d)
    assert m.shape_ == pytest.approx(0.6, rel=0.06)
    assert m.scale_s_ == pytest.approx(7200.0, rel=0.1)
    # Infant mortality: the hazard falls with age.
    assert m.hazard(600.0) > m.hazard(6000.0)


def test_bathtub_beats_weibull_on_bathtub_data_and_has_bathtub_hazard():
    rng = np.random.default_rng(3)
    n = 3000
    early = 20000.0 * rng.weibull(0.5, n)
    late = 60000.0 * rng.weibull(6.0, n)
    life = np.minimum(early, late)  # competing risks
    t, d = _censored(life, 86400.0)
    fits = fit_models(t, d, max_lifetime_s=86400.0)
    assert fits["bathtub"].aic_ < fits["weibull"].aic_ - 10
    b = fits["bathtub"]
    h = b.hazard(np.array([300.0, 20000.0, 70000.0]))
    assert h[0] > h[1] < h[2]


def test_cap_makes_survival_zero_and_samples_bounded():
    m = ExponentialLifetime(max_lifetime_s=86400.0).fit([50000.0] * 20)
    assert m.survival(86399.0) > 0
    assert m.survival(86400.0) == 0.0
    s = m.sample(5000, np.random.default_rng(0))
    assert s.max() <= 86400.0 and (s == 86400.0).mean() == pytest.approx(math.exp(-86400 / 50000), abs=0.03)


def test_sample_matches_survival():
    rng = np.random.default_rng(4)
    m = WeibullLifetime().fit(3000.0 * rng.weibull(1.7, 2000))
    s = m.sample(20000, np.random.default_rng(5))
    for q in (1000.0, 3000.0, 6000.0):
        assert (s > q).mean() == pytest.approx(m.survival(q), abs=0.015)


def test_kaplan_meier_hand_example_and_greenwood():
    # Times 1,2(censored),3,4 -> S(1)=3/4, S(3)=3/4*1/2, S(4)=0.
    km = KaplanMeier().fit([1.0, 2.0, 3.0, 4.0], [True, False, True, True])
    assert km.survival(1.5) == pytest.approx(0.75)
    assert km.survival(3.5) == pytest.approx(0.375)
    # Greenwood variance at t=1: S^2 * 1/(4*3)
    lo, hi = km.confidence_band(np.array([1.5]))
    assert lo[0] < 0.75 < hi[0]
    assert math.isnan(km.aic_)


def test_kaplan_meier_band_covers_truth():
    rng = np.random.default_rng(6)
    t, d = _censored(rng.exponential(1000.0, 400), 1500.0)
    km = KaplanMeier().fit(t, d)
    grid = np.array([200.0, 500.0, 1000.0])
    lo, hi = km.confidence_band(grid)
    truth = np.exp(-grid / 1000.0)
    assert np.all(lo <= truth) and np.all(truth <= hi)


def test_renewal_matches_poisson_for_exponential_and_counts_cap():
    m = ExponentialLifetime(max_lifetime_s=None).fit([3600.0] * 10)
    assert expected_revocations(m, 4, 7200.0) == pytest.approx(8.0)
    # Through the grid solver (a delay forces it): renewals of X = L + D have mean 1/(mu + D).
    r = expected_revocations(m, 1, 100 * 3600.0, replacement_delay_s=1e-9)
    assert r == pytest.approx(100.0, rel=0.02)
    # A node that never gets revoked but is stopped at a 10 h cap: 3 stops in 35 h.
    capped = ExponentialLifetime(max_lifetime_s=36000.0).fit([1e12], [False])
    assert expected_revocations(capped, 1, 35 * 3600.0) == pytest.approx(3.0, abs=0.05)
    assert expected_revocations(capped, 2, 35 * 3600.0, replace=False) == pytest.approx(2.0, abs=1e-6)


def test_renewal_differs_from_t_over_mtbf_for_infant_mortality():
    rng = np.random.default_rng(7)
    m = WeibullLifetime().fit(3600.0 * rng.weibull(0.5, 3000))
    T = 3600.0
    renewal = expected_revocations(m, 1, T)
    naive = T / m.mean_lifetime_s()
    assert renewal > 1.5 * naive
    # Monte Carlo check of the renewal function.
    draws = m.sample(400_000, np.random.default_rng(8)).reshape(-1, 200).cumsum(axis=1)
    assert (draws <= T).sum(axis=1).mean() == pytest.approx(renewal, rel=0.05)


def test_optimal_interval_matches_young_daly_for_exponential():
    m = ExponentialLifetime().fit([36000.0] * 100)
    opt = optimal_checkpoint_interval_s(60.0, m)
    assert opt == pytest.approx(daly_interval_s(60.0, 36000.0), rel=0.02)
    assert opt == pytest.approx(young_daly_interval_s(60.0, 36000.0), rel=0.05)
    # Eight nodes fail eight times as often: Daly's optimum for M / 8.
    opt8 = optimal_checkpoint_interval_s(60.0, m, 8)
    assert opt8 == pytest.approx(daly_interval_s(60.0, 36000.0 / 8), rel=0.02)


def test_transience_cost_monte_carlo_agrees_with_theory():
    mtbf, C, R = 20000.0, 60.0, 120.0
    m = ExponentialLifetime().fit([mtbf] * 100)
    tau = optimal_checkpoint_interval_s(C, m, restart_s=R)
    res = transience_cost(10 * 3600.0, 1, m, C, R, tau, runs=4000, seed=1)
    # Renewal-reward: wall/work = (M + R)(e^{(tau+C)/M} - 1) / tau.
    theory = (mtbf + R) * (math.exp((tau + C) / mtbf) - 1) / tau
    assert res["expected_slowdown"] == pytest.approx(theory, rel=0.03)
    assert res["quantiles"]["p5"] <= res["quantiles"]["p50"] <= res["quantiles"]["p95"]
    # Lost work per revocation is about half an interval.
    per = res["expected_lost_work_s"] / res["expected_revocations"]
    assert per == pytest.approx((tau + C) / 2, rel=0.15)
    # Same seed, same answer.
    assert transience_cost(10 * 3600.0, 1, m, C, R, tau, runs=500, seed=3) == \
        transience_cost(10 * 3600.0, 1, m, C, R, tau, runs=500, seed=3)


def test_bathtub_degenerates_gracefully_on_weibull_data():
    rng = np.random.default_rng(9)
    t = 5000.0 * rng.weibull(0.7, 500)
    w = WeibullLifetime().fit(t)
    b = BathtubLifetime().fit(t)
    assert b.loglik_ >= w.loglik_ - 1.0


def test_from_fitted_rebuilds_the_same_law_without_the_optimizer():
    rng = np.random.default_rng(4)
    t, d = _censored(20000.0 * rng.weibull(0.6, 300), 60000.0)
    for cls in (ExponentialLifetime, WeibullLifetime, BathtubLifetime):
        m = cls(max_lifetime_s=86400.0).fit(t, d)
        r = cls.from_fitted(m.fitted_params(), t, d, max_lifetime_s=86400.0)
        assert r.fitted_params() == m.fitted_params()
        assert r.aic_ == pytest.approx(m.aic_) and r.mean_lifetime_s() == pytest.approx(m.mean_lifetime_s())
    with pytest.raises(InputError):
        BathtubLifetime.from_fitted({"early_shape_": 0.5}, t, d)


def test_shipped_lifetime_fits_are_what_refitting_the_shipped_traces_gives():
    """Every pool ``lifetime_model`` can use has shipped bathtub parameters, and refitting the
    data reproduces them (else: python tools/fit_lifetimes.py)."""
    import warnings

    from spottrain.transience.select import SHIPPED_MODELS, data_fingerprint, lifetime_pools, shipped_fits

    shipped = shipped_fits()
    checked = 0
    for names, data, cap in lifetime_pools():
        key = data_fingerprint(data.durations_s, data.observed, cap)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # the bathtub fit overflows nowhere
            fresh = fit_models(data.durations_s, data.observed, max_lifetime_s=cap, models=SHIPPED_MODELS,
                               use_shipped=False)
        if "bathtub" not in fresh:
            continue
        assert key in shipped, f"no shipped fit for {names}: rerun python tools/fit_lifetimes.py"
        # The same optimum: the shipped parameters reach the fresh fit's likelihood and law. On a
        # flat likelihood, optimizers on different CPUs stop a hair apart in a weakly identified
        # parameter (seen: a wear-out steepness 0.2 % apart at equal AIC), so the parameters
        # themselves are not compared digit for digit.
        again = BathtubLifetime.from_fitted(shipped[key]["bathtub"], data.durations_s, data.observed,
                                            max_lifetime_s=cap)
        assert again.aic_ == pytest.approx(fresh["bathtub"].aic_, rel=1e-7), names
        grid = np.linspace(0.0, float(cap or data.durations_s.max()), 97)
        np.testing.assert_allclose(again.survival(grid), fresh["bathtub"].survival(grid), atol=1e-3, err_msg=str(names))
        reused = fit_models(data.durations_s, data.observed, max_lifetime_s=cap, models=SHIPPED_MODELS)
        assert reused["bathtub"].aic_ == pytest.approx(fresh["bathtub"].aic_, rel=1e-9)
        checked += 1
    assert checked >= 3
