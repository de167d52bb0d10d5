"""A run's summary, built from the controller's events and the workers' event logs.

Definitions (times are wall-clock, seconds):

- ``revocations``: workers lost (killed, declared lost by the liveness check, or left after a
  preemption notice); released nodes and workers stopped with the job are not revocations;
- ``lost_steps``: per revocation, the newest step completed before it minus the step training
  resumed from (0 when the survivors keep their state; the in-flight step is not counted);
- ``recovery_s``: from a worker's death (or the fault injected into it: a SIGSTOP, a link
  down, a host vanishing) to the next completed step of the job;
- ``max_stall_s``: the longest gap between two consecutive completed steps.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    job_id: str
    ok: bool
    failure: str | None
    target_steps: int | None
    completed_steps: int
    revocations: int
    notices: int
    replacements: int
    lost_steps: int
    max_stall_s: float
    median_step_s: float | None
    max_recovery_s: float | None
    wall_s: float
    cost_usd: float
    final_checkpoint: str | None
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    membership: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    run_dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_worker_events(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path(run_dir).glob("events-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by kill -9
    return sorted(out, key=lambda e: e["t"])


def summarize(*, job: Any, controller_events: list[dict[str, Any]], wall0: float, failed: str | None) -> RunSummary:
    wev = read_worker_events(job.run_dir)
    steps = sorted(((e["t"], int(e["step"])) for e in wev if e["kind"] == "step"), key=lambda x: x[0])
    done = [e for e in wev if e["kind"] == "done"]
    completed = max([int(e["step"]) for e in done] + [s for _, s in steps] + [0])
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:])]
    median = sorted(gaps)[len(gaps) // 2] if gaps else None
    released = {e["worker"] for e in controller_events if e["kind"] == "release"}
    losses = [e for e in controller_events if e["kind"] == "exit" and e["how"] not in ("stopped", "error", "input_error")
              and e["worker"] not in released]
    left_at = {e["worker"]: e["t"] for e in controller_events if e["kind"] == "left"}
    recoveries = []
    for ev in losses:
        # A leaver stops training when it announces it leaves, not when its process is gone.
        t = left_at.get(ev["worker"], ev["t"]) if ev["how"] == "left" else (ev.get("fault_t") or ev["t"])
        before = max((s for ts, s in steps if ts <= t), default=0)
        after = next(((ts, s) for ts, s in steps if ts > t), None)
        rec = {"time_s": ev["time_s"], "worker": ev["worker"], "how": ev["how"], "code": ev.get("code"),
               "recovery_s": None, "lost_steps": 0}
        if after is not None:
            rec["recovery_s"] = round(after[0] - t, 4)
            rec["lost_steps"] = max(0, before - (after[1] - 1))
        recoveries.append(rec)
    ckpts = [{k: e[k] for k in ("step", "stall_s", "persist_s", "bytes", "emergency", "path", "wid") if k in e}
             for e in wev if e["kind"] == "ckpt"]
    last_t = max([e["t"] for e in controller_events] + [wall0])
    node_s = 0.0
    spawns = {e["worker"]: e["t"] for e in controller_events if e["kind"] == "spawn"}
    ends = {e["worker"]: e["t"] for e in controller_events if e["kind"] in ("exit", "finished", "exit_after_finish")}
    for wid, t in spawns.items():
        node_s += ends.get(wid, last_t) - t
    final = next((c["path"] for c in reversed(ckpts) if c.get("step") == completed), None)
    target = job.steps
    ok = failed is None and bool(done) and (target is None or completed == target)
    rec_times = [r["recovery_s"] for r in recoveries if r["recovery_s"] is not None]
    return RunSummary(
        job_id=job.job_id, ok=ok, failure=failed if failed or ok else "no worker reported completion",
        target_steps=target, completed_steps=completed,
        revocations=len(losses), notices=sum(1 for e in controller_events if e["kind"] == "notice"),
        replacements=sum(1 for e in controller_events if e["kind"] == "joined"),
        lost_steps=sum(r["lost_steps"] for r in recoveries),
        max_stall_s=round(max(gaps, default=0.0), 4), median_step_s=median,
        max_recovery_s=max(rec_times) if rec_times else None,
        wall_s=round(last_t - wall0, 3), cost_usd=round(node_s / 3600.0 * job.price_usd_per_hour, 6),
        final_checkpoint=final, recoveries=recoveries,
        membership=[{"time_s": e["time_s"], "gen": e["gen"], "world": e["world"], "members": e["members"]}
                    for e in controller_events if e["kind"] == "membership"],
        checkpoints=ckpts, run_dir=str(job.run_dir),
    )
