"""The built-in model zoo: ``build(name, batch_size) -> (model, batch)``.

Every zoo model is wrapped so that ``model(*batch)`` returns the scalar training loss
(cross-entropy against synthetic labels), which is the contract the profiler measures.
Weights are random (seeded); nothing is downloaded. The torch-free facts about each model
(parameter counts, FLOPs, data sets) live in :mod:`spottrain.profiler.zoo_info`.

>>> model, batch = build("mlp-tiny", 4)
>>> float(model(*batch)) > 0
True
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from spottrain.profiler import _zoo_models as m
from spottrain.profiler.zoo_info import ZooEntry, canonical_model, zoo_entry, zoo_info, zoo_names

__all__ = ["ZooModel", "build", "build_network", "make_batch", "zoo_entry", "zoo_info", "zoo_names"]

_NETWORKS: dict[str, Callable[[], nn.Module]] = {
    "mlp-tiny": lambda: m.MLP(),
    "resnet18": lambda: m.ResNet(m.BasicBlock, [2, 2, 2, 2], 1000, cifar=False),
    "resnet50": lambda: m.ResNet(m.Bottleneck, [3, 4, 6, 3], 1000, cifar=False),
    "resnet101": lambda: m.ResNet(m.Bottleneck, [3, 4, 23, 3], 1000, cifar=False),
    "resnet152": lambda: m.ResNet(m.Bottleneck, [3, 8, 36, 3], 1000, cifar=False),
    "resnet18-cifar": lambda: m.ResNet(m.BasicBlock, [2, 2, 2, 2], 10, cifar=True),
    "resnet50-cifar": lambda: m.ResNet(m.Bottleneck, [3, 4, 6, 3], 10, cifar=True),
    "resnet32": lambda: m.CifarResNet(5),
    "vgg16": lambda: m.VGG(16),
    "vgg19": lambda: m.VGG(19),
    "mobilenet-v2": lambda: m.MobileNetV2(),
    "efficientnet-b0": lambda: m.EfficientNetB0(),
    "convnext-tiny": lambda: m.ConvNeXtTiny(),
    "vit-b16": lambda: m.ViT(),
    "transformer-base": lambda: m.TranslationTransformer(),
    "lstm-lm": lambda: m.LSTMLanguageModel(),
    "bert-base": lambda: m.BertClassifier(),
    "bert-large": lambda: m.BertClassifier(dim=1024, layers=24, heads=16),
    "gpt2-small": lambda: m.GPT2(),
    "gpt2-medium": lambda: m.GPT2(dim=1024, layers=24, heads=16),
}


class ZooModel(nn.Module):
    """A zoo network plus its loss: ``forward(*batch)`` returns the scalar loss."""

    def __init__(self, name: str, net: nn.Module, entry: ZooEntry) -> None:
        super().__init__()
        self.name = name
        self.net = net
        self.task = entry.task
        self.family = entry.family

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.family == "transformer":
            # inputs: (batch, 2, length) = source and target token ids; teacher forcing.
            logits = self.net(inputs[:, 0], inputs[:, 1])
        else:
            logits = self.net(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def build_network(name: str, *, device: str | torch.device = "cpu", seed: int = 0) -> nn.Module:
    """The bare network (logits out), built directly on ``device`` (``"meta"`` is free)."""
    key = canonical_model(name)
    torch.manual_seed(seed)
    with torch.device(device):
        return _NETWORKS[key]()


def make_batch(name: str, batch_size: int, *, device: str | torch.device = "cpu", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic ``(inputs, targets)`` batch with the model's input shape; fixed by ``seed``."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    entry = zoo_entry(name)
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, *entry.input_shape)
    if entry.input_dtype == "int64":
        inputs = torch.randint(0, entry.num_classes, shape, generator=gen)
    else:
        inputs = torch.randn(shape, generator=gen)
    if entry.task == "classification":
        targets = torch.randint(0, entry.num_classes, (batch_size,), generator=gen)
    else:
        # Next-token prediction over the (target) sequence.
        targets = torch.randint(0, entry.num_classes, (batch_size, entry.input_shape[-1]), generator=gen)
    if str(device) == "meta" or str(device) != "cpu":
        inputs, targets = inputs.to(device), targets.to(device)
    return inputs, targets


def build(name: str, batch_size: int | None = None, *, device: str | torch.device = "cpu", seed: int = 0) -> tuple[ZooModel, tuple[torch.Tensor, torch.Tensor]]:
    """Build zoo model ``name`` and a synthetic batch: ``loss = model(*batch)``.

    ``batch_size`` defaults to the model's reference recipe (:attr:`ZooEntry.default_batch_size`).
    Unknown names raise :class:`~spottrain.errors.UnknownNameError` with the near miss.
    """
    key = canonical_model(name)
    entry = zoo_entry(key)
    model = ZooModel(key, build_network(key, device=device, seed=seed), entry)
    return model, make_batch(key, batch_size or entry.default_batch_size, device=device, seed=seed)


def count_parameters(model: nn.Module) -> int:
    """All parameters (shared/tied ones once)."""
    return sum(p.numel() for p in model.parameters())
