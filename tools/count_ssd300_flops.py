#!/usr/bin/env python3
"""Parameters, parameter tensors and training FLOPs per image of SSD300 (ResNet-50 backbone).

The network Lambda's benchmark trains as ``ssd``: NVIDIA DeepLearningExamples'
``PyTorch/Detection/SSD`` model, rebuilt here from the zoo's ResNet blocks (no download, no
torchvision):

* ResNet-50's stem and its first three stages (conv1 .. conv4_x), with the first block of conv4
  at stride 1 (so conv4 keeps 38x38 at a 300x300 input);
* five extra blocks (1x1 then 3x3 convolutions with batch norm; 256, 256, 128, 128, 128 inner
  channels; the first three at stride 2, the last two unpadded) down to 512, 512, 256, 256 and 256
  channels;
* per feature map (38, 19, 10, 5, 3, 1 pixels square) a 3x3 box-regression head and a 3x3
  class head for 4, 6, 6, 6, 4, 4 default boxes and 81 COCO classes.

FLOPs are counted by ``torch.utils.flop_counter`` on one 300x300 image (2 per multiply-add),
times 3 for the forward and backward passes; the loss, box matching and hard-negative mining are
not counted (no multiply-adds of any size). ::

    python tools/count_ssd300_flops.py          # print the figures
    python tools/count_ssd300_flops.py --check  # exit 1 if the figures spottrain knows it by disagree
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from spottrain.profiler._zoo_models import Bottleneck  # noqa: E402

FEATURE_CHANNELS = [1024, 512, 512, 256, 256, 256]
EXTRA_INNER = [256, 256, 128, 128, 128]
DEFAULT_BOXES = [4, 6, 6, 6, 4, 4]
CLASSES = 81


def _stage(cin: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
    layers = [Bottleneck(cin, planes, stride)] + [Bottleneck(planes * 4, planes) for _ in range(blocks - 1)]
    return nn.Sequential(*layers)


class SSD300(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
            _stage(64, 64, 3, 1), _stage(256, 128, 4, 2), _stage(512, 256, 6, 1))
        self.extra = nn.ModuleList()
        for i, (cin, cout, inner) in enumerate(zip(FEATURE_CHANNELS[:-1], FEATURE_CHANNELS[1:], EXTRA_INNER)):
            down = dict(padding=1, stride=2) if i < 3 else {}
            self.extra.append(nn.Sequential(
                nn.Conv2d(cin, inner, 1, bias=False), nn.BatchNorm2d(inner), nn.ReLU(inplace=True),
                nn.Conv2d(inner, cout, 3, bias=False, **down), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)))
        self.loc = nn.ModuleList(nn.Conv2d(c, n * 4, 3, padding=1) for n, c in zip(DEFAULT_BOXES, FEATURE_CHANNELS))
        self.conf = nn.ModuleList(nn.Conv2d(c, n * CLASSES, 3, padding=1)
                                  for n, c in zip(DEFAULT_BOXES, FEATURE_CHANNELS))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        feeds = [self.trunk(x)]
        for block in self.extra:
            feeds.append(block(feeds[-1]))
        return [head(f) for heads in (self.loc, self.conf) for head, f in zip(heads, feeds)]


def figures() -> tuple[int, int, int]:
    """(fwd + bwd FLOPs per image, parameters, parameter tensors)."""
    net = SSD300().eval()  # eval: batch norm accepts the 1x1 map of one image
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        out = net(torch.zeros(1, 3, 300, 300))
    sizes = [o.shape[-1] for o in out[: len(FEATURE_CHANNELS)]]
    assert sizes == [38, 19, 10, 5, 3, 1], sizes
    return (3 * counter.get_total_flops(), sum(p.numel() for p in net.parameters()),
            len(list(net.parameters())))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true",
                   help="compare with the figures the converter writes (spottrain.perf.workload's)")
    args = p.parse_args()
    got = figures()
    print(f"SSD300 (ResNet-50): {got[0]:,} FLOPs per training image, {got[1]:,} parameters, {got[2]} tensors")
    if args.check:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from convert_measurements import LAMBDA_MODELS

        if tuple(LAMBDA_MODELS["ssd300_resnet50"]) != got:
            print(f"convert_measurements.LAMBDA_MODELS says {LAMBDA_MODELS['ssd300_resnet50']}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
