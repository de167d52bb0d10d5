"""What a plan's revocation figures rest on, and how far they move when that evidence is weak.

Each spot group of a plan is priced with the lifetime law of its (cloud, GPU)
(:func:`spottrain.transience.lifetime_model`). That law is one of three kinds of evidence:

- ``traced``: fitted on node lifetimes of this cloud and GPU (shipped revocation traces);
- ``elsewhere``: this GPU has traces on another cloud, but not on this one; the law used is
  pooled over this cloud's other GPUs (or every trace), and the GPU's law on the other cloud is
  one of the plausible laws;
- ``pooled``: neither this cloud nor any other has traces of this GPU; the law is pooled.

A pooled law is an average of unlike markets, so it must not be read as a measurement. For a plan
with any non-traced spot group, :func:`plan_evidence` re-assesses P(deadline) under each
*plausible* law (the laws of the trace pools the pooled law was made of, and the GPU's own law on
another cloud), with the same risk model (:mod:`spottrain.planner.risk`), and reports the range
and the worst plausible law. A plan's evidence is its weakest group's (on-demand groups need
none). ``spottrain plan --evidence traced`` plans only on spot types with traces of their own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from spottrain.planner import risk
from spottrain.planner.columns import assess_cluster, lost_shares, on_demand_fallback
from spottrain.transience.select import known_pools, lifetime_model
from spottrain.units import (
    format_count, format_duration, format_interval, format_probability, format_rate, format_usd, plural,
)

ORDER = ("on-demand", "traced", "elsewhere", "pooled")
"""Evidence kinds from strongest to weakest."""
TITLE = {"on-demand": "on-demand (no revocations)", "traced": "trace-backed",
         "elsewhere": "fitted on this GPU elsewhere", "pooled": "pooled"}


@dataclass(frozen=True, kw_only=True)
class Law:
    """One lifetime law the risk model can price a group with."""

    label: str
    """``'aws/T4 (230 nodes, 210 revocations)'``."""
    mean_lifetime_s: float
    key: tuple[str, str]
    """(cloud, GPU) whose fitted law this is (:func:`spottrain.transience.lifetime_model`)."""


@dataclass(frozen=True, kw_only=True)
class GroupEvidence:
    instance_type: str
    cloud: str
    gpu: str
    kind: str
    """on-demand, traced, elsewhere or pooled."""
    detail: str
    """What the law is fitted on, in words."""
    law: Law | None
    """The law the planner used (None on demand)."""
    plausible: tuple[Law, ...] = ()
    """Other laws this group's market could follow (empty when traced or on demand)."""

    def to_dict(self) -> dict[str, Any]:
        return {"instance_type": self.instance_type, "cloud": self.cloud, "gpu": self.gpu, "kind": self.kind,
                "detail": self.detail, "law": None if self.law is None else self.law.label,
                "mean_lifetime_h": None if self.law is None else self.law.mean_lifetime_s / 3600,
                "plausible_laws": [{"law": x.label, "mean_lifetime_h": x.mean_lifetime_s / 3600}
                                   for x in self.plausible]}


@dataclass(frozen=True, kw_only=True)
class PlanEvidence:
    kind: str
    """The weakest of the groups' kinds."""
    groups: tuple[GroupEvidence, ...]
    p_deadline_model: float | None
    """P(deadline) under the laws the planner used (analytical model)."""
    p_deadline_low: float | None = None
    """Least P(deadline) over the plausible laws (None when every group is traced)."""
    p_deadline_high: float | None = None
    worst_law: str | None = None
    """The plausible law that gives ``p_deadline_low``."""

    @property
    def title(self) -> str:
        return TITLE[self.kind]

    def headline(self) -> str:
        """One line: ``'evidence: pooled -- no azure lifetime data ...; P(deadline) 41.3 % to > 99.9 %
        over 7 plausible lifetime laws (worst: aws/T4 ...)'``."""
        parts = []
        for g in self.groups:
            if g.kind == "on-demand":
                continue
            parts.append(f"{g.instance_type} {TITLE[g.kind]} ({g.detail})")
        text = f"evidence: {self.title}"
        if parts:
            text += " -- " + "; ".join(parts)
        if self.p_deadline_low is not None and self.p_deadline_high is not None:
            n = sum(len(g.plausible) for g in self.groups)
            text += (f"; P(meet deadline) {format_probability(self.p_deadline_low)} to "
                     f"{format_probability(self.p_deadline_high)} over {plural(n, 'plausible lifetime law')} "
                     f"(analytical model; worst: {self.worst_law})")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "headline": self.headline(),
                "groups": [g.to_dict() for g in self.groups], "p_deadline_model": self.p_deadline_model,
                "p_deadline_low": self.p_deadline_low, "p_deadline_high": self.p_deadline_high,
                "worst_law": self.worst_law}


