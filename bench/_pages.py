"""Writing a benchmark's results page."""

from __future__ import annotations

from pathlib import Path

READING = "## Reading"


def write_page(path: str | Path, lines: list[str]) -> None:
    """Write ``lines`` to ``path``, keeping the page's hand-written reading of the figures.

    The section from ``## Reading`` to the end is written by a person, not by the script; it
    survives a regeneration (check it against the new figures).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    reading = old[old.index(READING):] if READING in old else ""
    body = "\n".join(lines).rstrip("\n") + "\n"
    path.write_text(body + "\n" + reading if reading else body)
