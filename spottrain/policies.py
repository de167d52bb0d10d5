"""Recovery policies: pure functions ``decide(state) -> Decision``.

The simulator and the runtime call the *same* functions, so what we simulate is what we run.
A policy sees a :class:`JobState` snapshot at an event (a revocation, a preemption notice, a
replacement joining, a price change, a periodic tick) and answers with a :class:`Decision`:
checkpoint now, request replacement nodes, release nodes, or fall back to on-demand.

What a policy sees and the two replacement rules the others build on are in
:mod:`spottrain.policy_base` (re-exported here); the literature's strategies in
:mod:`spottrain.literature_policies`. :data:`POLICIES` holds them all.

No I/O, no clocks, no randomness: everything a policy needs is in the state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from spottrain import literature_policies
from spottrain.errors import UnknownNameError
from spottrain.policy_base import (EVENTS, REPLACE_MAX_COST_RATIO, Decision, JobState, NodeOption, NodeView, Policy,
                                   _cheapest_spot, _deficit, _same_as, replace_cheapest, replace_same)

__all__ = ["EVENTS", "POLICIES", "REPLACE_MAX_COST_RATIO", "DEADLINE_MARGIN_S", "DEADLINE_MARGIN_SHARE", "deadline_margin_s",
           "RETURN_BUFFER_SWITCHES", "Decision", "JobState", "NodeOption", "NodeView", "Policy", "deadline_cheapest",
           "deadline_margin", "deadline_return", "get_policy", "no_replace", "register_policy", "replace_cheapest",
           "replace_same", "uniform_progress"]


def no_replace(state: JobState) -> Decision:
    """Keep going with the survivors (checkpoint on notice)."""
    if state.event == "notice":
        return Decision(checkpoint_now=True, reason="preemption notice: emergency checkpoint")
    return Decision()


def _fallback_slack(state: JobState) -> tuple[float, float]:
    """``(slack_s, switch_s)``: time to spare if the rest ran on the on-demand fallback from the
    next switch, and what one switch to it costs (start-up of the fallback + one restart)."""
    od_rate = sum(o.throughput for o in state.on_demand_fallback)
    od_delay = max(o.delay_s for o in state.on_demand_fallback)
    need_s = state.remaining_samples / max(od_rate, 1e-12) + state.restart_overhead_s
    assert state.deadline_s is not None
    return state.deadline_s - state.now_s - need_s - od_delay, od_delay + state.restart_overhead_s


def _on_fallback(state: JobState) -> bool:
    """Whether the on-demand fallback runs or boots: more on-demand nodes live or requested than
    the plan has. A plan's own on-demand nodes (an anchor beside spot groups) are not the fallback:
    when every spot node is gone they train alone, at a fraction of the plan's rate."""
    planned = sum(1 for n in state.planned if not n.spot)
    return sum(1 for n in state.nodes if not n.spot) + state.pending_on_demand > planned


def uniform_progress(state: JobState) -> Decision:
    """Can't Be Late (NSDI'24): stay on spot while the slack allows, else go on-demand.

    Slack = time left to the deadline - time the on-demand fallback needs for the remaining work
    - one restart. While slack is positive, behave like :func:`replace_same`; once it is gone,
    switch to the on-demand cluster so the deadline is still met.
    """
    if (state.deadline_s is not None and state.on_demand_fallback and any(n.spot for n in state.planned)
            and state.event in ("revoked", "tick", "price_change")):
        slack = _fallback_slack(state)[0]
        if slack <= 0 and not _on_fallback(state):
            return _to_on_demand(state, f"slack {slack:.0f}s <= 0: switch to on-demand to meet the deadline")
    return replace_same(state)


DEADLINE_MARGIN_S = 1200.0
"""Safety margin of :func:`deadline_margin`: a few policy ticks (5 min each) plus a restart."""
DEADLINE_MARGIN_SHARE = 0.1
"""...but never more than this share of the deadline, so short jobs are not pushed on-demand at once."""


def deadline_margin_s(deadline_s: float) -> float:
    """:func:`deadline_margin`'s safety margin for a deadline: :data:`DEADLINE_MARGIN_S`, at most
    :data:`DEADLINE_MARGIN_SHARE` of the deadline."""
    return min(DEADLINE_MARGIN_S, DEADLINE_MARGIN_SHARE * deadline_s)


