"""FLOP and activation counting: :class:`torch.utils.flop_counter.FlopCounterMode` with grouped
convolutions' weight gradients counted per group, and the elements a forward pass writes.

PyTorch's formula for ``convolution_backward`` counts the weight gradient of a grouped
convolution as if it were dense: a 3x3 depthwise convolution over 960 channels is charged 960
times its work. A MobileNetV2 training step then reads 12.3 GFLOPs per sample instead of 1.8,
and the performance model would take a memory-bound network for a compute-bound one. The
gradient of the input is counted right already (its weight shape carries the groups).
"""

from __future__ import annotations

import torch
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["CountingActivations", "conv_backward_flop", "counting_flops"]

# PyTorch's registered formula takes tensors; the shape formula is the function it wraps.
_TORCH_CONV_BACKWARD = getattr(flop_counter.conv_backward_flop, "__wrapped__", flop_counter.conv_backward_flop)


def conv_backward_flop(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                       output_padding, groups, output_mask, out_shape, **kwargs) -> int:
    """FLOPs of ``aten.convolution_backward``: PyTorch's count, the weight gradient divided by ``groups``."""
    whole = _TORCH_CONV_BACKWARD(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation,
                                 transposed, output_padding, groups, output_mask, out_shape)
    if groups == 1 or not output_mask[1]:
        return whole
    weight_grad = _TORCH_CONV_BACKWARD(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation,
                                       transposed, output_padding, groups, [False, True, False], out_shape)
    return whole - weight_grad + weight_grad // groups


def counting_flops() -> FlopCounterMode:
    """A silent FlopCounterMode whose convolution backward counts grouped convolutions right."""
    return FlopCounterMode(display=False,
                           custom_mapping={torch.ops.aten.convolution_backward: conv_backward_flop})


class CountingActivations(TorchDispatchMode):
    """Counts the elements the operations run under it write (views, which move no data, excluded):
    run over a forward pass, the activation traffic that sets a layer's arithmetic intensity
    (FLOPs per element written)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            self.elements += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out
