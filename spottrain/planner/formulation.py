"""The planner's optimization problem, solved as a mixed-integer linear program with HiGHS.

Sets
----
- ``I``: candidates, one per (cloud, instance type, market, region) after zone dominance
  (:mod:`spottrain.planner.candidates`).
- ``J``: columns ``j = (i, n)``: ``n`` nodes of candidate ``i``, ``1 <= n <= min(max_nodes,
  quota_i)`` (spotDNN bounds the worker counts per type; we bound them by quota and max nodes).
- ``G``: placement groups. All nodes of a plan share a group: the same cloud and region
  (data locality, one network), and in synchronous training also the same GPUs per node. A
  synchronous mix of GPU models runs at the slowest worker (the performance model's mix rule:
  the slowest compute, the total GPUs' all-reduce over the slowest network), which pays off
  when a quota caps the cheapest type; asynchronous PS mixes anything (spotDNN).

Parameters (per column, from the models; :mod:`spottrain.planner.columns`)
--------------------------------------------------------------------------
- ``P_j``: price rate ($/h) = n x node price (spot or on-demand; SkyPilot catalog).
- ``E_j = W / E[T_j]``: effective throughput (samples/s) of the column as a cluster of its own,
  ``E[T_j]`` from the risk model (perf-model throughput, checkpoint overhead at the optimal
  interval, lost work, restarts; CM-DARE / spotDNN / Young-Daly; :mod:`spottrain.planner.risk`).
- ``Q_j = W / T_j^(c)``: throughput at the confidence level ``c`` (``T^(c)`` = c-quantile of time).
- ``traffic_j``: gradient bytes/s pushed to the parameter servers (async PS only).

Decision variables
------------------
- ``x_j in {0, 1}``: column ``j`` is part of the plan. Choosing a count by a one-hot over ``n``
  (an SOS1 set per candidate) makes the piecewise-linear throughput curve exact at every
  integer count, however nonlinear the performance model is in ``n``.
- ``z_g in {0, 1}``: the plan is placed in group ``g``.
- ``y_(g,N) in {0, 1}``: group ``g`` holds ``N`` nodes in total (sync only).
- ``e >= 0`` (continuous): the plan's effective throughput in the relaxation.

Constraints
-----------
1. ``sum_{n} x_(i,n) <= 1`` for each candidate (one count per node kind).
2. ``sum_{j in g} x_j <= K z_g``, ``sum_g z_g = 1``: one group, at most ``K = 3`` node kinds
   (heterogeneous mixes of up to three types; spotDNN, Srift).
3. ``sum_j n_j x_j <= max_nodes``; per instance-type quotas ``sum_{j: type q} n_j x_j <= quota_q``.
4. Deadline with confidence: ``sum_j Q_j x_j >= W / D``.
5. On-demand anchor (DeepVM): ``sum_{j on-demand} n_j x_j >= 1`` and, with a share ``s``,
   ``sum_{on-demand} n_j x_j - s sum_j n_j x_j >= 0``.
6. PS capacity (async): ``traffic_j <= ps x PS bandwidth`` for a column; a mix is checked
   exactly when it is evaluated. No row for mixes: summing its parts' traffic at their own
   throughput overstates a mix's (the parts slow each other at the servers), so such a row would
   cut feasible mixes (random one-server requests against brute force found such optima).
7. Budget: ``sum_j (P_j W / 3600 - B E_j) x_j <= 0`` (expected cost <= B), and with a hard cap
   ``H`` on the 95th-percentile cost the same with ``W / T_j^(0.95)``.
8. GPU memory: columns whose GPU cannot hold the per-GPU batch are never generated.
9. Mix throughput: ``e <= sum_j E_j x_j`` and, in synchronous training (a group's nodes have the
   same GPU, GPUs per node and network), ``sum_N y_(g,N) = z_g``,
   ``sum_N N y_(g,N) = sum_{j in g} n_j x_j`` and ``e <= sum_(g,N) Ebar_g(N) y_(g,N)``, with
   ``Ebar_g(N)`` the best effective throughput of N nodes of one kind of the group: a synchronous
   mix of N nodes with the same GPUs per node is no faster than N nodes of its fastest kind (its
   compute waits for the slowest GPU, its all-reduce moves the same bytes over the slowest
   network), and its revocation losses are at least those of an all-on-demand cluster.

Objectives
----------
- min-cost: minimize ``W / 3600 * sum P_j x_j / e`` (expected cost), a 0-1 linear-fractional
  program, solved exactly by Dinkelbach's method: repeatedly minimize ``sum P_j x_j - lambda e``
  and set ``lambda`` to the ratio of the solution.
- max-throughput: maximize ``e`` subject to the budget (7, with ``e`` in place of the sum).

Linearization and why the answer is exact
-----------------------------------------
For one column (a homogeneous cluster) every parameter is the exact model value. A mix is
evaluated by the performance model's heterogeneous rule and the risk model of the whole
cluster; the linear model adds up its parts' failure-free throughput (:func:`free_times`),
which never underestimates the mix (a mix is at most as fast as its parts run separately,
needs no fewer samples than any of them, and loses time to revocations and checkpoints), so
the MILP is a relaxation. The parts' own effective throughput (losses included) would not be:
a mix loses, per revocation, the share of its throughput the lost node carried while the
replacement comes, and checkpoints at the interval of its total rate, so it can lose less than
its parts do as clusters of their own
(found by random requests against brute force, ``tests/test_planner_solver.py``). We solve it lazily: each MILP solution is evaluated exactly, excluded
by a no-good cut, and the search stops when the relaxation cannot beat the best exact plan.
With the exhaustive homogeneous enumeration as the first incumbent this is a branch-and-bound
whose answer equals exhaustive search (tested against brute force).

Pruning (provable under the same relaxation)
--------------------------------------------
- Zones: a dearer zone of the same type, market and region is dominated (candidates).
- Counts beyond the throughput peak are not pruned: a node that adds no throughput is a spare,
  whose loss stops no work while its replacement comes (the survivors train at the throughput of
  the nodes left, :func:`spottrain.planner.columns.lost_shares`), so such a cluster can lose less
  to revocations than the smaller one it does not outrun.
- Bounds and window: with incumbent ratio ``lambda*`` a mix must have
  ``sum (P_j - lambda* E_j) < 0``; a column is dropped when even the ``K - 1`` most favourable
  other kinds of its group cannot make up for it, and when ``Q_j`` plus the ``K - 1`` largest
  ``Q`` of other kinds cannot reach ``W / D`` (spotDNN's lower bound and sliding window).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from spottrain.planner.candidates import Candidate
from spottrain.planner.columns import Columns

if TYPE_CHECKING:
    from scipy import sparse

Picks = tuple[tuple[int, int], ...]
"""A plan as ((candidate index, node count), ...), sorted."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Constraints shared by the homogeneous screen and the MILP."""

    max_nodes: int = 64
    max_kinds: int = 3
    quotas: dict[str, int] | None = None
    anchor_min_on_demand: int = 0
    anchor_share: float = 0.0
    ps_capacity_bytes_per_s: float | None = None
    deadline_s: float | None = None
    confidence: float = 0.95
    budget_usd: float | None = None
    hard_cap_usd: float | None = None
    same_gpu: bool = True


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """The exact evaluation of a plan."""

    picks: Picks
    time_mean_s: float
    time_q_s: float
    time_p95_s: float
    price_rate: float
    """$/h with every node held (what the solver's bounds price)."""
    billed_rate: float
    """Mean $/h billed over the run (:func:`spottrain.planner.columns.billed_rate`)."""
    p_deadline: float | None
    feasible: bool
    thr: float
    low: float
    high: float
    bottleneck: str
    interval_s: float
    revocations: float
    why_not: str = ""
    p_on_demand: float = 0.0
    """Probability that the deadline policy moves the run to on-demand nodes (its times, cost,
    revocations and P(deadline) count it: :func:`spottrain.planner.risk.fallback`)."""

    @property
    def cost_usd(self) -> float:
        return self.billed_rate / 3600.0 * self.time_mean_s

    @property
    def cost_p95_usd(self) -> float:
        return self.billed_rate / 3600.0 * self.time_p95_s


