"""A self-contained HTML report: sections of prose, tables and inline PNG plots.

The file needs nothing but a browser to read: the CSS is inline, the plots are base64 PNGs in
``data:`` URIs, and there is no JavaScript and no external link. A ``<meta name="generator">``
marker identifies a file as a spottrain report, so that a later run may replace its own
report but never a file someone else wrote (see :func:`is_spottrain_report`).

>>> r = Report("Example")
>>> r.add_section("Plan", text="4 x V100 spot, 3.1 h, $12.40")
>>> "Plan" in r.to_html()
True
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spottrain.errors import InputError

GENERATOR_MARKER = '<meta name="generator" content="spottrain-report">'
"""Present in every report this module writes; :func:`is_spottrain_report` looks for it."""

STATUS_OK = "ok"
STATUS_UNAVAILABLE = "not available"


@dataclass(frozen=True, kw_only=True)
class Plot:
    """A rendered plot: PNG bytes plus the text a reader (or a screen reader) needs."""

    png: bytes
    alt: str
    """What the plot shows, with its axes and units."""
    caption: str = ""


@dataclass(kw_only=True)
class Section:
    """One part of the report, rendered in order."""

    title: str
    status: str = STATUS_OK
    """``ok`` or ``not available`` (the stage did not run; ``reason`` says why)."""
    reason: str = ""
    blocks: list[str] = field(default_factory=list)
    """Rendered HTML fragments, in order."""

    @property
    def anchor(self) -> str:
        return "sec-" + re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")


def _fmt_cell(value: Any) -> str:
    if value is None:
        return "&mdash;"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "&mdash;"
        if value in (float("inf"), float("-inf")):
            return "&infin;" if value > 0 else "-&infin;"
        if 0 < abs(value) < 0.001:  # never scientific notation in a report ("1.2e-27")
            return "&lt; 0.001" if value > 0 else "&gt; -0.001"
        if abs(value) >= 1000 or value == int(value):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return html.escape(str(value))


def _td(value: Any) -> str:
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f'<td class="num">{_fmt_cell(value)}</td>' if numeric else f"<td>{_fmt_cell(value)}</td>"


def table_html(rows: Sequence[Mapping[str, Any]] | Sequence[Sequence[Any]], columns: Sequence[str] | None = None) -> str:
    """An HTML table from dict rows (keys become headers) or sequences plus ``columns``."""
    if not rows:
        return '<p class="muted">(no rows)</p>'
    if isinstance(rows[0], Mapping):
        columns = list(columns or rows[0].keys())
        body = [[r.get(c) for c in columns] for r in rows]  # type: ignore[union-attr]
    else:
        if columns is None:
            raise ValueError("columns are required for sequence rows")
        body = [list(r) for r in rows]
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    trs = "".join("<tr>" + "".join(_td(v) for v in r) + "</tr>" for r in body)
    return f'<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>'


def plot_html(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    caption = f"<figcaption>{html.escape(plot.caption)}</figcaption>" if plot.caption else ""
    return (
        f'<figure><img class="plot" alt="{html.escape(plot.alt, quote=True)}" '
        f'src="data:image/png;base64,{data}">{caption}</figure>'
    )


class Report:
    """Builds the report section by section; :meth:`save` writes one HTML file."""

    def __init__(self, title: str, *, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.sections: list[Section] = []
        self.created_at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    def add_section(
        self,
        title: str,
        *,
        text: str | None = None,
        html_fragment: str | None = None,
        table: Sequence[Mapping[str, Any]] | None = None,
        columns: Sequence[str] | None = None,
        plots: Sequence[Plot] = (),
        status: str = STATUS_OK,
        reason: str = "",
    ) -> Section:
        """Append a section. ``text`` is escaped (paragraphs split on blank lines);
        ``html_fragment`` is trusted HTML; ``table`` rows are dicts; ``plots`` are inline PNGs.
        A section with ``status="not available"`` shows ``reason`` instead of results."""
        section = Section(title=title, status=status, reason=reason)
        if text:
            for para in text.strip().split("\n\n"):
                section.blocks.append(f"<p>{html.escape(para.strip())}</p>")
        if html_fragment:
            section.blocks.append(html_fragment)
        if table is not None:
            section.blocks.append(table_html(table, columns))
        for plot in plots:
            section.blocks.append(plot_html(plot))
        self.sections.append(section)
        return section

    def add_unavailable(self, title: str, reason: str) -> Section:
        """A stage that did not run: the report says so, and shows no made-up numbers."""
        return self.add_section(title, status=STATUS_UNAVAILABLE, reason=reason)

    def to_html(self) -> str:
        toc = "".join(
            f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a>'
            + (' <span class="badge">not available</span>' if s.status != STATUS_OK else "")
            + "</li>"
            for s in self.sections
        )
        parts = []
        for s in self.sections:
            body = "".join(s.blocks)
            if s.status != STATUS_OK:
                body = f'<p class="unavailable"><strong>Not available:</strong> {html.escape(s.reason)}</p>' + body
            parts.append(
                f'<section class="section" id="{s.anchor}" data-status="{html.escape(s.status)}">'
                f"<h2>{html.escape(s.title)}</h2>{body}</section>"
            )
        subtitle = f'<p class="subtitle">{html.escape(self.subtitle)}</p>' if self.subtitle else ""
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"{GENERATOR_MARKER}"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head><body>"
            f"<header><h1>{html.escape(self.title)}</h1>{subtitle}"
            f'<p class="muted">Written {self.created_at} by spottrain.</p></header>'
            f'<nav><ol>{toc}</ol></nav><main>{"".join(parts)}</main></body></html>\n'
        )

    def save(self, path: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the report atomically.

        An existing file is replaced only when it is a previous spottrain report (it carries
        :data:`GENERATOR_MARKER`) or when ``force``; anything else is refused, so a user's own
        ``report.html`` is never lost by accident.
        """
        path = Path(path)
        if path.suffix.lower() not in (".html", ".htm"):
            raise InputError("report file name must end in .html", file=str(path))
        if path.is_dir():
            raise InputError("is a directory; give a file name ending in .html", file=str(path))
        if path.exists() and not force and not is_spottrain_report(path):
            raise InputError(
                "file exists and is not a spottrain report; pass --force to overwrite it", file=str(path)
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(self.to_html(), encoding="utf-8")
        os.replace(tmp, path)
        return path


def is_spottrain_report(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is an HTML file written by :class:`Report` (marker in its head)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return GENERATOR_MARKER.encode() in head


_CSS = """
:root{--fg:#1d232b;--muted:#5b6673;--line:#d8dde3;--accent:#1f5fa8;--warn:#9a5b00;--bg:#fff}
*{box-sizing:border-box}
body{margin:0;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header,nav,main{max-width:1000px;margin:0 auto;padding:0 20px}
header{padding-top:24px}
h1{font-size:1.7em;margin:0 0 4px}
h2{font-size:1.25em;margin:0 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.subtitle{margin:0;font-size:1.05em}
.muted{color:var(--muted);font-size:.9em}
nav ol{columns:2;margin:8px 0 16px;padding-left:20px;color:var(--muted)}
nav a{color:var(--accent);text-decoration:none}
.section{margin:26px 0}
.badge{font-size:.75em;color:var(--warn);border:1px solid var(--warn);border-radius:3px;padding:0 4px}
.unavailable{color:var(--warn);background:#fff7e8;border-left:3px solid var(--warn);padding:8px 12px}
table{border-collapse:collapse;margin:10px 0;font-size:.92em;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:left;vertical-align:top}
td.num{text-align:right}
thead th{border-bottom:2px solid var(--fg)}
figure{margin:12px 0}
img.plot{max-width:100%;height:auto;border:1px solid var(--line)}
figcaption{color:var(--muted);font-size:.9em}
pre{background:#f5f7f9;padding:8px;overflow-x:auto}
"""