def _beyond(items, nodes) -> list:
    """``items`` (nodes or options) less one of each instance type per node of ``nodes``, type for
    type: what is not already made up by them."""
    left = Counter(n.instance_type for n in nodes)
    out = []
    for item in items:
        if left[item.instance_type] > 0:
            left[item.instance_type] -= 1
        else:
            out.append(item)
    return out


def _to_on_demand(state: JobState, reason: str) -> Decision:
    """Release the spot nodes, checkpoint, and request the on-demand fallback: the part of it that
    the live on-demand nodes (the plan's own) do not already make up, type for type."""
    request = _beyond(state.on_demand_fallback, [n for n in state.nodes if not n.spot])
    return Decision(switch_to_on_demand=True, request=tuple(request),
                    release=tuple(n.node_id for n in state.nodes if n.spot), checkpoint_now=True, reason=reason)


def deadline_margin(state: JobState) -> Decision:
    """Uniform progress against a deadline brought forward by a margin: :data:`DEADLINE_MARGIN_S`,
    at most :data:`DEADLINE_MARGIN_SHARE` of the deadline.

    Policies are consulted at events and periodic ticks, so plain uniform progress switches to
    on-demand up to one tick late and misses the deadline by minutes; the margin absorbs that.
    """
    if state.deadline_s is not None:
        margin = deadline_margin_s(state.deadline_s)
        state = replace(state, deadline_s=state.deadline_s - margin)
    return uniform_progress(state)


RETURN_BUFFER_SWITCHES = 3.0
"""Slack :func:`deadline_return` keeps for going back to spot, in round trips spot -> on-demand -> spot."""


def deadline_return(state: JobState) -> Decision:
    """Deadline-aware like :func:`deadline_margin`, but on-demand only while spot is away.

    :func:`deadline_margin` waits for spot until the slack is gone and then stays on-demand to the
    end, even if spot capacity is back minutes later. This policy keeps a buffer of
    :data:`RETURN_BUFFER_SWITCHES` switch costs above the margin: once the slack falls into that
    buffer it moves to the on-demand fallback, keeps a request for the plan's spot nodes open
    (the cloud grants them when it has capacity again) and, when they have joined, releases the
    on-demand nodes - as long as the slack left still pays for another switch. Each round trip
    spends some of the buffer, so the number of returns is bounded and the deadline holds like
    :func:`deadline_margin`'s.
    """
    planned_spot = [n for n in state.planned if n.spot]
    if state.deadline_s is None or not state.on_demand_fallback or not planned_spot:
        return replace_same(state)
    if state.event == "notice":
        return Decision(checkpoint_now=True, reason="preemption notice: emergency checkpoint")
    margin = deadline_margin_s(state.deadline_s)
    slack, switch_s = _fallback_slack(state)
    slack -= margin
    buffer_s = RETURN_BUFFER_SWITCHES * switch_s
    spot_live = [n for n in state.nodes if n.spot]
    # the fallback's nodes: every on-demand node beyond the plan's own, type for type
    od_live = _beyond([n for n in state.nodes if not n.spot], [n for n in state.planned if not n.spot])
    if od_live:
        # on the fallback: back to spot once the plan's spot nodes have joined
        if len(spot_live) >= len(planned_spot):
            if slack >= switch_s:
                return Decision(release=tuple(n.node_id for n in od_live),
                                reason=f"spot is back, slack {slack:.0f}s: release the on-demand fallback")
            return Decision(release=tuple(n.node_id for n in spot_live),
                            reason=f"spot is back but slack {slack:.0f}s is too short: stay on-demand")
        if state.pending == 0 and slack >= 2 * switch_s and state.event in ("tick", "joined", "revoked"):
            wanted = tuple(o for o in (_same_as(state, n) for n in planned_spot) if o is not None)
            if wanted:
                return Decision(request=wanted, reason="on-demand with slack to spare: ask for spot again")
        return Decision()
    if slack <= buffer_s and state.event in ("revoked", "tick", "price_change") and len(spot_live) < len(planned_spot):
        return _to_on_demand(state, f"spot short and slack {slack:.0f}s within the buffer: on-demand until spot is back")
    if slack <= 0 and state.event in ("revoked", "tick", "price_change"):
        return _to_on_demand(state, f"slack {slack:.0f}s <= 0: switch to on-demand to meet the deadline")
    return replace_same(state)


