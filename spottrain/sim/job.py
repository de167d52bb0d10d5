"""A training job on a revocable cluster, as a discrete-event simulation.

The job processes ``samples_total`` samples at the performance model's throughput for the
current membership. What happens around it:

- **Nodes** are requested in batches (the initial cluster is one batch; a policy decision is
  one batch); a batch joins when all its nodes have booted (gang start). A spot node is granted
  when the revocation source says the market has room (trace replay) or at once (sampled
  lifetimes), bills from then on, boots (start-up / replacement delay) and joins.
- **Revocations** arrive at the time the source gives (GCP: at most 24 h after the grant), with a
  preemption **notice** ``PREEMPTION_NOTICE_S[cloud]`` seconds before (AWS 120 s, GCP 30 s). The policy is
  asked at every notice, revocation, join, price change and periodic tick (for policies that
  use ticks) and answers with a :class:`~spottrain.policies.Decision`.
- **Synchronous training** (``sync``): losing a node stalls ``regroup_s`` (detection, re-forming
  the group). The survivors hold the model, as spottrain's runtime keeps it in their memory, so
  nothing rolls back while one node is left, and a joining node takes the model from a peer (a
  ``regroup_s`` stall, no checkpoint); losing the last one rolls progress back to the last
  durable checkpoint (lost work), and the next node to join restarts from it (``restart_s``). A
  checkpoint-restart runtime (torchrun restarting every worker; the policies that stand for such
  systems, whose ``restarts_from_checkpoint`` says so; or ``SimParams(keep_state=False)`` for
  every policy) rolls back at every lost node and restarts at every change (``restart_s``). The
  chief of async PS training rolls back as before. Such a runtime's planned membership change (a join,
  a release) first checkpoints (``checkpoint_cost_s``) and then restarts: no work is lost.
  **Asynchronous PS training**: losing a non-chief worker only lowers throughput; a joining
  worker starts pulling parameters at once.
- **Checkpoints** every ``checkpoint_interval_s`` seconds of training (the plan's interval)
  stall the job ``checkpoint_cost_s``; a checkpoint interrupted by a revocation does not count.
  A policy may checkpoint on a notice (emergency checkpoint): it survives if it completes before
  the revocation.
- **Cost**: every granted node bills its current price until it is revoked or released or the
  job ends.
- **Other instance types**: a policy that buys them (``buys_other_types``, e.g. replace-cheapest)
  may request nodes of alternative types (:mod:`spottrain.sim.markets`), each spot
  type following its own market's revocations; the membership then mixes GPUs and the
  performance model prices the mix. Other policies see only the plan's types.
- An empty cluster with nothing requested relaunches the plan's cluster (what a user would do);
  runs that have not finished by the horizon count as unfinished (deadline missed).

Everything random is drawn from one ``numpy.random.Generator``: a run is deterministic given
its seed.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Any

import numpy as np

from spottrain.clouds import GCP_PREEMPTIBLE_CAP_S, PREEMPTION_NOTICE_S, vm_startup_s
from spottrain.policies import Decision, JobState, NodeOption, NodeView
from spottrain.sim import markets
from spottrain.sim.core import Environment, Interrupt
from spottrain.sim.markets import NodeType, frozen_without_init, membership_key
from spottrain.sim.setup import RunResult, SimSetup
from spottrain.sim.sources import replacement_wait

INF = math.inf


class _Node:
    __slots__ = ("id", "type", "slot", "acq", "revoke_at", "booted", "joined", "gone", "batch", "view", "first")

    def __init__(self, nid: str, ntype: NodeType, batch: "_Batch", first: bool = False) -> None:
        self.id, self.type, self.batch = nid, ntype, batch
        self.first = first  # one of the plan's own nodes, requested at the start (not a replacement)
        self.slot = -1
        self.acq = INF
        self.revoke_at = INF
        self.booted = self.joined = self.gone = False
        self.view: NodeView | None = None


class _Batch:
    __slots__ = ("nodes", "initial")

    def __init__(self, initial: bool = False) -> None:
        self.nodes: list[_Node] = []
        self.initial = initial


def run_setup(setup: SimSetup, seed: int, *, record: bool = False) -> RunResult:
    """One simulated run of ``setup`` with ``seed`` (``record``: keep the timeline for a plot).

    Deterministic given ``seed``."""
    return JobRun(setup, seed, record=record).run()


class JobRun:
    """One simulated run of the job (see the module docstring for the model)."""

    def __init__(self, setup: SimSetup, seed: int, *, record: bool = False) -> None:
        self.s = setup
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.run_markets = markets.RunMarkets(setup.source, setup.markets, self.rng, seed, setup.spot_nodes)
        self.other_type_nodes = 0
        self.env = Environment()
        self.live: dict[str, _Node] = {}
        self.pending: dict[str, _Node] = {}
        self.billed: dict[str, _Node] = {}
        self._next_id = 0
        self.rate = 0.0
        self.progress = self.durable = 0.0
        self.train_since: float | None = None
        self.stall_until = 0.0
        self.pending_ckpt: float | None = None
        self.since_ckpt = 0.0
        self.cost = 0.0
        self.cost_rate = 0.0
        self.cost_since = 0.0
        self.prices: dict[tuple[str, bool, str | None], float] = {}
        """Current price of a type whose price moved (others: the plan's price)."""
        self.options = setup.options
        self.chief: str | None = None
        self.done = self.env.event()
        self.finished = self.failed = self.switched = False
        self.revocations = self.checkpoints = self.replacements = 0
        self.lost = 0.0
        self.stall_s = 0.0
        self.started_s: float | None = None
        self._views: tuple[NodeView, ...] | None = None
        self._wake_pending = False
        self._queues: dict[str, list[_Node]] = {"boot": [], "notice": [], "revoke": []}
        self._buckets: dict[tuple[str, float], list[Any]] = {}
        self._flushers = {"boot": self._flush_boots, "notice": self._flush_notices, "revoke": self._flush_revocations}
        self.tl: dict[str, list] | None = (
            {"membership": [(0.0, 0)], "progress": [(0.0, 0.0)], "checkpoints": [], "revocations": [],
             "joins": [], "notices": [], "decisions": []} if record else None
        )

    # ------------------------------------------------------------ accounting
    def _account(self) -> None:
        if self.train_since is not None:
            now = self.env.now
            dt = now - self.train_since
            self.progress += self.rate * dt
            self.since_ckpt += dt
            self.train_since = now

    def _bill(self) -> None:
        now = self.env.now
        self.cost += self.cost_rate * (now - self.cost_since)
        self.cost_since = now

    def _set_rate(self) -> None:
        key = membership_key((n.type.gpu, n.type.gpus_per_node, 1) for n in self.live.values())
        self.rate = self.s.throughput(key)
        self._views = None
        if self.tl is not None:
            self.tl["membership"].append((self.env.now, len(self.live)))
            self.tl.setdefault("membership_keys", []).append((self.env.now, key))
            self._mark()  # progress is accounted up to now by every caller

    def _mark(self) -> None:
        if self.tl is not None:
            self.tl["progress"].append((self.env.now, self.progress))

    def _wake(self) -> None:
        if not self._wake_pending and self.trainer.is_alive:
            self._wake_pending = True
            self.trainer.interrupt("wake")

    # ------------------------------------------------------------ the trainer process
    def _trainer(self):
        env, s = self.env, self.s
        while True:
            try:
                self._wake_pending = False
                now = env.now
                if self.stall_until > now + 1e-9:
                    self.train_since = None
                    t0 = now
                    try:
                        yield env.timeout(self.stall_until - now)
                    finally:
                        self.stall_s += env.now - t0
                    self._end_stall()
                    continue
                self._end_stall()
                if self.rate <= 0.0:
                    self.train_since = None
                    t0 = now
                    try:
                        yield env.event()  # until a join wakes us
                    finally:
                        self.stall_s += env.now - t0
                    continue
                self.train_since = now
                dt_finish = max(s.total - self.progress, 0.0) / self.rate
                dt_ckpt = s.interval_s - self.since_ckpt
                if dt_finish <= dt_ckpt:
                    yield env.timeout(dt_finish)
                    self._account()
                    self.progress = max(self.progress, s.total)
                    self._finish(True)
                    return
                yield env.timeout(max(dt_ckpt, 0.0))
                self._account()
                self._begin_checkpoint()
            except Interrupt:
                self._account()

    def _begin_checkpoint(self) -> None:
        self._account()
        self.train_since = None
        self.pending_ckpt = self.progress
        self.since_ckpt = 0.0
        self.stall_until = max(self.stall_until, self.env.now + self.s.checkpoint_cost_s)
        self._mark()

    def _end_stall(self) -> None:
        if self.pending_ckpt is not None and self.env.now >= self.stall_until - 1e-9:
            self.durable = self.pending_ckpt
            self.pending_ckpt = None
            self.checkpoints += 1
            if self.tl is not None:
                self.tl["checkpoints"].append((self.env.now, self.durable))

    def _finish(self, ok: bool) -> None:
        if self.done.triggered:
            return
        self._bill()
        self.cost_rate = 0.0
        self.finished = ok
        self._mark()
        self.done.succeed()

    # ------------------------------------------------------------ nodes
    def _request(self, types: list[NodeType], *, initial: bool = False) -> None:
        batch = _Batch(initial)
        for t in types:
            node = _Node(f"n{self._next_id}", t, batch, first=initial)
            self._next_id += 1
            batch.nodes.append(node)
            self.pending[node.id] = node
            self._acquire(node)

    def _acquire(self, node: _Node) -> None:
        now = self.env.now
        t = node.type
        if t.spot:
            rev, slots, _ = self.run_markets.market(t.market)
            node.slot = heapq.heappop(slots) if slots else self.s.spot_nodes
            node.acq = rev.acquire_time(now, node.slot, group=t.group)
            delay = self.run_markets.delay_s(t)
            if rev.kind != "trace" and self.s.params.startup_s is None:
                # A sampled replacement delay is a wait for capacity (no node yet: nothing billed,
                # nothing to revoke) and then a start-up. The plan's own nodes start at once; a
                # market without capacity after an outage (acquire_time later than now) makes its
                # group wait once, together.
                wait, delay = replacement_wait(delay, vm_startup_s(t.cloud))
                if not node.first and node.acq == now:
                    node.acq += float(wait)
                delay = float(delay)
        else:
            node.acq = now
            delay = vm_startup_s(t.cloud)
        if self.s.params.startup_s is not None:
            delay = self.s.params.startup_s
        if node.acq == INF or node.acq > self.s.horizon_s:
            return
        self._at(node.acq, "grant", (node, delay))

    def _granted(self, node: _Node, delay: float) -> None:
        if node.gone or self.done.triggered:
            return
        now = self.env.now
        t = node.type
        rev = self.run_markets.market(t.market)[0] if t.spot else None
        if rev is not None:
            back = rev.acquire_time(now, node.slot, group=t.group)
            if rev.kind == "model" and back > now:  # requested before its group's outage: granted once capacity is back
                self._at(back, "grant", (node, delay))
                return
        self._bill()
        self.billed[node.id] = node
        self.cost_rate += self._price_of(node.type) / 3600.0
        if rev is not None:
            rv = rev.revoke_time(now, node.slot, group=t.group)
            if node.type.cloud == "gcp":
                rv = min(rv, now + GCP_PREEMPTIBLE_CAP_S)
            node.revoke_at = max(rv, now)
            if rv < INF:
                notice = PREEMPTION_NOTICE_S.get(node.type.cloud, 30.0)
                if rv - notice > now + delay:
                    self._at(rv - notice, "notice", node)
                self._at(node.revoke_at, "revoke", node)
        self._at(now + delay, "boot", node)

    def _at(self, time: float, kind: str, item: Any) -> None:
        """Schedule a node event; events of one kind at one instant share one queue entry
        (a trace often revokes or grants many nodes at once)."""
        key = (kind, time)
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = [item]
            self.env.call_at(time, lambda: self._fire(key))
        else:
            bucket.append(item)

    def _fire(self, key: tuple[str, float]) -> None:
        items = self._buckets.pop(key)
        kind = key[0]
        if kind == "grant":
            for node, delay in items:
                self._granted(node, delay)
            return
        q = self._queues[kind]
        was_empty = not q
        q.extend(items)
        if was_empty:
            self.env.call_at(self.env.now, self._flushers[kind], priority=2)

    def _take(self, kind: str) -> list[_Node]:
        q = self._queues[kind]
        self._queues[kind] = []
        return [n for n in q if not n.gone] if not self.done.triggered else []

    def _flush_boots(self) -> None:
        booted = self._take("boot")
        for node in booted:
            node.booted = True
        self._join_complete([n.batch for n in booted])

    def _join_complete(self, batches: list[_Batch]) -> None:
        """Join the nodes of every batch of ``batches`` whose nodes have all booted (or are gone)."""
        ready: list[_Node] = []
        initial = False
        for batch in batches:
            if all(n.booted or n.gone for n in batch.nodes):
                fresh = [n for n in batch.nodes if not n.gone and not n.joined and n not in ready]
                ready += fresh
                initial |= batch.initial and bool(fresh)
        if ready:
            self._join(ready, initial=initial)

    def _join(self, nodes: list[_Node], *, initial: bool) -> None:
        self._account()
        had = bool(self.live)
        for n in nodes:
            n.joined = True
            self.live[n.id] = n
        for n in nodes:
            self.pending.pop(n.id, None)
        if self.chief is None:
            self.chief = nodes[0].id
        now = self.env.now
        if self.started_s is None:
            self.started_s = now
        if self.tl is not None:
            self.tl["joins"].append((now, len(nodes)))
        if not initial:
            self.replacements += len(nodes)
            self.other_type_nodes += sum(1 for n in nodes if n.type.market)
            if self.s.sync and had and self.s.keep_state:
                # the joiner takes the model from a peer: the group re-forms, nothing is written
                self.stall_until = max(self.stall_until, now + self.s.regroup_s)
            elif self.s.sync and had:
                if self.train_since is not None:  # planned change: checkpoint, then restart
                    self._begin_checkpoint()
                    self.stall_until += self.s.restart_s
                else:
                    self.stall_until = max(self.stall_until, now + self.s.restart_s)
            elif not had:
                self.train_since = None
                self.stall_until = max(self.stall_until, now + self.s.restart_s)
        self._set_rate()
        self._decide("joined", nodes[0].id)
        self._wake()

    def _leave(self, node: _Node) -> None:
        node.gone = True
        if node.id in self.billed:
            self._bill()
            del self.billed[node.id]
            self.cost_rate = max(self.cost_rate - self._price_of(node.type) / 3600.0, 0.0)
        if node.slot >= 0 and node.slot < self.s.spot_nodes:
            heapq.heappush(self.run_markets.market(node.type.market)[1], node.slot)
            node.slot = -1
        self.pending.pop(node.id, None)
        self.live.pop(node.id, None)

    def _flush_notices(self) -> None:
        for node in self._take("notice"):
            if node.joined and not node.gone and not self.done.triggered:
                if self.tl is not None:
                    self.tl["notices"].append((self.env.now, node.id))
                self._decide("notice", node.id)

    def _flush_revocations(self) -> None:
        nodes = self._take("revoke")
        if not nodes:
            return
        now = self.env.now
        self.revocations += len(nodes)
        if self.tl is not None:
            self.tl["revocations"].extend((now, n.id) for n in nodes)
        joined, left = [], []
        for node in nodes:
            if node.joined:
                joined.append(node)
                continue
            # Revoked while booting: give the slot back and try again. The node's batch no longer
            # waits for it (the runtime starts with the nodes that are up); its replacement joins
            # on its own when it has booted.
            left.append(node.batch)
            self._leave(node)
            batch = _Batch()
            fresh = _Node(f"n{self._next_id}", node.type, batch)
            self._next_id += 1
            batch.nodes.append(fresh)
            self.pending[fresh.id] = fresh
            self._acquire(fresh)
        self._join_complete(left)
        if not joined:
            return
        self._account()
        views = [self._view(n) for n in joined]
        chief_lost = any(n.id == self.chief for n in joined)
        for node in joined:
            self._leave(node)
        if chief_lost:
            self.chief = next(iter(self.live), None)
            if self.s.params.fail_on_chief_loss:
                self.failed = True
                self._finish(False)
                return
        if self.s.sync and self.live and self.s.keep_state:
            # The survivors hold the model: nothing rolls back, the group re-forms around them.
            self.pending_ckpt = None
            self.train_since = None
            self.stall_until = now + self.s.regroup_s
            self._mark()
        elif self.s.sync or chief_lost:
            self.lost += max(self.progress - self.durable, 0.0)
            self.progress = self.durable
            self.pending_ckpt = None
            self.train_since = None
            self.stall_until = now + self.s.restart_s
            self._mark()
        self._set_rate()
        for node, view in zip(joined, views):
            self._decide("revoked", node.id, extra_view=view)
        if not self.live and not self.pending and self.s.params.relaunch_when_empty:
            self._request(list(self.s.planned_types))
        self._wake()

    # ------------------------------------------------------------ policy
    def _view(self, node: _Node) -> NodeView:
        if node.view is None:
            t = node.type
            node.view = frozen_without_init(NodeView, node_id=node.id, instance_type=t.instance_type, gpu=t.gpu,
                                            spot=t.spot, zone=t.zone, price_usd_per_hour=self._price_of(t),
                                            throughput=0.0)
        return node.view

    def _node_views(self) -> tuple[NodeView, ...]:
        if self._views is None:
            w = sum(n.type.weight for n in self.live.values()) or 1.0
            r = self.rate / w
            self._views = tuple(
                frozen_without_init(NodeView, node_id=n.id, instance_type=n.type.instance_type, gpu=n.type.gpu,
                                    spot=n.type.spot, zone=n.type.zone, price_usd_per_hour=self._price_of(n.type),
                                    throughput=r * n.type.weight)
                for n in self.live.values()
            )
        return self._views

    def _decide(self, event: str, subject: str | None, extra_view: NodeView | None = None) -> None:
        s = self.s
        nodes = self._node_views()
        planned = s.planned_views
        if extra_view is not None:
            # The revoked node stands in for a planned node of its type, so that the policy can
            # look it up (state.node) while the planned cluster keeps its size.
            i = next((k for k, v in enumerate(planned) if v.instance_type == extra_view.instance_type
                      and v.spot == extra_view.spot), 0)
            planned = planned[:i] + (extra_view,) + planned[i + 1:]
        state = frozen_without_init(
            JobState, now_s=self.env.now, event=event, subject=subject, nodes=nodes, planned=planned,
            pending=len(self.pending), samples_done=self.progress, samples_total=s.total,
            deadline_s=s.plan.deadline_s, restart_overhead_s=s.restart_s + s.checkpoint_cost_s,
            options=self._live_options() if s.cross and event in _LIVE_EVENTS else self.options,
            on_demand_fallback=s.od_fallback,
            pending_on_demand=sum(1 for n in self.pending.values() if not n.type.spot) if self.pending else 0,
        )
        d = s.policy(state)
        if d.request or d.release or d.checkpoint_now or d.switch_to_on_demand:
            self._apply(d)
        elif self.tl is not None and d.reason:
            self.tl["decisions"].append((self.env.now, d.reason))

    def _live_options(self) -> tuple[NodeOption, ...]:
        """Options as they stand now, valued for the live and pending nodes (policies that buy
        other types; see :class:`~spottrain.sim.markets.LiveOptions`)."""
        base: dict[tuple[str, int], int] = {}
        for pool in (self.live, self.pending):
            for n in pool.values():
                k = (n.type.gpu, n.type.gpus_per_node)
                base[k] = base.get(k, 0) + 1
        return self.s.live_options.options(base, self._price_of, lambda t: self.run_markets.p_now(t, self.env.now))

    def _apply(self, d: Decision) -> None:
        if self.tl is not None and d.reason:
            self.tl["decisions"].append((self.env.now, d.reason))
        if d.switch_to_on_demand:
            self.switched = True
            for node in [n for n in self.pending.values() if n.type.spot]:
                self._leave(node)  # outstanding spot requests are cancelled
        if d.checkpoint_now and self.train_since is not None:
            self._begin_checkpoint()
            self._wake()
        if d.release:
            self._account()
            released_live = False
            for nid in d.release:
                node = self.live.get(nid) or self.pending.get(nid)
                if node is None:
                    continue
                released_live |= node.joined
                self._leave(node)
            if released_live:
                if self.pending_ckpt is not None:  # the checkpoint just taken survives the release
                    self.durable = self.pending_ckpt
                elif not self.live or (self.s.sync and not self.s.keep_state):
                    self.lost += max(self.progress - self.durable, 0.0)
                    self.progress = self.durable
                if self.live:
                    held = self.s.sync and self.s.keep_state  # the members left hold the model
                    stall = self.s.regroup_s if held else self.s.restart_s
                    self.stall_until = max(self.stall_until, self.env.now + stall)
                self._set_rate()
                self._wake()
        if d.request:
            self._request([self.s.type_for(o) for o in d.request])

    def _price_of(self, t: NodeType) -> float:
        return self.prices.get((t.instance_type, t.spot, t.zone), t.price_usd_per_hour) if self.prices else t.price_usd_per_hour

    def _price_change(self, key: tuple[str, bool, str | None], price: float) -> None:
        if self.done.triggered:
            return
        t = self.s.types[key]
        old = self._price_of(t)
        if price == old:
            return
        self._bill()
        billed = sum(1 for n in self.billed.values() if n.type is t)
        self.cost_rate = max(self.cost_rate + billed * (price - old) / 3600.0, 0.0)
        self.prices[key] = price
        self.options = tuple(dataclasses.replace(o, price_usd_per_hour=self.prices.get(
            (o.instance_type, o.spot, o.zone), o.price_usd_per_hour)) for o in self.s.options)
        for n in self.live.values():
            n.view = None
        self._views = None
        self._account()
        self._decide("price_change", None)

    # ------------------------------------------------------------ driver
    def _ticker(self):
        while True:
            yield self.env.timeout(self.s.params.tick_s)
            if self.done.triggered:
                return
            self._account()
            self._decide("tick", None)

    def run(self) -> RunResult:
        env, s = self.env, self.s
        self.trainer = env.process(self._trainer(), "trainer")
        self._request(list(s.planned_types), initial=True)
        if s.ticks:
            env.process(self._ticker(), "ticker")
        for t, key, price in s.price_events:
            if t <= s.horizon_s:
                env.call_at(t, lambda key=key, price=price: self._price_change(key, price))
        env.call_at(s.horizon_s, lambda: self._finish(False))
        env.run(until=self.done)
        makespan = env.now
        deadline = s.plan.deadline_s
        met = None if deadline is None else bool(self.finished and makespan <= deadline)
        tl = None
        if self.tl is not None:
            tl = dict(self.tl)
            tl.update(samples_total=s.total, planned_nodes=len(s.planned_types), makespan_s=makespan,
                      deadline_s=deadline)
        return RunResult(
            makespan_s=makespan, cost_usd=self.cost, finished=self.finished, deadline_met=met,
            revocations=self.revocations, lost_work_s=self.lost / max(s.planned_tp, 1e-12),
            checkpoints=self.checkpoints, replacements=self.replacements, stall_s=self.stall_s,
            switched_on_demand=self.switched, failed=self.failed,
            started_s=self.started_s if self.started_s is not None else makespan, timeline=tl,
            other_type_nodes=self.other_type_nodes,
        )


_NOTHING = Decision()
_LIVE_EVENTS = frozenset({"revoked", "price_change", "tick"})
"""Events at which policies that buy other types see live options (they buy on these; at a notice
or a join they see the plan's options, which keeps the frequent events cheap)."""
