"""The GPU registry: one canonical name per GPU, with the vendor's published peak figures.

Every layer resolves GPU names here (the performance model's :func:`spottrain.perf.hardware.device`
is a view over this table). The table lives in ``spottrain/data/catalog/gpu_specs.csv`` (one row
per GPU, a source URL and a note beside each): the GPUs of the cloud offers, then benchmark
boards that appear in the shipped measurements but are not offered (workstation cards, PCIe
variants). Names are canonical in the SkyPilot style (``V100``, ``V100-32GB``, ``A100-80GB``);
lookups accept aliases and spelling variants ("Tesla V100", "A100-SXM4-80GB", "nvidia l4",
"GeForce RTX 4090"), fall back to the name without memory size / form factor ("H100 SXM5" ->
``H100``) and suggest the near miss for anything else.

Example::

    >>> gpu_spec("Tesla V100").fp32_tflops
    15.7
    >>> canonical_gpu("a100-sxm4-80gb")
    'A100-80GB'
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from dataclasses import dataclass
from importlib import resources

from spottrain.errors import UnknownNameError

SPEC_FILE = "gpu_specs.csv"


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """Peak per-GPU figures of one GPU model, as published by its vendor."""

    name: str
    """Canonical name, e.g. ``"V100"``, ``"A100-80GB"``."""
    architecture: str
    """Micro-architecture, e.g. ``"Volta"``."""
    die: str
    """The GPU die the board is built on, e.g. ``"GA100"`` (every A100 board), ``"GA102"`` (A10, A10G)."""
    fp32_tflops: float
    """Peak FP32 (non-tensor) TFLOPS."""
    fp16_tflops: float
    """Peak FP16 tensor-core TFLOPS, dense; the FP16 (or FP32) rate for GPUs without tensor cores."""
    tf32_tflops: float | None
    """Peak TF32 tensor TFLOPS, dense (Ampere and later), else ``None``."""
    memory_gib: float | None
    """GPU memory capacity (nominal); ``None`` for benchmark boards whose capacity was not recorded."""
    memory_bandwidth_gbs: float
    """GPU memory bandwidth in GB/s."""
    pcie_gen: int | None
    """PCIe generation of the host link; ``None`` where it was not recorded."""
    pcie_gbs: float
    """Host link bandwidth, GB/s per direction (x16)."""
    nvlink_gbs: float | None
    """Total NVLink bandwidth of one GPU in GB/s, ``None`` without NVLink."""
    tdp_w: float | None = None
    """Maximum board power (W; per die for dual-GPU boards), ``None`` where no vendor figure is published."""
    memory: str = ""
    """Memory technology: ``HBM2``/``HBM2e``/``HBM3``/``HBM3e`` or ``GDDR5``/``GDDR5X``/``GDDR6``/``GDDR6X``."""
    source: str
    """URL(s) the figures were taken from."""
    note: str = ""
    """How the figures were read (board vs die, dense vs sparse)."""

    def peak_tflops(self, precision: str = "fp32") -> float:
        """Peak TFLOPS at ``precision`` (``fp32``, ``tf32`` or ``fp16``); TF32 falls back to FP32."""
        if precision == "fp32":
            return self.fp32_tflops
        if precision == "fp16":
            return self.fp16_tflops
        if precision == "tf32":
            return self.tf32_tflops if self.tf32_tflops is not None else self.fp32_tflops
        raise UnknownNameError("precision", precision, ("fp32", "tf32", "fp16"))


def _key(name: str) -> str:
    """Normalise a GPU name for lookup: case, vendor words and punctuation do not matter."""
    key = name.strip().lower()
    key = re.sub(r"\b(nvidia|tesla)\b", "", key)
    return re.sub(r"[^a-z0-9]", "", key)


_VENDOR_WORDS = re.compile(r"nvidia|geforce|tesla")
# Memory size, form factor and memory type, which several boards of one GPU share: the canonical
# name is tried without them when the full name is unknown ("H100-SXM5" -> H100).
_BOARD_WORDS = re.compile(r"\d+gb|sxm\d?|hbm\d?e?")
# The same words as whole parts of a name, before its separators go: in "H200 141GB HBM3e" the
# memory size must not take the model number's digits with it ("h200141gb").
_BOARD_PARTS = re.compile(r"(?:nvidia|geforce|tesla|\d+gb|sxm\d?|hbm\d?e?|dgxs)")


def _lookup_keys(name: str) -> list[str]:
    """Keys tried in turn: the name, then without vendor words, then also without board words."""
    alnum = "".join(ch for ch in name.lower() if ch.isalnum())
    bare = _VENDOR_WORDS.sub("", alnum)
    parts = "".join(p for p in re.split(r"[^a-z0-9]+", name.lower()) if p and not _BOARD_PARTS.fullmatch(p))
    return list(dict.fromkeys([_key(name), alnum, bare, _BOARD_WORDS.sub("", bare), parts]))


def _opt(value: str) -> float | None:
    return float(value) if value.strip() else None


def _opt_int(value: str) -> int | None:
    return int(value) if value.strip() else None


def _shipped_spec(row: dict[str, str]) -> GpuSpec:
    return GpuSpec(
        name=row["name"],
        architecture=row["architecture"],
        die=row["die"],
        fp32_tflops=float(row["fp32_tflops"]),
        fp16_tflops=float(row["fp16_tflops"]),
        tf32_tflops=_opt(row["tf32_tflops"]),
        memory_gib=_opt(row["memory_gib"]),
        memory_bandwidth_gbs=float(row["memory_bandwidth_gbs"]),
        pcie_gen=_opt_int(row["pcie_gen"]),
        pcie_gbs=float(row["pcie_gbs"]),
        nvlink_gbs=_opt(row["nvlink_gbs"]),
        tdp_w=_opt(row["tdp_w"]),
        memory=row["memory"],
        source=row["source"],
        note=row["note"],
    )


EXTRA_SPECS_ENV = "SPOTTRAIN_GPU_SPECS"
"""Environment variable naming a CSV of GPUs the registry does not hold, one row per board from its
datasheet, in the shipped table's columns: ``name``, ``architecture``, ``fp32_tflops`` and
``memory_bandwidth_gbs`` required; ``fp16_tflops`` (dense tensor rate with FP32 accumulate; empty:
the FP32 rate, no tensor cores), ``tf32_tflops``, ``tdp_w`` and ``memory`` (``GDDR6``...: a GDDR
board with its power is held to its power limit) as the datasheet gives them; ``aliases``, ``die``,
``memory_gib``, ``pcie_gen``, ``pcie_gbs``, ``nvlink_gbs``, ``source``, ``note`` optional. Every
command reads it; its boards are predicted from their figures and how the fitted boards of their die (else
of their architecture) fall short of theirs."""

_COLUMNS = ("name", "aliases", "architecture", "die", "fp32_tflops", "fp16_tflops", "tf32_tflops", "memory_gib",
            "memory_bandwidth_gbs", "pcie_gen", "pcie_gbs", "nvlink_gbs", "tdp_w", "memory", "source", "note")
_PCIE_GBS = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}


def _extra_specs(path: str, specs: dict[str, GpuSpec], keys: dict[str, str]) -> None:
    """Add the rows of the user's table at ``path`` (:data:`EXTRA_SPECS_ENV`) to ``specs`` and ``keys``."""
    from spottrain.files import read_csv

    table = read_csv(path, what=f"GPU table (${EXTRA_SPECS_ENV})", known=_COLUMNS,
                     required=("name", "architecture", "fp32_tflops", "memory_bandwidth_gbs"))
    fp32 = table.numbers("fp32_tflops", high=10_000.0)
    fp16 = table.numbers("fp16_tflops", required=False, high=100_000.0)
    tf32 = table.numbers("tf32_tflops", required=False, high=100_000.0)
    bandwidth = table.numbers("memory_bandwidth_gbs", high=1e6)
    memory_gib = table.numbers("memory_gib", required=False, high=1e5)
    gen = table.numbers("pcie_gen", integer=True, low=3, low_open=False, high=6, required=False)
    pcie = table.numbers("pcie_gbs", required=False, high=1e4)
    nvlink = table.numbers("nvlink_gbs", required=False, high=1e5)
    tdp = table.numbers("tdp_w", required=False, high=1e5)
    known_archs = {s.architecture.lower(): s.architecture for s in specs.values()}
    opt = lambda v: None if math.isnan(v) else float(v)  # noqa: E731
    for i, (name, aliases, arch, die, memory, source, note) in enumerate(zip(
            *(table.texts(c) for c in ("name", "aliases", "architecture", "die", "memory", "source", "note")))):
        if not name:
            raise table.error("expected the board's name", row=i, column="name")
        if not arch:
            raise table.error(f"expected its architecture (one of {', '.join(sorted(set(known_archs.values())))}, "
                              "or a new one)", row=i, column="architecture")
        names = [name, *filter(None, (a.strip() for a in aliases.split("|")))]
        for alias in names:
            taken = next((keys[k] for k in _lookup_keys(alias) if k in keys), None)
            if taken is not None:
                raise table.error(f"GPU {alias!r} is {taken!r} of the registry already: name another board, or "
                                  f"leave out the row", row=i, column="name" if alias == name else "aliases")
        if not math.isnan(fp16[i]) and fp16[i] < fp32[i]:
            raise table.error(f"expected the tensor rate, at least fp32_tflops ({fp32[i]:g}), got {fp16[i]:g}",
                              row=i, column="fp16_tflops")
        spec = GpuSpec(
            name=name, architecture=known_archs.get(arch.lower(), arch), die=die,
            fp32_tflops=float(fp32[i]), fp16_tflops=float(fp32[i] if math.isnan(fp16[i]) else fp16[i]),
            tf32_tflops=opt(tf32[i]), memory_gib=opt(memory_gib[i]), memory_bandwidth_gbs=float(bandwidth[i]),
            pcie_gen=None if math.isnan(gen[i]) else int(gen[i]),
            pcie_gbs=opt(pcie[i]) or _PCIE_GBS.get(0 if math.isnan(gen[i]) else int(gen[i]), 16.0),
            nvlink_gbs=opt(nvlink[i]), tdp_w=opt(tdp[i]), memory=memory,
            source=source or f"{path}, line {table.lines[i]}",
            note=(note + " " if note else "") + f"Your board ({EXTRA_SPECS_ENV}), not a cloud offer.",
        )
        specs[name] = spec
        for alias in names:
            keys.setdefault(_key(alias), name)