# --------------------------------------------------------------------------- laws


@functools.cache
def _traced_laws() -> dict[tuple[str, str], tuple[Law, tuple[str, ...]]]:
    """(cloud, GPU) with traces of its own -> (its law, the trace names it is fitted on)."""
    out = {}
    for cloud, gpu in known_pools():
        m = lifetime_model(cloud, gpu)
        if m.pooled_from is None:
            out[(cloud, gpu)] = (Law(label=f"{cloud}/{gpu} ({plural(m.n_nodes, 'node')}, "
                                           f"{plural(m.n_revocations, 'revocation')})",
                                     mean_lifetime_s=float(m.mean_lifetime_s()), key=(cloud, gpu)), tuple(m.sources))
    return out


def has_own_traces(cloud: str, gpu: str) -> bool:
    """Whether spot ``gpu`` servers on ``cloud`` have a lifetime law fitted on their own traces."""
    return lifetime_model(cloud, gpu).pooled_from is None


@functools.cache
def group_evidence(cloud: str, gpu: str, instance_type: str, spot: bool) -> GroupEvidence:
    """The evidence behind one node kind's revocation figures."""
    if not spot:
        return GroupEvidence(instance_type=instance_type, cloud=cloud, gpu=gpu, kind="on-demand",
                             detail="no revocations", law=None)
    m = lifetime_model(cloud, gpu)
    used = Law(label=f"{m.name} fit on {plural(m.n_nodes, 'node')}", mean_lifetime_s=float(m.mean_lifetime_s()),
               key=(cloud, gpu))
    if m.pooled_from is None:
        detail = (f"{m.name} law fitted on {plural(m.n_nodes, 'node')} and {plural(m.n_revocations, 'revocation')} "
                  f"of {cloud}/{m.gpu}")
        return GroupEvidence(instance_type=instance_type, cloud=cloud, gpu=gpu, kind="traced", detail=detail,
                             law=used)
    traced = _traced_laws()
    sources = set(m.sources)
    members = [law for key, (law, names) in sorted(traced.items()) if sources & set(names)]
    elsewhere = [law for (c, g), (law, _) in sorted(traced.items()) if g == m.gpu and c != cloud]
    kind = "elsewhere" if elsewhere else "pooled"
    plausible = tuple(dict.fromkeys(elsewhere + members))
    detail = f"no {cloud}/{m.gpu} traces; {m.name} law pooled from {m.pooled_from.split(' (')[0]}"
    if elsewhere:
        detail += f"; {m.gpu} traced on " + ", ".join(x.label.split("/")[0] for x in elsewhere)
    return GroupEvidence(instance_type=instance_type, cloud=cloud, gpu=gpu, kind=kind, detail=detail, law=used,
                         plausible=plausible)


# --------------------------------------------------------------------------- a plan


@functools.cache
def _revocation_under(law_key: tuple[str, str], cloud: str, gpu: str) -> risk.Revocation:
    """A ``cloud``/``gpu`` node's revocations with the lifetime law of ``law_key`` (its own
    replacement delay and preemption notice)."""
    own = risk.revocation(cloud, gpu)
    if law_key == (cloud, gpu):
        return own
    return risk.revocation_of(lifetime_model(*law_key), restart_mean_s=own.restart_mean_s,
                              restart_sd_s=own.restart_sd_s, source=own.source, notice_s=own.notice_s,
                              outage_share=own.outage_share)


