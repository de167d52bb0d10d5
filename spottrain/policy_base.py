"""What a recovery policy sees and answers, and the two replacement rules others build on.

:class:`JobState` (a snapshot at an event), :class:`Decision` (checkpoint now, request nodes,
release nodes, switch to on-demand), the views of nodes and options, and :func:`replace_same` /
:func:`replace_cheapest`. The registry and the other policies are in :mod:`spottrain.policies`
(which re-exports everything here); the literature's in :mod:`spottrain.literature_policies`.

No I/O, no clocks, no randomness: everything a policy needs is in the state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

EVENTS = ("revoked", "notice", "joined", "tick", "price_change")


@dataclass(frozen=True, kw_only=True)
class NodeView:
    """One live node of the job."""

    node_id: str
    instance_type: str
    gpu: str
    spot: bool
    zone: str | None
    price_usd_per_hour: float
    throughput: float
    """Samples/s this node contributes in the current cluster (performance model)."""


@dataclass(frozen=True, kw_only=True)
class NodeOption:
    """A node the job could request now (a catalog offer with its prospects)."""

    instance_type: str
    gpu: str
    spot: bool
    zone: str | None
    price_usd_per_hour: float
    throughput: float
    """Samples/s the node would add."""
    delay_s: float
    """Expected time until it has joined (acquisition + start-up + restore)."""
    p_available: float = 1.0
    """Probability that the cloud grants it now (1.0 for on-demand)."""

    @property
    def usd_per_sample(self) -> float:
        return self.price_usd_per_hour / 3600.0 / max(self.throughput, 1e-12)


@dataclass(frozen=True, kw_only=True)
class JobState:
    """What a policy may look at."""

    now_s: float
    event: str
    """One of :data:`EVENTS`."""
    subject: str | None
    """The node the event is about (revoked / notified / joined), if any."""
    nodes: tuple[NodeView, ...]
    """Live nodes after the event."""
    planned: tuple[NodeView, ...]
    """The cluster of the plan (the membership the job started with)."""
    pending: int
    """Replacements requested that have not joined yet."""
    samples_done: float
    """Durable progress (as of the last checkpoint or live progress, as the caller decides)."""
    samples_total: float
    deadline_s: float | None
    restart_overhead_s: float
    """Expected stall to switch membership (detection + re-forming the group + restore)."""
    options: tuple[NodeOption, ...] = ()
    """What can be requested now, spot and on-demand."""
    on_demand_fallback: tuple[NodeOption, ...] = ()
    """The on-demand cluster to switch to when slack runs out (uniform progress)."""
    pending_on_demand: int = 0
    """Of ``pending``, how many are on-demand nodes (a fallback that has not joined yet)."""

    @property
    def throughput(self) -> float:
        return sum(n.throughput for n in self.nodes)

    @property
    def remaining_samples(self) -> float:
        return max(self.samples_total - self.samples_done, 0.0)

    def node(self, node_id: str | None) -> NodeView | None:
        for pool in (self.nodes, self.planned):
            for n in pool:
                if n.node_id == node_id:
                    return n
        return None


@dataclass(frozen=True, kw_only=True)
class Decision:
    checkpoint_now: bool = False
    request: tuple[NodeOption, ...] = ()
    release: tuple[str, ...] = ()
    switch_to_on_demand: bool = False
    reason: str = ""


Policy = Callable[[JobState], Decision]
"""A policy. One that may buy instance types other than the lost node's says so with a function
attribute ``buys_other_types = True`` (e.g. :func:`replace_cheapest`): callers then offer it
other markets' nodes in ``JobState.options``, valued for the cluster as it stands now."""


def _same_as(state: JobState, node: NodeView | None) -> NodeOption | None:
    """The option that buys the same kind of node back, if the catalog offers it."""
    if node is None:
        return None
    same = [o for o in state.options if o.instance_type == node.instance_type and o.spot == node.spot]
    if not same:
        return None
    in_zone = [o for o in same if o.zone == node.zone]
    return min(in_zone or same, key=lambda o: (o.delay_s, o.price_usd_per_hour))


def _deficit(state: JobState) -> int:
    return len(state.planned) - len(state.nodes) - state.pending


def replace_same(state: JobState) -> Decision:
    """Checkpoint on a notice; buy back a node of the revoked type (spotDNN / SkyPilot style,
    but only the lost node, not the whole cluster)."""
    if state.event == "notice":
        return Decision(checkpoint_now=True, reason="preemption notice: emergency checkpoint")
    if state.event == "revoked" and _deficit(state) > 0:
        option = _same_as(state, state.node(state.subject))
        if option is not None:
            return Decision(request=(option,), reason=f"replace {state.subject} with another {option.instance_type}")
        return Decision(reason="no offer of the same type: continue smaller")
    return Decision()


REPLACE_MAX_COST_RATIO = 2.0
""":func:`replace_cheapest` skips options whose cost per sample is more than this multiple of the
planned cluster's: a node that adds little throughput (a slow GPU pacing a synchronous ring) is
not worth a restart of the group."""


def replace_cheapest(state: JobState) -> Decision:
    """Replace a revoked node with the available spot option of least cost per sample, of any
    instance type the caller offers (the same type, or another whose market has capacity).

    An option is ranked by its cost per sample divided by ``p_available``; options that would
    add no throughput, or cost more per sample than :data:`REPLACE_MAX_COST_RATIO` times the
    planned cluster, are skipped (then the job continues smaller).
    """
    if state.event == "notice":
        return Decision(checkpoint_now=True, reason="preemption notice: emergency checkpoint")
    if state.event == "revoked" and _deficit(state) > 0:
        best = _cheapest_spot(state)
        if best is not None:
            return Decision(request=(best,), reason=f"replace {state.subject} with cheapest per sample: {best.instance_type}")
    return Decision()


def _cheapest_spot(state: JobState) -> NodeOption | None:
    """The spot option of least cost per sample over ``p_available`` (see :func:`replace_cheapest`)."""
    planned_tp = sum(n.throughput for n in state.planned)
    limit = (REPLACE_MAX_COST_RATIO * sum(n.price_usd_per_hour for n in state.planned) / 3600.0
             / planned_tp if planned_tp > 0 else math.inf)
    spot = [o for o in state.options if o.spot and o.p_available > 0.0 and o.throughput > 0.0
            and o.usd_per_sample <= limit]
    if not spot:
        return None
    return min(spot, key=lambda o: o.usd_per_sample / max(o.p_available, 1e-6))


replace_cheapest.buys_other_types = True  # type: ignore[attr-defined]
