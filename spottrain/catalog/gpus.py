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


@functools.lru_cache(maxsize=1)
def _table() -> tuple[dict[str, GpuSpec], dict[str, str]]:
    """Parse the shipped table once: specs by canonical name and canonical name by key."""
    text = resources.files("spottrain").joinpath("data", "catalog", SPEC_FILE).read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    specs: dict[str, GpuSpec] = {}
    keys: dict[str, str] = {}
    for row in rows:
        spec = GpuSpec(
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
        specs[spec.name] = spec
        for alias in [spec.name, *filter(None, row["aliases"].split("|"))]:
            keys.setdefault(_key(alias), spec.name)
    return specs, keys


def known_gpus() -> list[str]:
    """Canonical names of every GPU in the registry (cloud GPUs and benchmark boards), sorted."""
    return sorted(_table()[0])


def canonical_gpu(name: str) -> str:
    """The canonical name of ``name`` (an alias or spelling variant).

    Raises :class:`~spottrain.errors.UnknownNameError` with the near miss if unknown.
    """
    canonical = _canonical_or_none(name)
    if canonical is None:
        raise UnknownNameError("GPU", name, _table()[0])
    return canonical


@functools.lru_cache(maxsize=4096)
def _canonical_or_none(name: str) -> str | None:
    """The lookup of :func:`canonical_gpu`, cached: a catalog load asks it for every offer."""
    keys = _table()[1]
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