def _p_deadline(plan: Any, laws: list[Law | None], *, job: Any = None) -> float | None:
    """P(deadline) of ``plan`` by the risk model with each group's lifetime law given (None: on demand)."""
    if plan.deadline_s is None:
        return None
    total = sum(g.count for g in plan.groups)
    p = plan.prediction
    revs = [(g.count, _revocation_under(law.key, g.cloud, g.gpu)) for g, law in zip(plan.groups, laws)
            if law is not None]
    gpus = sum(g.count * g.gpus_per_node for g in plan.groups)
    work_sd = float(job.work_log_sd(total, gpus)[0]) if job is not None else 0.0
    ckpt = float(job.checkpoint_s) if job is not None else risk.checkpoint_cost_s(plan.workload.gradient_bytes)
    lost = None
    if job is not None:
        lost = lost_shares(job.workload, [(g.gpu, g.gpus_per_node, g.count, g.network_gbps, g.cloud, g.spot)
                                          for g in plan.groups],
                           p.throughput_samples_per_s, sync=job.sync, ps=job.ps)
    a = assess_cluster(revs, total, plan.workload.samples_total, p.throughput_samples_per_s, p.throughput_low,
                       p.throughput_high, ckpt, deadline_s=plan.deadline_s, confidence=plan.confidence,
                       work_log_sd=work_sd, lost=lost, sync=plan.sync != "async")
    if revs:  # the deadline policy's fallback to the same nodes on demand, as the planner counts it
        a = on_demand_fallback(a, deadline_s=plan.deadline_s, confidence=plan.confidence, checkpoint_s=ckpt,
                               quantiles=False)  # only its P(deadline) is read
    return float(a.p_deadline[0])


def plan_evidence(plan: Any, *, job: Any = None) -> PlanEvidence:
    """The evidence behind ``plan``'s revocation figures and, when a group's law is not its own,
    P(deadline) over the plausible laws (each non-traced group in turn; the others keep theirs).

    >>> ev = plan_evidence(result.best)                    # doctest: +SKIP
    >>> ev.kind, ev.p_deadline_low, ev.worst_law            # doctest: +SKIP
    """
    groups = tuple(group_evidence(g.cloud, g.gpu, g.instance_type, g.spot) for g in plan.groups)
    kind = max((g.kind for g in groups), key=ORDER.index) if groups else "on-demand"
    base = [ge.law for ge in groups]
    p_model = _p_deadline(plan, base, job=job)
    lo = hi = worst = None
    if p_model is not None and any(ge.plausible for ge in groups):
        values = []
        for k, ge in enumerate(groups):
            for law in ge.plausible:
                laws = list(base)
                laws[k] = law
                values.append((_p_deadline(plan, laws, job=job), law.label))
        values.append((p_model, "the pooled law"))
        lo_v = min(values, key=lambda v: v[0])
        lo, worst = lo_v
        hi = max(v for v, _ in values)
    return PlanEvidence(kind=kind, groups=groups, p_deadline_model=p_model, p_deadline_low=lo, p_deadline_high=hi,
                        worst_law=worst)


# --------------------------------------------------------------------------- the headline


FASTER_SHARE = 0.8
"""A runner-up is pointed out when it takes at most this share of the chosen plan's time ..."""
EXTRA_COST_SHARE = 0.05
"""... for at most this much more cost (same source of figures for both)."""


def headline(result: Any, refinement: Any = None) -> dict[str, Any]:
    """Every figure of the chosen plan's headline, from one computation each, labelled with its
    source: the analytical model's (always) and the simulation's (when the plan was refined), the
    evidence behind the revocation figures, and a faster runner-up worth a look.

    ``source`` says which figures the plan was chosen on (``'simulation'`` or ``'analytical model'``)."""
    best = result.best
    ctx = getattr(result, "context", None)
    job = getattr(ctx, "job", None)
    out: dict[str, Any] = {"label": best.label, "deadline_s": best.deadline_s, "budget_usd": best.budget_usd,
                           "confidence": best.confidence, "policy": best.policy,
                           "checkpoint_interval_s": best.checkpoint_interval_s}
    if refinement is not None:
        chosen = refinement.chosen
        analytical_plan = chosen.plan
        out["source"] = "simulation"
        out["simulated"] = {"runs": int(getattr(chosen, "runs", refinement.runs)), "replayed_on": chosen.availability,
                            "duration_s": chosen.mean_duration_s, "duration_p95_s": chosen.p95_duration_s,
                            "cost_usd": chosen.mean_cost_usd, "cost_p95_usd": chosen.p95_cost_usd,
                            "deadline_met_rate": chosen.met_rate, "finished_rate": chosen.finished_rate,
                            "mean_revocations": chosen.mean_revocations, "policy": analytical_plan.policy,
                            "on_demand_rate": chosen.on_demand_rate}
    else:
        analytical_plan = best
        out["source"] = "analytical model"
        out["simulated"] = None
    out["analytical"] = analytical_plan.prediction.figures()
    out["evidence"] = plan_evidence(analytical_plan, job=job).to_dict()
    out["faster_alternative"] = _faster(result, refinement)
    return out


