"""The array engine: many runs of one (plan, policy, revocation source) advanced together.

:class:`~spottrain.sim.job.JobRun` simulates one run at a time, one Python call per event; it
is the reference and covers every policy. For the common case - one homogeneous plan, one of
the policies below, revocations from a replayed trace, a pool of traces or a fitted lifetime
model - this module runs the *same job model* with the state of all runs held in numpy arrays:

- per run: clock, progress, durable progress, pending checkpoint, stall end, cost and billing
  rate, counters; per run and planned node (a *slot* of the job's spot nodes, as in
  :mod:`spottrain.sim.sources`): node state (free, waiting for a grant, booting, booted and
  waiting for its gang, live) and the times of its grant, boot, notice and revocation;
- each step finds, for every unfinished run, its next event (a trainer timer - end of a stall,
  a checkpoint due, the end of the work -, a node event, the tick at which a deadline policy
  switches to on-demand, the horizon), advances progress and cost linearly to it for all runs
  at once, and applies the events of that instant with array operations;
- revocation and grant times come from the trace arrays of :class:`~spottrain.sim.sources.CapacityTrace`
  looked up for all (run, slot) pairs at once (``searchsorted``); each run's trace (of a pool)
  and offset are drawn from the run's own seed exactly as the event engine draws them, so a
  trace replay gives run for run the event engine's cost and makespan. Sampled lifetimes and
  replacement delays are drawn from one generator for the whole batch (the same laws, other
  draws: equal in distribution, not run for run).

Ticks of deadline policies are not stepped one by one: within a segment the slack of
uniform progress is linear in time, so the first tick at which it is gone is computed directly.
Nor are uneventful checkpoint cycles (:meth:`_Batch._whole_cycles`): the cycles a run goes through
before anything else can happen to it are summed in one step, with the steps' additions in the
steps' order, so the runs are bit for bit those of stepping through them.

Covered (:func:`unsupported` says why not otherwise): policies in :data:`POLICIES`; plans of
one node group (spot or on-demand); synchronous training; no price trace; no chief-loss
failure; sources: none, a :class:`~spottrain.sim.sources.CapacityTrace`, a
:class:`~spottrain.sim.sources.TracePool` of them, a :class:`~spottrain.sim.sources.LifetimeSource`.
Everything else - policies that decide with per-event Python (replace-cheapest,
deadline-return, deadline-cheapest, skypilot-managed, the baselines that re-plan), mixes of
node types, asynchronous parameter-server training, price replay, recorded timelines - runs on
the event engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.clouds import GCP_PREEMPTIBLE_CAP_S, PREEMPTION_NOTICE_S, vm_startup_s
from spottrain.policies import deadline_margin_s
from spottrain.sim.markets import membership_key
from spottrain.sim.setup import RunResult, SimSetup
from spottrain.sim.sources import (CapacityTrace, LifetimeSource, NoRevocations, TracePool, replacement_sampler,
                                   replacement_wait)

INF = math.inf


@dataclass(frozen=True)
class _Rule:
    notice_checkpoint: bool
    """Checkpoint at a preemption notice."""
    replace: bool
    """Buy back a revoked node of the same type."""
    margin: str | None
    """None: no deadline logic; 'none': uniform progress; 'margin': deadline-margin's margin."""


POLICIES: dict[str, _Rule] = {
    "replace-same": _Rule(True, True, None),
    "no-replace": _Rule(True, False, None),
    "checkpoint-restart": _Rule(False, False, None),
    "on-demand": _Rule(False, False, None),
    "uniform-progress": _Rule(True, True, "none"),
    "deadline-margin": _Rule(True, True, "margin"),
}
"""Policies the array engine runs, by what they do (the same decisions as :mod:`spottrain.policies`)."""

FREE, WAIT, BOOT, READY, LIVE = 0, 1, 2, 3, 4
CYCLE_CELLS = 1 << 21
"""Most (run, step) cells :meth:`_Batch._whole_cycles` holds at once (16 MiB per array)."""


def unsupported(setup: SimSetup) -> str | None:
    """Why the array engine cannot run ``setup`` (None: it can)."""
    p = setup.params
    if setup.policy_name not in POLICIES:
        return f"policy {setup.policy_name} decides per event in Python"
    if len(setup.plan.groups) != 1:
        return "a mix of node groups"
    if not setup.sync:
        return "asynchronous parameter-server training"
    if setup.price_events:
        return "price replay"
    if getattr(setup, "cross", False):
        return "other instance types"
    if p.fail_on_chief_loss:
        return "failure on chief loss"
    if setup.spot_nodes and _members(setup.source) is None and not isinstance(setup.source, LifetimeSource):
        return f"revocation source {type(setup.source).__name__}"
    return None


def _members(source: Any) -> tuple[list[CapacityTrace], np.ndarray] | None:
    if isinstance(source, CapacityTrace):
        return [source], np.ones(1)
    if isinstance(source, TracePool) and all(isinstance(m, CapacityTrace) for m in source.members):
        return list(source.members), np.asarray(source.p)
    return None


