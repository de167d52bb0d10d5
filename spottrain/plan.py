"""The saved plan: what the planner decided, read by ``simulate`` and ``run``.

A plan is plain data (JSON with a schema version); no torch, no catalog lookups. The planner
writes it, the simulator replays it against traces, and the runtime launches it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spottrain.errors import InputError, SchemaVersionError

PLAN_SCHEMA_VERSION = 1
PLAN_KIND = "spottrain.plan"


@dataclass(frozen=True, kw_only=True)
class PlanGroup:
    """``count`` identical nodes bought on one market in one place."""

    cloud: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    count: int
    spot: bool
    """True: spot / preemptible; False: on-demand."""
    region: str
    zone: str | None
    price_usd_per_hour: float
    """Price of one node on this group's market (spot price when ``spot``)."""
    on_demand_price_usd_per_hour: float
    network_gbps: float


@dataclass(frozen=True, kw_only=True)
class PlanWorkload:
    model: str
    batch_size: int
    """Per-GPU batch size."""
    samples_total: float
    """Samples to process (epochs x dataset size, or derived from a target loss)."""
    flops_per_sample: float
    """Forward + backward FLOPs of one training sample."""
    param_count: int
    gradient_bytes: float
    target_loss: float | None = None
    epochs: float | None = None
    dataset_size: float | None = None


@dataclass(frozen=True, kw_only=True)
class PlanPrediction:
    throughput_samples_per_s: float
    throughput_low: float
    throughput_high: float
    duration_s: float
    """Expected wall-clock time including revocation overheads."""
    duration_p95_s: float
    cost_usd: float
    """Expected cost including revocation overheads."""
    cost_p95_usd: float
    p_meet_deadline: float | None
    bottleneck: str
    expected_revocations: float


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A cluster choice and its predicted outcome."""

    workload: PlanWorkload
    groups: tuple[PlanGroup, ...]
    ps: int
    """Number of parameter servers (0 = all-reduce)."""
    sync: str
    """``sync`` or ``async``."""
    prediction: PlanPrediction
    checkpoint_interval_s: float
    deadline_s: float | None = None
    budget_usd: float | None = None
    confidence: float = 0.95
    objective: str = "min-cost"
    policy: str = "replace-same"
    """Recovery policy the runtime and the simulator use (see :mod:`spottrain.policies`)."""
    explanation: str = ""
    catalog_snapshot: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = PLAN_SCHEMA_VERSION

    @property
    def nodes(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def price_usd_per_hour(self) -> float:
        return sum(g.count * g.price_usd_per_hour for g in self.groups)

    @property
    def cluster(self) -> str:
        """The measurement-table form of the cluster, e.g. ``4xV100+2xK80:4``."""
        parts = []
        for g in self.groups:
            part = f"{g.count}x{g.gpu}"
            if g.gpus_per_node != 1:
                part += f":{g.gpus_per_node}"
            parts.append(part)
        return "+".join(parts)

    @property
    def label(self) -> str:
        """Instance types, counts and markets, e.g. ``4x p3.2xlarge spot + 1x p3.2xlarge on-demand``."""
        return " + ".join(f"{g.count}x {g.instance_type} {'spot' if g.spot else 'on-demand'}" for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = PLAN_KIND
        data["groups"] = [asdict(g) for g in self.groups]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "plan") -> "Plan":
        if not isinstance(data, dict) or data.get("kind") != PLAN_KIND:
            raise InputError("not a spottrain plan (missing kind: spottrain.plan)", file=source)
        version = data.get("schema_version")
        if version != PLAN_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"plan schema version {version!r} is not supported (this spottrain reads version "
                f"{PLAN_SCHEMA_VERSION}); re-run `spottrain plan`",
                file=source,
            )
        try:
            body = {k: v for k, v in data.items() if k != "kind"}
            body["workload"] = PlanWorkload(**body["workload"])
            body["groups"] = tuple(PlanGroup(**g) for g in body["groups"])
            body["prediction"] = PlanPrediction(**body["prediction"])
            return cls(**body)
        except (KeyError, TypeError) as exc:
            raise InputError(f"malformed plan: {exc}", file=source) from None

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write atomically; refuse to replace an existing file unless ``overwrite``."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise InputError("file exists; pass --force to overwrite it", file=str(path))
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as fh:
            json.dump(self.to_dict(), fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Plan":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError("no such plan file", file=str(path)) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", file=str(path), line=exc.lineno) from None
        return cls.from_dict(data, source=str(path))