def _faster(result: Any, refinement: Any) -> dict[str, Any] | None:
    """A plan at most :data:`FASTER_SHARE` of the chosen time for at most :data:`EXTRA_COST_SHARE`
    more cost, judged on the figures the choice was made on."""
    if refinement is not None:
        me = refinement.chosen
        pool = [(c.label, c.mean_duration_s, c.mean_cost_usd) for c in refinement.candidates
                if c.eligible and c.label != me.label]
        t0, c0 = me.mean_duration_s, me.mean_cost_usd
        source = f"simulation, {plural(int(getattr(me, 'runs', refinement.runs)), 'run')}"
    else:
        p = result.best.prediction
        pool = [(r.label, r.prediction.duration_s, r.prediction.cost_usd) for r in result.runners_up]
        t0, c0, source = p.duration_s, p.cost_usd, "analytical model"
    good = [(lab, t, c) for lab, t, c in pool
            if np.isfinite(t) and t <= FASTER_SHARE * t0 and c <= (1 + EXTRA_COST_SHARE) * c0]
    if not good or not (t0 > 0 and c0 > 0):
        return None
    lab, t, c = min(good, key=lambda x: (x[1], x[2]))
    return {"label": lab, "duration_s": t, "cost_usd": c, "time_share": t / t0, "extra_cost_share": c / c0 - 1,
            "source": source}


def headline_rows(hl: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The headline's figures as a table: a column per source (analytical model, simulation)."""
    a, sim = hl["analytical"], hl.get("simulated")
    cols = ["", "analytical model"] + ([f"simulation ({plural(sim['runs'], 'run')})"] if sim else [])

    def both(an: str, si: str) -> list[str]:
        return [an] + ([si] if sim else [])

    def dur(m, p):
        return f"{format_duration(m)} (p95 {format_duration(p)})"

    rows = [["expected time"] + both(dur(a["duration_s"], a["duration_p95_s"]),
                                     dur(sim["duration_s"], sim["duration_p95_s"]) if sim else ""),
            ["expected cost"] + both(f"{format_usd(a['cost_usd'])} (p95 {format_usd(a['cost_p95_usd'])})",
                                     f"{format_usd(sim['cost_usd'])} (p95 {format_usd(sim['cost_p95_usd'])})"
                                     if sim else "")]
    if hl.get("deadline_s") is not None:
        rows.append(["P(meet deadline)"] + both(format_probability(a["p_meet_deadline"]),
                                                format_rate(sim["deadline_met_rate"], runs=sim["runs"]) if sim else ""))
    rows.append(["revocations"] + both(format_count(a["expected_revocations"]),
                                       format_count(sim["mean_revocations"]) if sim else ""))
    if a.get("p_on_demand") is not None:
        rows.append(["moved to on-demand"] + both(format_probability(a["p_on_demand"]),
                                                  format_rate(sim["on_demand_rate"], runs=sim["runs"])
                                                  if sim and sim.get("on_demand_rate") is not None else ""))
    return cols, rows


def headline_lines(hl: dict[str, Any]) -> list[str]:
    """The headline's sentences (what it was chosen on, the evidence, the policy, a faster option)."""
    sim = hl.get("simulated")
    goal = (f"deadline {format_duration(hl['deadline_s'])} at {format_probability(hl['confidence'])} required"
            if hl.get("deadline_s") is not None else f"budget {format_usd(hl.get('budget_usd'))}")
    if sim:
        chosen = (f"chosen on simulation: {plural(sim['runs'], 'run')} per candidate, replayed on "
                  f"{sim['replayed_on']}; the analytical model's figures beside it")
    else:
        chosen = "chosen on the analytical model (not refined by simulation)"
    lines = [f"{hl['label']} -- {goal}; {chosen}", hl["evidence"]["headline"],
             f"checkpoint every {format_interval(hl['checkpoint_interval_s'])}; recovery policy {hl['policy']}"
             + (" (the simulation ran the same policy)" if sim else "")]
    f = hl.get("faster_alternative")
    if f:
        lines.append(f"worth a look: {f['label']} takes {f['time_share']:.0%} of the time "
                     f"({format_duration(f['duration_s'])}) for {f['extra_cost_share']:+.1%} cost "
                     f"({format_usd(f['cost_usd'])}; {f['source']})")
    return lines
