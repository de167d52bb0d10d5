"""Plots for the report, drawn with matplotlib's Agg backend from plain data.

Every helper takes lists and dicts (no spottrain objects), returns a :class:`Plot` holding PNG
bytes, and labels every axis with its unit. Nothing here touches a display or the network.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from spottrain.report.document import Plot

_DPI = 110
_COLORS = ("#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#4b5563")


def _figure(width_in: float = 8.0, height_in: float = 4.2, ncols: int = 1, **subplot_kw: Any):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    # A bare Figure (no pyplot): no global state, safe in threads and under pytest.
    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    axes = fig.subplots(1, ncols, **subplot_kw) if ncols > 1 else fig.subplots(**subplot_kw)
    return fig, axes


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()


def _style(ax) -> None:
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def pareto_plot(
    candidates: Sequence[Mapping[str, Any]],
    *,
    pareto: Sequence[Mapping[str, Any]] = (),
    baselines: Sequence[Mapping[str, Any]] = (),
    chosen: Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
    candidates_label: str = "candidate clusters",
) -> Plot:
    """Cost vs time. Each point is ``{"label", "duration_s", "cost_usd"}``; ``candidates``
    are drawn faint, ``pareto`` as a step line, ``baselines`` as labelled markers, and the
    ``chosen`` plan highlighted; ``deadline_s`` as a vertical line."""
    fig, ax = _figure()
    _style(ax)
    if candidates:
        ax.scatter([p["duration_s"] / 3600 for p in candidates], [p["cost_usd"] for p in candidates],
                   s=10, color="#9ca3af", alpha=0.5, label=f"{candidates_label} ({len(candidates)})")
    if pareto:
        pts = sorted(pareto, key=lambda p: p["duration_s"])
        ax.plot([p["duration_s"] / 3600 for p in pts], [p["cost_usd"] for p in pts], "-o",
                color=_COLORS[0], markersize=4, drawstyle="steps-post", label="Pareto front")
    markers = "sD^vP*X"
    for i, b in enumerate(baselines):
        ax.scatter([b["duration_s"] / 3600], [b["cost_usd"]], marker=markers[i % len(markers)], s=60,
                   color=_COLORS[(i + 1) % len(_COLORS)], zorder=3, label=f"baseline: {b['label']}")
    if chosen is not None:
        ax.scatter([chosen["duration_s"] / 3600], [chosen["cost_usd"]], marker="*", s=260, color="#facc15",
                   edgecolors="black", zorder=4, label=f"chosen: {chosen['label']}")
    if deadline_s:
        ax.axvline(deadline_s / 3600, color="#b91c1c", linestyle="--", linewidth=1, label="deadline")
    every = [*candidates, *pareto, *baselines, *([chosen] if chosen else [])]
    xs = [p["duration_s"] for p in every if p["duration_s"] > 0]
    ys = [p["cost_usd"] for p in every if p["cost_usd"] > 0]
    # Pareto fronts span from seconds on 64 nodes to hours on one: logarithmic axes keep both ends readable.
    if xs and max(xs) / min(xs) > 30:
        ax.set_xscale("log")
    if ys and max(ys) / min(ys) > 30:
        ax.set_yscale("log")
    ax.set_xlabel("expected training time (hours)")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title("Cost vs time of candidate clusters")
    # beside the axes: inside, the legend would cover points or the deadline line
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return Plot(png=_png(fig), alt="Scatter of expected cost (USD) against expected training time (hours) "
                "for candidate clusters, with the Pareto front, the baselines and the chosen plan.")


def throughput_plot(rows: Sequence[Mapping[str, Any]], *, model: str = "") -> Plot:
    """Predicted throughput per GPU type: rows ``{"gpu", "throughput", "low"?, "high"?}`` in
    samples/s (one GPU each). Error bars show the ``low``..``high`` interval when given."""
    rows = sorted(rows, key=lambda r: r["throughput"])
    fig, ax = _figure(8.0, max(2.5, 0.38 * len(rows) + 1.2))
    _style(ax)
    names = [str(r["gpu"]) for r in rows]
    vals = [float(r["throughput"]) for r in rows]
    lows = [vals[i] - float(r.get("low", vals[i])) for i, r in enumerate(rows)]
    highs = [float(r.get("high", vals[i])) - vals[i] for i, r in enumerate(rows)]
    ax.barh(names, vals, xerr=[lows, highs], color=_COLORS[0], alpha=0.85, capsize=3)
    ax.set_xlabel("predicted throughput (samples/s, one GPU)")
    ax.set_ylabel("GPU type")
    ax.set_title(f"Predicted training throughput{' of ' + model if model else ''} per GPU type")
    return Plot(png=_png(fig), alt="Horizontal bar chart of predicted throughput in samples per second per GPU type.")


def lifetime_plot(curves: Sequence[Mapping[str, Any]], *, horizon_h: float | None = None) -> Plot:
    """Survival curves: ``{"label", "t_s": [...], "survival": [...], "empirical": bool?}``.
    Empirical (Kaplan-Meier) curves are drawn as steps, fitted models as smooth lines."""
    fig, ax = _figure(10.0, 4.8)
    _style(ax)
    for i, c in enumerate(curves):
        t_h = [t / 3600 for t in c["t_s"]]
        color = c.get("color") or _COLORS[i % len(_COLORS)]
        if c.get("empirical"):
            ax.step(t_h, c["survival"], where="post", color=color, linewidth=1.0, alpha=0.7, linestyle=":", label=c["label"])
        else:
            ax.plot(t_h, c["survival"], color=color, linewidth=1.8, linestyle=c.get("linestyle", "-"), label=c["label"])
    if horizon_h:
        ax.set_xlim(0, horizon_h)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("node lifetime (hours)")
    ax.set_ylabel("probability still running (survival, 0-1)")
    ax.set_title("Spot / preemptible node lifetimes")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return Plot(png=_png(fig), alt="Survival curves: probability a node is still running against its lifetime in hours.")


LOG_SPAN = 10.0
"""Largest max/min ratio of a box plot's values shown on a linear axis."""


