"""Self-contained HTML reports with inline plots (no network needed to view them).

>>> from spottrain.report import Report, lifetime_plot
>>> r = Report("Lifetimes")
>>> _ = r.add_section("Curves", plots=[lifetime_plot([{"label": "fit", "t_s": [0, 3600], "survival": [1, 0.5]}])])
"""

from spottrain.report.document import (
    GENERATOR_MARKER,
    STATUS_OK,
    STATUS_UNAVAILABLE,
    Plot,
    Report,
    Section,
    is_spottrain_report,
    table_html,
)
from spottrain.report.plots import (
    distribution_plot,
    lifetime_plot,
    line_plot,
    pareto_plot,
    throughput_plot,
    timeline_plot,
)

__all__ = [
    "GENERATOR_MARKER",
    "STATUS_OK",
    "STATUS_UNAVAILABLE",
    "Plot",
    "Report",
    "Section",
    "distribution_plot",
    "is_spottrain_report",
    "lifetime_plot",
    "line_plot",
    "pareto_plot",
    "table_html",
    "throughput_plot",
    "timeline_plot",
]