class _TraceArrays:
    """A :class:`CapacityTrace` as arrays: event times, and per level the next up / down index."""

    def __init__(self, tr: CapacityTrace) -> None:
        self.times = np.asarray(tr._times, dtype=float)
        keys = sorted(tr._levels)
        row = {k: i for i, k in enumerate(keys)}
        self.up = np.stack([np.asarray(tr._levels[k].up, dtype=np.int64) for k in keys])
        self.down = np.stack([np.asarray(tr._levels[k].down, dtype=np.int64) for k in keys])
        self.slot_row = np.asarray([row[tr._slot_level[j]] for j in range(tr.nodes)], dtype=np.int64)
        self.nodes = tr.nodes
        self.n = len(self.times)


def _arrays(tr: CapacityTrace) -> _TraceArrays:
    got = tr.__dict__.get("_vector_arrays")
    if got is None:
        got = tr.__dict__["_vector_arrays"] = _TraceArrays(tr)
    return got


def _next_up(tr: _TraceArrays, row: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of the next event at which the slot's level is up, from event ``i`` on."""
    return tr.up[row, i]


def _next_down(tr: _TraceArrays, row: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Index of the next event at which the slot's level goes down after event ``i`` (a slot
    already down at ``i``, granted at a boundary, waits for the next one)."""
    k = tr.down[row, i]
    nxt = np.where(i + 1 < tr.n, tr.down[row, np.minimum(i + 1, tr.n - 1)], tr.n)
    return np.where(k == i, nxt, k)


@dataclass(kw_only=True)
class VectorRuns:
    """Outcomes of a batch of runs (one entry per run, in seed order)."""

    makespan_s: np.ndarray
    cost_usd: np.ndarray
    finished: np.ndarray
    deadline_met: np.ndarray | None
    revocations: np.ndarray
    lost_work_s: np.ndarray
    checkpoints: np.ndarray
    replacements: np.ndarray
    stall_s: np.ndarray
    switched_on_demand: np.ndarray
    started_s: np.ndarray

    def __len__(self) -> int:
        return len(self.cost_usd)

    def run_results(self) -> list[RunResult]:
        """The runs as :class:`~spottrain.sim.setup.RunResult` (what the event engine returns)."""
        met = self.deadline_met
        return [RunResult(makespan_s=float(self.makespan_s[i]), cost_usd=float(self.cost_usd[i]),
                          finished=bool(self.finished[i]), deadline_met=None if met is None else bool(met[i]),
                          revocations=int(self.revocations[i]), lost_work_s=float(self.lost_work_s[i]),
                          checkpoints=int(self.checkpoints[i]), replacements=int(self.replacements[i]),
                          stall_s=float(self.stall_s[i]), switched_on_demand=bool(self.switched_on_demand[i]),
                          failed=False, started_s=float(self.started_s[i]))
                for i in range(len(self))]


def run_vector(setup: SimSetup, seeds: Sequence[int], *, draw_seed: int | None = None) -> VectorRuns:
    """Run ``setup`` once per seed of ``seeds``, all runs together (see the module docstring).

    A trace replay picks each run's trace and offset from ``default_rng(seed)`` exactly as
    :func:`spottrain.sim.job.run_setup` does. Sampled lifetimes and delays come from one
    generator seeded with ``draw_seed`` (default: from the seeds). Raises ValueError when
    :func:`unsupported` gives a reason."""
    why = unsupported(setup)
    if why is not None:
        raise ValueError(f"the array engine does not cover this setup: {why}")
    return _Batch(setup, list(seeds), draw_seed).run()


class _Batch:
    def __init__(self, setup: SimSetup, seeds: list[int], draw_seed: int | None) -> None:
        s = self.s = setup
        self.rule = POLICIES[setup.policy_name]
        R = self.R = len(seeds)
        g = setup.plan.groups[0]
        self.N = N = g.count
        t = setup.planned_types[0]
        self.spot = t.spot
        self.cloud = t.cloud
        self.price = t.price_usd_per_hour / 3600.0
        od = setup.fallback_types[0]
        self.od_price = od.price_usd_per_hour / 3600.0
        self.rates = np.asarray([setup.throughput(membership_key([(t.gpu, t.gpus_per_node, k)]))
                                 for k in range(N + 1)], dtype=float)
        fixed = setup.params.startup_s
        self.startup = float(fixed) if fixed is not None else vm_startup_s(t.cloud)
        self.od_startup = float(fixed) if fixed is not None else vm_startup_s(od.cloud)
        self.notice_s = PREEMPTION_NOTICE_S.get(t.cloud, 30.0)
        self.gcp_cap = GCP_PREEMPTIBLE_CAP_S if t.cloud == "gcp" else INF
        self.rng = np.random.default_rng([int(draw_seed if draw_seed is not None else (seeds[0] if seeds else 0)),
                                          len(seeds), 7])
        # revocation source
        src = setup.source if self.spot else NoRevocations()
        self.kind = "none"
        self.delay_fn = None
        if self.spot and not isinstance(src, NoRevocations):
            mem = _members(src)
            if mem is not None:
                self.kind = "trace"
                traces, p = mem
                self.traces = [_arrays(m) for m in traces]
                member = np.zeros(R, dtype=np.int64)
                offset = np.zeros(R)
                for i, seed in enumerate(seeds):
                    rng = np.random.default_rng(seed)
                    k = int(rng.choice(len(traces), p=p)) if len(traces) > 1 else 0
                    off = rng.uniform(0.0, traces[k].duration_s)
                    fo = traces[k].fixed_offset_s
                    member[i], offset[i] = k, float(off if fo is None else fo)
                self.member, self.offset = member, offset
            else:
                self.kind = "model"
                self.life = src
                # per run, its group since it last stood empty (sources.LifetimeRun): when its outage
                # strikes, when capacity is back after it, the last revocation handed out, whether it struck
                self.outage_at, self.back_at, self.last_rv = np.full(R, -INF), np.full(R, -INF), np.full(R, -INF)
                self.struck = np.zeros(R, dtype=bool)
                if fixed is None:
                    self.delay_fn = replacement_sampler(t.cloud, t.gpu, True)[0]
        # deadline policy constants (uniform progress on the on-demand fallback)
        self.deadline = setup.plan.deadline_s
        if self.rule.margin is not None and self.deadline is not None and setup.od_fallback and self.spot:
            margin = deadline_margin_s(self.deadline) if self.rule.margin == "margin" else 0.0
            self.od_rate = max(sum(o.throughput for o in setup.od_fallback), 1e-12)
            od_delay = max(o.delay_s for o in setup.od_fallback)
            self.slack_base = self.deadline - margin - (setup.restart_s + setup.checkpoint_cost_s) - od_delay
            self.deadline_policy = True
        else:
            self.deadline_policy = False
        self.tick_s = float(setup.params.tick_s)
        self._pools: dict[str, tuple[np.ndarray, int]] = {}

    # ------------------------------------------------------------ sources
    def _acquire(self, r: np.ndarray, j: np.ndarray, t: np.ndarray, wait: np.ndarray) -> np.ndarray:
        """When slots ``j`` of runs ``r``, requested at ``t`` with their own waits for capacity
        ``wait``, are granted (inf: never). After an outage a group waits once, together
        (sources.LifetimeRun)."""
        if self.kind == "trace":
            return self._trace_event(r, j, t, _next_up) + wait
        if self.kind == "model" and self.life.outage_share > 0.0:
            run = self.st["idx"][r]
            return np.where(self._out_of_capacity(run, t), self.back_at[run], t + wait)
        return t + wait

    def _out_of_capacity(self, run: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Whether the market of runs ``run`` (original positions) has no capacity at ``t``: its
        group's outage struck and capacity is not back yet (sources.LifetimeRun.acquire_time)."""
        return self.struck[run] & (self.outage_at[run] <= t) & (t < self.back_at[run])

    def _revoke(self, r: np.ndarray, j: np.ndarray, t: np.ndarray) -> np.ndarray:
        """When slots ``j`` of runs ``r``, granted at ``t``, are revoked (inf: never)."""
        if self.kind == "none":
            return np.full(len(r), INF)
        if self.kind == "model":
            life = self._draw("life", len(r), lambda n: self.life.own(n, self.rng))
            if self.life.cap_s is not None:
                life = np.minimum(life, self.life.cap_s)
            if self.life.outage_share == 0.0:
                return t + life
            # The group's outage (sources.LifetimeRun): the run's first node granted while its group
            # stands empty starts the outage's clock.
            run = self.st["idx"][r]
            fresh = t >= self.last_rv[run]  # every node of the run's group is gone: a fresh outage clock
            if fresh.any():
                start = np.full(self.R, INF)
                np.minimum.at(start, run[fresh], t[fresh])
                runs = np.nonzero(start < INF)[0]
                self.outage_at[runs] = start[runs] + self._draw("outage", runs.size,
                                                                lambda n: self.life.outages(n, self.rng))
                self.back_at[runs] = self.outage_at[runs] + self._draw("outage wait", runs.size,
                                                                       lambda n: self.life.waits(n, self.rng))
                self.last_rv[runs], self.struck[runs] = -INF, False
            end = self.outage_at[run]
            rv = np.minimum(t + life, end)
            np.maximum.at(self.last_rv, run, rv)
            self.struck[run[rv == end]] = True
            return rv
        return self._trace_event(r, j, t, _next_down)

    def _trace_event(self, r: np.ndarray, j: np.ndarray, t: np.ndarray, index: Any) -> np.ndarray:
        """The time of the next event of slots ``j`` of runs ``r`` after ``t`` in each run's trace
        (at its offset): ``index(trace, level row, event index at t)`` gives the event's index in
        the trace (``trace.n``: none); no earlier than ``t``, inf when there is none."""
        out = np.full(len(r), INF)
        r = self.st["idx"][r]  # the run's original position (the batch shrinks as runs end)
        for m, tr in enumerate(self.traces):
            sel = np.nonzero(self.member[r] == m)[0] if len(self.traces) > 1 else np.arange(len(r))
            if sel.size == 0:
                continue
            off = self.offset[r[sel]]
            tt = t[sel]
            i = np.maximum(np.searchsorted(tr.times, tt + off, side="right") - 1, 0)
            k = index(tr, tr.slot_row[np.minimum(j[sel], tr.nodes - 1)], i)
            ok = k < tr.n
            out[sel] = np.where(ok, np.maximum(tt, tr.times[np.minimum(k, tr.n - 1)] - off), INF)
        return out

    def _delays(self, n: int, initial: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(wait for capacity, start-up) of ``n`` requested nodes. A sampled replacement delay is a
        wait (no node yet: nothing billed, nothing to revoke) and then a start-up; the plan's own
        nodes (``initial``) only start up, as in :meth:`spottrain.sim.job.JobRun._acquire`."""
        if self.delay_fn is not None:
            if initial:
                return np.zeros(n), np.full(n, self.startup)
            return replacement_wait(self._draw("delay", n, lambda k: self.delay_fn(k, self.rng)), self.startup)
        return np.zeros(n), np.full(n, self.startup)

    def _draw(self, key: str, n: int, sample: Any) -> np.ndarray:
        """``n`` draws of a law, taken from a pool drawn in bulk (one call to the law per
        thousands of draws: drawing a few at every step costs more than the draws)."""
        pool, at = self._pools.get(key, (np.zeros(0), 0))
        if at + n > pool.size:
            pool = np.concatenate([pool[at:], np.asarray(sample(max(4096, 4 * n)), dtype=float)])
            at = 0
        self._pools[key] = (pool, at + n)
        return pool[at:at + n]

    # ------------------------------------------------------------ the batch
    def run(self) -> VectorRuns:
        s, R, N = self.s, self.R, self.N
        total, interval, ckpt_cost, restart = s.total, s.interval_s, s.checkpoint_cost_s, s.restart_s
        horizon = s.horizon_s
        # per run
        st = dict(
            idx=np.arange(R), now=np.zeros(R), progress=np.zeros(R), durable=np.zeros(R), pend=np.full(R, np.nan),
            since=np.zeros(R), stall_until=np.zeros(R), cost=np.zeros(R), crate=np.zeros(R),
            live=np.zeros(R, dtype=np.int64), revs=np.zeros(R, dtype=np.int64), ckpts=np.zeros(R, dtype=np.int64),
            repl=np.zeros(R, dtype=np.int64), lost=np.zeros(R), stall_s=np.zeros(R), started=np.full(R, np.nan),
            switched=np.full(R, not self.spot), od_st=np.zeros(R, dtype=np.int8), od_boot=np.full(R, INF),
            gang_initial=np.ones(R, dtype=bool),
            # per run and slot
            ns=np.full((R, N), WAIT, dtype=np.int8), t_grant=np.zeros((R, N)), t_boot=np.full((R, N), INF),
            t_not=np.full((R, N), INF), t_rev=np.full((R, N), INF), gang=np.ones((R, N), dtype=bool),
            delay=np.zeros((R, N)),
        )
        out = dict(makespan=np.zeros(R), cost=np.zeros(R), finished=np.zeros(R, dtype=bool),
                   revs=np.zeros(R, dtype=np.int64), lost=np.zeros(R), ckpts=np.zeros(R, dtype=np.int64),
                   repl=np.zeros(R, dtype=np.int64), stall_s=np.zeros(R), switched=np.zeros(R, dtype=bool),
                   started=np.zeros(R))
        self.st = st
        # the initial request: every planned node, one gang
        if N:
            rr, jj = np.nonzero(np.ones((R, N), dtype=bool))
            wait, st["delay"][rr, jj] = self._delays(rr.size, initial=True)
            acq = self._acquire(rr, jj, np.zeros(rr.size), wait)
            st["t_grant"][rr, jj] = np.where(acq > horizon, INF, acq)
        st["t_nodes"] = np.full(R, INF)
        if N:
            self._touch(np.arange(R))
        st["dead"] = np.zeros(R, dtype=bool)
        while st["idx"].size:
            dead = st["dead"]
            self._step(total, interval, ckpt_cost, restart, horizon)
            done = st["done"]
            new = done & ~dead
            if new.any():
                d = np.nonzero(new)[0]
                ids = st["idx"][d]
                out["makespan"][ids] = st["now"][d]
                out["cost"][ids] = st["cost"][d]
                out["finished"][ids] = st["fin"][d]
                for k in ("revs", "lost", "ckpts", "repl", "stall_s", "switched"):
                    out[k][ids] = st[k][d]
                started = st["started"][d]
                out["started"][ids] = np.where(np.isnan(started), st["now"][d], started)
            st["dead"] = done
            n_dead = int(done.sum())
            if n_dead and (n_dead == done.size or n_dead >= 0.25 * done.size):
                keep = np.nonzero(~done)[0]
                for k in list(st):
                    if k not in ("done", "fin"):
                        st[k] = st[k][keep]
        deadline = s.plan.deadline_s
        met = None if deadline is None else out["finished"] & (out["makespan"] <= deadline)
        return VectorRuns(makespan_s=out["makespan"], cost_usd=out["cost"], finished=out["finished"], deadline_met=met,
                          revocations=out["revs"], lost_work_s=out["lost"] / max(s.planned_tp, 1e-12),
                          checkpoints=out["ckpts"], replacements=out["repl"], stall_s=out["stall_s"],
                          switched_on_demand=out["switched"], started_s=out["started"])

    def _step(self, total: float, interval: float, ckpt_cost: float, restart: float, horizon: float) -> None:
        st, rule = self.st, self.rule
        if interval > 0 and st["now"].size:
            self._whole_cycles(total, interval, ckpt_cost, horizon)
        now = st["now"]
        rate = self.rates[st["live"]] + np.where(st["od_st"] == 2, self.rates[self.N], 0.0)
        stalled = st["stall_until"] > now + 1e-9
        training = ~stalled & (rate > 0)
        # the trainer's next timer
        safe = np.where(training, rate, 1.0)
        dt_f = np.maximum(total - st["progress"], 0.0) / safe
        dt_c = interval - st["since"]
        finish_first = dt_f <= dt_c
        t_tr = np.where(stalled, st["stall_until"],
                        np.where(training, now + np.where(finish_first, dt_f, np.maximum(dt_c, 0.0)), INF))
        # node events (each run's next one is kept up to date by _touch)
        t_nodes = st["t_nodes"]
        t_od = st["od_boot"]
        # the tick at which a deadline policy's slack is gone (state unchanged until then)
        if self.deadline_policy and not st["switched"].all():
            t_tick = self._switch_tick(now, rate, training, st)
        else:
            t_tick = np.full(now.size, INF)
        t_next = np.minimum(np.minimum(np.minimum(t_tr, t_nodes), np.minimum(t_od, t_tick)), horizon)
        dead = st["dead"]
        t_next = np.where(dead, now, t_next)
        # advance everything linearly to t_next
        dt = t_next - now
        st["progress"] = np.where(training, st["progress"] + rate * dt, st["progress"])
        st["since"] = np.where(training, st["since"] + dt, st["since"])
        st["stall_s"] = np.where(training, st["stall_s"], st["stall_s"] + dt)
        st["cost"] = st["cost"] + st["crate"] * dt
        st["now"] = now = t_next
        done = dead.copy()
        fin = np.zeros(now.size, dtype=bool)
        st["done"], st["fin"] = done, fin
        # horizon
        done |= now >= horizon
        # trainer timers
        hit = (t_tr == now) & ~done
        if hit.any():
            r_fin = hit & training & finish_first
            if r_fin.any():
                st["progress"][r_fin] = np.maximum(st["progress"][r_fin], total)
                fin |= r_fin
                done |= r_fin
            r_ck = hit & training & ~finish_first & ~done
            if r_ck.any():
                self._begin_checkpoint(np.nonzero(r_ck)[0], ckpt_cost)
                training = training & ~r_ck
        # the end of a stall completes a pending checkpoint; a trainer past its stall trains
        ended = (st["stall_until"] <= now + 1e-9) & ~done
        ck = ended & ~np.isnan(st["pend"])
        if ck.any():
            st["durable"][ck] = st["pend"][ck]
            st["pend"][ck] = np.nan
            st["ckpts"][ck] += 1
        training = ended & (self.rates[st["live"]] + np.where(st["od_st"] == 2, self.rates[self.N], 0.0) > 0)
        self.training = training
        rows = np.nonzero((t_nodes == now) & ~done)[0] if self.N else np.zeros(0, dtype=np.int64)
        if rows.size:
            nowc = now[rows][:, None]
            ns = st["ns"]
            sub = ns[rows]
            at_rev = (st["t_rev"][rows] == nowc) & (sub >= BOOT)
            at_not = st["t_not"][rows] == nowc
            g = (sub == WAIT) & (st["t_grant"][rows] == nowc)
            if g.any():
                rr, jj = np.nonzero(g)
                self._grants(rows[rr], jj)
            b = (ns[rows] == BOOT) & (st["t_boot"][rows] == nowc)
            if b.any():
                self._boots(rows, b, restart, ckpt_cost)
            if at_not.any():
                rr, jj = np.nonzero(at_not)
                st["t_not"][rows[rr], jj] = INF
                if rule.notice_checkpoint:
                    hit_rows = rows[(at_not & (ns[rows] == LIVE)).any(axis=1)]
                    hit_rows = hit_rows[self.training[hit_rows]]
                    if hit_rows.size:
                        self._begin_checkpoint(hit_rows, ckpt_cost)
            if at_rev.any():
                k = at_rev.any(axis=1)
                self._revocations(rows[k], at_rev[k], restart, ckpt_cost, horizon)
            self._touch(rows)
        od = (t_od == now) & ~done
        if od.any():
            rows = np.nonzero(od)[0]
            st["od_st"][rows] = 2
            st["od_boot"][rows] = INF
            self._join_stall(rows, self.N, initial=False, restart=restart, ckpt_cost=ckpt_cost)
        tick = (t_tick == now) & ~done & ~st["switched"]
        if tick.any():
            rows = np.nonzero(tick)[0]
            self._switch(rows, ckpt_cost)
            self._touch(rows)

    # ------------------------------------------------------------ pieces
    def _whole_cycles(self, total: float, interval: float, ckpt_cost: float, horizon: float) -> None:
        """Advance runs at the start of a checkpoint cycle (training, nothing pending, ``since``
        0) over the whole cycles (``interval`` of training, then a checkpoint of ``ckpt_cost``)
        that end before anything else can happen to them: their next node event, on-demand boot,
        the horizon, the end of the work, and (deadline policies) the first instant their slack
        could be gone (it falls by at most 1 s per second). Such a cycle is two steps that only
        move the clock, progress, cost and the checkpoint counters; here all of them are summed
        at once, with the steps' additions in the steps' order, so the state is bit for bit the
        one the steps would give (tests/test_sim_vector.py checks it)."""
        st = self.st
        now = st["now"]
        rate = self.rates[st["live"]] + np.where(st["od_st"] == 2, self.rates[self.N], 0.0)
        at_start = ((st["since"] == 0.0) & np.isnan(st["pend"]) & (st["stall_until"] <= now + 1e-9)
                    & (rate > 0) & ~st["dead"])
        if not at_start.any():
            return
        r = np.nonzero(at_start)[0]
        cycle = interval + ckpt_cost
        t0 = now[r]
        room = np.minimum(np.minimum(st["t_nodes"][r], st["od_boot"][r]), horizon) - t0
        # cycles to spare before each bound, so that nothing of the skipped span ties with them
        m = np.floor(room / cycle) - 1.0
        m = np.minimum(m, np.floor((total - st["progress"][r]) / (rate[r] * interval)) - 1.0)
        if self.deadline_policy:
            slack = self.slack_base - t0 - np.maximum(total - st["progress"][r], 0.0) / self.od_rate
            m = np.where(st["switched"][r], m, np.minimum(m, np.floor(slack / cycle) - 2.0))
        ok = m >= 2
        if not ok.any():
            return
        r = r[ok]
        m = np.minimum(m[ok], max(2, CYCLE_CELLS // (2 * r.size))).astype(np.int64)  # memory; the rest later
        # the steps' sums, in the steps' order: the clock adds the interval, then the checkpoint
        # cost; progress, cost and stall time add rate x dt of each step. np.cumsum adds one term
        # after the other, as the steps do (zeros past a run's last cycle add nothing).
        width = 2 * int(m.max())
        live = (np.arange(width)[None, :] // 2) < m[:, None]
        inc = np.where(np.arange(width) % 2 == 0, interval, ckpt_cost)[None, :] * live
        clock = np.cumsum(np.concatenate([now[r][:, None], inc], axis=1), axis=1)
        dt = np.diff(clock, axis=1)
        prog = np.cumsum(np.concatenate([st["progress"][r][:, None], rate[r][:, None] * dt[:, 0::2]], axis=1), axis=1)
        cost = np.cumsum(np.concatenate([st["cost"][r][:, None], st["crate"][r][:, None] * dt], axis=1), axis=1)
        stall = np.cumsum(np.concatenate([st["stall_s"][r][:, None], dt[:, 1::2]], axis=1), axis=1)
        now[r] = clock[:, -1]
        st["stall_until"][r] = np.maximum(st["stall_until"][r], clock[:, -1])
        st["progress"][r] = st["durable"][r] = prog[:, -1]
        st["cost"][r] = cost[:, -1]
        st["stall_s"][r] = stall[:, -1]
        st["ckpts"][r] += m

    def _switch_tick(self, now, rate, training, st) -> np.ndarray:
        tick = self.tick_s
        s0 = self.slack_base - now - np.maximum(self.s.total - st["progress"], 0.0) / self.od_rate
        c = np.where(training, rate / self.od_rate - 1.0, -1.0)
        t1 = (np.floor(now / tick + 1e-12) + 1.0) * tick
        s1 = s0 + c * (t1 - now)
        neg = c < 0
        t_star = now + np.where(neg & (s0 > 0), s0 / np.where(neg, -c, 1.0), 0.0)
        tk = np.maximum(np.ceil(t_star / tick - 1e-12) * tick, t1)
        out = np.where(s1 <= 0, t1, np.where(neg, tk, INF))
        return np.where(st["switched"], INF, out)

    def _begin_checkpoint(self, rows: np.ndarray, ckpt_cost: float) -> None:
        st = self.st
        st["pend"][rows] = st["progress"][rows]
        st["since"][rows] = 0.0
        st["stall_until"][rows] = np.maximum(st["stall_until"][rows], st["now"][rows] + ckpt_cost)
        self.training[rows] = False

    def _request(self, rr: np.ndarray, jj: np.ndarray, horizon: float, gang: bool) -> None:
        st = self.st
        st["ns"][rr, jj] = WAIT
        st["gang"][rr, jj] = gang
        wait, st["delay"][rr, jj] = self._delays(rr.size)
        acq = self._acquire(rr, jj, st["now"][rr], wait)
        st["t_grant"][rr, jj] = np.where(acq > horizon, INF, acq)
        st["t_boot"][rr, jj] = INF
        st["t_not"][rr, jj] = INF
        st["t_rev"][rr, jj] = INF

    def _touch(self, rows: np.ndarray) -> None:
        """Recompute the next node event of runs ``rows`` (after their slots changed)."""
        st = self.st
        t = np.minimum(np.minimum(st["t_grant"][rows], st["t_boot"][rows]),
                       np.minimum(st["t_not"][rows], st["t_rev"][rows]))
        st["t_nodes"][rows] = t.min(axis=1)

    def _grants(self, rr: np.ndarray, jj: np.ndarray) -> None:
        st = self.st
        now = st["now"][rr]
        if self.kind == "model" and self.life.outage_share > 0.0:
            # a node requested before its group's outage is granted only once capacity is back
            run = st["idx"][rr]
            out = self._out_of_capacity(run, now)
            if out.any():
                back = self.back_at[run[out]]
                st["t_grant"][rr[out], jj[out]] = np.where(back > self.s.horizon_s, INF, back)
                rr, jj, now = rr[~out], jj[~out], now[~out]
        st["ns"][rr, jj] = BOOT
        st["t_grant"][rr, jj] = INF
        np.add.at(st["crate"], rr, self.price)
        delay = st["delay"][rr, jj]
        st["t_boot"][rr, jj] = now + delay
        rv = np.minimum(self._revoke(rr, jj, now), now + self.gcp_cap)
        st["t_rev"][rr, jj] = np.maximum(rv, now)
        notice = rv - self.notice_s
        st["t_not"][rr, jj] = np.where(np.isfinite(rv) & (notice > now + delay), notice, INF)

    def _boots(self, rows: np.ndarray, m: np.ndarray, restart: float, ckpt_cost: float) -> None:
        """Nodes ``m`` (a mask over the slots of runs ``rows``) have booted: they join, each gang once complete."""
        st = self.st
        ns = st["ns"]
        sub = ns[rows]
        sub[m] = READY
        tb = st["t_boot"][rows]
        tb[m] = INF
        st["t_boot"][rows] = tb
        gang = st["gang"][rows]
        gang_wait = (gang & ((sub == WAIT) | (sub == BOOT))).any(axis=1)
        joining = (sub == READY) & (~gang | ~gang_wait[:, None])
        count = joining.sum(axis=1)
        initial = (joining & gang).any(axis=1) & st["gang_initial"][rows]
        sub[joining] = LIVE
        ns[rows] = sub
        g2 = st["gang"][rows]
        g2[joining] = False
        st["gang"][rows] = g2
        k = count > 0
        rows, count, initial = rows[k], count[k], initial[k]
        if rows.size == 0:
            return
        st["gang_initial"][rows[initial]] = False
        self._join_stall(rows, count, initial=initial, restart=restart, ckpt_cost=ckpt_cost)

    def _join_stall(self, rows: np.ndarray, count: Any, *, initial: Any, restart: float, ckpt_cost: float) -> None:
        """``count`` nodes join runs ``rows``: a planned membership change checkpoints and restarts."""
        st = self.st
        count = np.broadcast_to(np.asarray(count), rows.shape)
        initial = np.broadcast_to(np.asarray(initial, dtype=bool), rows.shape)
        had = st["live"][rows] > 0
        now = st["now"][rows]
        st["started"][rows] = np.where(np.isnan(st["started"][rows]), now, st["started"][rows])
        st["live"][rows] += np.where(st["od_st"][rows] == 2, 0, count)
        later = ~initial
        st["repl"][rows] += np.where(later, count, 0)
        if self.s.keep_state and self.s.sync:
            # the joiners take the model from a peer: the group re-forms, nothing is written
            held = later & had
            st["stall_until"][rows[held]] = np.maximum(st["stall_until"][rows[held]], now[held] + self.s.regroup_s)
            ck = np.zeros(rows.shape, dtype=bool)
        else:
            held = ck = later & had & self.training[rows]
        if ck.any():
            self._begin_checkpoint(rows[ck], ckpt_cost)
            st["stall_until"][rows[ck]] += restart
        other = later & ~held
        st["stall_until"][rows[other]] = np.maximum(st["stall_until"][rows[other]], now[other] + restart)
        self.training[rows[later]] = False

    def _revocations(self, rows0: np.ndarray, rev: np.ndarray, restart: float, ckpt_cost: float,
                     horizon: float) -> None:
        """Nodes ``rev`` (a mask over the slots of runs ``rows0``) are revoked."""
        st, rule, N = self.st, self.rule, self.N
        ns = st["ns"]
        sub0 = ns[rows0]
        n_rev = rev.sum(axis=1)
        st["revs"][rows0] += n_rev
        st["crate"][rows0] = np.maximum(st["crate"][rows0] - n_rev * self.price, 0.0)
        # revoked before joining: give the slot back and try again; the gang no longer waits for
        # it (its replacement joins on its own), so the rest of the gang may join now
        early = rev & (sub0 < LIVE)
        if early.any():
            rr, jj = np.nonzero(early)
            rr = rows0[rr]
            self._request(rr, jj, horizon, gang=False)
            runs = np.unique(rr)
            self._boots(runs, np.zeros((runs.size, N), dtype=bool), restart, ckpt_cost)
        joined0 = rev & (sub0 == LIVE)
        has = joined0.any(axis=1)
        rows, joined = rows0[has], joined0[has]
        if rows.size == 0:
            return
        k = joined.sum(axis=1)
        sub = ns[rows]
        sub[joined] = FREE
        ns[rows] = sub
        for key in ("t_rev", "t_not"):
            a = st[key][rows]
            a[joined] = INF
            st[key][rows] = a
        st["live"][rows] -= k
        # the survivors hold the model (keep_state): only a run left without a live node rolls back
        alive = (st["live"][rows] > 0) | (st["od_st"][rows] == 2)
        roll = rows[~alive] if self.s.keep_state else rows
        st["lost"][roll] += np.maximum(st["progress"][roll] - st["durable"][roll], 0.0)
        st["progress"][roll] = st["durable"][roll]
        st["pend"][rows] = np.nan
        st["stall_until"][rows] = st["now"][rows] + np.where(alive & self.s.keep_state, self.s.regroup_s, restart)
        self.training[rows] = False
        # the policy, at each revoked node
        go = np.zeros(rows.size, dtype=bool)
        if self.deadline_policy:
            slack = (self.slack_base - st["now"][rows]
                     - np.maximum(self.s.total - st["progress"][rows], 0.0) / self.od_rate)
            go = (slack <= 0) & ~st["switched"][rows]
            if go.any():
                self._switch(rows[go], ckpt_cost)
        if rule.replace:
            rep = rows[~go & ~st["switched"][rows]]
            if rep.size:
                rr, jj = np.nonzero(joined[np.searchsorted(rows, rep)])
                self._request(rep[rr], jj, horizon, gang=False)
        # an empty cluster with nothing requested relaunches the plan's cluster
        if self.s.params.relaunch_when_empty:
            sub = ns[rows]
            empty = (sub == FREE).all(axis=1) & (st["od_st"][rows] == 0)
            if empty.any():
                er = rows[empty]
                rr, jj = np.nonzero(np.ones((er.size, N), dtype=bool))
                self._request(er[rr], jj, horizon, gang=True)
                st["gang_initial"][er] = False

    def _switch(self, rows: np.ndarray, ckpt_cost: float) -> None:
        """Uniform progress's switch: cancel pending spot nodes, checkpoint, release live spot
        nodes, request the on-demand fallback."""
        st = self.st
        sub = st["ns"][rows]
        st["switched"][rows] = True
        tr = self.training[rows]
        if tr.any():
            self._begin_checkpoint(rows[tr], ckpt_cost)
        live = sub == LIVE
        released = live.any(axis=1)
        billed = (sub >= BOOT).sum(axis=1)
        st["crate"][rows] = np.maximum(st["crate"][rows] - billed * self.price, 0.0)
        sub[:] = FREE
        st["ns"][rows] = sub
        for key in ("t_grant", "t_boot", "t_not", "t_rev"):
            st[key][rows] = INF
        st["live"][rows] = 0
        has_pend = ~np.isnan(st["pend"][rows])
        keep = released & has_pend
        st["durable"][rows[keep]] = st["pend"][rows[keep]]
        roll = rows[released & ~has_pend]
        st["lost"][roll] += np.maximum(st["progress"][roll] - st["durable"][roll], 0.0)
        st["progress"][roll] = st["durable"][roll]
        self.training[rows] = False
        st["od_st"][rows] = 1
        st["crate"][rows] += self.N * self.od_price
        st["od_boot"][rows] = st["now"][rows] + self.od_startup
