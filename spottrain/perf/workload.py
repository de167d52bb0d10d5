"""What is trained: FLOPs and gradient bytes per sample, from a profile or a zoo name."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from spottrain.errors import InputError
from spottrain.profiler.zoo_info import canonical_model, zoo_info

# Forward + backward FLOPs per sample (2 FLOPs per multiply-add, backward = 2 x forward) for zoo
# models, used only while the zoo's generated FLOPs table has no entry.
# ResNet-50 224x224: 4.1 GMAC forward (He et al. 2016); ResNet-18: 1.8 GMAC; VGG-16: 15.5 GMAC;
# BERT-base at 128 tokens: 2 x 85M non-embedding params x 128 + attention; GPT-2 small at 1024 tokens: 6 x 85M x 1024 + attention.
_PUBLISHED_FLOPS = {
    "resnet50": 6 * 4.1e9, "resnet18": 6 * 1.8e9, "vgg16": 6 * 15.5e9, "vgg19": 6 * 19.6e9,
    "bert-base": 3 * 128 * (2 * 85e6 + 4 * 12 * 128 * 768), "gpt2-small": 3 * 1024 * (2 * 85e6 + 4 * 12 * 1024 * 768),
    "resnet32": 6 * 69e6,
}


# Parameter tensors of the zoo's own constructions (``len(list(build_network(name).parameters()))``;
# tests/test_perf_workload.py rebuilds every zoo network on the meta device and checks this table).
# The estimate below is far off for models with few, large layers (VGG-16: 32, not ~245).
ZOO_TENSOR_COUNTS = {
    "mlp-tiny": 4, "resnet18": 62, "resnet50": 161, "resnet101": 314, "resnet152": 467, "resnet18-cifar": 62,
    "resnet50-cifar": 161, "resnet32": 95, "vgg16": 32, "vgg19": 38, "mobilenet-v2": 158, "efficientnet-b0": 213,
    "convnext-tiny": 182, "vit-b16": 152, "transformer-base": 185, "lstm-lm": 11, "bert-base": 153, "bert-large": 297,
    "gpt2-small": 148, "gpt2-medium": 292,
}


@functools.lru_cache(maxsize=512)
def known_tensor_count(name: str) -> int | None:
    """Parameter tensors of zoo model ``name`` (or an alias); ``None`` when it is not a zoo model."""
    try:
        return ZOO_TENSOR_COUNTS.get(canonical_model(name))
    except Exception:  # noqa: BLE001 - not a zoo model
        return None


def estimate_tensor_count(param_count: float) -> float:
    """Parameter tensors of a model whose count is not known: ~160 at 25 M parameters, growing as P^0.25.

    Anchors: ResNet-50 has 161 parameter tensors at 25.6 M parameters, BERT-base about 200 at 110 M,
    the CM-DARE CIFAR ResNets 50-326 at 0.7-6 M.
    """
    return float(min(max(160.0 * (max(param_count, 1.0) / 25e6) ** 0.25, 8.0), 2000.0))


TRAINING_STATE_BYTES_PER_PARAM = 16.0
"""fp32 weights, gradients and Adam's two moments: 4 x 4 bytes per parameter."""


def training_state_gib(param_count: float) -> float:
    """GPU memory of a data-parallel worker's training state, activations not counted (a lower bound)."""
    return TRAINING_STATE_BYTES_PER_PARAM * float(param_count) / 2**30


@functools.lru_cache(maxsize=512)
def input_pixels(name: str) -> float:
    """Decoded image elements per sample of a zoo model fed by an image pipeline (0 otherwise).

    Only image models at ImageNet-like resolution (>= 64x64) count: their data loader decodes and
    augments every sample on the host CPU. Token inputs and CIFAR-sized images cost the host little.
    """
    try:
        info = zoo_info(canonical_model(name))
    except Exception:  # noqa: BLE001 - not a zoo model: no known input pipeline
        return 0.0
    shape = tuple(info.get("input_shape") or ())
    if len(shape) == 3 and "float" in str(info.get("input_dtype", "float")) and min(shape[1:]) >= 64:
        return float(shape[0] * shape[1] * shape[2])
    return 0.0