def distribution_plot(
    per_policy: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    deadline_s: float | None = None,
    budget_usd: float | None = None,
) -> Plot:
    """Box plots of simulated cost and makespan per policy: ``{policy: {"cost_usd": [...],
    "duration_s": [...]}}`` (one value per Monte Carlo run). The cost axis turns logarithmic when
    the costs span more than :data:`LOG_SPAN` (one on-demand outlier would squash every box), and
    the legends sit below the axes, clear of the deadline and budget lines."""
    fig, (ax_cost, ax_time) = _figure(9.0, max(3.0, 0.45 * len(per_policy) + 1.6), ncols=2)
    names = list(per_policy)
    for ax in (ax_cost, ax_time):
        _style(ax)
    ax_cost.boxplot([list(per_policy[n]["cost_usd"]) for n in names], orientation="horizontal", tick_labels=names,
                    showfliers=True, flierprops={"markersize": 2})
    ax_time.boxplot([[d / 3600 for d in per_policy[n]["duration_s"]] for n in names], orientation="horizontal",
                    tick_labels=names, showfliers=True, flierprops={"markersize": 2})
    ax_time.set_yticklabels([])
    costs = [c for n in names for c in per_policy[n]["cost_usd"] if c > 0]
    log_cost = bool(costs) and max(costs) / min(costs) > LOG_SPAN
    if log_cost:
        ax_cost.set_xscale("log")
    if budget_usd:
        ax_cost.axvline(budget_usd, color="#b91c1c", linestyle="--", linewidth=1, label="budget")
        ax_cost.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    if deadline_s:
        ax_time.axvline(deadline_s / 3600, color="#b91c1c", linestyle="--", linewidth=1, label="deadline")
        ax_time.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    ax_cost.set_xlabel("simulated cost (USD" + (", log scale)" if log_cost else ")"))
    ax_cost.set_ylabel("recovery policy")
    ax_time.set_xlabel("simulated makespan (hours)")
    runs = max((len(v["cost_usd"]) for v in per_policy.values()), default=0)
    fig.suptitle(f"Cost and makespan over {runs} simulated runs per policy")
    return Plot(png=_png(fig), alt="Box plots of simulated cost in USD and makespan in hours, one row per recovery policy.")