def _extra_path() -> str:
    """The path :data:`EXTRA_SPECS_ENV` names ("" when unset)."""
    return os.environ.get(EXTRA_SPECS_ENV, "").strip()


def _table() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    """Specs by canonical name and canonical name by key: the shipped table, and the user's
    :data:`EXTRA_SPECS_ENV` table when it is set."""
    return _tables(_extra_path())


@functools.lru_cache(maxsize=4)
def _tables(extra: str) -> tuple[dict[str, GpuSpec], dict[str, str]]:
    """Parse the shipped table once (and ``extra``, a path, when given)."""
    text = resources.files("spottrain").joinpath("data", "catalog", SPEC_FILE).read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    specs: dict[str, GpuSpec] = {}
    keys: dict[str, str] = {}
    for row in rows:
        spec = _shipped_spec(row)
        specs[spec.name] = spec
        for alias in [spec.name, *filter(None, row["aliases"].split("|"))]:
            keys.setdefault(_key(alias), spec.name)
    if extra:
        _extra_specs(extra, specs, keys)
    return specs, keys


def known_gpus() -> list[str]:
    """Canonical names of every GPU in the registry (cloud GPUs and benchmark boards), sorted."""
    return sorted(_table()[0])


class UnknownGpuError(UnknownNameError):
    """A GPU the registry does not hold: the near miss, and how to add a board from its datasheet."""

    def __init__(self, name: str, known) -> None:
        super().__init__("GPU", name, known)
        self.args = (f"{self.args[0]} (a board the registry lacks: give its datasheet figures in a CSV named by "
                     f"${EXTRA_SPECS_ENV}, see docs/formats.md)",)


