"""What is trained: FLOPs and gradient bytes per sample, from a profile or a zoo name."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from spottrain.errors import InputError, UnknownNameError
from spottrain.profiler.zoo_info import canonical_model, is_zoo_model, zoo_info, zoo_names
from spottrain.types import precision_name

# Forward + backward FLOPs per sample (2 FLOPs per multiply-add, backward = 2 x forward) for zoo
# models, used only while the zoo's generated FLOPs table has no entry.
# ResNet-50 224x224: 4.1 GMAC forward (He et al. 2016); ResNet-18: 1.8 GMAC; VGG-16: 15.5 GMAC;
# BERT-base at 128 tokens: 2 x 85M non-embedding params x 128 + attention; GPT-2 small at 1024 tokens: 6 x 85M x 1024 + attention.
_PUBLISHED_FLOPS = {
    "resnet50": 6 * 4.1e9, "resnet18": 6 * 1.8e9, "vgg16": 6 * 15.5e9, "vgg19": 6 * 19.6e9,
    "bert-base": 3 * 128 * (2 * 85e6 + 4 * 12 * 128 * 768), "gpt2-small": 3 * 1024 * (2 * 85e6 + 4 * 12 * 1024 * 768),
    "resnet32": 6 * 69e6,
}


@dataclass(frozen=True)
class PublishedArchitecture:
    """An image network the zoo does not build (torchvision's ImageNet classifiers, NVIDIA's SSD300
    detector): its published size."""

    name: str
    gmacs: float
    """Forward multiply-adds per image (G) at ``side`` x ``side``: torchvision's "GFLOPS" column, or
    counted on the rebuilt layers (SSD300)."""
    param_count: int
    tensor_count: int | None
    """Parameter tensors, counted from the architecture (weights and biases of each layer, the two
    affine tensors of each batch norm); ``None`` where not derived, estimated then."""
    side: int = 224

    @property
    def flops_per_sample(self) -> float:
        """Forward + backward FLOPs: 2 per multiply-add, backward twice the forward."""
        return 6.0 * self.gmacs * 1e9


# torchvision's model documentation (https://pytorch.org/vision/stable/models.html: each ImageNet-1K
# weights entry's num_params and GFLOPS, the forward multiply-adds at the weights' input size), for
# the architectures a user names most that the zoo does not build. Tensor counts from the
# architectures: ResNet-34's 16 basic blocks of 2 convolutions and 2 batch norms (6 tensors), 3
# down-sampling branches (3), stem (3) and classifier (2): 110; ResNeXt and Wide ResNet keep
# ResNet-50's / -101's layer list (161 / 314); a DenseNet layer has 2 batch norms and 2 convolutions
# (6), a transition 3, plus stem 3, last norm 2 and classifier 2; SqueezeNet 8 fire modules of 3
# convolutions with biases, plus 2 convolutions.
_TORCHVISION = (
    PublishedArchitecture(name="alexnet", gmacs=0.71, param_count=61_100_840, tensor_count=16),
    PublishedArchitecture(name="vgg11", gmacs=7.61, param_count=132_863_336, tensor_count=22),
    PublishedArchitecture(name="vgg13", gmacs=11.31, param_count=133_047_848, tensor_count=26),
    PublishedArchitecture(name="vgg11_bn", gmacs=7.61, param_count=132_868_840, tensor_count=38),
    PublishedArchitecture(name="vgg13_bn", gmacs=11.31, param_count=133_053_736, tensor_count=46),
    PublishedArchitecture(name="vgg16_bn", gmacs=15.47, param_count=138_365_992, tensor_count=58),
    PublishedArchitecture(name="vgg19_bn", gmacs=19.63, param_count=143_678_248, tensor_count=70),
    PublishedArchitecture(name="resnet34", gmacs=3.66, param_count=21_797_672, tensor_count=110),
    PublishedArchitecture(name="resnext50_32x4d", gmacs=4.23, param_count=25_028_904, tensor_count=161),
    PublishedArchitecture(name="resnext101_32x8d", gmacs=16.41, param_count=88_791_336, tensor_count=314),
    PublishedArchitecture(name="wide_resnet50_2", gmacs=11.40, param_count=68_883_240, tensor_count=161),
    PublishedArchitecture(name="wide_resnet101_2", gmacs=22.75, param_count=126_886_696, tensor_count=314),
    PublishedArchitecture(name="densenet121", gmacs=2.83, param_count=7_978_856, tensor_count=364),
    PublishedArchitecture(name="densenet161", gmacs=7.73, param_count=28_681_000, tensor_count=484),
    PublishedArchitecture(name="densenet169", gmacs=3.36, param_count=14_149_480, tensor_count=508),
    PublishedArchitecture(name="densenet201", gmacs=4.29, param_count=20_013_928, tensor_count=604),
    PublishedArchitecture(name="inception_v3", gmacs=5.71, param_count=27_161_264, tensor_count=None, side=299),
    PublishedArchitecture(name="googlenet", gmacs=1.50, param_count=6_624_904, tensor_count=None),
    PublishedArchitecture(name="squeezenet1_0", gmacs=0.82, param_count=1_248_424, tensor_count=52),
    PublishedArchitecture(name="squeezenet1_1", gmacs=0.35, param_count=1_235_496, tensor_count=52),
    PublishedArchitecture(name="shufflenet_v2_x1_0", gmacs=0.14, param_count=2_278_604, tensor_count=None),
    PublishedArchitecture(name="mobilenet_v3_large", gmacs=0.22, param_count=5_483_032, tensor_count=None),
    PublishedArchitecture(name="mobilenet_v3_small", gmacs=0.06, param_count=2_542_856, tensor_count=None),
    PublishedArchitecture(name="mnasnet1_0", gmacs=0.31, param_count=4_383_312, tensor_count=None),
)


# NVIDIA DeepLearningExamples' SSD300 (ResNet-50 backbone, 300x300 images, 81 COCO classes), which
# Lambda's benchmark trains as ``ssd``: multiply-adds, parameters and tensors counted on its layers
# rebuilt by tools/count_ssd300_flops.py (a test checks the two agree).
_DETECTORS = (
    PublishedArchitecture(name="ssd300_resnet50", gmacs=20.150906112, param_count=22_894_902, tensor_count=183,
                          side=300),
)


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_BY_KEY = {_key(a.name): a for a in (*_TORCHVISION, *_DETECTORS)}


def published_names() -> list[str]:
    """The names of :func:`published_architecture`'s networks."""
    return [a.name for a in (*_TORCHVISION, *_DETECTORS)]


