"""Human quantities: parsing durations, counts and money on the command line, and formatting
every figure a command prints (durations, intervals, step times, money, probabilities, rates,
plurals), so that each rule lives in one place and every command reads the same.

>>> format_probability(0.99999), format_probability(1.2e-27), format_probability(0.953)
('> 99.9 %', '< 0.1 %', '95.3 %')
>>> format_usd(0.0042), format_usd(1234.5), plural(1, "node"), plural(3, "node")
('$0.0042', '$1,234.50', '1 node', '3 nodes')
>>> format_step_time(38_600.0), format_interval(376.596)
('38.6 s', '6 min 17 s')
"""

from __future__ import annotations

import math
import re

from spottrain.errors import InputError

_DURATION_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9, "B": 1e9}


def parse_duration_s(text: str | float | int, *, option: str = "duration", require_unit: bool = False) -> float:
    """``'8h'``, ``'90m'``, ``'1.5d'``, ``'3600'`` (seconds) or ``'2h30m'`` -> seconds (> 0).

    ``require_unit``: refuse a bare number in a string (``--deadline 8`` would silently mean 8
    seconds); options whose natural unit is hours or days set it.

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
        if require_unit and any(u == "" for _, u in parts):
            raise InputError(f"give a unit, e.g. {parts[0][0]}h, {parts[0][0]}m or {parts[0][0]}s "
                             f"(a bare number would be seconds), got {text!r}", column=option)
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
    if seconds == math.inf:
        return "never"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f}d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f}h"
    if seconds >= 60:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:.0f}s"


def format_interval(seconds: float) -> str:
    """An interval to the second (checkpoint intervals, delays): ``'6 min 17 s'``, ``'1 h 05 min'``,
    ``'45 s'``, ``'0.4 s'`` -- never ``'376.596s'``."""
    if seconds != seconds:
        return "n/a"
    if seconds == math.inf:
        return "never"
    if seconds < 10:
        return f"{seconds:.1f} s" if seconds < 9.95 else "10 s"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, r = divmod(s, 60)
        return f"{m} min" + (f" {r} s" if r else "")
    h, r = divmod(s, 3600)
    m = int(round(r / 60))
    if m == 60:
        h, m = h + 1, 0
    if h >= 48:
        return f"{seconds / 86400:.1f} d"
    return f"{h} h" + (f" {m:02d} min" if m else "")


def format_step_time(ms: float) -> str:
    """A step or collective time given in milliseconds: ``'0.42 ms'``, ``'12.3 ms'``, ``'386 ms'``,
    ``'38.6 s'``, ``'6 min 26 s'`` -- never ``'3.86e+04 ms'``."""
    if ms != ms:
        return "n/a"
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 100:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return format_interval(ms / 1000)


def format_usd(value: float | None) -> str:
    """Money: cents from a dollar up (``'$1,234.50'``), two significant figures below a cent
    (``'$0.0042'``), ``'$0'`` for nothing -- a sub-cent cost never reads as ``'$0.01'``."""
    if value is None or value != value:
        return "n/a"
    if value == math.inf:
        return "unbounded"
    a = abs(value)
    sign = "-" if value < 0 else ""
    if a == 0:
        return "$0"
    if a < 0.01:
        return f"{sign}${a:.2g}" if a >= 1e-4 else f"{sign}< $0.0001"
    if a < 1:
        return f"{sign}${a:.3f}".rstrip("0") if a < 0.1 else f"{sign}${a:.2f}"
    return f"{sign}${a:,.2f}"


def format_probability(p: float | None, *, digits: int = 1) -> str:
    """A model's probability as a percentage: ``'95.3 %'``; beyond the shown precision
    ``'> 99.9 %'`` / ``'< 0.1 %'`` (never ``'1'``, ``'1.000'`` or ``'1.2e-27'``: a model is never
    certain, so 0 and 1 read the same way); ``'-'`` for None. Rates counted over simulated runs,
    which can be exactly 0 or 100 %, use :func:`format_rate`."""
    if p is None or p != p:
        return "-"
    p = min(max(float(p), 0.0), 1.0)
    step = 10.0 ** (-digits)
    pct = 100.0 * p
    shown = f"{pct:.{digits}f}"
    if float(shown) >= 100.0:
        return f"> {100.0 - step:.{digits}f} %"
    if float(shown) <= 0.0:
        return f"< {step:.{digits}f} %"
    return f"{shown} %"


def format_rate(p: float | None, *, runs: int | None = None) -> str:
    """A rate observed over runs (deadline met, finished): a percentage of runs, exact at the ends
    (``'100 % of 100 runs'``); without ``runs`` just the percentage."""
    if p is None or p != p:
        return "-"
    pct = 100.0 * float(p)
    text = f"{pct:.0f} %" if pct in (0.0, 100.0) or runs is not None and runs <= 100 else f"{pct:.1f} %"
    return text + (f" of {plural(runs, 'run')}" if runs is not None else "")


def format_count(value: float, *, digits: int = 1) -> str:
    """An expected count (revocations): ``'0.19'``, ``'1.3'``, ``'12'``."""
    if value != value:
        return "n/a"
    if value == math.inf:
        return "unbounded"
    if value == 0:
        return "0"
    if value < 1:
        return f"{value:.2f}"
    if value < 10:
        return f"{value:.{digits}f}"
    return f"{value:,.0f}"


_IRREGULAR = {"was": "were", "is": "are", "this": "these", "it": "they"}


def plural(n: float, word: str, plural_form: str | None = None, *, show: bool = True) -> str:
    """``plural(1, 'node') == '1 node'``, ``plural(2, 'node') == '2 nodes'``, ``plural(1.5, 'revocation')
    == '1.5 revocations'`` (only exactly one is singular); ``plural_form`` for irregular words."""
    one = float(n) == 1.0
    if one:
        form = word
    elif plural_form is not None:
        form = plural_form
    elif word in _IRREGULAR:
        form = _IRREGULAR[word]
    elif word.endswith(("s", "x", "ch", "sh")):
        form = word + "es"
    elif word.endswith("y") and word[-2:-1] not in "aeiou":
        form = word[:-1] + "ies"
    else:
        form = word + "s"
    if not show:
        return form
    num = f"{int(n):,}" if float(n).is_integer() else f"{n:g}"
    return f"{num} {form}"
