"""Built-in example jobs for ``spottrain run --example NAME`` (small enough for 2 CPU cores).

- ``cifar-resnet``: a narrow ResNet (3 stages x 1 basic block, widths 8/16/32, GroupNorm
  instead of BatchNorm so that the updates do not depend on how the batch is split across
  workers) on *synthetic* CIFAR-shaped data (3x32x32, 10 classes from a fixed random teacher).
- ``mlp``: a 3-layer perceptron on synthetic 32-dimensional data (the fast test job).

Run one worker directly with ``python -m spottrain.runtime.examples mlp``; its configuration
comes from ``SPOTTRAIN_*`` variables (:meth:`TrainConfig.from_env`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from spottrain.errors import UnknownNameError
from spottrain.runtime.api import TrainConfig, Trainer


class SyntheticDataset:
    """``size`` samples of shape ``shape``; labels from a fixed random linear teacher."""

    def __init__(self, *, size: int, shape: tuple[int, ...], classes: int, seed: int = 1234) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, *shape, generator=g)
        teacher = torch.randn(int(torch.tensor(shape).prod()), classes, generator=g)
        self.y = (self.x.reshape(size, -1) @ teacher).argmax(dim=1)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    def get_batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.x[idx], self.y[idx]


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = nn.GroupNorm(4, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = nn.GroupNorm(4, cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(4, cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.n1(self.c1(x)))
        return F.relu(self.n2(self.c2(out)) + self.skip(x))


class SmallResNet(nn.Module):
    """CIFAR-style ResNet with one basic block per stage."""

    def __init__(self, classes: int = 10, widths: tuple[int, int, int] = (8, 16, 32)) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.GroupNorm(4, widths[0]), nn.ReLU())
        self.stages = nn.Sequential(_Block(widths[0], widths[0], 1), _Block(widths[0], widths[1], 2),
                                    _Block(widths[1], widths[2], 2))
        self.head = nn.Linear(widths[2], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)).mean(dim=(2, 3)))


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


@dataclass(frozen=True, kw_only=True)
class Example:
    name: str
    description: str
    model: Callable[[], nn.Module]
    dataset: Callable[[], Any]
    lr: float
    global_batch_size: int
    steps: int


EXAMPLES: dict[str, Example] = {
    "cifar-resnet": Example(
        name="cifar-resnet", description="narrow ResNet-8 (GroupNorm) on synthetic CIFAR-shaped data",
        model=SmallResNet, dataset=lambda: SyntheticDataset(size=4096, shape=(3, 32, 32), classes=10),
        lr=0.05, global_batch_size=32, steps=200),
    "mlp": Example(
        name="mlp", description="3-layer perceptron on synthetic 32-d data",
        model=_mlp, dataset=lambda: SyntheticDataset(size=2048, shape=(32,), classes=10),
        lr=0.1, global_batch_size=64, steps=100),
}


def get_example(name: str) -> Example:
    try:
        return EXAMPLES[name]
    except KeyError:
        raise UnknownNameError("example", name, EXAMPLES) from None


def build_trainer(name: str, config: TrainConfig | None = None) -> Trainer:
    """The example's trainer, configured from the environment unless ``config`` is given.

    ``SPOTTRAIN_EXAMPLE_SLEEP_S`` adds a sleep to every forward pass: it stands in for a
    slower model (tests use it to give a replacement time to join); numerics are unchanged.
    ``SPOTTRAIN_EXAMPLE_SLEEP_FILE`` names a file holding that sleep instead, read again at
    every forward pass: a test slows the job down until the event it checks has happened
    (a replacement joined), then writes ``0`` and the remaining steps run at full speed.
    The file may also say ``<sleep> hold <step>``: once ``<step>`` steps are complete, every
    forward pass waits until the file no longer holds (at most :data:`HOLD_MAX_S`), so the job
    cannot end before the event however long it takes (a replacement's start-up on a loaded
    machine). All members of a group are at the same step, so they all wait in the same
    forward pass, before its all-reduce: no collective waits on a held peer.
    """
    ex = get_example(name)
    cfg = config or TrainConfig.from_env(steps=ex.steps, global_batch_size=ex.global_batch_size)
    torch.manual_seed(cfg.seed)
    model = ex.model()
    opt = torch.optim.SGD(model.parameters(), lr=ex.lr, momentum=0.9)
    loss_fn = classification_loss
    sleep_s = float(os.environ.get("SPOTTRAIN_EXAMPLE_SLEEP_S", "0") or 0)
    sleep_file = os.environ.get("SPOTTRAIN_EXAMPLE_SLEEP_FILE")
    trainer: Trainer | None = None
    if sleep_file:
        def loss_fn(model: nn.Module, batch: Any) -> torch.Tensor:
            _pace(sleep_file, sleep_s, trainer.step if trainer is not None else 0)
            return classification_loss(model, batch)
    elif sleep_s > 0:
        def loss_fn(model: nn.Module, batch: Any) -> torch.Tensor:
            time.sleep(sleep_s)
            return classification_loss(model, batch)
    trainer = Trainer(model=model, optimizer=opt, dataset=ex.dataset(), loss_fn=loss_fn, config=cfg)
    return trainer


HOLD_MAX_S = 90.0
"""The longest a forward pass waits on a hold in the sleep file (then the job goes on: a test
waiting for an event that never comes fails on its assertions, not on its timeout)."""


def _read_sleep(path: str, default: float) -> tuple[float, int | None]:
    """The sleep in ``path`` (seconds) and the step it holds from (None: no hold); ``default``
    and no hold while the file is missing or being written."""
    try:
        with open(path) as fh:
            words = fh.read().split()
        if len(words) == 3 and words[1] == "hold":
            return max(float(words[0]), 0.0), int(words[2])
        if len(words) == 1:
            return max(float(words[0]), 0.0), None
    except (OSError, ValueError):
        pass
    return default, None


def _pace(path: str, default: float, step: int) -> None:
    """One forward pass's wait: while the file holds from a step at or before ``step`` (the
    steps complete), until it no longer does; then the sleep it names."""
    sleep_s, hold = _read_sleep(path, default)
    end = time.monotonic() + HOLD_MAX_S
    while hold is not None and step >= hold and time.monotonic() < end:
        time.sleep(0.02)
        sleep_s, hold = _read_sleep(path, default)
    time.sleep(sleep_s)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(1)
    build_trainer(argv[0] if argv else "mlp").fit()


if __name__ == "__main__":
    main()
