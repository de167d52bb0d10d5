"""The saved plan: what the planner decided, read by ``simulate`` and ``run``.

A plan is plain data (JSON with a schema version); no torch, no catalog lookups. The planner
writes it, the simulator replays it against traces, and the runtime launches it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spottrain.errors import InputError, SchemaVersionError, UnknownNameError

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
    precision: str = "fp32"
    """What the planned speeds assume the job trains in: ``fp32`` or ``fp16`` (mixed precision).
    A custom command's measurement rows carry it (the command's own code chooses the precision)."""


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
    p_on_demand: float | None = None
    """Probability that the deadline policy moves the run to on-demand nodes (None without a
    deadline or a spot node); the figures above count those runs."""

    def figures(self) -> dict[str, Any]:
        """The outcome's figures as a headline or a refinement record shows them: time and cost with their
        p95, P(deadline), revocations and the share of runs moved to on-demand nodes."""
        return {"duration_s": self.duration_s, "duration_p95_s": self.duration_p95_s, "cost_usd": self.cost_usd,
                "cost_p95_usd": self.cost_p95_usd, "p_meet_deadline": self.p_meet_deadline,
                "expected_revocations": self.expected_revocations, "p_on_demand": self.p_on_demand}


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
        """Validate a plan document (:class:`PlanSchema`: types and physical ranges) and build it.

        Errors are one line naming the file and the key, e.g. ``plan.json, column
        groups[0].price_usd_per_hour: plan: expected a number >= 0, got -3``.
        """
        if not isinstance(data, dict) or data.get("kind") != PLAN_KIND:
            raise InputError("not a spottrain plan (missing kind: spottrain.plan)", file=source)
        version = data.get("schema_version")
        if version != PLAN_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"plan schema version {version!r} is not supported (this spottrain reads version "
                f"{PLAN_SCHEMA_VERSION}); re-run `spottrain plan`",
                file=source,
            )
        # lazy: spottrain.files only when a plan file is read or written
        from spottrain.files import validate_model

        checked = validate_model(PlanSchema, data, file=source, what="plan")
        body = {k: v for k, v in data.items() if k != "kind"}
        body.update({k: getattr(checked, k) for k in PlanSchema.model_fields if k in body and k not in _NESTED})
        try:
            body["workload"] = _build(PlanWorkload, data["workload"], checked.workload, "workload")
            body["groups"] = tuple(_build(PlanGroup, g, cg, f"groups[{i}]")
                                   for i, (g, cg) in enumerate(zip(data["groups"], checked.groups)))
            body["prediction"] = _build(PlanPrediction, data["prediction"], checked.prediction, "prediction")
            plan = cls(**body)
        except TypeError as exc:
            raise InputError(f"malformed plan: {_unknown_key(exc)}", file=source) from None
        except _KeyProblem as exc:
            raise InputError(f"plan: {exc.args[1]}", file=source, column=exc.args[0]) from None
        _check_against_catalog(plan, source=source)
        return plan

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write atomically; refuse to replace an existing file unless ``overwrite``."""
        # lazy: as above
        from spottrain.files import check_output, write_atomic

        path = check_output(path, option="--out", force=overwrite)
        return write_atomic(path, json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Plan":
        """Read a plan file (through :mod:`spottrain.files`: OS, encoding and JSON errors are one line)."""
        # lazy: as above
        from spottrain.files import read_json

        return cls.from_dict(read_json(path, what="plan file"), source=str(path))


# --- the plan file's schema: types and physical ranges of every key we read ----------------------

_NESTED = ("workload", "groups", "prediction")
MAX_NODES_PER_GROUP = 10_000
"""More nodes of one type than any cloud's GPU quota grants one account (thousands at most)."""
MAX_GPUS_PER_NODE = 16

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class PlanGroupSchema(_Strict):
    cloud: Literal["aws", "gcp", "azure"]
    instance_type: Name
    gpu: Name
    gpus_per_node: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_NODE)]
    count: Annotated[int, Field(ge=1, le=MAX_NODES_PER_GROUP)]
    spot: bool
    region: Name
    zone: Name | None
    price_usd_per_hour: NonNegativeFloat
    on_demand_price_usd_per_hour: NonNegativeFloat
    network_gbps: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)]


