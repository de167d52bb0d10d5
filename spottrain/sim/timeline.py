"""Timeline plot of one simulated run: membership, progress, checkpoints, revocations."""

from __future__ import annotations

import io
from typing import Any

from spottrain.sim.setup import RunResult


def timeline_png(result: RunResult, *, title: str = "") -> bytes:
    """PNG of a recorded run (``spottrain.sim.job.run_setup(setup, seed, record=True)``): progress
    (% of the job) and durable checkpoints on top, live nodes below, against hours since the start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl: dict[str, Any] | None = result.timeline
    if tl is None:
        raise ValueError("the run was not recorded (use record=True)")
    total = tl["samples_total"] or 1.0
    end_h = result.makespan_s / 3600
    fig, (ax_p, ax_m) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5), height_ratios=[2, 1], dpi=110)
    xs = [t / 3600 for t, _ in tl["progress"]]
    ys = [100 * p / total for _, p in tl["progress"]]
    ax_p.plot(xs, ys, color="#2563eb", linewidth=1.4, label="progress (live)")
    if tl["checkpoints"]:
        ax_p.plot([t / 3600 for t, _ in tl["checkpoints"]], [100 * d / total for _, d in tl["checkpoints"]],
                  ".", color="#16a34a", markersize=3, label="checkpoint (durable)")
    rev = sorted({t for t, _ in tl["revocations"]})
    for i, t in enumerate(rev):
        ax_p.axvline(t / 3600, color="#dc2626", linewidth=0.6, alpha=0.5, label="revocation" if i == 0 else None)
        ax_m.axvline(t / 3600, color="#dc2626", linewidth=0.6, alpha=0.5)
    if tl.get("deadline_s"):
        ax_p.axvline(tl["deadline_s"] / 3600, color="black", linestyle="--", linewidth=1, label="deadline")
    ax_p.set_ylabel("job progress (% of samples)")
    ax_p.set_ylim(0, 105)
    ax_p.legend(fontsize=8, loc="upper left")
    ax_p.grid(alpha=0.3)
    mx = [t / 3600 for t, _ in tl["membership"]] + [end_h]
    my = [n for _, n in tl["membership"]]
    my.append(my[-1])
    ax_m.step(mx, my, where="post", color="#7c3aed", linewidth=1.4, label="live nodes")
    ax_m.axhline(tl["planned_nodes"], color="#6b7280", linestyle=":", linewidth=1, label="planned nodes")
    ax_m.set_ylabel("live nodes (count)")
    ax_m.set_xlabel("time since launch (hours)")
    ax_m.set_ylim(0, max(my + [tl["planned_nodes"]]) + 1)
    ax_m.legend(fontsize=8, loc="lower left")
    ax_m.grid(alpha=0.3)
    fig.suptitle(title or f"Simulated run: {end_h:.1f} h, ${result.cost_usd:,.0f}, {result.revocations} revocations")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