@dataclass(kw_only=True)
class SolveStats:
    columns_total: int = 0
    columns_after_pruning: int = 0
    milp_calls: int = 0
    exact_evaluations: int = 0
    plans_enumerated: int = 0
    seconds: float = 0.0
    proven_optimal: bool = True
    notes: list[str] = field(default_factory=list)


def group_keys(cands: Sequence[Candidate], same_gpu: bool) -> list[tuple]:
    """Placement group of each candidate. ``same_gpu`` (synchronous training): nodes with the same
    GPUs per node may mix (any GPU model; every step waits for the slowest); else (asynchronous
    PS) any node of the cloud and region."""
    if same_gpu:
        return [(c.cloud, c.region, c.gpus_per_node) for c in cands]
    return [(c.cloud, c.region) for c in cands]


def _top_others(values: np.ndarray, owner: np.ndarray, grp: np.ndarray, k: int, best: bool) -> np.ndarray:
    """For each column, the sum of the ``k`` best per-candidate values among *other* candidates of
    its group (``best``: largest; else smallest, counting only negative ones). ``owner`` must be
    sorted (columns are stored candidate by candidate)."""
    if k <= 0 or values.size == 0:
        return np.zeros(values.size)
    sign = -1.0 if best else 1.0
    v = sign * values
    uc, start = np.unique(owner, return_index=True)
    cval = np.minimum.reduceat(v, start)
    if not best:
        cval = np.minimum(cval, 0.0)
    cgrp = grp[start]
    order = np.lexsort((cval, cgrp))
    sg, sv = cgrp[order], cval[order]
    gstart = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]])
    gend = np.r_[gstart[1:], sg.size]
    rank = np.empty(uc.size, dtype=int)
    rank[order] = np.arange(uc.size) - np.repeat(gstart, gend - gstart)
    topk = np.zeros(uc.size)
    topk1 = np.zeros(uc.size)
    for a, b in zip(gstart, gend):
        t = sv[a:min(b, a + k + 1)]
        members = order[a:b]
        topk[members] = t[:k].sum()
        topk1[members] = t.sum()
    cand_other = np.where(rank < k, topk1 - cval, topk)
    return sign * cand_other[np.searchsorted(uc, owner)]


