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


def write_results(argv: list[str], script: str, lines: list[str]) -> None:
    """Write a benchmark's page to the path after ``--write`` in ``argv``, else to
    ``bench/results/<script's stem>.md`` (:func:`write_page`), and say where."""
    out = argv[argv.index("--write") + 1] if "--write" in argv else str(
        Path(script).resolve().parent / "results" / f"{Path(script).stem}.md")
    write_page(out, lines)
    print(f"wrote {out}")
