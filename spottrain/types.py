"""Plain nouns shared by every layer. No torch, no I/O.

Units are in the names: ``price_usd_per_hour``, ``deadline_s``, ``bandwidth_gbps``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spottrain.errors import InputError

# A GPU name may hold spaces, as torch and nvidia-smi print it: 1xTesla V100-PCIE-16GB:4.
_GROUP = re.compile(r"^\s*(\d+)\s*x\s*([A-Za-z0-9][A-Za-z0-9._\- ]*?)\s*(?::\s*(\d+))?\s*(?::\s*(spot|ondemand|on-demand))?\s*$")


PRECISION_SPELLINGS: dict[str, str] = {
    "fp32": "fp32", "float32": "fp32", "single": "fp32",
    # TF32 is what fp32 means on Ampere and later GPUs (PyTorch's cuDNN default, the tables' rows)
    "tf32": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "amp": "fp16", "mixed": "fp16",
    # bf16 autocast runs the same tensor cores at the same peak as fp16
    "bf16": "fp16", "bfloat16": "fp16",
}
"""How a table or an option may name a precision -> the performance model's two: ``fp32`` (plain or
TF32) and ``fp16`` (mixed precision on tensor cores)."""


def precision_name(text: str | None) -> str | None:
    """``fp32`` or ``fp16`` for any spelling of :data:`PRECISION_SPELLINGS` (case-insensitive; empty:
    ``fp32``); ``None`` for anything else."""
    key = (text or "").strip().lower() or "fp32"
    return PRECISION_SPELLINGS.get(key)


@dataclass(frozen=True, kw_only=True)
class ClusterGroup:
    """``count`` nodes (workers) of one kind, each with ``gpus_per_node`` GPUs."""

    count: int
    """Number of nodes (workers) in this group."""
    gpu: str
    """GPU name (``V100``) or instance type (``p3.2xlarge``) as written by the user."""
    gpus_per_node: int = 1
    """GPUs in each node; data parallel across all of them."""
    spot: bool | None = None
    """True for spot/preemptible, False for on-demand, None when not stated."""

    @property
    def total_gpus(self) -> int:
        return self.count * self.gpus_per_node

    def __str__(self) -> str:
        text = f"{self.count}x{self.gpu}"
        if self.gpus_per_node != 1:
            text += f":{self.gpus_per_node}"
        if self.spot is not None:
            text += ":spot" if self.spot else ":ondemand"
        return text


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """A cluster as the measurement table writes it: ``1xV100+1xP100+2xK80``, ``2xA100:8``."""

    groups: tuple[ClusterGroup, ...]

    @classmethod
    def parse(cls, text: str, *, where: str = "cluster") -> "ClusterSpec":
        """Parse ``'+'``-joined groups ``NxGPU``, ``NxGPU:G`` or ``NxGPU:G:spot``; the GPU name may be
        the one torch prints (``1xTesla V100-PCIE-16GB:4``).

        >>> str(ClusterSpec.parse("1xV100+2xK80"))
        '1xV100+2xK80'
        """
        if not isinstance(text, str) or not text.strip():
            raise InputError("expected a cluster such as 4xK80 or 1xV100+2xK80:4, got an empty value", column=where)
        groups = []
        for part in text.split("+"):
            m = _GROUP.match(part)
            if not m:
                raise InputError(
                    f"bad cluster group {part.strip()!r} in {text!r}: expected NxGPU or NxGPU:G (e.g. 4xK80, 2xA100:8)",
                    column=where,
                )
            count, gpu, per_node, market = m.groups()
            if int(count) < 1 or (per_node is not None and int(per_node) < 1):
                raise InputError(f"cluster group {part.strip()!r}: counts must be >= 1", column=where)
            spot = None if market is None else market == "spot"
            groups.append(ClusterGroup(count=int(count), gpu=gpu, gpus_per_node=int(per_node or 1), spot=spot))
        return cls(groups=tuple(groups))

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def total_gpus(self) -> int:
        return sum(g.total_gpus for g in self.groups)

    @property
    def is_homogeneous(self) -> bool:
        return len({(g.gpu, g.gpus_per_node) for g in self.groups}) == 1

    def __str__(self) -> str:
        return "+".join(str(g) for g in self.groups)
