"""The fleet controller: one elastic job over nodes from a :class:`~spottrain.runtime.cloud.Provider`.

Same membership protocol as the local backend (:mod:`spottrain.runtime.elastic`: a c10d
TCPStore, ``gen/<g>/members``, ``ctl``, ``ready/``, ``notice/``, ``decision/``, ``left/``,
``progress``), but nodes are bought and given back through a provider, so every plan group
(its own instance type, zone, spot or on-demand) joins the one job, and every field of the
policy's :class:`~spottrain.policies.Decision` is carried out:

- ``request``: launch nodes of the option's market (a plan group, or a new group for another
  type or the on-demand fallback); each new node takes the slot of a lost one;
- ``release``: leave the membership, then terminate. A release that would leave the job with no
  member (a switch to on-demand) is held until a requested node has joined, so the state passes
  from memory to memory instead of through the last checkpoint;
- ``switch_to_on_demand``: the request holds the on-demand fallback and the release the spot
  nodes (as the policies build it); recorded as such;
- ``checkpoint_now``: a checkpoint request to every worker (``ctl``), or the answer to the node
  that posted a notice.

The policy sees what the simulator gives it: the deadline (once a step rate is measured),
progress in steps, periodic ticks, the live and planned nodes, pending requests, and options
with the plan's prices. It is an explicit state machine over provider states and store keys;
one ``_step`` per ``poll_s``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from spottrain.policies import Decision, JobState, NodeOption, NodeView, get_policy
from spottrain.runtime.cloud import ENV_RDZV, LOST, RUNNING, STARTING, SUCCEEDED, NodeGroup, Provider, parse_address
from spottrain.runtime.liveness import DEFAULT_DEADLINE_S, ENV_LIVENESS, LivenessServer
from spottrain.runtime.membership import MembershipPublisher


@dataclass(kw_only=True)
class FleetJob:
    """What the controller runs: the plan's groups, the policy, the target."""

    groups: tuple[NodeGroup, ...]
    job_id: str
    steps: int | None
    """Optimizer steps to complete (the policy's ``samples_total``, in steps); ``None``: unknown
    (the worker's own default), then deadline-aware policies decide without the deadline."""
    policy: str = "replace-same"
    env: dict[str, str] = field(default_factory=dict)
    """``SPOTTRAIN_*`` settings every worker gets."""
    deadline_s: float | None = None
    """Seconds from the start of the job (the plan's deadline)."""
    store_bind: str = "127.0.0.1:0"
    """``host:port`` the store listens on (port 0: any free port)."""
    advertise: str | None = None
    """``host:port`` the nodes use to reach the store (default: ``store_bind``'s host and the port
    bound; port 0: the port bound)."""
    liveness_port: int | None = None
    """Port of the heartbeat server (:mod:`spottrain.runtime.liveness`), on the advertised host;
    default: the store's port + 1 when that is fixed, else any free port."""
    liveness_advertise: str | None = None
    """``host:port`` the nodes use to reach the heartbeat server (default: the store's
    advertised host and the port bound)."""
    liveness_timeout_s: float = DEFAULT_DEADLINE_S
    """A joined worker silent this long (a VM gone without a word, a SIGSTOP) is declared lost."""
    tick_s: float = 300.0
    """Period of the policy's ``tick`` events (the simulator's default is 5 minutes)."""
    replacement_delay_s: float = 180.0
    """Expected time until a requested node has joined (the options' ``delay_s``)."""
    restart_overhead_s: float = 30.0
    join_timeout_s: float = 900.0
    """The first generation forms when every initial node is ready, or after this long with those that are."""
    finish_grace_s: float = 5.0
    """After the job is done, how long the controller waits for the other workers to exit
    (their last checkpoint) before it gives every node back."""
    before_launch: Callable[[str], None] | None = None
    """Called with the advertised store address once the store listens, before any node is
    launched (e.g. :func:`~spottrain.runtime.cloud.check_reachable`); an exception stops the job there."""
    ready_timeout_s: float = 1800.0
    """A node whose worker runs (launched and set up, as the provider says) but has not joined
    after this long is given up: terminated and reported to the policy as lost."""
    stop_grace_s: float = 30.0
    """When the controller stops before the end (Ctrl-C, SIGTERM, a failure): how long the
    workers get to checkpoint and exit before their nodes are taken back."""
    max_launches: int = 32
    """Nodes a policy may request over the whole job (a runaway guard)."""
    timeout_s: float = 7 * 24 * 3600.0
    poll_s: float = 0.2


