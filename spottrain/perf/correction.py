"""Learned correction of the analytical model (Srift-style): ridge regression on log residuals.

Features are physically meaningful and scale-free: log nodes, log GPUs per node, log of the
communication-to-compute byte ratio (gradient bytes / (batch x FLOPs)), log FLOPs per sample,
PS count, async, heterogeneity, fp16. The correction multiplies the analytical prediction by
``exp(w . x)``; it is fitted on the analytical model's training residuals and the throughput
model keeps it only when cross-validation shows it reduces held-out error.
"""

from __future__ import annotations

import math

import numpy as np

from spottrain.errors import NotFittedError


def features(rows) -> np.ndarray:
    """Feature matrix (rows x 8) of measurements or queries."""
    out = []
    for r in rows:
        flops = getattr(r, "flops_per_sample", None) or getattr(r, "flops")
        grad = r.gradient_bytes if hasattr(r, "gradient_bytes") else r.grad
        gpn = max(g.gpus_per_node for g in r.cluster.groups)
        out.append([math.log(r.cluster.nodes), math.log(gpn), math.log(grad / (r.batch_size * flops)),
                    math.log(flops) - 21.0, float(r.ps), float(r.sync == "async"),
                    float(not r.cluster.is_homogeneous), float(r.precision == "fp16")])
    return np.array(out, float)


STRUCTURE = (0, 1, 4, 5, 6)
"""Features that describe the cluster's structure: nodes, GPUs per node, PS, async, heterogeneity."""


class ResidualCorrection:
    """Ridge regression of log(measured / analytical) on :func:`features`."""

    def __init__(self, *, alpha: float = 3.0) -> None:
        self.alpha = alpha

    def get_params(self, deep: bool = False) -> dict:
        return {"alpha": self.alpha}

    def fit(self, rows, log_residuals) -> "ResidualCorrection":
        X = features(rows)
        y = np.asarray(log_residuals, float)
        self.mean_ = X.mean(axis=0)
        # A feature that does not vary in the rows (every row on one node) gets no weight: scaled by
        # 1, its column is all zeros and ridge leaves its coefficient at 0. Scaled by its ~0 standard
        # deviation, a query that differs (a multi-node query from one-node rows) would saturate the
        # correction at its clip, x2 either way, from a feature the rows never measured.
        std = X.std(axis=0)
        self.scale_ = np.where(std > 1e-9, std, 1.0)
        self.low_, self.high_ = X.min(axis=0), X.max(axis=0)
        Z = (X - self.mean_) / self.scale_
        A = Z.T @ Z + self.alpha * np.eye(Z.shape[1])
        self.coef_ = np.linalg.solve(A, Z.T @ (y - y.mean()))
        self.intercept_ = float(y.mean())
        return self

    def predict(self, rows) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise NotFittedError("ResidualCorrection.predict called before fit()")
        X = features(rows)
        Z = (X - self.mean_) / self.scale_
        out = np.clip(Z @ self.coef_ + self.intercept_, -0.7, 0.7)
        # A residual fudge learnt on one kind of cluster says nothing of another: a query with more
        # nodes or GPUs per node than the rows, or parameter servers, asynchrony or mixed GPU types
        # they lacked, gets no correction (one-node rows' correction applied across nodes took the
        # Pollux multi-node rows from 13.4 % to 15.4 % error, bench/prediction_accuracy.py).
        s = list(STRUCTURE)
        outside = ((X[:, s] < self.low_[s] - 1e-9) | (X[:, s] > self.high_[s] + 1e-9)).any(axis=1)
        return np.where(outside, 0.0, out)
