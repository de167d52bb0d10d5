"""Pace of the example jobs in the runtime tests.

A scenario needs slow steps until the event it checks has happened (a replacement has joined,
the spot nodes have left), else the job ends first; after that, slow steps only cost test time.
The example trainer reads its per-step sleep from ``SPOTTRAIN_EXAMPLE_SLEEP_FILE`` at every
forward pass (:func:`spottrain.runtime.examples.build_trainer`; numerics unchanged), so a test
writes ``0`` there once the event has happened and the remaining steps run at full speed.

Slow steps alone are a wall-clock bet: the job still ends after its last step, however long the
event takes (a replacement's start-up, seconds of Python and torch imports, takes several times
longer on a loaded machine). ``hold_at_step`` makes the wait an event's: once that many steps
are complete the workers wait in the next forward pass until the test writes ``0`` (the example
gives up after :data:`~spottrain.runtime.examples.HOLD_MAX_S`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "SPOTTRAIN_EXAMPLE_SLEEP_FILE"


class Pace:
    def __init__(self, directory: Path, sleep_s: float = 0.1, *, hold_at_step: int | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "pace"
        self.sleep_s = sleep_s
        self.set(sleep_s, hold_at_step=hold_at_step)

    @property
    def env(self) -> dict[str, str]:
        return {ENV: str(self.path)}

    def set(self, sleep_s: float, *, hold_at_step: int | None = None) -> None:
        """``sleep_s`` per forward pass; with ``hold_at_step``, no step past that one until the
        next ``set`` (or :meth:`fast`)."""
        part = self.path.with_suffix(".part")
        part.write_text(str(sleep_s) if hold_at_step is None else f"{sleep_s} hold {hold_at_step}")
        os.replace(part, self.path)  # a reader sees the old value or the new, never an empty file
        self.held = hold_at_step is not None

    def unhold(self) -> None:
        """Drop a hold still in force, back to the slow steps it was set with; nothing once the
        hold is gone (a later call does not undo :meth:`fast`)."""
        if self.held:
            self.set(self.sleep_s)

    def fast(self) -> None:
        """Full speed, and no hold."""
        self.set(0.0)

    def fast_after(self, kind: str, when: Callable[[dict[str, Any]], bool] = lambda data: True,
                   then: Callable[[str, dict[str, Any]], None] | None = None) -> Callable[[str, dict[str, Any]], None]:
        """An ``on_event`` callback: full speed from the first event of ``kind`` (for which
        ``when`` holds) on; every event is passed on to ``then``."""

        def on_event(k: str, data: dict[str, Any]) -> None:
            if k == kind and when(data):
                self.fast()
            if then is not None:
                then(k, data)

        return on_event
