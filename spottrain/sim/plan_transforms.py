"""The literature's baselines in the simulator: the plan transforms some of them start from.

The baselines' recovery strategies are policies like ours and live in
:mod:`spottrain.literature_policies` (registered in :mod:`spottrain.policies`, so ``run`` has them
too); their names are re-exported here. Some baselines also change the cluster they start with;
that is a *plan transform* (:data:`PLAN_TRANSFORMS`) applied before the first run, by the
simulator and by ``spottrain run``.

- ``checkpoint-restart``, ``skypilot-managed``, ``replan-on-price``: the plan's cluster as it is;
- ``on-demand``: the plan's cluster bought on-demand (no revocations; the price anchor);
- ``deepvm-anchor``: DeepVM (CCGrid'24): one extra on-demand node anchors the checkpoints;
  checkpoints are asynchronous multi-level (only the in-memory snapshot stalls training, a
  quarter of the full checkpoint cost, :data:`ANCHOR_CHECKPOINT_FACTOR`).

And one of ours beside them, :func:`spottrain.policies.deadline_margin`: uniform progress (Can't
Be Late) with a safety margin before the deadline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from spottrain.literature_policies import (  # noqa: F401  (the baselines' policies, by their old names)
    LITERATURE_POLICIES,
    REPLAN_GAIN,
    checkpoint_restart,
    deepvm_anchor,
    on_demand_only,
    replan_on_price,
    skypilot_managed,
)
from spottrain.plan_file import Plan

ANCHOR_CHECKPOINT_FACTOR = 0.25
"""DeepVM's asynchronous checkpointing to the anchor: share of the checkpoint cost that stalls."""


def to_on_demand(plan: Plan) -> tuple[Plan, dict[str, Any]]:
    groups = tuple(dataclasses.replace(g, spot=False, price_usd_per_hour=g.on_demand_price_usd_per_hour) for g in plan.groups)
    return dataclasses.replace(plan, groups=groups), {}


def with_anchor(plan: Plan) -> tuple[Plan, dict[str, Any]]:
    """Add one on-demand node of the plan's first group (it trains too and holds the checkpoints)."""
    g = plan.groups[0]
    anchor = dataclasses.replace(g, count=1, spot=False, price_usd_per_hour=g.on_demand_price_usd_per_hour)
    groups = plan.groups + (anchor,)
    nodes = sum(x.count for x in plan.groups)
    pred = dataclasses.replace(
        plan.prediction,
        throughput_samples_per_s=plan.prediction.throughput_samples_per_s * (nodes + 1) / nodes,
    )
    return dataclasses.replace(plan, groups=groups, prediction=pred), {"checkpoint_factor": ANCHOR_CHECKPOINT_FACTOR}


PLAN_TRANSFORMS: dict[str, Callable[[Plan], tuple[Plan, dict[str, Any]]]] = {
    "on-demand": to_on_demand,
    "deepvm-anchor": with_anchor,
}
"""Baselines that start from a different cluster: ``name -> plan -> (plan, overrides)``."""

BASELINES = tuple(LITERATURE_POLICIES)
