"""The profile record: what one short measurement of a model on one device says.

Torch-free on purpose: the performance model, the planner and the store read profiles
without importing torch. A profile is a frozen, keyword-only dataclass that serialises to a
versioned JSON object (``schema_version``); ``docs/profile.md`` documents every key.

Scripts rely on these top-level keys (they are never renamed within a major version):
``model``, ``batch_size``, ``param_count``, ``gradient_bytes``, ``flops_per_sample_forward``,
``flops_per_sample_backward``, ``step_time_s``, ``samples_per_s``, ``device``.

Units: seconds (``_s``), bytes (``_bytes``), FLOPs are floating-point operations (a
multiply-add counts as 2, as :class:`torch.utils.flop_counter.FlopCounterMode` counts them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from spottrain.errors import InputError, SchemaVersionError

PROFILE_SCHEMA_VERSION = 1
"""Bumped when a key changes meaning or is removed; adding optional keys keeps the version."""

REQUIRED_KEYS = (
    "model",
    "batch_size",
    "param_count",
    "gradient_bytes",
    "flops_per_sample_forward",
    "flops_per_sample_backward",
    "step_time_s",
    "samples_per_s",
    "device",
)
"""Top-level keys every profile has; scripts may rely on them."""

PHASES = ("forward", "backward", "optimizer", "total")


@dataclass(frozen=True, kw_only=True)
class PhaseTiming:
    """Spread of one phase of a training step over the measured iterations (seconds)."""

    median_s: float
    """Median over the measured iterations."""
    p10_s: float
    """10th percentile."""
    p25_s: float
    """25th percentile (lower quartile)."""
    p75_s: float
    """75th percentile (upper quartile)."""
    p90_s: float
    """90th percentile."""
    mean_s: float
    """Arithmetic mean."""

    @property
    def iqr_s(self) -> float:
        """Inter-quartile range, a robust spread."""
        return self.p75_s - self.p25_s

    @classmethod
    def from_samples(cls, samples_s: list[float]) -> "PhaseTiming":
        """Summarise raw per-iteration times (at least one)."""
        if not samples_s:
            raise ValueError("no timing samples")
        xs = sorted(float(x) for x in samples_s)
        return cls(
            median_s=_quantile(xs, 0.5),
            p10_s=_quantile(xs, 0.10),
            p25_s=_quantile(xs, 0.25),
            p75_s=_quantile(xs, 0.75),
            p90_s=_quantile(xs, 0.90),
            mean_s=sum(xs) / len(xs),
        )


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), without numpy."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True, kw_only=True)
class Profile:
    """One measurement of a training step of ``model`` at ``batch_size`` on one device.

    >>> p = Profile(model="mlp-tiny", batch_size=32, param_count=101770, gradient_bytes=407080,
    ...             flops_per_sample_forward=2.0e5, flops_per_sample_backward=4.0e5,
    ...             step_time_s=0.001, samples_per_s=32000.0,
    ...             device={"kind": "cpu", "name": "x86", "peak_tflops": None})
    >>> Profile.from_dict(p.to_dict()) == p
    True
    """

    model: str
    """Zoo name (``resnet50``) or the user's ``module:function`` / given name."""
    batch_size: int
    """Samples per step on this one device."""
    param_count: int
    """All parameters of the model."""
    gradient_bytes: int
    """Bytes of gradients per step (trainable parameters x gradient element size): what data
    parallelism communicates per worker per step."""
    flops_per_sample_forward: float
    """FLOPs of the forward pass per sample (FlopCounterMode, 2 per multiply-add)."""
    flops_per_sample_backward: float
    """FLOPs of the backward pass per sample (about 2x forward for most layers)."""
    step_time_s: float
    """Median wall time of one training step (forward + backward + optimizer)."""
    samples_per_s: float
    """batch_size / step_time_s."""
    device: dict[str, Any]
    """``kind`` ("cpu"|"cuda"), ``name``, ``peak_tflops`` (float or None when unknown),
    ``peak_source``, ``count`` (devices used, 1), and for CUDA ``memory_bytes``, ``capability``."""
    schema_version: int = PROFILE_SCHEMA_VERSION
    """Version of this record's layout."""
    trainable_param_count: int | None = None
    """Parameters with ``requires_grad`` (what gets gradients)."""
    precision: str = "fp32"
    """``fp32`` or ``amp`` (autocast: fp16 + GradScaler on CUDA, bf16 on CPU)."""
    optimizer: str = "sgd"
    """Optimizer stepped in the measurement (``sgd`` with momentum, ``adam``, ``adamw``)."""
    timing: dict[str, PhaseTiming] = field(default_factory=dict)
    """Per-phase spread: ``forward``, ``backward``, ``optimizer``, ``total``."""
    iterations: int = 0
    """Measured iterations (after warm-up)."""
    warmup: int = 0
    """Warm-up iterations (not measured)."""
    achieved_tflops: float | None = None
    """(forward+backward FLOPs per sample) x samples/s / 1e12."""
    fraction_of_peak: float | None = None
    """achieved_tflops / device peak_tflops, None when the peak is unknown."""
    activations_per_sample: float | None = None
    """Elements the forward pass's operations write per sample (views excluded): with the FLOPs,
    the arithmetic intensity the throughput model uses to tell a memory-bound network."""
    memory: dict[str, Any] = field(default_factory=dict)
    """``peak_bytes`` (measured peak of the step, None when not measurable), ``static_bytes``
    (parameters, gradients and optimizer state), ``activation_bytes_per_sample`` (tensors saved
    for backward, per sample), ``peak_bytes_per_sample``, ``method``."""
    input: dict[str, Any] = field(default_factory=dict)
    """What one sample is: ``shape`` (per sample), ``dtype``, ``description``."""
    loss_curve: list[list[float]] | None = None
    """``[[step, loss], ...]`` from ``--loss-steps K`` training steps, or None."""
    loss_curve_source: str | None = None
    """What the loss curve trained on (``synthetic`` fixed batches, or the user's data)."""
    versions: dict[str, str | None] = field(default_factory=dict)
    """``python``, ``torch``, ``spottrain``, ``cuda``, ``cudnn``, ``platform``."""
    created_at: str | None = None
    """ISO-8601 UTC time of the measurement."""
    overhead: dict[str, float] = field(default_factory=dict)
    """``wall_s`` of the whole profile, ``measured_s`` (sum of measured step times),
    ``flop_count_s``, ``warmup_s``: what the profile itself cost."""
    notes: list[str] = field(default_factory=list)
    """Caveats worth reading (e.g. FLOPs the counter cannot see)."""

    @property
    def flops_per_sample(self) -> float:
        """Forward + backward FLOPs per sample: one training step's work per sample."""
        return self.flops_per_sample_forward + self.flops_per_sample_backward

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``flops_per_sample`` (fwd+bwd) is added for convenience."""
        data = asdict(self)
        data["timing"] = {k: {**asdict(v), "iqr_s": v.iqr_s} for k, v in self.timing.items()}
        data["flops_per_sample"] = self.flops_per_sample
        # Keep the documented keys first: easier to read by eye.
        ordered = {"schema_version": data.pop("schema_version")}
        for key in REQUIRED_KEYS:
            ordered[key] = data.pop(key)
        ordered.update(data)
        return ordered

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> "Profile":
        """Validate and build; ``source`` names the file in error messages.

        Raises :class:`SchemaVersionError` for a different major layout and
        :class:`InputError` for missing or ill-typed keys. Unknown keys are ignored, so a
        newer writer's additive keys do not break an older reader.
        """
        where = source or "profile"
        if not isinstance(data, Mapping):
            raise InputError("expected a JSON object with a profile", file=where)
        version = data.get("schema_version")
        if version is None:
            raise SchemaVersionError("missing 'schema_version': not a spottrain profile", file=source)
        if version != PROFILE_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"profile schema_version {version!r} is not supported (this spottrain reads version "
                f"{PROFILE_SCHEMA_VERSION}); re-run `spottrain profile` to regenerate it",
                file=source,
            )
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise InputError(f"missing required key(s) {', '.join(missing)}", file=where)
        # lazy: spottrain.files only when a profile is read or written (not on a plain plan)
        from spottrain.files import validate_model

        validate_model(ProfileSchema, dict(data), file=where, what="profile")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key, kind in (("batch_size", int), ("param_count", int), ("gradient_bytes", int)):
            if not isinstance(kwargs[key], int) or isinstance(kwargs[key], bool) or kwargs[key] < 0:
                raise InputError(f"key {key!r}: expected a non-negative integer, got {kwargs[key]!r}", file=where)
        for key in ("flops_per_sample_forward", "flops_per_sample_backward", "step_time_s", "samples_per_s"):
            value = kwargs[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise InputError(f"key {key!r}: expected a non-negative number, got {value!r}", file=where)
            kwargs[key] = float(value)
        if kwargs["batch_size"] < 1:
            raise InputError("key 'batch_size': expected >= 1", file=where)
        device = kwargs["device"]
        if not isinstance(device, Mapping) or "kind" not in device:
            raise InputError("key 'device': expected an object with at least 'kind' and 'name'", file=where)
        kwargs["device"] = dict(device)
        try:
            kwargs["timing"] = {
                k: PhaseTiming(**{f: float(v[f]) for f in _TIMING_FIELDS}) for k, v in dict(data.get("timing") or {}).items()
            }
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"key 'timing': malformed phase timing ({exc})", file=where) from None
        if kwargs.get("loss_curve") is not None:
            curve = kwargs["loss_curve"]
            try:
                kwargs["loss_curve"] = [[float(s), float(l)] for s, l in curve]
            except (TypeError, ValueError):
                raise InputError("key 'loss_curve': expected [[step, loss], ...]", file=where) from None
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Profile":
        """Read a profile JSON file (as written by :meth:`save` or ``spottrain profile --out``).

        The file passes :func:`spottrain.files.read_json` (missing, binary, non-UTF-8 or invalid
        JSON files are one-line errors naming the file and line) and :class:`ProfileSchema`.
        """
        # lazy: as above
        from spottrain.files import read_json

        return cls.from_dict(read_json(path, what="profile file"), source=str(path))

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write JSON atomically (a temporary file beside ``path``); refuses to replace an existing
        file unless ``overwrite``, and a directory or unwritable place always."""
        # lazy: as above
        from spottrain.files import check_output, write_atomic

        path = check_output(path, option="--out", force=overwrite)
        return write_atomic(path, self.to_json() + "\n")