def published_architecture(name: str) -> PublishedArchitecture | None:
    """The published figures of a torchvision classifier the zoo does not build (``inception_v3``,
    ``DenseNet-121``: case and separators do not matter); ``None`` for any other name."""
    return _BY_KEY.get(_key(name))


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
        arch = published_architecture(name)
        return arch.tensor_count if arch is not None else None


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
    except Exception:  # noqa: BLE001 - not a zoo model: a published ImageNet classifier's images, else none known
        arch = published_architecture(name)
        return 3.0 * arch.side * arch.side if arch is not None else 0.0
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
        """A zoo model (``resnet50``) with FLOPs and parameters from the zoo table, or a published
        image network of :func:`published_architecture` with its published figures."""
        arch = published_architecture(name)
        if arch is not None and not is_zoo_model(name):
            return cls(model=arch.name, batch_size=int(batch_size or 32), flops_per_sample=arch.flops_per_sample,
                       param_count=arch.param_count, gradient_bytes=4.0 * arch.param_count, precision=precision,
                       tensor_count=arch.tensor_count)
        try:
            info = zoo_info(name)
        except UnknownNameError:
            raise UnknownNameError("model", name, [*zoo_names(), *published_names()]) from None
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
                   precision=precision_name(str(d.get("precision") or "")) or "fp32")