@dataclass(kw_only=True)
class FleetResult:
    ok: bool
    steps_done: int
    events: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    """One entry per policy call: ``event``, ``subject`` and the decision's fields."""
    failure: str | None = None
    input_error: str | None = None
    """The one-line message of a worker that failed on the user's input (the job stopped there)."""
    reports: list[dict[str, Any]] = field(default_factory=list)
    """The chief's window reports (loss, gradient noise, window time; ``Trainer._post_window``),
    in order: what the run measured, for the store (:func:`spottrain.runtime.record.record_fleet_run`)."""


@dataclass(kw_only=True)
class _Node:
    node_id: str
    group: NodeGroup
    slot: int | None
    state: str = STARTING
    ready: bool = False
    released: bool = False
    gone: bool = False
    notice_handled: bool = False
    running_since: float | None = None


class FleetController(MembershipPublisher):
    """Run a :class:`FleetJob` on ``provider``; :meth:`run` returns a :class:`FleetResult`."""

    def __init__(self, job: FleetJob, provider: Provider,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.job = job
        self.provider = provider
        self.on_event = on_event or (lambda kind, data: None)
        self.policy = get_policy(job.policy)
        self.events: list[dict[str, Any]] = []
        self.decisions: list[dict[str, Any]] = []
        self.nodes: dict[str, _Node] = {}
        self.groups: list[NodeGroup] = list(job.groups)
        self.slots: list[str] = []
        """Node id holding each planned slot (the lost one until a replacement takes it)."""
        self.members: list[str] = []
        self.gen = -1
        self.ckpt_requests = 0
        self.launches = 0
        self.formed = False
        self.finished = False
        self.failed: str | None = None
        self.held_release: list[str] = []
        self.input_error: str | None = None
        self.held_after: tuple[int, list[str]] | None = None
        self._rate: list[tuple[float, int]] = []
        self._next_tick = job.tick_s
        self._counter: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers
    def now(self) -> float:
        return time.monotonic() - self.t0

    def record(self, kind: str, **data: Any) -> None:
        ev = {"time_s": round(self.now(), 3), "kind": kind, **data}
        self.events.append(ev)
        self.on_event(kind, ev)

    def _new_ids(self, group: NodeGroup, n: int) -> list[str]:
        k = self._counter.get(group.name, 0)
        self._counter[group.name] = k + n
        return [f"{group.name}-n{k + i}" for i in range(n)]

    def _launch(self, group: NodeGroup, n: int, slots: list[int | None]) -> list[str]:
        ids = self._new_ids(group, n)
        for node_id, slot in zip(ids, slots):
            self.nodes[node_id] = _Node(node_id=node_id, group=group, slot=slot)
            if slot is not None:
                self.slots[slot] = node_id
        env = {**self.job.env, ENV_RDZV: self.address, ENV_LIVENESS: self.liveness_address,
               "SPOTTRAIN_JOB_ID": self.job.job_id}
        self.provider.launch(group, ids, env)
        self.record("launch", group=group.name, market=group.label, nodes=ids)
        return ids

    def _key(self, key: str) -> Any | None:
        if not self.store.check([key]):
            return None
        return json.loads(self.store.get(key))

    def progress(self) -> int:
        value = self._key("progress")
        return int(value) if value is not None else 0

    # ------------------------------------------------------------------ policy state
    def _view(self, node: _Node, per_node: float) -> NodeView:
        g = node.group
        return NodeView(node_id=node.node_id, instance_type=g.instance_type, gpu=g.gpu, spot=g.spot, zone=g.zone,
                        price_usd_per_hour=g.price_usd_per_hour, throughput=per_node * g.gpus_per_node)

    def _option(self, g: NodeGroup, spot: bool, per_node: float) -> NodeOption:
        price = g.price_usd_per_hour if spot == g.spot else g.on_demand_price_usd_per_hour
        return NodeOption(instance_type=g.instance_type, gpu=g.gpu, spot=spot, zone=g.zone, price_usd_per_hour=price,
                          throughput=per_node * g.gpus_per_node, delay_s=self.job.replacement_delay_s)

    def step_rate(self) -> float | None:
        """Steps per second over the last minute of progress, ``None`` before two samples."""
        if len(self._rate) < 2 or self._rate[-1][1] <= self._rate[0][1]:
            return None
        (t0, s0), (t1, s1) = self._rate[0], self._rate[-1]
        return (s1 - s0) / max(t1 - t0, 1e-9)

    def state(self, event: str, subject: str | None) -> JobState:
        live = [n for n in (self.nodes[m] for m in self.members) if not n.released and not n.gone]
        # Members already asked to leave (their release waits for a peer to take the state) are
        # not the policy's to count: it decided about them, and a second look would decide again.
        leaving = set(self.held_release) | set(self.held_after[1] if self.held_after else ())
        rate = self.step_rate()
        gpus = sum(n.group.gpus_per_node for n in live) or 1
        per_gpu = (rate or 0.0) / gpus
        planned = tuple(self._view(self.nodes[s], per_gpu) for s in self.slots)
        options = []
        for g in self.groups:
            options.append(self._option(g, g.spot, per_gpu))
            if g.spot:
                options.append(self._option(g, False, per_gpu))
        fallback = tuple(self._option(self.nodes[s].group, False, per_gpu) for s in self.slots)
        pending = [n for n in self.nodes.values() if not n.ready and not n.gone]
        # Before a step rate is measured, slack cannot be computed: the policy decides without the deadline.
        deadline = self.job.deadline_s if rate and self.job.steps else None
        return JobState(now_s=self.now(), event=event, subject=subject,
                        nodes=tuple(self._view(n, per_gpu) for n in live if n.node_id not in leaving),
                        planned=planned, pending=len(pending), samples_done=float(self.progress()),
                        samples_total=float(self.job.steps or 0), deadline_s=deadline,
                        restart_overhead_s=self.job.restart_overhead_s, options=tuple(options),
                        on_demand_fallback=fallback, pending_on_demand=sum(1 for n in pending if not n.group.spot))

    # ------------------------------------------------------------------ decisions
    def decide(self, event: str, subject: str | None) -> Decision:
        decision = self.policy(self.state(event, subject))
        entry = {"event": event, "subject": subject, "checkpoint_now": decision.checkpoint_now,
                 "request": [f"{o.instance_type}:{'spot' if o.spot else 'on-demand'}" for o in decision.request],
                 "release": list(decision.release), "switch_to_on_demand": decision.switch_to_on_demand,
                 "reason": decision.reason}
        self.decisions.append(entry)
        self.record("decision", **entry)
        self.execute(decision, event, subject)
        return decision

    def execute(self, d: Decision, event: str, subject: str | None) -> None:
        if d.checkpoint_now and event != "notice":
            self.request_checkpoint()
        if event == "notice" and subject is not None:
            self.store.set(f"decision/{subject}", json.dumps({"checkpoint_now": d.checkpoint_now}))
        by_group: dict[str, list[NodeOption]] = {}
        for option in d.request:
            by_group.setdefault(self._group_for(option).name, []).append(option)
        for name, opts in by_group.items():
            room = self.job.max_launches - self.launches
            if room <= 0:
                self.record("refused", what="request", reason=f"max_launches {self.job.max_launches} reached")
                break
            n = min(len(opts), room)
            self.launches += n
            group = next(g for g in self.groups if g.name == name)
            self._launch(group, n, self._free_slots(n, exclude=d.release))
        if d.switch_to_on_demand:
            self.record("switch_to_on_demand", released=list(d.release), requested=len(d.request))
        if d.release:
            self.release(list(d.release))

    def _group_for(self, option: NodeOption) -> NodeGroup:
        """The group that buys ``option``: a plan group of that market, else a new one."""
        for g in self.groups:
            if (g.instance_type, g.spot, g.zone) == (option.instance_type, option.spot, option.zone):
                return g
        base = next((g for g in self.groups if g.instance_type == option.instance_type), self.groups[0])
        g = replace(base, name=f"g{len(self.groups)}{'' if option.spot else 'od'}", instance_type=option.instance_type,
                    gpu=option.gpu, spot=option.spot, zone=option.zone,
                    price_usd_per_hour=option.price_usd_per_hour, count=0)
        self.groups.append(g)
        return g

    def _free_slots(self, n: int, exclude: tuple[str, ...] = ()) -> list[int | None]:
        """Slots for ``n`` new nodes: planned slots whose node is lost or being released (a
        replacement takes its slot at once), then ``None`` (a node beyond the plan)."""
        free: list[int | None] = [i for i, node_id in enumerate(self.slots)
                                  if self.nodes[node_id].gone or self.nodes[node_id].released or node_id in exclude]
        return (free + [None] * n)[:n]

    def release(self, ids: list[str]) -> None:
        """Members leave gracefully (the heartbeat's ``release``: at the next step boundary, the
        others keep the state) and their nodes are terminated once they have left; a node not
        reachable that way leaves the membership and is terminated at once."""
        ids = [i for i in ids if i in self.nodes and not self.nodes[i].gone and not self.nodes[i].released]
        if not ids:
            return
        keep = [m for m in self.members if m not in ids and not self.nodes[m].gone]
        if not keep and self.formed:
            # Nobody would hold the state: release once a requested node has joined and trained.
            self.held_release = sorted(set(self.held_release) | set(ids))
            self.record("release_held", nodes=ids, reason="no member would remain; waiting for a requested node")
            return
        now_gone = []
        for i in ids:
            self.nodes[i].released = True
            if not (self.formed and i in self.members and self.liveness.send(i, {"release": True, "checkpoint": False})):
                now_gone.append(i)
        if now_gone and self.formed and any(m in now_gone for m in self.members):
            self.publish([m for m in self.members if m not in now_gone and not self.nodes[m].gone])
        for i in now_gone:
            self.nodes[i].gone = True
            self.provider.terminate(i)
        self.record("release", nodes=ids, graceful=[i for i in ids if i not in now_gone])

    # ------------------------------------------------------------------ main loop
    def run(self) -> FleetResult:
        import torch.distributed as dist

        host, port = parse_address(self.job.store_bind, option="store_bind", any_port=True)
        self.store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
        adv = self.job.advertise
        if adv and adv.endswith(":0"):  # the advertised host, the port bound
            adv = f"{adv[:-2]}:{self.store.port}"
        self.address = adv if adv else f"{host}:{self.store.port}"
        lport = self.job.liveness_port if self.job.liveness_port is not None else (port + 1 if port else 0)
        self.liveness = LivenessServer(host=host, port=lport)
        self.liveness_address = self.job.liveness_advertise or f"{self.address.rsplit(':', 1)[0]}:{self.liveness.port}"
        self.t0 = time.monotonic()
        self.record("start", policy=self.job.policy, address=self.address,
                    groups=[f"{g.count}x {g.label}" for g in self.job.groups])
        try:
            if self.job.before_launch is not None:
                self.job.before_launch(self.address)
                self.job.before_launch(self.liveness_address)
            for g in self.job.groups:
                if g.count > 0:
                    first = len(self.slots)
                    self.slots.extend([""] * g.count)
                    self._launch(g, g.count, list(range(first, first + g.count)))
            while not self._step():
                time.sleep(self.job.poll_s)
        except BaseException as exc:  # Ctrl-C, SIGTERM turned into an exception, a bug: stop cleanly
            self.failed = self.failed or f"controller stopped ({type(exc).__name__})"
            raise
        finally:
            if not self.finished:
                self._stop_workers()
            self.provider.shutdown()
            self.liveness.close()
            self.record("stop", failed=self.failed)
        try:
            reports = self.reports()
        except Exception as exc:  # noqa: BLE001 - the run's result matters more than its measurements
            self.record("reports-lost", error=str(exc))
            reports = []
        return FleetResult(ok=self.finished and self.failed is None, steps_done=self.progress(), events=self.events,
                           decisions=self.decisions, failure=self.failed, input_error=self.input_error,
                           reports=reports)

    def _step(self) -> bool:
        now = self.now()
        states = self.provider.poll()
        for node_id, st in states.items():
            node = self.nodes.get(node_id)
            if node is None or node.gone:
                continue
            node.state = st
            if st == RUNNING and node.running_since is None:
                node.running_since = now
            if st == SUCCEEDED and not self.finished:
                self.finished = True
                self.finish_by = now + self.job.finish_grace_s
                self.record("finished", node=node_id, steps=self.progress())
            elif st == LOST:
                report = None if node.released else self._key(f"error/{node_id}")
                if report is not None:
                    self._failed_in_code(node, report)
                    return True
                self._lost(node, "lost" if not node.released else "released")
        if self.job.steps and not self.finished and self.formed and self.progress() >= self.job.steps:
            self.finished = True
            self.finish_by = now + self.job.finish_grace_s
            self.record("finished", node=None, steps=self.progress())
        for node in list(self.nodes.values()):
            if node.gone:
                continue
            if not node.released and not node.ready and self._key(f"ready/{node.node_id}") is not None:
                node.ready = True
                self._joined(node)
            elif (not node.ready and node.running_since is not None and not self.finished
                  and now - node.running_since > self.job.ready_timeout_s):
                self._lost(node, f"never joined in {self.job.ready_timeout_s:.0f}s")
                continue
            if (node.ready and not node.released and not node.notice_handled
                    and self._key(f"notice/{node.node_id}") is not None):
                node.notice_handled = True
                self.record("notice", node=node.node_id)
                self.decide("notice", node.node_id)
            if node.ready and self._key(f"left/{node.node_id}") is not None:
                self._lost(node, "left")
            elif node.ready and not self.finished:
                self._check_liveness(node)
        if self.formed and not self.finished:
            self.check_regroup(lambda m: m in self.nodes and not self.nodes[m].gone and not self.nodes[m].released)
        if self.held_after is not None and self.progress() >= self.held_after[0]:
            held, self.held_after = self.held_after[1], None
            self.release(held)
        if self.finished:
            running = [n.node_id for n in self.nodes.values() if not n.gone and n.state in (RUNNING, STARTING) and n.ready]
            if running and now > self.finish_by:
                self.record("finish_timeout", nodes=running)
            return not running or now > self.finish_by
        if not self.formed and self._initial_ready(now):
            ready = [n.node_id for n in self.nodes.values() if n.ready and not n.gone and not n.released]
            self.formed = True
            self._next_tick = now + self.job.tick_s
            self.publish(ready)
        step = self.progress()
        if not self._rate or step != self._rate[-1][1]:
            self._rate.append((now, step))
            while len(self._rate) > 2 and now - self._rate[1][0] > 60.0:
                self._rate.pop(0)
        if self.formed and now >= self._next_tick:
            self._next_tick = now + self.job.tick_s
            self.decide("tick", None)
        alive = [n for n in self.nodes.values() if not n.gone]
        if self.formed and not alive:
            self.failed = "all nodes lost and the policy requested no replacement"
            return True
        if now > self.job.timeout_s:
            self.failed = f"timed out after {self.job.timeout_s:.0f}s"
            return True
        return False

    def _stop_workers(self) -> None:
        """Every worker checkpoints (rank 0) and exits (the heartbeat's ``stop``), for at most
        ``stop_grace_s``; the provider then takes every node back."""
        self.liveness.stop(self.failed or "controller stopping")
        self.record("stopping", reason=self.failed)
        end = time.monotonic() + self.job.stop_grace_s
        while time.monotonic() < end:
            states = self.provider.poll()
            if not any(st in (RUNNING, STARTING) and not self.nodes[n].gone and self.nodes[n].ready
                       for n, st in states.items() if n in self.nodes):
                return
            time.sleep(0.2)

    def _initial_ready(self, now: float) -> bool:
        initial = [self.nodes[s] for s in self.slots]
        if all(n.ready or n.gone for n in initial) and any(n.ready for n in initial):
            return True
        return now > self.job.join_timeout_s and any(n.ready for n in self.nodes.values())

    def _joined(self, node: _Node) -> None:
        self.record("ready", node=node.node_id, group=node.group.name)
        if not self.formed or self.finished:
            return
        members = [m for m in self.members if not self.nodes[m].gone and not self.nodes[m].released] + [node.node_id]
        self.record("joined", node=node.node_id)
        self.publish(members)
        if self.held_release:
            # Released members stay for two more steps, so the one that joined gets the state
            # from them (a peer) instead of from the last checkpoint; then they go.
            self.held_after = (self.progress() + 2, self.held_release)
            self.held_release = []
        self.decide("joined", node.node_id)

    def _failed_in_code(self, node: _Node, report: dict[str, Any]) -> None:
        """A worker posted ``error/<node>`` before its node ended: an exception in the training
        code, or the user's input (a setting, a checkpoint). Not a revocation: the job stops
        here and nothing is replaced."""
        node.gone = True
        message = str(report.get("message") or report.get("type"))
        self.record("error", node=node.node_id, input=bool(report.get("input")), type=report.get("type"),
                    message=message)
        if report.get("input"):
            self.input_error = message
            self.failed = f"node {node.node_id} failed on its input: {message}; not retried"
        else:
            self.failed = f"node {node.node_id} raised {report.get('type')} in the training code: {message}; not retried"

    def _check_liveness(self, node: _Node) -> None:
        st = self.liveness.status(node.node_id)
        if st is None:
            return  # not connected yet (the provider's state covers a node that never starts)
        state, silent = st
        if state == "closed":
            self._lost(node, "disconnected")
        elif state == "open" and silent > self.job.liveness_timeout_s:
            self._lost(node, f"silent {silent:.1f}s")

    def _lost(self, node: _Node, how: str) -> None:
        node.gone = True
        if self.finished:
            if node.released:  # asked to leave before the last step, left after it: still give it back
                self.provider.terminate(node.node_id)
            return
        self.record("lost", node=node.node_id, how=how, was_member=node.node_id in self.members,
                    released=node.released)
        if how not in ("left", "lost", "released"):
            # declared lost by liveness: fence it (it exits if it still runs) and give the machine back
            self.liveness.fence(node.node_id, how)
            self.provider.terminate(node.node_id)
        if node.node_id in self.held_release:
            self.held_release.remove(node.node_id)
        if node.node_id in self.members:
            survivors = [m for m in self.members if not self.nodes[m].gone]
            if survivors:
                self.publish(survivors, abort=how != "left")
        if node.released:
            self.provider.terminate(node.node_id)  # it left as asked: give the machine back
            return
        if self.formed or node.slot is not None:
            self.decide("revoked", node.node_id)
