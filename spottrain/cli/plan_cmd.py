"""`spottrain plan`: registered in :mod:`spottrain.cli.main`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's command(s) to the app (filled in by the plan capability)."""