def timeline_plot(
    *,
    membership: Sequence[Sequence[float]],
    progress: Sequence[Sequence[float]],
    checkpoints_s: Sequence[float] = (),
    revocations_s: Sequence[float] = (),
    joins_s: Sequence[float] = (),
    planned_revocations_s: Sequence[float] = (),
    total_steps: float | None = None,
) -> Plot:
    """The local run over wall-clock time: ``membership`` ``[(t_s, workers)]`` as a step line,
    ``progress`` ``[(t_s, completed_steps)]``, with checkpoints, revocations (actual and as
    planned from the simulated schedule) and joins marked."""
    fig, _ = _figure(9.0, 5.2)
    # Two rows sharing the time axis: progress on top, membership below.
    fig.clear()
    ax_p, ax_m = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    for ax in (ax_p, ax_m):
        _style(ax)
    if progress:
        ax_p.plot([p[0] for p in progress], [p[1] for p in progress], color=_COLORS[0], linewidth=1.6, label="completed steps")
    if total_steps:
        ax_p.axhline(total_steps, color="#6b7280", linestyle=":", linewidth=1, label="target steps")
    for i, t in enumerate(checkpoints_s):
        ax_p.axvline(t, color=_COLORS[2], linewidth=0.8, alpha=0.6, label="checkpoint" if i == 0 else None)
    for i, t in enumerate(planned_revocations_s):
        ax_p.axvline(t, color="#9ca3af", linestyle="--", linewidth=1, label="scheduled revocation" if i == 0 else None)
    for i, t in enumerate(revocations_s):
        ax_p.axvline(t, color=_COLORS[4], linewidth=1.4, label="revocation" if i == 0 else None)
        ax_m.axvline(t, color=_COLORS[4], linewidth=1.4)
    for i, t in enumerate(joins_s):
        ax_m.axvline(t, color=_COLORS[5], linestyle="-.", linewidth=1, label="worker joined" if i == 0 else None)
    if membership:
        xs = [m[0] for m in membership]
        ys = [m[1] for m in membership]
        if progress and progress[-1][0] > xs[-1]:
            xs.append(progress[-1][0])
            ys.append(ys[-1])
        ax_m.step(xs, ys, where="post", color=_COLORS[1], linewidth=1.8, label="live workers")
        ax_m.set_ylim(0, max(ys) + 1)
    ax_p.set_ylabel("completed steps (count)")
    ax_p.set_title("Local elastic run: progress and membership")
    ax_p.legend(fontsize=8, loc="upper left")
    ax_m.set_ylabel("workers (count)")
    ax_m.set_xlabel("wall-clock time since start (seconds)")
    handles, _ = ax_m.get_legend_handles_labels()
    if handles:
        ax_m.legend(fontsize=8, loc="lower left")
    return Plot(png=_png(fig), alt="Timeline of the local run: completed steps and live workers against "
                "wall-clock seconds, with checkpoints, revocations and joins marked.")


def line_plot(
    series: Sequence[Mapping[str, Any]], *, xlabel: str, ylabel: str, title: str, alt: str
) -> Plot:
    """A generic labelled line plot: series ``{"label", "x": [...], "y": [...]}``."""
    fig, ax = _figure()
    _style(ax)
    for i, s in enumerate(series):
        ax.plot(s["x"], s["y"], color=_COLORS[i % len(_COLORS)], label=s["label"])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return Plot(png=_png(fig), alt=alt)
