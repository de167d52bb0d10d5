"""Parsing of human quantities on the command line: durations, counts and money."""

from __future__ import annotations

import re

from spottrain.errors import InputError

_DURATION_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9, "B": 1e9}


def parse_duration_s(text: str | float | int, *, option: str = "duration") -> float:
    """``'8h'``, ``'90m'``, ``'1.5d'``, ``'3600'`` (seconds) or ``'2h30m'`` -> seconds (> 0).

    >>> parse_duration_s("2h30m")
    9000.0
    """
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        s = text.strip().lower().replace(" ", "")
        parts = re.findall(r"(\d+(?:\.\d+)?)([a-z]*)", s)
        if not parts or "".join(n + u for n, u in parts) != s:
            raise InputError(f"expected a duration such as 8h, 90m or 3600s, got {text!r}", column=option)
        value = 0.0
        for number, unit in parts:
            if unit not in _DURATION_UNITS and unit != "":
                raise InputError(f"unknown time unit {unit!r} in {text!r} (use s, m, h or d)", column=option)
            value += float(number) * _DURATION_UNITS.get(unit, 1.0)
    if not value > 0:
        raise InputError(f"must be positive, got {text!r}", column=option)
    return value


def parse_count(text: str | float | int, *, option: str = "count") -> float:
    """``'1.28M'`` -> 1_280_000.0, ``'50k'`` -> 50_000.0; must be positive."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kKmMgGB]?)\s*", text)
        if not m:
            raise InputError(f"expected a number such as 50000, 50k or 1.28M, got {text!r}", column=option)
        value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2)]
    if not value > 0:
        raise InputError(f"must be positive, got {text!r}", column=option)
    return value


def parse_money_usd(text: str | float | int, *, option: str = "budget") -> float:
    """``'$200'``, ``'200'``, ``'1.5k'`` -> US dollars (> 0)."""
    if isinstance(text, str):
        text = text.strip().lstrip("$")
    return parse_count(text, option=option)


def format_duration(seconds: float) -> str:
    """Seconds -> a short human string: ``'3.4h'``, ``'12m'``, ``'45s'``."""
    if seconds != seconds:  # NaN
        return "n/a"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"