@functools.lru_cache(maxsize=512)
def known_intensity(name: str) -> float | None:
    """FLOPs per activation element (training FLOPs per sample over the elements the forward pass writes
    per sample) of zoo model ``name``; ``None`` when it is not a zoo model. The ratio, not the count,
    carries over to the same network at another input size."""
    try:
        entry = zoo_info(canonical_model(name))
    except Exception:  # noqa: BLE001 - not a zoo model
        return None
    flops, acts = entry.get("flops_per_sample"), entry.get("activations_per_sample")
    return flops / acts if flops and acts else None


def published_flops(name: str) -> float | None:
    """Published fwd+bwd FLOPs per sample of a zoo model, if we have a figure."""
    try:
        name = canonical_model(name)
    except Exception:  # noqa: BLE001 - unknown name
        pass
    return _PUBLISHED_FLOPS.get(name)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One model at one per-GPU batch size, as the throughput model sees it."""

    model: str
    batch_size: int
    """Per-GPU batch size."""
    flops_per_sample: float
    """Forward + backward FLOPs of one sample."""
    param_count: int
    gradient_bytes: float
    """Bytes exchanged per gradient push (fp32 = 4 x parameters)."""
    step_time_s_ref: float | None = None
    """Measured step time on ``ref_gpu`` (from a profile), used to calibrate compute time."""
    ref_gpu: str | None = None
    precision: str = "fp32"
    tensor_count: int | None = None
    """Parameter tensors (a parameter server pays a cost per tensor); ``None`` = the zoo's count for a zoo
    model, else estimated from the parameter count."""
    activations_per_sample: float | None = None
    """Elements the forward pass writes per sample (a profile measures them); ``None`` = the zoo's
    intensity for a zoo model, else estimated from the layer width."""

    @classmethod
    def from_zoo(cls, name: str, batch_size: int | None = None, *, precision: str = "fp32") -> "Workload":
        """A zoo model (``resnet50``) with FLOPs and parameters from the zoo table."""
        info = zoo_info(name)
        flops = info.get("flops_per_sample") or published_flops(name)
        if not flops:
            raise InputError(f"zoo model {name!r} has no FLOPs figure; profile it (spottrain profile) instead", column="model")
        b = int(batch_size or info.get("default_batch_size") or 32)
        return cls(model=info["name"], batch_size=b, flops_per_sample=float(flops), param_count=int(info["param_count"]),
                   gradient_bytes=float(info.get("gradient_bytes") or 4 * info["param_count"]), precision=precision,
                   tensor_count=known_tensor_count(info["name"]))

    @classmethod
    def from_profile(cls, profile: Any, batch_size: int | None = None) -> "Workload":
        """From a :class:`spottrain.profiler.schema.Profile` or its dict form."""
        d = profile.to_dict() if hasattr(profile, "to_dict") else dict(profile)
        try:
            fwd = float(d.get("flops_per_sample_forward") or 0)
            bwd = float(d.get("flops_per_sample_backward") or 0)
            flops = float(d.get("flops_per_sample") or (fwd + bwd))
            params = int(d["param_count"])
            b = int(batch_size or d["batch_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"profile lacks a usable field: {exc}") from None
        if flops <= 0:
            flops = published_flops(str(d.get("model", ""))) or 0.0
        if flops <= 0:
            raise InputError("profile has no FLOPs per sample", column="flops_per_sample_forward")
        dev = d.get("device") or {}
        ref_gpu = dev.get("name") if dev.get("kind") == "cuda" else None
        step = d.get("step_time_s")
        same_batch = batch_size is None or int(batch_size) == int(d["batch_size"])
        return cls(model=str(d.get("model", "custom")), batch_size=b, flops_per_sample=flops, param_count=params,
                   gradient_bytes=float(d.get("gradient_bytes") or 4 * params),
                   step_time_s_ref=float(step) if (step and ref_gpu and same_batch) else None, ref_gpu=ref_gpu,
                   tensor_count=int(d["tensor_count"]) if d.get("tensor_count") else None,
                   activations_per_sample=float(d["activations_per_sample"]) if d.get("activations_per_sample")
                   else None,
                   precision=str(d.get("precision") or "fp32").replace("amp", "fp16").replace("bf16", "fp16")
                   if str(d.get("precision") or "fp32") in ("fp32", "fp16", "amp", "bf16") else "fp32")