def canonical_gpu(name: str) -> str:
    """The canonical name of ``name`` (an alias or spelling variant).

    Raises :class:`UnknownGpuError` (an :class:`~spottrain.errors.UnknownNameError`) with the near
    miss if unknown.
    """
    canonical = _canonical_or_none(name, _extra_path())
    if canonical is None:
        raise UnknownGpuError(name, _table()[0])
    return canonical


@functools.lru_cache(maxsize=4096)
def _canonical_or_none(name: str, extra: str = "") -> str | None:
    """The lookup of :func:`canonical_gpu`, cached: a catalog load asks it for every offer."""
    keys = _tables(extra)[1]
    return next((keys[k] for k in _lookup_keys(name) if k in keys), None)


def gpu_label(name: str) -> str:
    """The canonical name of ``name``, or ``name`` upper-cased when the registry does not know it.

    For labels that must stay usable when the GPU is unknown (a user trace of a new GPU, a pool
    of lifetime data): they group by this label instead of failing."""
    try:
        return canonical_gpu(name)
    except UnknownNameError:
        return name.strip().upper()


def gpu_spec(name: str) -> GpuSpec:
    """The :class:`GpuSpec` of ``name`` (any alias); ``UnknownNameError`` with the near miss."""
    return _table()[0][canonical_gpu(name)]