def deadline_cheapest(state: JobState) -> Decision:
    """Deadline-aware replacement across instance types: :func:`replace_cheapest` while the slack
    allows, the on-demand fallback once it is gone.

    The slack is :func:`deadline_margin`'s (time left to the deadline brought forward by the
    margin, minus what the on-demand fallback needs for the remaining work, its start-up and one
    restart), so the switch to on-demand comes exactly when deadline-margin's would for the same
    progress. Progress is what the cluster really trained: a slower GPU bought here paces a
    synchronous ring, the job advances at that mixed rate and the slack erodes accordingly (the
    options' throughput is what each node would add to the cluster as it stands).

    While slack remains, a lost node is replaced by the spot option of least cost per sample
    over its ``p_available`` (any instance type the caller offers; see
    :data:`REPLACE_MAX_COST_RATIO`), but only when the slack still pays for the restart that
    its joining costs (its ``delay_s``). At a tick with nodes missing and nothing pending it
    buys the missing nodes of the best option at once (the market may have come back).

    Other types only stand in while the plan's own type is away: the plan chose that type for
    the deadline, and a slower stand-in spends slack that the on-demand fallback pays back later.
    At a tick with other-type nodes live, nothing pending and the plan's type granted again
    (``p_available`` > 0), it asks for the plan's spot nodes back and, once they have joined,
    releases the other types. Once on the fallback it stays there. Without a deadline it is
    :func:`replace_cheapest`.
    """
    planned_spot = sum(1 for n in state.planned if n.spot)
    if state.deadline_s is None or not state.on_demand_fallback or not planned_spot:
        return replace_cheapest(state)
    if state.event == "notice":
        return Decision(checkpoint_now=True, reason="preemption notice: emergency checkpoint")
    if _on_fallback(state):
        return Decision()  # the fallback is running or booting: stay on it
    plan_types = {n.instance_type for n in state.planned if n.spot}
    others = tuple(n.node_id for n in state.nodes if n.spot and n.instance_type not in plan_types)
    own = sum(1 for n in state.nodes if n.spot and n.instance_type in plan_types)
    if state.event == "joined":
        if others and own >= planned_spot:
            return Decision(release=others, reason="the plan's type is back: release the other types")
        return Decision()
    if state.event not in ("revoked", "tick", "price_change"):
        return Decision()
    margin = deadline_margin_s(state.deadline_s)
    slack = _fallback_slack(state)[0] - margin
    if slack <= 0:
        return _to_on_demand(state, f"slack {slack:.0f}s <= 0: switch to on-demand to meet the deadline")
    if state.event == "tick" and others and not state.pending:
        back = [o for o in state.options if o.spot and o.instance_type in plan_types and o.p_available > 0.0]
        if back and slack > back[0].delay_s:
            return Decision(request=(back[0],) * (planned_spot - own),
                            reason=f"{back[0].instance_type} has capacity again: move back from the other types")
    deficit = _deficit(state)
    if deficit <= 0 or state.event == "price_change" or (state.event == "tick" and state.pending):
        return Decision()
    best = _cheapest_spot(state)
    if best is None or slack <= best.delay_s:
        return Decision()
    count = 1 if state.event == "revoked" else deficit
    return Decision(request=(best,) * count,
                    reason=f"slack {slack:.0f}s: {count} x {best.instance_type}, cheapest per sample")


deadline_cheapest.buys_other_types = True  # type: ignore[attr-defined]


POLICIES: dict[str, Policy] = {
    "replace-same": replace_same,
    "replace-cheapest": replace_cheapest,
    "no-replace": no_replace,
    "uniform-progress": uniform_progress,
    "deadline-margin": deadline_margin,
    "deadline-return": deadline_return,
    "deadline-cheapest": deadline_cheapest,
    # the literature's strategies (SkyPilot managed jobs, DeepVM, checkpoint-restart ...): here,
    # not only in the simulator, so that ``run`` has every policy ``simulate`` has
    **literature_policies.LITERATURE_POLICIES,
}


def register_policy(name: str, policy: Policy) -> Policy:
    """Add a policy under ``name`` (a user's own; the shipped ones are all registered here)."""
    POLICIES[name] = policy
    return policy


def get_policy(name: str) -> Policy:
    """The policy registered as ``name``; an unknown name suggests the near miss."""
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownNameError("policy", name, POLICIES) from None

