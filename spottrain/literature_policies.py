"""The literature's recovery strategies as policies, so that ``simulate`` and ``run`` both have them.

Pure functions ``decide(state) -> Decision`` like those of :mod:`spottrain.policies`, whose
registry :data:`~spottrain.policies.POLICIES` holds every one of them (so ``get_policy`` sees them
without importing the simulator). Two of them also start from a different cluster than the
plan's; that *plan transform* lives with the simulator (``spottrain.sim.plan_transforms.PLAN_TRANSFORMS``)
and is applied by whoever starts the job.

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

``checkpoint-restart``, ``skypilot-managed`` and ``deepvm-anchor`` restart from a checkpoint after
every loss, as the systems they stand for do (``restarts_from_checkpoint``); the others run on
spottrain's runtime, whose survivors keep the model.
"""

from __future__ import annotations

from spottrain.policy_base import Decision, JobState, NodeOption, Policy, replace_cheapest, replace_same

REPLAN_GAIN = 0.8
"""Re-plan only when the best option costs at most this share of the current cost per sample."""


def checkpoint_restart(state: JobState) -> Decision:
    """No notice handling, no replacement: restart on the survivors from the last checkpoint."""
    return Decision()


# The systems these policies stand for restart from a checkpoint after a loss (the simulator's
# ``keep_state`` is off for them), where spottrain's runtime keeps training on the survivors' state:
# plain checkpoint-restart, SkyPilot's managed jobs (the whole cluster is re-provisioned) and DeepVM
# (it restores from the checkpoints on its on-demand anchor, which is why it keeps them cheap).
checkpoint_restart.restarts_from_checkpoint = True  # type: ignore[attr-defined]


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


skypilot_managed.restarts_from_checkpoint = True  # type: ignore[attr-defined]


def on_demand_only(state: JobState) -> Decision:
    """The cluster is on-demand (the ``on-demand`` plan transform): nothing to decide."""
    return Decision()


def deepvm_anchor(state: JobState) -> Decision:
    """Replace revoked spot workers with the same type; the on-demand anchor is never released."""
    return replace_same(state)


deepvm_anchor.restarts_from_checkpoint = True  # type: ignore[attr-defined]


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


LITERATURE_POLICIES: dict[str, Policy] = {
    "checkpoint-restart": checkpoint_restart,
    "skypilot-managed": skypilot_managed,
    "on-demand": on_demand_only,
    "deepvm-anchor": deepvm_anchor,
    "replan-on-price": replan_on_price,
}