class PlanWorkloadSchema(_Strict):
    model: Name
    batch_size: Annotated[int, Field(ge=1, le=10_000_000)]
    samples_total: PositiveFloat
    flops_per_sample: PositiveFloat
    param_count: Annotated[int, Field(ge=1)]
    gradient_bytes: PositiveFloat
    target_loss: FiniteFloat | None = None
    epochs: PositiveFloat | None = None
    dataset_size: PositiveFloat | None = None
    precision: Literal["fp32", "fp16"] = "fp32"


class PlanPredictionSchema(_Strict):
    throughput_samples_per_s: PositiveFloat
    throughput_low: NonNegativeFloat
    throughput_high: PositiveFloat
    duration_s: PositiveFloat
    duration_p95_s: PositiveFloat
    cost_usd: NonNegativeFloat
    cost_p95_usd: NonNegativeFloat
    p_meet_deadline: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None
    bottleneck: str
    expected_revocations: NonNegativeFloat
    p_on_demand: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _ordered(self) -> "PlanPredictionSchema":
        if not self.throughput_low <= self.throughput_samples_per_s <= self.throughput_high:
            raise ValueError("expected throughput_low <= throughput_samples_per_s <= throughput_high")
        return self


class PlanSchema(_Strict):
    """The keys of a plan file with their types and ranges (docs/formats.md, "Plan")."""

    workload: PlanWorkloadSchema
    groups: Annotated[list[PlanGroupSchema], Field(min_length=1, max_length=100)]
    ps: Annotated[int, Field(ge=0, le=1000)]
    sync: Literal["sync", "async"]
    prediction: PlanPredictionSchema
    checkpoint_interval_s: PositiveFloat
    deadline_s: PositiveFloat | None = None
    budget_usd: PositiveFloat | None = None
    confidence: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.95
    objective: Name = "min-cost"
    policy: Name = "replace-same"
    explanation: str = ""
    catalog_snapshot: str = ""
    extra: dict[str, Any] = {}
    schema_version: int = PLAN_SCHEMA_VERSION

    @model_validator(mode="after")
    def _consistent(self) -> "PlanSchema":
        if self.sync == "async" and self.ps == 0:
            raise ValueError("sync 'async' needs a parameter server (ps >= 1)")
        return self


class _KeyProblem(Exception):
    """(key path, message) of a key the dataclass does not take."""


def _build(kind: type, raw: Any, checked: BaseModel, where: str) -> Any:
    """The dataclass ``kind`` from a raw mapping, with the schema's validated values."""
    body = dict(raw)
    names = {f.name for f in dataclasses.fields(kind)}
    for key in body:
        if key not in names:
            raise _KeyProblem(f"{where}.{key}", "unknown key")
    body.update({k: getattr(checked, k) for k in type(checked).model_fields if k in body})
    return kind(**body)


def _unknown_key(exc: TypeError) -> str:
    text = str(exc)
    if "unexpected keyword argument" in text:
        return "unknown key " + text.rsplit("argument", 1)[-1].strip()
    if "missing" in text:
        return "missing key(s) " + text.rsplit(":", 1)[-1].strip()
    return text


def _check_against_catalog(plan: "Plan", *, source: str) -> None:
    """A group whose instance type is in the shipped catalog must name that type's GPU, GPU count,
    and one of its regions (zones are written as names or as AWS zone ids, so they are not
    checked); the policy must be a known one."""
    try:
        from spottrain.policies import POLICIES
    except ImportError:  # pragma: no cover
        POLICIES = None
    if POLICIES is not None and plan.policy not in POLICIES:
        err = UnknownNameError("policy", plan.policy, POLICIES)
        raise InputError(str(err), file=source, column="policy")
    # lazy: the catalog only to check a plan against it
    from spottrain.catalog import load_catalog

    catalog = load_catalog()
    for i, g in enumerate(plan.groups):
        offers = [o for o in catalog.offers if o.instance_type == g.instance_type and o.cloud == g.cloud]
        where = f"groups[{i}]"
        if not offers:
            continue  # a type from a user catalog or a study's own cluster: no reference to check against
        o = offers[0]
        if (o.gpu, o.gpu_count) != (g.gpu, g.gpus_per_node):
            raise InputError(f"plan: {g.instance_type} has {o.gpu_count}x {o.gpu}, the group says "
                             f"{g.gpus_per_node}x {g.gpu}", file=source, column=f"{where}.gpu")
        regions = {x.region for x in offers}
        if g.region not in regions:
            err = UnknownNameError(f"region of {g.instance_type}", g.region, regions)
            raise InputError(f"plan: {err}", file=source, column=f"{where}.region")
