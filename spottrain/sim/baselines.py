"""The literature's recovery strategies, registered as policies so the simulator can compare them.

Each is a pure function ``decide(state) -> Decision`` registered in :mod:`spottrain.policies`
(the runtime could run them too). Some baselines also change the cluster they start with; that
is a *plan transform* (:data:`PLAN_TRANSFORMS`) applied by the simulator before the first run.

- ``checkpoint-restart``: periodic checkpoints only, no emergency checkpoint on a notice, no
  replacement: the job restarts from the last checkpoint on the survivors after every loss.
- ``skypilot-managed``: SkyPilot managed spot jobs: on any preemption the whole cluster is torn
  down and re-provisioned (everyone stalls until all nodes are back), no notice handling.
- ``on-demand``: the plan's cluster bought on-demand (no revocations; the price anchor).
- ``deepvm-anchor``: DeepVM (CCGrid'24): one extra on-demand node anchors the checkpoints;
  checkpoints are asynchronous multi-level (only the in-memory snapshot stalls training, a
  quarter of the full checkpoint cost), revoked workers are replaced with the same type.
- ``replan-on-price``: re-plan when prices move: on a price change, move the whole cluster to
  the option with the least cost per sample if it is at least 20% cheaper; replace revoked
  nodes with the cheapest option per sample.

And one of ours, beside those of :mod:`spottrain.policies`:

- ``deadline-margin``: uniform progress (Can't Be Late) that keeps a safety margin of
  ``DEADLINE_MARGIN_S`` (at most 10% of the deadline) before the deadline: the policy is asked at ticks, so without a margin
  the switch to on-demand comes up to one tick late and the deadline is missed by minutes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from spottrain.plan import Plan
from spottrain.policies import (
    Decision,
    JobState,
    NodeOption,
    register_policy,
    replace_cheapest,
    replace_same,
)

ANCHOR_CHECKPOINT_FACTOR = 0.25
"""DeepVM's asynchronous checkpointing to the anchor: share of the checkpoint cost that stalls."""
REPLAN_GAIN = 0.8
"""Re-plan only when the best option costs at most this share of the current cost per sample."""


def checkpoint_restart(state: JobState) -> Decision:
    """No notice handling, no replacement: restart on the survivors from the last checkpoint."""
    return Decision()


def skypilot_managed(state: JobState) -> Decision:
    """On a revocation, release every node and relaunch the plan's whole cluster at once."""
    if state.event != "revoked" or state.pending > 0:
        return Decision()
    wanted = []
    for node in state.planned:
        option = _matching(state.options, node.instance_type, node.spot, node.zone)
        if option is not None:
            wanted.append(option)
    return Decision(
        release=tuple(n.node_id for n in state.nodes), request=tuple(wanted),
        reason="managed spot: preempted, re-provision the whole cluster",
    )


def on_demand_only(state: JobState) -> Decision:
    """The cluster is on-demand (see :func:`to_on_demand`): nothing to decide."""
    return Decision()


def deepvm_anchor(state: JobState) -> Decision:
    """Replace revoked spot workers with the same type; the on-demand anchor is never released."""
    return replace_same(state)


def replan_on_price(state: JobState) -> Decision:
    """On a price change move to a clearly cheaper option per sample; on a revocation replace cheapest."""
    if state.event == "price_change" and state.nodes and state.pending == 0:
        current = sum(n.price_usd_per_hour for n in state.nodes) / 3600.0 / max(state.throughput, 1e-12)
        spot = [o for o in state.options if o.spot and o.p_available > 0.0]
        if spot:
            best = min(spot, key=lambda o: o.usd_per_sample)
            if best.usd_per_sample <= REPLAN_GAIN * current:
                count = max(round(state.throughput / max(best.throughput, 1e-12)), 1)
                return Decision(
                    checkpoint_now=True, release=tuple(n.node_id for n in state.nodes), request=(best,) * count,
                    reason=f"prices moved: re-plan onto {count}x {best.instance_type}",
                )
    return replace_cheapest(state)


def _matching(options: tuple[NodeOption, ...], instance_type: str, spot: bool, zone: str | None) -> NodeOption | None:
    same = [o for o in options if o.instance_type == instance_type and o.spot == spot]
    in_zone = [o for o in same if o.zone == zone]
    return (in_zone or same or [None])[0]


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

BASELINES = ("checkpoint-restart", "skypilot-managed", "on-demand", "deepvm-anchor", "replan-on-price")

register_policy("checkpoint-restart", checkpoint_restart)
register_policy("skypilot-managed", skypilot_managed)
register_policy("on-demand", on_demand_only)
register_policy("deepvm-anchor", deepvm_anchor)
register_policy("replan-on-price", replan_on_price)
