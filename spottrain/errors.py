"""One error hierarchy for everything a user can get wrong.

The CLI catches :class:`SpottrainError`, prints its message on one line and exits with
code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SpottrainError(Exception):
    """Base class of all user-facing errors: bad input, unknown names, infeasible requests."""

    exit_code = 2


class InputError(SpottrainError):
    """A file, option or field has a value we cannot use.

    The message names where the bad value is (file, line, column or option) and what was
    expected, e.g. ``catalog.csv line 12, column SpotPrice: expected a number >= 0, got 'n/a'``.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        where = []
        if file is not None:
            where.append(str(file))
        if line is not None:
            where.append(f"line {line}")
        if column is not None:
            # a command-line flag is named as such ("--deadline: ..."), never as a column
            where.append(column if column.startswith("-") else f"column {column}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.file = file
        self.line = line
        self.column = column


class UnknownNameError(SpottrainError):
    """A name (GPU, cloud, region, model, trace ...) is not known; suggests the near miss."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        known = sorted(set(known))
        self.kind, self.name = kind, name
        self.suggestion = suggest(name, known)
        message = f"unknown {kind} {name!r}"
        if self.suggestion:
            message += f": did you mean {self.suggestion}?"
        elif known and len(known) <= 12:
            message += f" (known: {', '.join(known)})"
        super().__init__(message)


class InfeasibleError(SpottrainError):
    """No plan satisfies the constraints; the message names the nearest feasible alternative."""


class NotFittedError(SpottrainError):
    """A model was asked to predict before ``fit`` was called."""


class CheckpointError(SpottrainError):
    """A checkpoint is missing, corrupt, from another job or from an incompatible version."""


class SchemaVersionError(InputError):
    """A saved file (profile, plan, checkpoint) was written by an incompatible schema version."""


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The closest known name to ``name`` (case-insensitive), or ``None`` if nothing is close."""
    known = list(known)
    by_lower = {k.lower(): k for k in known}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    if match:
        return by_lower[match[0]]
    # Prefix matches catch abbreviations such as 'v10' -> 'V100'.
    prefixed = [k for k in known if k.lower().startswith(name.lower())] if name else []
    return min(prefixed, key=len) if prefixed else None
