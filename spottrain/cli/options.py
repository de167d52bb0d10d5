"""Ranges, units and names of command-line flags, checked before a command does any work.

Every command calls these at its top, so a flag outside its range is refused in one line that
names the flag and the allowed range (``--workers: expected a whole number from 1 to 8 (this
machine's CPUs x 4), got 100000``), before a file is read or a process started. Upper bounds
exist where a value would exhaust the machine (processes, memory) or exceed any cloud's quota.

>>> number(4, "--workers", low=1, high=8, integer=True)
4
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.markup import escape

from spottrain.catalog.gpus import canonical_gpu
from spottrain.errors import InputError, UnknownNameError
from spottrain.types import PRECISION_SPELLINGS
from spottrain.units import parse_duration_s

MAX_NODES = 10_000
"""More nodes than any cloud grants one account in GPU quota (thousands at most)."""
MAX_GPUS_PER_NODE = 16
MAX_BATCH = 10_000_000
"""Per-GPU batch size: beyond any model's memory."""
MAX_RUNS = 100_000
"""Monte Carlo runs per policy: 100k runs of each policy already take many minutes and keep every
run's result in memory; the 95th percentiles settle within a few thousand."""
MAX_NETWORK_GBPS = 10_000.0
"""Per-node network: 3.2 Tbps (p5.48xlarge) is the largest offered today."""
MAX_SEED = 2**32 - 1
"""numpy's seed range."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:+/@=,\-]*$")


def max_processes() -> int:
    """The most worker processes a command may start: 4 per CPU of this machine (more only
    time-slice), and never more than the user's process limit leaves free."""
    cpus = os.cpu_count() or 1
    limit = 4 * cpus
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, max(1, soft // 4))
    except (ImportError, OSError, ValueError):  # pragma: no cover - not Linux
        pass
    return max(1, limit)


def available_memory_bytes() -> int | None:
    """Memory this machine can give a command now (MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _range_text(integer: bool, low: float | None, low_open: bool, high: float | None, why: str) -> str:
    kind = "a whole number" if integer else "a number"
    if low is not None and high is not None and not low_open:
        text = f"{kind} from {low:g} to {high:g}"
    else:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            parts.append(f"<= {high:g}")
        text = kind + (" " + " and ".join(parts) if parts else " (finite)")
    return text + (f" ({why})" if why else "")


def number(value: float | int | None, flag: str, *, low: float | None = None, low_open: bool = False,
           high: float | None = None, integer: bool = False, why: str = "", unit: str = "") -> float | int | None:
    """``value`` if it is finite and in range (None passes: the flag was not given); else an
    :class:`InputError` naming ``flag``, the range and the value."""
    if value is None:
        return None
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if not bad:
        bad = ((low is not None and (value <= low if low_open else value < low))
               or (high is not None and value > high) or (integer and value != int(value)))
    if bad:
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        raise InputError(f"expected {_range_text(integer, low, low_open, high, why)}{unit}, got {shown}", column=flag)
    return value


def count(value: int | None, flag: str, *, low: int = 1, high: int | None = None, why: str = "") -> int | None:
    """A whole number in ``[low, high]``."""
    return number(value, flag, low=low, high=high, integer=True, why=why)  # type: ignore[return-value]


def positive(value: float | None, flag: str, *, high: float | None = None, why: str = "", unit: str = "") -> float | None:
    """A finite number > 0 (and <= ``high``)."""
    return number(value, flag, low=0, low_open=True, high=high, why=why, unit=unit)


def processes(value: int | None, flag: str = "--workers") -> int | None:
    """A number of worker processes: 1 to :func:`max_processes`."""
    top = max_processes()
    return count(value, flag, low=1, high=top, why=f"{os.cpu_count() or 1} CPUs here, at most 4 processes each")


def fraction(value: float | None, flag: str, *, closed_high: bool = True, low_open: bool = False) -> float | None:
    """A number in [0, 1] (or (0, 1) / [0, 1) as asked)."""
    if value is not None and not closed_high and value == 1:
        raise InputError("expected a number below 1, got 1", column=flag)
    return number(value, flag, low=0, low_open=low_open, high=1)


def name(value: str | None, flag: str, *, max_length: int = 200) -> str | None:
    """A name typed on the command line: printable, no control characters or stray symbols.

    Lookups elsewhere normalise spelling (case, dashes); this refuses what is not a name at
    all, so ``--gpu 'V100 x!'`` is not read as V100.
    """
    if value is None:
        return None
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InputError(f"expected a name, got {value!r} (a control character)", column=flag)
    text = value.strip()
    if not text:
        raise InputError("expected a name, got an empty value", column=flag)
    if len(text) > max_length:
        raise InputError(f"expected a name of at most {max_length} characters, got {len(text)}", column=flag)
    if not _NAME.match(text):
        bad = next((ch for ch in text if not (ch.isascii() and (ch.isalnum() or ch in " ._:+/@=,-"))), text[0])
        raise InputError(f"expected a name of letters, digits and . _ - : + /, got {value!r} "
                         f"(character {bad!r})", column=flag)
    return text


def choice(value: str | None, flag: str, known: Sequence[str], *, kind: str | None = None) -> str | None:
    """``value`` if it is one of ``known`` exactly (case-insensitive); else the near misses."""
    if value is None:
        return None
    by_lower = {k.lower(): k for k in known}
    hit = by_lower.get(value.strip().lower())
    if hit is None:
        raise InputError(str(UnknownNameError(kind or "value", value, known)), column=flag)
    return hit


def precision(value: str | None, flag: str = "--precision") -> str | None:
    """A precision as the performance model names it: ``fp32``, or ``fp16`` for mixed precision,
    which ``amp`` (``spottrain profile``'s name) and ``bf16`` also mean
    (:data:`spottrain.types.PRECISION_SPELLINGS`)."""
    if value is None:
        return None
    return PRECISION_SPELLINGS[choice(value, flag, list(PRECISION_SPELLINGS), kind="precision")]


def gpu(value: str | None, flag: str = "--gpu") -> str | None:
    """A GPU name: a clean name (:func:`name`) that the GPU registry knows (aliases accepted)."""
    if value is None:
        return None
    text = name(value, flag)
    try:
        canonical = canonical_gpu(text)
    except UnknownNameError as exc:
        raise InputError(str(exc), column=flag) from None
    return canonical


def cluster(value: str | None, flag: str = "--cluster"):
    """A cluster such as ``4xV100+2xK80:4``: parsed, GPU names known, at most :data:`MAX_NODES`
    nodes and :data:`MAX_GPUS_PER_NODE` GPUs per node."""
    if value is None:
        return None
    # lazy: not loaded at CLI start-up; only for --cluster
    from spottrain.types import ClusterSpec

    text = name(value, flag)
    try:
        spec = ClusterSpec.parse(text, where=flag)
    except InputError as exc:
        raise InputError(str(exc).removeprefix(f"{flag}: "), column=flag) from None
    nodes = sum(g.count for g in spec.groups)
    if nodes > MAX_NODES:
        raise InputError(f"expected at most {MAX_NODES:,} nodes (no cloud grants one account more), got {nodes:,}",
                         column=flag)
    for g in spec.groups:
        if g.gpus_per_node > MAX_GPUS_PER_NODE:
            raise InputError(f"cluster group {g}: no node holds more than {MAX_GPUS_PER_NODE} GPUs", column=flag)
    return spec


def names_list(value: str | None, flag: str, *, known: Iterable[str] | None = None) -> list[str] | None:
    """A comma-separated list of names (``--clouds aws,gcp``), each checked."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",")]
    if not any(items) or any(not v for v in items):
        raise InputError(f"expected comma-separated names, got {value!r}", column=flag)
    known_list = list(known) if known is not None else None
    return [choice(name(v, flag), flag, known_list) if known_list is not None else name(v, flag) for v in items]


def exclusive(flags: dict[str, object], *, at_most: int = 1) -> None:
    """Refuse contradictory flags given together: ``flags`` maps flag -> value (None/False: not given)."""
    given = [f for f, v in flags.items() if v is not None and v is not False]
    if len(given) > at_most:
        raise InputError(f"{' and '.join(given)} contradict each other; give one of them", column=given[0])


def output(path: Path | None, flag: str, *, force: bool = False, suffixes: Sequence[str] | None = None) -> Path | None:
    """An output file checked before the work: not a directory, a writable place, not existing
    without ``--force``. Creates nothing."""
    if path is None:
        return None
    # lazy: spottrain.files only when an output path is checked
    from spottrain.files import check_output

    return check_output(path, option=flag, force=force, suffixes=suffixes)


def input_file(path: Path | None, flag: str) -> Path | None:
    """An input file that exists and is a regular file (its content is checked by its reader)."""
    if path is None:
        return None

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError("file not found", file=str(path), column=flag) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(path), column=flag) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory; expected a file", file=str(path), column=flag)
    return path


def estimate(what: str, needed: float, available: float | None, flag: str, *, unit: str = "GiB",
             hint: str = "") -> None:
    """Refuse work whose estimated need (``needed``, in ``unit``) exceeds what is ``available``."""
    if available is not None and needed > available:
        raise InputError(f"{what} needs about {needed:,.1f} {unit}, more than the {available:,.1f} {unit} available"
                         + (f"; {hint}" if hint else ""), column=flag)


def usage_line(exc) -> str:
    """One line for a click usage error: what was wrong and where to look."""
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "spottrain"
    message = " ".join(str(exc.format_message()).split())
    param = getattr(exc, "param", None)
    if param is not None and getattr(param, "opts", None) and param.opts[0] not in message:
        message = f"{param.opts[0]}: {message}"

    return escape(f"{message} (see `{path} --help`)")


MAX_DURATION_S = 366 * 86400.0
"""A year: no training job, deadline or checkpoint runs longer; more is a typo in the unit."""


def duration(text: str | None, flag: str, *, require_unit: bool = False, high_s: float = MAX_DURATION_S,
             allow_zero: bool = False) -> float | None:
    """A duration flag (``8h``, ``90m``) in seconds: finite, > 0 (>= 0 with ``allow_zero``), at most ``high_s``."""
    if text is None:
        return None

    if allow_zero and str(text).strip() in ("0", "0s", "0m", "0h"):
        return 0.0
    value = parse_duration_s(text, option=flag, require_unit=require_unit)
    if not math.isfinite(value) or value > high_s:
        raise InputError(f"expected a duration of at most {high_s / 86400:g} days, got {text!r}", column=flag)
    return value


def job_checkpoints(job_id: str | None, directory: Path, *, flag: str = "--job-id") -> None:
    """Check a run's checkpoint directory before any worker starts (torch-free: manifests only).

    A ``job_id`` that differs from the job of the checkpoints already there is refused (the
    workers would refuse them one by one and the run would restart forever), and so are
    checkpoints none of which has a readable manifest: resuming would silently start from step 0
    over the user's files, so the user moves them away first (nothing is deleted).
    """
    if not directory.is_dir():
        return
    # lazy: as above, when a JSON input is read
    from spottrain.files import read_json

    dirs = sorted((p for p in directory.iterdir() if p.is_dir() and p.name.startswith("step-")), key=lambda p: p.name)
    if not dirs:
        return
    jobs: dict[str, str] = {}
    for d in dirs:
        try:
            man = read_json(d / "MANIFEST.json", what="checkpoint manifest")
        except InputError:
            continue
        if isinstance(man, dict) and isinstance(man.get("job_id"), str):
            jobs.setdefault(man["job_id"], d.name)
    if job_id is not None:
        others = {j: d for j, d in jobs.items() if j != job_id}
        if others:
            j, d = next(iter(others.items()))
            raise InputError(f"the checkpoints in {directory} belong to job {j!r} ({d}), not {job_id!r}; pass "
                             f"--job-id {j} to resume it, or another --run-dir / --checkpoint-dir", column=flag)
    if not jobs:
        names = ", ".join(d.name for d in dirs[:5]) + (f" and {len(dirs) - 5} more" if len(dirs) > 5 else "")
        raise InputError(f"none of the {len(dirs)} checkpoint(s) in {directory} is readable (no valid "
                         f"MANIFEST.json: {names}); nothing was deleted: move them away, or pass another "
                         "--run-dir / --checkpoint-dir, to start from step 0")
