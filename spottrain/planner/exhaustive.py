"""Exhaustive enumeration of plans: the reference the solver is checked against.

Every plan of up to ``max_kinds`` candidates that may share a cluster (one placement group;
with synchronous all-reduce, one node shape), every node count up to each candidate's limit and
the cluster's ``max_nodes``, each assessed exactly with :meth:`Context.evaluate`. The number of
plans grows as ``n^k``: use it on small catalogs only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from spottrain.planner.formulation import Outcome, group_keys


def all_plans(ctx: Any, mask: np.ndarray, max_kinds: int = 3) -> Iterator[Outcome]:
    """Yield the exact outcome of every plan over the columns selected by ``mask``."""
    cands = sorted({int(i) for i in ctx.cols.cand[mask]})
    keys = group_keys(ctx.cands, ctx.limits.same_gpu)
    limits = {i: int(ctx.cols.n[ctx.cols.cand == i].max()) for i in cands}
    for k in range(1, max_kinds + 1):
        for combo in itertools.combinations(cands, k):
            if len({keys[i] for i in combo}) > 1:
                continue
            for counts in itertools.product(*[range(1, limits[i] + 1) for i in combo]):
                if sum(counts) <= ctx.limits.max_nodes:
                    yield ctx.evaluate(tuple(zip(combo, counts)))