class _Rows:
    """The MILP's constraint rows as sparse (row, column, value) triplets: a dense matrix would need
    rows x columns memory (thousands of candidates x tens of thousands of columns). Variables are
    laid out x, z, y, u, then e (the last column)."""

    def __init__(self, prob: "MixProblem") -> None:
        self.nvar = prob.nvar
        self.offsets = (0, prob.nx, prob.nx + prob.ng, prob.nx + prob.ng + prob.ny)  # of x, z, y, u
        self.ri: list[np.ndarray] = []
        self.ci: list[np.ndarray] = []
        self.vi: list[np.ndarray] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, xpart=None, zpart=None, ypart=None, epart=0.0, l=-np.inf, h=np.inf, upart=None) -> None:
        """One row ``l <= xpart.x + zpart.z + ypart.y + upart.u + epart e <= h``."""
        r = len(self.lo)
        for part, off in zip((xpart, zpart, ypart, upart), self.offsets):
            if part is not None:
                part = np.asarray(part, float)
                nz = np.flatnonzero(part)
                self.ri.append(np.full(nz.size, r))
                self.ci.append(nz + off)
                self.vi.append(part[nz])
        if epart:
            self.ri.append(np.array([r]))
            self.ci.append(np.array([self.nvar - 1]))
            self.vi.append(np.array([float(epart)]))
        self.lo.append(l)
        self.hi.append(h)

    def add_block(self, row: np.ndarray, col: np.ndarray, val: np.ndarray, count: int, *, h: float) -> None:
        """``count`` rows at once (``-inf <= . <= h``): entry k sits in new row ``row[k]``, column ``col[k]``."""
        self.ri.append(row + len(self.lo))
        self.ci.append(col)
        self.vi.append(val)
        self.lo.extend([-np.inf] * count)
        self.hi.extend([h] * count)

    def triplets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
        return cat(self.ri, int), cat(self.ci, int), cat(self.vi, float)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array(self.lo, float), np.array(self.hi, float)

    def sparse(self) -> sparse.csr_matrix:
        from scipy import sparse  # lazy: scipy's sparse matrices and MILP load only when a MILP is solved

        r, c, v = self.triplets()
        return sparse.csr_matrix((v, (r, c)), shape=(len(self.lo), self.nvar))

    def dense(self) -> np.ndarray:
        r, c, v = self.triplets()
        A = np.zeros((len(self.lo), self.nvar))
        np.add.at(A, (r, c), v)
        return A


