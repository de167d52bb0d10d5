"""What every simulated run of one (plan, policy, revocation source) shares.

:class:`SimSetup` turns a plan into the simulator's node types (the plan's groups and their
on-demand fallbacks), the options a policy may buy, the revocation markets, the price events, the
checkpoint and restart stalls and the throughput function of a membership; :class:`SimParams`
holds the knobs of the job model and :class:`RunResult` the outcome of one run
(:class:`spottrain.sim.job.JobRun`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from spottrain.catalog import gpu_label
from spottrain.clouds import REGROUP_S, vm_startup_s
from spottrain.plan_file import Plan
from spottrain.policies import NodeOption, NodeView, Policy, get_policy
from spottrain.sim import markets
from spottrain.sim.markets import NodeType, gpu_weight, throughput_function
from spottrain.sim.sources import run_horizon_s

INF = math.inf
TICK_POLICIES = {"uniform-progress", "deadline-margin", "deadline-return", "deadline-cheapest"}
"""Policies that look at periodic ticks; the others are asked only on real events."""


@dataclass(frozen=True, kw_only=True)
class SimParams:
    """Knobs of the job model (defaults documented in docs/simulate.md)."""

    checkpoint_cost_s: float | None = None
    """Stall of one checkpoint; None: ``plan.extra['checkpoint_cost_s']`` or estimated from the model size."""
    restart_s: float | None = None
    """Stall to restart from the last checkpoint (no live node holds the model: the first node after
    every node was lost, or every membership change of a checkpoint-restart runtime); None: 60 s +
    checkpoint cost."""
    regroup_s: float | None = None
    """Stall to re-form a synchronous group around members that hold the model (``keep_state``: a
    revocation with survivors, a join, a release); None: :data:`spottrain.clouds.REGROUP_S`."""
    tick_s: float = 300.0
    """Period of policy ticks (only for policies in :data:`TICK_POLICIES`)."""
    horizon_s: float | None = None
    """Give up after this much simulated time; None: 5x the plan's duration, at least 2 days
    (:func:`~spottrain.sim.sources.run_horizon_s`)."""
    keep_state: bool = True
    """Synchronous training: the survivors of a revocation keep the model (spottrain's runtime), so
    only losing every node rolls back to the last checkpoint; False: every lost node rolls back (a
    checkpoint-restart runtime)."""
    fail_on_chief_loss: bool = False
    """Stop the run (failed) when the chief is revoked (the behaviour of the ICAC'19 clusters)."""
    relaunch_when_empty: bool = True
    checkpoint_factor: float = 1.0
    """Share of the checkpoint cost that stalls training (asynchronous checkpointing: < 1)."""
    startup_s: float | None = None
    """Fixed delay from grant to join for every node; None: the cloud's start-up / replacement-delay model."""
    price_trace: str | None = None
    """A trace with ``price`` events replayed from its start: spot prices of matching instance types."""
    alternatives: tuple[dict[str, Any], ...] | None = None
    """Spot node types of other instance types that policies which buy other types (``buys_other_types``)
    may request: None: the plan's ``extra['alternatives']``, else derived from the catalog
    (:func:`spottrain.sim.markets.alternative_groups`); ``()``: none."""
    max_alternatives: int = 4
    """How many alternatives to derive from the catalog when ``alternatives`` is None (0: none)."""


@dataclass(frozen=True, kw_only=True)
class RunResult:
    makespan_s: float
    cost_usd: float
    finished: bool
    deadline_met: bool | None
    revocations: int
    lost_work_s: float
    """Work rolled back, in seconds of the planned cluster's throughput."""
    checkpoints: int
    replacements: int
    stall_s: float
    """Time the job spent checkpointing, restarting or waiting for nodes."""
    switched_on_demand: bool
    failed: bool
    started_s: float = 0.0
    """When the first nodes joined and training began."""
    other_type_nodes: int = 0
    """Replacement nodes of instance types not in the plan that joined (alternatives)."""
    timeline: dict[str, Any] | None = None


@dataclass
class SimSetup:
    """Everything shared by all runs of one (plan, policy, revocation source)."""

    plan: Plan
    policy_name: str
    source: Any
    params: SimParams = field(default_factory=SimParams)
    throughput_override: Any = None
    """``(f(membership) -> samples/s, description)`` instead of the default performance model."""
    markets: Any = None
    """Prepared :class:`~spottrain.sim.markets.Markets` to share between setups (None: made here)."""

    def __post_init__(self) -> None:
        plan, p = self.plan, self.params
        self.policy: Policy = get_policy(self.policy_name)
        self.ticks = self.policy_name in TICK_POLICIES
        if self.throughput_override is not None:
            self.throughput, self.throughput_desc = self.throughput_override
        else:
            self.throughput, self.throughput_desc = throughput_function(plan)
        w = plan.workload
        ckpt = p.checkpoint_cost_s
        if ckpt is None:
            ckpt = plan.extra.get("checkpoint_cost_s")
        if ckpt is None:
            # weights + optimizer state (~3x fp32 params) written at ~100 MB/s, plus a fixed 5 s
            ckpt = 5.0 + 12.0 * w.param_count / 100e6
        self.checkpoint_cost_s = float(ckpt) * p.checkpoint_factor
        self.restart_s = float(p.restart_s if p.restart_s is not None else 60.0 + self.checkpoint_cost_s)
        self.interval_s = max(float(plan.checkpoint_interval_s or 0.0), 1.0) if plan.checkpoint_interval_s else INF
        self.sync = plan.sync != "async"
        # Does a revocation leave the model with the survivors? spottrain's runtime keeps it; a
        # policy that models a checkpoint-restart system says it restarts from the checkpoint.
        self.keep_state = p.keep_state and not getattr(self.policy, "restarts_from_checkpoint", False)
        # Re-forming around the survivors reads no checkpoint; a checkpoint-restart runtime restarts.
        self.regroup_s = (float(p.regroup_s if p.regroup_s is not None else REGROUP_S) if self.keep_state
                          else self.restart_s)
        self.total = float(w.samples_total)
        self.planned_tp = plan.prediction.throughput_samples_per_s
        self.horizon_s = run_horizon_s(plan, p)
        # node types: the plan's groups, and the on-demand version of each
        self.types: dict[tuple[str, bool, str | None], NodeType] = {}
        self.planned_types: list[NodeType] = []
        self.fallback_types: list[NodeType] = []
        for g in plan.groups:
            t = self._type(g.cloud, g.instance_type, g.gpu, g.gpus_per_node, g.spot, g.zone, g.price_usd_per_hour)
            od = self._type(g.cloud, g.instance_type, g.gpu, g.gpus_per_node, False, g.zone, g.on_demand_price_usd_per_hour)
            self.planned_types += [t] * g.count
            self.fallback_types += [od] * g.count
        self.spot_nodes = sum(1 for t in self.planned_types if t.spot)
        tp_per_weight = self.planned_tp / max(sum(t.weight for t in self.planned_types), 1e-12)
        # policies see effective throughput: net of the periodic checkpoint stalls
        if self.interval_s < INF:
            tp_per_weight *= self.interval_s / (self.interval_s + self.checkpoint_cost_s)
        self.planned_views = tuple(
            NodeView(node_id=f"plan{i}", instance_type=t.instance_type, gpu=t.gpu, spot=t.spot, zone=t.zone,
                     price_usd_per_hour=t.price_usd_per_hour, throughput=t.weight * tp_per_weight)
            for i, t in enumerate(self.planned_types)
        )
        self.tp_per_weight = tp_per_weight
        self.options = tuple(self._option(t, tp_per_weight) for t in self.types.values())
        self.od_fallback = tuple(self._option(t, tp_per_weight) for t in self.fallback_types)
        self.price_events = self._price_events(p.price_trace) if p.price_trace else []
        self._alternatives()

    def _alternatives(self) -> None:
        """Markets of other instance types, for policies that buy them (``buys_other_types``).

        With at least one alternative, those policies see *live* options at revocations, price
        changes and ticks (:class:`~spottrain.sim.markets.LiveOptions`); every other policy sees
        exactly the options it always did."""
        plan, p = self.plan, self.params
        self.alt_types: list[NodeType] = []
        self.option_types: list[NodeType] = list(self.types.values())
        self.stall_factor = self.interval_s / (self.interval_s + self.checkpoint_cost_s) if self.interval_s < INF else 1.0
        wants = bool(getattr(self.policy, "buys_other_types", False)) and self.spot_nodes > 0
        if self.markets is None:
            self.markets = markets.Markets.for_plan(plan, self.source, p.alternatives if wants else (),
                                                    p.max_alternatives, horizon_s=self.horizon_s)
        # without alternatives the options stay the plan's, exactly as before
        self.cross = wants and bool(self.markets.groups)
        if not self.cross:
            return
        self.alt_types = markets.add_alternative_types(self.types, self.markets)
        self.option_types = list(self.types.values())
        if self.params.price_trace and self.alt_types:
            self.price_events = sorted(self.price_events + self._price_events(
                self.params.price_trace, [(t.instance_type, True, t.zone) for t in self.alt_types], required=False))
        self.live_options = markets.LiveOptions(self.option_types, self.throughput, self.stall_factor, self.restart_s)

    def _type(self, cloud, itype, gpu, gpn, spot, zone, price) -> NodeType:
        key = (itype, spot, zone)
        if key not in self.types:
            self.types[key] = NodeType(cloud=cloud, instance_type=itype, gpu=gpu_label(gpu), gpus_per_node=gpn,
                                       spot=spot, zone=zone, price_usd_per_hour=float(price),
                                       weight=gpu_weight(gpu) * gpn)
        return self.types[key]

    def _option(self, t: NodeType, tp_per_weight: float) -> NodeOption:
        return NodeOption(instance_type=t.instance_type, gpu=t.gpu, spot=t.spot, zone=t.zone,
                          price_usd_per_hour=t.price_usd_per_hour, throughput=t.weight * tp_per_weight,
                          delay_s=vm_startup_s(t.cloud) + self.restart_s,
                          p_available=getattr(self.source, "mean_up_fraction", 1.0) if t.spot else 1.0)

    def _price_events(self, name: str, keys: list | None = None,
                      required: bool = True) -> list[tuple[float, tuple[str, bool, str | None], float]]:
        return markets.price_events(name, self.types, keys, required)

    def type_for(self, option: NodeOption) -> NodeType:
        t = self.types.get((option.instance_type, option.spot, option.zone))
        if t is not None:
            return t
        same = next((x for x in self.types.values() if x.instance_type == option.instance_type), None)
        return self._type(same.cloud if same else "aws", option.instance_type, option.gpu,
                          same.gpus_per_node if same else 1, option.spot, option.zone, option.price_usd_per_hour)
