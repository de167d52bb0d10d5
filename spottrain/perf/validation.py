"""Cross-validation of throughput models: folds, MAPE, per-group tables."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from spottrain.perf.measurements import Measurement


def kfold_indices(n: int, folds: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled k-fold split of ``range(n)`` into (train, test) index arrays."""
    folds = max(2, min(folds, n))
    order = np.random.default_rng(seed).permutation(n)
    parts = np.array_split(order, folds)
    return [(np.concatenate([p for j, p in enumerate(parts) if j != i]), parts[i]) for i in range(folds)]


def mape(pred, obs) -> float:
    """Mean absolute percentage error in %."""
    pred, obs = np.asarray(pred, float), np.asarray(obs, float)
    return float(np.mean(np.abs(pred - obs) / obs) * 100.0)


def cross_validate(rows: list[Measurement], make_model: Callable, *, folds: int = 5, seed: int = 0,
                   group_of: Callable[[Measurement], str] | None = None) -> dict:
    """K-fold cross-validated predictions of ``make_model()`` on ``rows``.

    Returns ``{"pred": array, "obs": array, "mape": float, "groups": {group: (n, mape)}}``.
    ``group_of`` names the group of a row for the per-group table (default: model).
    """
    group_of = group_of or (lambda m: m.model)
    obs = np.array([m.throughput for m in rows], float)
    pred = np.zeros(len(rows))
    for train, test in kfold_indices(len(rows), folds, seed):
        model = make_model().fit([rows[i] for i in train])
        pred[test] = [p.throughput for p in model.predict([rows[i] for i in test], warn=False)]
    by = defaultdict(list)
    for i, m in enumerate(rows):
        by[group_of(m)].append(i)
    groups = {g: (len(ix), mape(pred[ix], obs[ix])) for g, ix in sorted(by.items())}
    return {"pred": pred, "obs": obs, "mape": mape(pred, obs), "groups": groups}