class MixProblem:
    """The MILP over a pruned set of columns, with no-good cuts added as the search goes.

    Variables: ``x`` (columns), ``z`` (groups), ``y[g, N]`` (the group's total node count, one-hot)
    and a continuous ``e`` (effective throughput of the plan). ``e <= sum E_j x_j`` (parts) and,
    in synchronous training where a group's nodes are performance-identical, ``e <= thr_g(N)``
    (the best effective throughput of N such nodes): the bound that keeps the relaxation tight.
    """

    def __init__(self, cols: Columns, keep: np.ndarray, cands: Sequence[Candidate], limits: Limits,
                 work: float, group_cap: Callable[[list[int], int], np.ndarray] | None = None) -> None:
        self.j = np.flatnonzero(keep)
        self.cols, self.cands, self.limits, self.work = cols, cands, limits, work
        cand = cols.cand[self.j]
        self.n = cols.n[self.j].astype(float)
        self.grp, ng = self._placement_groups(cand)
        M = int(limits.max_nodes) if group_cap is not None else 0
        shape_caps = self._group_caps(group_cap, cand, ng, M)
        self.nx, self.ng, self.ny, self.nu = self.j.size, ng, ng * M, len(shape_caps)
        self.nvar = self.nx + self.ng + self.ny + self.nu + 1
        free_mean, self.free_q = free_times(cols, limits.confidence, self.j)
        self.E, self.P = self._q(free_mean), cols.price_rate[self.j]
        rows = _Rows(self)
        self._add_plan_rows(rows, cand)
        if M:
            self._add_group_size_rows(rows, M, shape_caps)
        self._add_cost_rows(rows)
        self._rows = rows
        self._A: sparse.csr_matrix | None = None
        self.lo, self.hi = rows.bounds()
        self.M = M
        self.shape_caps = shape_caps
        self.cuts: list[tuple[np.ndarray, float]] = []
        self.plans_checked = 0
        self.calls = 0
        self.work = 0
        self.time_limit_s = SAFETY_TIME_LIMIT_S

    def _placement_groups(self, cand: np.ndarray) -> tuple[np.ndarray, int]:
        """The placement group (:func:`group_keys`) of each column, numbered in key order, and
        how many groups there are."""
        keys = group_keys(self.cands, self.limits.same_gpu)
        gkeys = sorted({keys[i] for i in cand})
        gid = {k: g for g, k in enumerate(gkeys)}
        return np.array([gid[keys[i]] for i in cand], dtype=int), len(gkeys)

    def _group_caps(self, group_cap: Callable | None, cand: np.ndarray, ng: int,
                    M: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """Set ``self.cap[g, N-1]``, the best throughput of N nodes of group g (None without
        ``group_cap``), and return the per-shape curves of groups with several node shapes (a
        synchronous mix runs no faster than N nodes of its slowest shape; u_s = 1 when shape s is
        in the plan) as (group, member mask over x, curve)."""
        shape_caps: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.cap = None
        if not M:
            return shape_caps
        self.cap = np.zeros((ng, M))
        members: dict[int, set[int]] = {}
        for k, i in enumerate(cand):
            members.setdefault(int(self.grp[k]), set()).add(int(i))
        for g in range(ng):
            caps = group_cap(sorted(members[g]), M)
            if isinstance(caps, np.ndarray):
                caps = [(set(members[g]), caps)]
            self.cap[g] = np.max([c for _, c in caps], axis=0)
            if len(caps) > 1:
                for ids, curve in caps:
                    shape_caps.append((g, np.isin(cand, list(ids)), np.asarray(curve, float)))
        return shape_caps

    def _add_plan_rows(self, rows: "_Rows", cand: np.ndarray) -> None:
        """What a plan may hold: one count per candidate, at most ``max_kinds`` columns in one
        placement group, node limit, quotas, deadline, on-demand anchor, and ``e <= sum of its
        parts`` (PS capacity is checked on the columns and on each evaluated plan)."""
        limits, cands, n, grp, ng, nx = self.limits, self.cands, self.n, self.grp, self.ng, self.nx
        # one count per candidate: a row per candidate, built at once
        uc, inv = np.unique(cand, return_inverse=True)
        rows.add_block(inv.astype(int), np.arange(nx), np.ones(nx), uc.size, h=1.0)
        for g in range(ng):
            zp = np.zeros(ng)
            zp[g] = -limits.max_kinds
            rows.add(xpart=(grp == g).astype(float), zpart=zp, h=0.0)
        rows.add(zpart=np.ones(ng), l=1.0, h=1.0)
        rows.add(xpart=n, h=float(limits.max_nodes))
        if limits.quotas:
            for name, q in limits.quotas.items():
                mask = np.array([name.lower() in (cands[i].instance_type.lower(), cands[i].gpu.lower()) for i in cand])
                if mask.any():
                    rows.add(xpart=n * mask, h=float(q))
        if limits.deadline_s is not None:
            rows.add(xpart=self._q(self.free_q), l=self.work / limits.deadline_s)
        od = np.array([not cands[i].spot for i in cand], dtype=float)
        if limits.anchor_min_on_demand > 0:
            rows.add(xpart=n * od, l=float(limits.anchor_min_on_demand))
        if limits.anchor_share > 0:
            rows.add(xpart=n * od - limits.anchor_share * n, l=0.0)
        rows.add(xpart=-self.E, epart=1.0, h=0.0)  # e <= sum of parts

    def _add_group_size_rows(self, rows: "_Rows", M: int, shape_caps: list[tuple[int, np.ndarray, np.ndarray]]) -> None:
        """Synchronous training: ``y[g, N]`` one-hot of the active group's node count N, and
        ``e <= thr_g(N)`` (and ``e <= thr_s(N)`` for each node shape s present)."""
        ng, ny, nu, n, grp = self.ng, self.ny, self.nu, self.n, self.grp
        for g in range(ng):
            yg = np.zeros(ny)
            yg[g * M:(g + 1) * M] = 1.0
            zp = np.zeros(ng)
            zp[g] = -1.0
            rows.add(zpart=zp, ypart=yg, l=0.0, h=0.0)  # one total count for the active group
            yn = np.zeros(ny)
            yn[g * M:(g + 1) * M] = -np.arange(1, M + 1)
            rows.add(xpart=n * (grp == g), ypart=yn, l=0.0, h=0.0)
        rows.add(ypart=-self.cap.reshape(-1), epart=1.0, h=0.0)  # e <= thr_g(N)
        big = float(self.cap.max()) * 2.0 + 1.0
        for s_idx, (g, in_shape, curve) in enumerate(shape_caps):
            u = np.zeros(nu)
            u[s_idx] = -float(self.limits.max_kinds)
            rows.add(xpart=in_shape.astype(float), upart=u, h=0.0)  # u_s = 1 when a column of shape s is chosen
            yc = np.zeros(ny)
            yc[g * M:(g + 1) * M] = -curve
            u = np.zeros(nu)
            u[s_idx] = big
            rows.add(ypart=yc, upart=u, epart=1.0, h=big)  # e <= thr_s(N) when shape s is present

    def _add_cost_rows(self, rows: "_Rows") -> None:
        """Budget on the expected cost, hard cap on the p95 cost (linear in x through e)."""
        limits, work = self.limits, self.work
        if limits.budget_usd is not None:
            rows.add(xpart=self.P * work / 3600.0, epart=-limits.budget_usd, h=0.0)
        if limits.hard_cap_usd is not None:
            e95 = self.E  # the p95 time is at least the failure-free time (free_times)
            rows.add(xpart=self.P * work / 3600.0 - limits.hard_cap_usd * e95, h=0.0)

    def _q(self, t: np.ndarray) -> np.ndarray:
        return np.divide(self.work, t, out=np.zeros_like(t), where=np.isfinite(t) & (t > 0))

    def _index(self, picks: Picks) -> list[int]:
        want = set(picks)
        return [k for k, jj in enumerate(self.j) if (int(self.cols.cand[jj]), int(self.cols.n[jj])) in want]

    def cut(self, picks: Picks) -> None:
        """No-good cut: never return exactly this set of columns again."""
        row = np.zeros(self.nvar)
        row[: self.nx] = -1.0
        chosen = self._index(picks)
        row[chosen] = 1.0
        self.cuts.append((row, len(chosen) - 1.0))

    def solve(self, c_x: np.ndarray, c_e: float = 0.0, *, e_floor: float | None = None) -> tuple[Picks | None, float]:
        """Minimize ``c_x . x + c_e e``; returns the picks and the objective value."""
        from scipy import sparse  # lazy: as in _Rows.matrix
        from scipy.optimize import Bounds, LinearConstraint, milp

        self.calls += 1
        self.work += self.nvar
        c = np.zeros(self.nvar)
        c[: self.nx] = c_x
        c[-1] = c_e
        if self._A is None:
            self._A = self._rows.sparse()
        A, lo, hi = self._A, self.lo, self.hi
        extra = [r for r, _ in self.cuts]
        elo = [-np.inf] * len(self.cuts)
        ehi = [b for _, b in self.cuts]
        if e_floor is not None:
            r = np.zeros(self.nvar)
            r[-1] = 1.0
            extra.append(r)
            elo.append(e_floor)
            ehi.append(np.inf)
        if extra:
            A = sparse.vstack([A, sparse.csr_matrix(np.array(extra))]).tocsr()
            lo, hi = np.concatenate([lo, elo]), np.concatenate([hi, ehi])
        integrality = np.ones(self.nvar)
        integrality[-1] = 0
        ub = np.ones(self.nvar)
        ub[-1] = np.inf
        with _solver_stdout_silenced():
            res = milp(c, constraints=LinearConstraint(A, lo, hi), integrality=integrality,
                       bounds=Bounds(np.zeros(self.nvar), ub),
                       options={"disp": False, "mip_rel_gap": 1e-9, "node_limit": MILP_NODE_LIMIT,
                                "time_limit": self.time_limit_s})
        if res.status == 1:  # node limit (or the safety net's time limit)
            self.timed_out = True
        if res.x is None or res.status not in (0, 1):
            return None, np.inf
        return self.picks_of(np.flatnonzero(res.x[: self.nx] > 0.5)), float(res.fun)

    def plans(self, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Every plan the MILP admits, when there are at most ``limit`` ways to choose up to
        ``max_kinds`` columns of one group (else None): each as a row of column indices (-1: none),
        with its price rate and its relaxed throughput ``e`` (the largest the rows allow).

        The MILP's own rows decide, evaluated at each integer point (``z`` its group, ``y`` its
        group's node count, ``u`` the node shapes present), so no constraint is written twice."""
        K = int(self.limits.max_kinds)
        groups = [np.flatnonzero(self.grp == g) for g in range(self.ng)]
        ways = sum(math.comb(m.size, k) for m in groups for k in range(1, min(K, m.size) + 1))
        if ways > limit or ways * len(self.lo) > ENUMERATE_MAX_CELLS:
            return None
        self.plans_checked = ways
        chunks = [np.array(list(itertools.combinations(m, k)), dtype=int).reshape(-1, k)
                  for m in groups for k in range(1, min(K, m.size) + 1)]
        combos = np.full((sum(len(c) for c in chunks), K), -1, dtype=int)
        r = 0
        for c in chunks:
            combos[r:r + len(c), :c.shape[1]] = c
            r += len(c)
        A = self._rows.dense()
        parts = [self._admitted(combos[a:a + 2048], A) for a in range(0, len(combos), 2048)]
        ok = np.concatenate([p[0] for p in parts])
        return combos[ok], np.concatenate([p[1] for p in parts])[ok], np.concatenate([p[2] for p in parts])[ok]

    def _admitted(self, combos: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For rows of column indices: whether the MILP's rows admit each plan, its price rate
        and the largest ``e`` they allow."""
        K = combos.shape[1]
        valid = combos >= 0
        idx = np.where(valid, combos, 0)
        cand = np.where(valid, self.cols.cand[self.j][idx], -1 - np.arange(K))
        cand.sort(axis=1)
        ok = (np.diff(cand, axis=1) != 0).all(axis=1)  # one count per candidate
        nx, ng, ny = self.nx, self.ng, self.ny
        rest = sum(A[:, idx[:, k]].T * valid[:, k, None] for k in range(K))
        g = self.grp[idx[:, 0]]
        rest += A[:, nx + g].T
        if self.M:
            total = (self.n[idx] * valid).sum(axis=1).astype(int)
            ok &= total <= self.M
            rest += A[:, nx + ng + g * self.M + np.clip(total, 1, self.M) - 1].T
        for s, (_, in_shape, _) in enumerate(self.shape_caps):
            present = (in_shape[idx] & valid).any(axis=1)
            rest += present[:, None] * A[None, :, nx + ng + ny + s]
        a, lo, hi = A[:, -1], self.lo, self.hi
        tol = 1e-9 * (1.0 + np.abs(rest))
        plain = a == 0
        ok &= ((rest[:, plain] >= lo[plain] - tol[:, plain]) & (rest[:, plain] <= hi[plain] + tol[:, plain])).all(axis=1)
        with np.errstate(invalid="ignore"):
            up = np.where(a > 0, hi - rest, lo - rest)[:, ~plain] / a[~plain]
            down = np.where(a > 0, lo - rest, hi - rest)[:, ~plain] / a[~plain]
        e_max = np.min(up, axis=1, initial=np.inf)
        e_min = np.maximum(np.max(down, axis=1, initial=-np.inf), 0.0)
        ok &= (e_max >= e_min - 1e-9 * (1.0 + np.abs(e_min))) & (e_max > 0)
        return ok, (self.P[idx] * valid).sum(axis=1), e_max

    def picks_of(self, combo: np.ndarray) -> Picks:
        """The plan of the kept columns at positions ``combo`` (negative: none)."""
        return tuple(sorted((int(self.cols.cand[self.j[k]]), int(self.cols.n[self.j[k]])) for k in combo if k >= 0))

    def throughput(self, picks: Picks) -> float:
        """The relaxation's effective throughput of a plan (an upper bound of the exact one)."""
        idx = self._index(picks)
        e = float(self.E[idx].sum())
        if self.cap is not None and idx:
            g = int(self.grp[idx[0]])
            total = int(self.n[idx].sum())
            e = min(e, float(self.cap[g, total - 1]))
        return e

    def ratio(self, picks: Picks) -> float:
        idx = self._index(picks)
        return float(self.P[idx].sum() / max(self.throughput(picks), 1e-300))


def spot_mask(cands: Sequence[Candidate]) -> np.ndarray:
    return np.array([c.spot for c in cands], dtype=bool)


def homogeneous_feasible(cols: Columns, cands: Sequence[Candidate], limits: Limits, work: float,
                         traffic: np.ndarray | None) -> np.ndarray:
    """Mask of columns that satisfy every constraint on their own (exact)."""
    ok = np.isfinite(cols.time_mean_s) & (cols.n <= limits.max_nodes)
    if limits.deadline_s is not None and cols.p_deadline is not None:
        ok &= cols.p_deadline >= limits.confidence
    od = ~spot_mask(cands)[cols.cand] if cols.size else np.zeros(0, bool)
    if limits.anchor_min_on_demand > 0 or limits.anchor_share > 0:
        ok &= od & (cols.n >= limits.anchor_min_on_demand)
    if limits.budget_usd is not None:
        ok &= cols.cost_usd <= limits.budget_usd
    if limits.hard_cap_usd is not None:
        ok &= cols.cost_p95_usd <= limits.hard_cap_usd
    if traffic is not None and limits.ps_capacity_bytes_per_s is not None:
        ok &= traffic <= limits.ps_capacity_bytes_per_s
    return ok


def free_times(cols: Columns, confidence: float, idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each column's failure-free completion time as a cluster of its own (launch plus its samples
    at the performance model's median throughput; at the high end of the throughput interval for
    the confidence quantile when the confidence is below one half): the mean and the quantile.

    The mix search's relaxation adds these parts up. A mix is no faster than its parts' throughput
    together and needs no fewer samples than any part alone, and its mean, quantile (confidence at
    least one half) and p95 times are no shorter than its failure-free median time, so the sum
    bounds every mix from above. The columns' own times (revocation and checkpoint losses
    included) do not add up that way: a mix loses, per revocation, the share of its throughput the
    lost node carried while the replacement comes, and checkpoints at the interval of its total
    revocation rate, so its losses can be smaller than the sum of its parts' losses as clusters of
    their own."""
    from spottrain.planner.risk import LAUNCH_S  # risk imports the transience layer: only when a mix is searched

    sel = slice(None) if idx is None else idx
    thr, high, work = cols.thr[sel], cols.high[sel], cols.work[sel]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(thr > 0, LAUNCH_S + work / np.where(thr > 0, thr, 1.0), np.inf)
        fast = thr if confidence >= 0.5 else high
        q = np.where(fast > 0, LAUNCH_S + work / np.where(fast > 0, fast, 1.0), np.inf)
    return mean, q


def prune(cols: Columns, cands: Sequence[Candidate], limits: Limits, work: float, objective: str,
          incumbent: Outcome | None) -> np.ndarray:
    """Columns that may still appear in a mix better than ``incumbent`` (see module docstring)."""
    free_mean, free_q = free_times(cols, limits.confidence)
    keep = np.isfinite(free_mean) & (cols.n <= limits.max_nodes)
    if limits.max_kinds < 2 or cols.size == 0:
        return np.zeros(cols.size, bool)
    E = np.divide(work, free_mean, out=np.zeros(cols.size), where=np.isfinite(free_mean))
    Q = np.divide(work, free_q, out=np.zeros(cols.size), where=np.isfinite(free_q))
    keys = group_keys(cands, limits.same_gpu)
    gid: dict[tuple, int] = {}
    cgid = np.array([gid.setdefault(k, len(gid)) for k in keys], dtype=int)
    grp = cgid[cols.cand]
    k = limits.max_kinds - 1
    idx = np.flatnonzero(keep)
    if limits.deadline_s is not None:
        need = work / limits.deadline_s
        others = _top_others(Q[idx], cols.cand[idx], grp[idx], k, best=True)
        keep[idx[Q[idx] + others < need * (1 - 1e-12)]] = False
        idx = np.flatnonzero(keep)
    if incumbent is not None and objective == "min-cost":
        lam = incumbent.billed_rate / (work / incumbent.time_mean_s)
        s = cols.price_rate[idx] - lam * E[idx]
        others = _top_others(s, cols.cand[idx], grp[idx], k, best=False)
        keep[idx[s + others >= 0]] = False
    elif incumbent is not None and objective == "max-throughput":
        e_inc = work / incumbent.time_mean_s
        others = _top_others(E[idx], cols.cand[idx], grp[idx], k, best=True)
        keep[idx[E[idx] + others <= e_inc * (1 + 1e-12)]] = False
    if limits.budget_usd is not None:
        idx = np.flatnonzero(keep)
        u = cols.price_rate[idx] * work / 3600.0 - limits.budget_usd * E[idx]
        others = _top_others(u, cols.cand[idx], grp[idx], k, best=False)
        keep[idx[u + others > 0]] = False
    # a mix needs at least two candidates of one group
    idx = np.flatnonzero(keep)
    if idx.size:
        pairs = np.unique(np.stack([grp[idx], cols.cand[idx]]), axis=1)
        kinds = np.bincount(pairs[0], minlength=len(gid))
        keep[idx[kinds[grp[idx]] < 2]] = False
    return keep


MAX_MILP_COLUMNS = 500
"""Columns beyond which one MILP solve takes seconds (its root LP and presolve, not its branching:
~0.7 s CPU at 485 columns, ~10 s at 2,769); the MILP then sees the most promising ones and the
answer is no longer proven optimal (``SolveStats.proven_optimal``)."""

MILP_NODE_LIMIT = 1000
"""Branch-and-bound nodes one MILP solve may explore (HiGHS ``mip_max_nodes``). The search is
bounded by counts, never by the clock, so the same request gives the same plan whatever the
machine's load; the bench requests' solves that finish explore at most ~60 nodes."""

MILP_WORK_LIMIT = 3000
"""MILP variables summed over one search's solves (each solve adds its variable count) after
which the lazy search stops with its best plan found (not proven optimal); a MILP larger than
the limit is not solved at all. Deterministic, like :data:`MILP_NODE_LIMIT`."""

ENUMERATE_MAX_PLANS = 200_000
"""Up to this many ways to choose the columns of a plan, they are enumerated and checked against
the MILP's rows with numpy instead of solving MILPs (:meth:`MixProblem.plans`): the optimum,
proven, with no solver and no solver import. A lazy MILP search with no-good cuts needs one solve
per plan it rules out, each slower than the last (e.g. 35 solves, 1.1 s, for the spotDNN-like
baseline's 741 plans, against milliseconds enumerated), and stops at 40 exact evaluations;
bench/plan_quality.py's ResNet-50 / 8 h request (39,773 ways) is proven after 309 evaluations in
~0.1 s. Memory stays bounded: the plans are checked 2,048 at a time."""

ENUMERATE_MAX_CELLS = 10_000_000
"""And up to this many (plan, MILP row) checks, ~0.13 us each (~1.3 s at the limit): the bench's
$50 budget (156,953 ways over 193 rows, ~4 s to enumerate) goes to the MILP instead."""

ENUMERATED_MAX_EVALUATIONS = 2000
"""Exact evaluations an enumerated search may make (each about half a millisecond, against a MILP
solve per evaluation in the lazy search, which stops at 40): bench/plan_quality.py's ResNet-50 /
8 h request proves its optimum after 309. Asynchronous PS requests need more: their chief's
rollbacks put the exact costs further above the relaxation (failure-free times), and 4 of 10
random one-server requests of the solver tests' generator prove theirs after 1,033-1,301
evaluations (0.5-0.7 s)."""

SAFETY_TIME_LIMIT_S = 60.0
"""A wall-clock limit kept only as a last resort against a pathological MILP (per solve, and on
the whole search); the count limits stop every bench request long before it. A plan it stops
says so in the solver notes, and only such a plan may depend on the machine's load."""


def _most_promising(cols: Columns, keep: np.ndarray, work: float, objective: str,
                    incumbent: Outcome | None) -> np.ndarray:
    """The :data:`MAX_MILP_COLUMNS` kept columns with the best reduced cost against the incumbent
    (min-cost: ``P_j - lambda* E_j``; else the highest effective throughput)."""
    idx = np.flatnonzero(keep)
    E = np.divide(work, cols.time_mean_s[idx], out=np.zeros(idx.size), where=np.isfinite(cols.time_mean_s[idx]))
    if objective == "min-cost":
        lam = incumbent.billed_rate / (work / incumbent.time_mean_s) if incumbent is not None else 0.0
        score = cols.billed_rate[idx] - lam * E if incumbent is not None else cols.billed_rate[idx] / np.maximum(E, 1e-300)
    else:
        score = -E
    out = np.zeros(keep.size, bool)
    out[idx[np.argsort(score, kind="stable")[:MAX_MILP_COLUMNS]]] = True
    return out


def solve_mix(cols: Columns, cands: Sequence[Candidate], limits: Limits, work: float, objective: str,
              incumbent: Outcome | None, evaluate: Callable[[Picks], Outcome],
              *, max_iterations: int = 40, work_limit: int | None = MILP_WORK_LIMIT,
              time_limit_s: float = SAFETY_TIME_LIMIT_S, stats: SolveStats | None = None,
              group_cap: Callable[[list[int], int], np.ndarray] | None = None) -> Outcome | None:
    """Improve ``incumbent`` with heterogeneous mixes (lazy MILP, see the module docstring).

    The search stops after ``max_iterations`` exact evaluations or once its solves have added up
    ``work_limit`` MILP variables (None: no such limit); ``time_limit_s`` is only a safety net."""
    stats = stats or SolveStats()
    t0 = time.perf_counter()
    keep = prune(cols, cands, limits, work, objective, incumbent)
    stats.columns_total = cols.size
    stats.columns_after_pruning = int(keep.sum())
    if keep.sum() > MAX_MILP_COLUMNS:
        keep = _most_promising(cols, keep, work, objective, incumbent)
        stats.proven_optimal = False
        stats.notes.append(f"mixes of the {MAX_MILP_COLUMNS} most promising of {stats.columns_after_pruning} columns")
    best = incumbent
    if not keep.any():
        stats.seconds += time.perf_counter() - t0
        return best
    prob = MixProblem(cols, keep, cands, limits, work, group_cap if limits.same_gpu else None)
    prob.time_limit_s = time_limit_s
    prob.timed_out = False
    if work_limit is not None and prob.nvar > work_limit:
        stats.proven_optimal = False
        stats.notes.append(f"MILP of {prob.nvar:,} variables over the work limit ({work_limit:,}): not solved")
        stats.seconds += time.perf_counter() - t0
        return best
    enumerated = prob.plans(ENUMERATE_MAX_PLANS)
    if enumerated is not None:
        best = _best_first(prob, enumerated, work, objective, best, evaluate, ENUMERATED_MAX_EVALUATIONS, stats)
        stats.seconds += time.perf_counter() - t0
        return best
    seen: set[Picks] = set()
    tol = 1e-9
    for _ in range(max_iterations):
        if objective == "min-cost":
            if best is not None:
                lam = best.billed_rate / (work / best.time_mean_s)
                picks, val = prob.solve(prob.P, -lam)
                if picks is None or val >= -tol * max(1.0, float(np.abs(prob.P).max())):
                    break
            else:
                picks, _ = prob.solve(prob.P, -1e-9)
                if picks is None:
                    break
                lam = prob.ratio(picks)
                for _ in range(30):  # Dinkelbach
                    p2, val = prob.solve(prob.P, -lam)
                    if p2 is None or val >= -tol * max(1.0, float(np.abs(prob.P).max())):
                        break
                    picks, lam = p2, prob.ratio(p2)
        else:
            floor = (work / best.time_mean_s) * (1 + 1e-9) if best is not None else 0.0
            picks, val = prob.solve(np.zeros(prob.nx), -1.0, e_floor=floor if best is not None else None)
            if picks is None:
                break
        if picks in seen:  # cannot happen with the cut in place; guards against solver tolerance
            stats.notes.append("solver returned a cut solution; stopped")
            break
        seen.add(picks)
        out = evaluate(picks)
        stats.exact_evaluations += 1
        prob.cut(picks)
        if out.feasible and (best is None or _better(out, best, objective)):
            best = out
        if work_limit is not None and prob.work >= work_limit:
            stats.proven_optimal = False
            stats.notes.append(f"stopped after {prob.calls} MILP solves ({prob.work:,} variables in all)")
            break
        if time.perf_counter() - t0 > time_limit_s:
            stats.proven_optimal = False
            stats.notes.append(f"stopped after {time_limit_s:.1f} s (safety time limit)")
            break
    else:
        stats.proven_optimal = False
        stats.notes.append(f"stopped after {max_iterations} exact evaluations")
    if prob.timed_out:
        stats.proven_optimal = False
        stats.notes.append("a MILP solve hit its node limit")
    stats.milp_calls += prob.calls
    stats.seconds += time.perf_counter() - t0
    return best


def _best_first(prob: MixProblem, enumerated: tuple[np.ndarray, np.ndarray, np.ndarray], work: float, objective: str,
                best: Outcome | None, evaluate: Callable[[Picks], Outcome], max_iterations: int,
                stats: SolveStats) -> Outcome | None:
    """The lazy search of :func:`solve_mix` over an enumerated plan set: evaluate exactly in order
    of the relaxation's cost ratio (min-cost) or throughput (max-throughput) and stop when the
    relaxation of the next plan cannot beat the best exact one. The relaxation never
    underestimates a plan, so the answer is the lazy MILP's (the optimum), found with fewer exact
    evaluations and no solver."""
    combos, price, e = enumerated
    stats.plans_enumerated += prob.plans_checked
    key = price / e if objective == "min-cost" else -e
    evaluations = 0
    for k in np.argsort(key, kind="stable"):
        if best is not None:
            best_e = work / best.time_mean_s
            if objective == "min-cost" and key[k] >= best.billed_rate / best_e * (1 - 1e-9):
                break
            if objective != "min-cost" and e[k] <= best_e * (1 + 1e-9):
                break
        if evaluations == max_iterations:
            stats.proven_optimal = False
            stats.notes.append(f"stopped after {max_iterations} exact evaluations")
            break
        out = evaluate(prob.picks_of(combos[k]))
        evaluations += 1
        if out.feasible and (best is None or _better(out, best, objective)):
            best = out
    stats.exact_evaluations += evaluations
    return best


def _better(a: Outcome, b: Outcome, objective: str) -> bool:
    if objective == "min-cost":
        return a.cost_usd < b.cost_usd * (1 - 1e-12)
    return a.time_mean_s < b.time_mean_s * (1 - 1e-12)


@contextlib.contextmanager
def _solver_stdout_silenced():
    """Point file descriptor 1 at /dev/null while HiGHS runs.

    Some HiGHS builds write a debug line ("HighsMipSolverData::transformNewIntegerFeasibleSolution
    tmpSolver.run();") straight to the C stdout whatever ``disp`` says (ERGO-Code/HiGHS#2783),
    which would corrupt ``spottrain plan --json``. Python's own buffer is flushed first so nothing
    of ours is lost.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no real stdout (embedded, closed): nothing to guard
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            try:
                yield
            finally:
                os.dup2(saved, 1)
    finally:
        os.close(saved)
