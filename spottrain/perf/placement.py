"""How a model's variables spread over k parameter servers (TensorFlow 1 round-robin placement).

TensorFlow 1's ``tf.train.replica_device_setter`` gives every variable, in creation order, to the
next server in turn (``ps_task = i mod k``): trainable weights, but also batch-norm moving
statistics and the global step, which is created first. The bytes therefore split evenly only
when the layers' pattern of variables does not repeat with a period that k divides. Tensor2Tensor's
Shake-Shake is the extreme case: every convolution has a bias and every batch norm four variables,
so each 3x3 kernel sits an even number of places after the previous one and, with two servers,
all of them land on the same server (99.7 % of the bytes), while each server still holds half of
the tensors. That is why a second server speeds up a Shake-Shake cluster so little in CM-DARE
(x1.05 for shake-big, whose bytes dominate, x1.25 for shake-small), and a ResNet almost x2.

:func:`ps_load_share` returns the largest share of the bytes and of the trainable tensors any server holds
for the architectures whose variable order is known: Tensor2Tensor's CIFAR ResNets and Shake-Shake
nets as CM-DARE and transient-dl ran them, rebuilt from their hyperparameters (their parameter and
tensor counts match the measurement tables exactly; tests/test_perf_placement.py checks it). For
other models it returns ``None`` and the throughput model assumes a generic split.
"""

from __future__ import annotations

import functools
import re

Layout = list[tuple[int, bool]]
"""Variables in creation order: (elements, trainable)."""


def _conv(v: Layout, cin: int, cout: int, ks: int, bias: bool) -> None:
    v.append((ks * ks * cin * cout, True))
    if bias:
        v.append((cout, True))


def _batch_norm(v: Layout, c: int) -> None:
    # tf.layers.batch_normalization: gamma, beta (trained), moving mean, moving variance (not trained).
    v.extend([(c, True), (c, True), (c, False), (c, False)])


def t2t_resnet_cifar(blocks: tuple[int, ...], filters: tuple[int, ...] = (16, 32, 64, 128), classes: int = 10) -> Layout:
    """Tensor2Tensor ``resnet`` (v2, pre-activation) on CIFAR: 7x7 stem, convolutions without bias."""
    v: Layout = []
    _conv(v, 3, filters[0], 7, False)
    _batch_norm(v, filters[0])
    cin = filters[0]
    for stage, n in enumerate(blocks):
        f = filters[stage + 1]
        for i in range(n):
            _batch_norm(v, cin)
            if i == 0:  # projection shortcut: 1x1 convolution + batch norm
                _conv(v, cin, f, 1, False)
                _batch_norm(v, f)
            _conv(v, cin, f, 3, False)
            _batch_norm(v, f)
            _conv(v, f, f, 3, False)
            cin = f
    v.extend([(cin * classes, True), (classes, True)])  # class-label top: dense kernel and bias
    return v


def t2t_shake_shake(hidden: int, layers: int = 26, classes: int = 10) -> Layout:
    """Tensor2Tensor ``shake_shake`` (two branches; widths 16, 32, 64 x hidden/16; convolutions with bias)."""
    k, n = hidden // 16, (layers - 2) // 6
    v: Layout = []
    _conv(v, 3, 16, 3, True)
    _batch_norm(v, 16)
    cin = 16
    for f in (16 * k, 32 * k, 64 * k):
        for _ in range(n):
            for _branch in range(2):
                _conv(v, cin, f, 3, True)
                _batch_norm(v, f)
                _conv(v, f, f, 3, True)
                _batch_norm(v, f)
            if cin != f:  # skip connection: two 1x1 half-width paths, concatenated, batch norm
                _conv(v, cin, f // 2, 1, True)
                _conv(v, cin, f // 2, 1, True)
                _batch_norm(v, f)
            cin = f
    v.extend([(cin * classes, True), (classes, True)])
    return v


_SHAKE_HIDDEN = {"16": 16, "48": 48, "80": 80, "small": 32, "mid": 64, "big": 96}
_RESNET_BLOCKS = {"15": (2, 2, 2), "32": (5, 5, 5)}


@functools.lru_cache(maxsize=64)
def known_layout(model: str) -> tuple[tuple[int, bool], ...] | None:
    """Variable layout of a model whose construction is known (``t2t-res32``, ``t2t-shakebig``...)."""
    name = model.lower().replace("_", "-").replace(" ", "")
    m = re.fullmatch(r"t2t-res(\d+)", name)
    if m and m.group(1) in _RESNET_BLOCKS:
        return tuple(t2t_resnet_cifar(_RESNET_BLOCKS[m.group(1)]))
    m = re.fullmatch(r"t2t-shake(16|48|80|small|mid|big)(32d)?", name)
    if m:
        return tuple(t2t_shake_shake(_SHAKE_HIDDEN[m.group(1)], 32 if m.group(2) else 26))
    return None


def round_robin_share(layout, k: int) -> tuple[float, float]:
    """(largest bytes share, largest trainable-tensor share) of one of k servers.

    Variables go to servers ``i mod k`` in creation order after the global step (index 0).
    Only trainable variables move gradients and weights every step. The two maxima may belong to
    different servers: together they bound the busiest server's work from above (and are both
    at least 1 / k, so k servers never divide the work by more than k).
    """
    k = max(int(k), 1)
    if k == 1:
        return 1.0, 1.0
    size = [0] * k
    count = [0] * k
    for i, (n, trainable) in enumerate(layout, start=1):
        if trainable:
            size[i % k] += n
            count[i % k] += 1
    return max(size) / max(sum(size), 1), max(count) / max(sum(count), 1)


@functools.lru_cache(maxsize=1024)
def ps_load_share(model: str, k: int, params: float | None = None) -> tuple[float, float] | None:
    """Largest shares of the bytes and tensors of ``model`` on one of k servers.

    ``None`` when the layout is unknown, or when ``params`` (the query's parameter count) differs
    from the rebuilt layout's by more than 1 %: then the name does not describe that model.
    """
    if k <= 1:
        return 1.0, 1.0
    layout = known_layout(model)
    if not layout:
        return None
    if params is not None and abs(sum(n for n, t in layout if t) / max(params, 1.0) - 1.0) > 0.01:
        return None
    return round_robin_share(layout, k)