_TIMING_FIELDS = tuple(f.name for f in fields(PhaseTiming))

_Pos = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _DeviceSchema(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: Annotated[str, Field(min_length=1, max_length=100)]
    peak_tflops: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] | None = None


class _TimingSchema(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    median_s: _NonNeg
    p10_s: _NonNeg
    p25_s: _NonNeg
    p75_s: _NonNeg
    p90_s: _NonNeg
    mean_s: _NonNeg


class ProfileSchema(BaseModel):
    """Types and physical ranges of a profile's keys (docs/formats.md, "Profile"): counts are
    whole numbers, times and rates positive and finite, FLOPs non-negative and finite."""

    model_config = ConfigDict(extra="ignore", strict=True)
    model: Annotated[str, Field(min_length=1, max_length=500)]
    batch_size: Annotated[int, Field(ge=1, le=10_000_000)]
    param_count: Annotated[int, Field(ge=0)]
    gradient_bytes: Annotated[int, Field(ge=0)]
    flops_per_sample_forward: _NonNeg
    flops_per_sample_backward: _NonNeg
    step_time_s: _Pos
    samples_per_s: _Pos
    device: _DeviceSchema
    trainable_param_count: Annotated[int, Field(ge=0)] | None = None
    activations_per_sample: _NonNeg | None = None
    precision: Literal["fp32", "amp", "fp16", "bf16"] = "fp32"
    timing: dict[str, _TimingSchema] = {}
    iterations: Annotated[int, Field(ge=0)] = 0
    warmup: Annotated[int, Field(ge=0)] = 0
    loss_curve: list[Annotated[list[Annotated[float, Field(allow_inf_nan=False)]], Field(min_length=2, max_length=2)]] | None = None


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Shorthand for :meth:`Profile.load`."""
    return Profile.load(path)
