"""The zoo's architectures in plain ``torch.nn``, randomly initialised (no downloads).

Each follows the published architecture closely enough to reproduce its parameter count
exactly (see :mod:`spottrain.profiler.zoo_info` for the counts and sources):

- ResNet-18/50 for ImageNet: He et al. 2016, torchvision layout (BN, 7x7 stem, max-pool).
- ResNet-18/50 for CIFAR: the common 32x32 variant (3x3 stem, no max-pool, 10 classes).
- ResNet-32 for CIFAR-10: He et al. 2016 section 4.2 (6n+2 layers, n=5, 16/32/64 channels,
  parameter-free "option A" shortcuts: stride-2 subsampling plus zero-padded channels).
- VGG-16/19: Simonyan & Zisserman 2015 configurations D and E, no batch norm.
- Transformer (base): Vaswani et al. 2017, d=512, 6+6 layers, 8 heads, d_ff=2048, one shared
  source/target BPE vocabulary tied to the output projection.
- LSTM language model: Zaremba et al. 2014 "medium" (2 layers x 650, PTB vocabulary 10k).
- BERT-base: Devlin et al. 2019 encoder (12 x 768, 12 heads) with pooler and a 2-way
  sequence-classification head (fine-tuning).
- GPT-2 small: Radford et al. 2019 (12 x 768, context 1024, vocabulary 50257, tied embeddings).
- MobileNetV2: Sandler et al. 2018 (width 1.0, torchvision layout).
- EfficientNet-B0: Tan & Le 2019; ConvNeXt-T: Liu et al. 2022 (torchvision layouts).
- ViT-B/16: Dosovitskiy et al. 2021 (12 x 768, 16x16 patches at 224x224, torchvision layout).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------- ResNets (ImageNet + CIFAR)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _projection(cin, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        # Stride on the 3x3 conv (torchvision's "ResNet v1.5").
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = _projection(cin, planes * 4, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


def _projection(cin: int, cout: int, stride: int) -> nn.Module | None:
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    """ImageNet layout when ``cifar`` is False, else the 32x32 variant."""

    def __init__(self, block: type, layers: list[int], num_classes: int, *, cifar: bool) -> None:
        super().__init__()
        if cifar:
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        else:
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
            )
        blocks: list[nn.Module] = []
        cin = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), layers)):
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block(cin, planes, stride))
                cin = planes * block.expansion
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _CifarBlockA(nn.Module):
    """Basic block with the parameter-free option-A shortcut of He et al. (CIFAR)."""

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, planes - cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        shortcut = x
        if self.stride != 1 or self.pad:
            shortcut = x[:, :, :: self.stride, :: self.stride]
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + shortcut)


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for CIFAR-10 (He et al. 2016, section 4.2)."""

    def __init__(self, n: int, num_classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks: list[nn.Module] = []
        cin = 16
        for i, planes in enumerate((16, 32, 64)):
            for j in range(n):
                blocks.append(_CifarBlockA(cin, planes, 2 if (i > 0 and j == 0) else 1))
                cin = planes
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------- VGG

VGG_CONFIGS = {
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    def __init__(self, depth: int, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in VGG_CONFIGS[depth]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=True)]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 7)
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------- MLP


class MLP(nn.Module):
    def __init__(self, sizes: tuple[int, ...] = (784, 128, 10)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# ---------------------------------------------------------------- sequence models


def _sinusoid(length: int, dim: int) -> torch.Tensor:
    pos = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table


class TranslationTransformer(nn.Module):
    """Encoder-decoder Transformer with one shared vocabulary (tied embeddings and softmax)."""

    def __init__(self, vocab: int = 37000, d_model: int = 512, heads: int = 8, layers: int = 6,
                 d_ff: int = 2048, max_len: int = 1024) -> None:
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pos", _sinusoid(max_len, d_model), persistent=False)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout=0.1, batch_first=True)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        s = self.embed(src) * scale + self.pos[: src.shape[1]]
        t = self.embed(tgt) * scale + self.pos[: tgt.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device, dtype=s.dtype)
        out = self.core(s, t, tgt_mask=mask, tgt_is_causal=True)
        return out @ self.embed.weight.t()


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int = 10000, hidden: int = 650, layers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(hidden, hidden, layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.decoder(self.drop(out))


class _SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, *, causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads, self.causal = heads, causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, dropout_p=0.1 if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class _Block(nn.Module):
    """Transformer block: post-LN (BERT) or pre-LN (GPT-2)."""

    def __init__(self, dim: int, heads: int, *, causal: bool, pre_ln: bool) -> None:
        super().__init__()
        self.attn = _SelfAttention(dim, heads, causal=causal)
        self.ln1 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.pre_ln = pre_ln

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class BertClassifier(nn.Module):
    def __init__(self, vocab: int = 30522, dim: int = 768, layers: int = 12, heads: int = 12,
                 max_len: int = 512, type_vocab: int = 2, num_labels: int = 2) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(max_len, dim)
        self.token_type = nn.Embedding(type_vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList(_Block(dim, heads, causal=False, pre_ln=False) for _ in range(layers))
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, num_labels)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.word(tokens) + self.position(pos) + self.token_type(torch.zeros_like(tokens))
        x = self.ln(x)
        for block in self.blocks:
            x = block(x)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


class GPT2(nn.Module):
    def __init__(self, vocab: int = 50257, dim: int = 768, layers: int = 12, heads: int = 12, context: int = 1024) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads, causal=True, pre_ln=True) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


# ---------------------------------------------------------------- MobileNetV2, ViT-B/16


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             act: Callable[[], nn.Module] | None = None) -> nn.Sequential:
    """Convolution (no bias, "same" padding), batch norm, then ``act()`` unless it is None (linear)."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _relu6() -> nn.Module:
    return nn.ReLU6(inplace=True)


class _SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(F.silu(self.reduce(s))))


class _InvertedResidual(nn.Module):
    """1x1 expansion, kxk depthwise, (squeeze-and-excitation,) linear 1x1 projection; a residual when
    shapes allow. MobileNetV2's block (3x3, ReLU6) and EfficientNet's MBConv (SiLU, a squeeze to a
    quarter of the block's input)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, *, kernel: int = 3,
                 act: Callable[[], nn.Module] = _relu6, excite: bool = False) -> None:
        super().__init__()
        hidden = cin * expand
        layers = [_conv_bn(cin, hidden, 1, act=act)] if expand != 1 else []
        layers.append(_conv_bn(hidden, hidden, kernel, stride, groups=hidden, act=act))
        if excite:
            layers.append(_SqueezeExcite(hidden, max(1, cin // 4)))
        layers.append(_conv_bn(hidden, cout, 1))
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    """Sandler et al. 2018, width 1.0, torchvision layout (ReLU6, dropout 0.2 before the classifier)."""

    # (expansion t, channels c, repeats n, first stride s): the paper's Table 2.
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2, act=_relu6)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1, act=_relu6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class ViT(nn.Module):
    """Dosovitskiy et al. 2021 ViT-B/16 at 224x224 (196 patches + a class token), torchvision layout:
    pre-LN blocks, learnt positions, a linear head on the class token."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, layers: int = 12, heads: int = 12,
                 num_classes: int = 1000) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.position = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.blocks = nn.ModuleList(_Block(dim, heads, causal=False, pre_ln=True) for _ in range(layers))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patchify(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x)[:, 0])


# ---------------------------------------------------------------- EfficientNet-B0, ConvNeXt-T


class EfficientNetB0(nn.Module):
    """Tan & Le 2019, B0, torchvision layout (MBConv blocks: SiLU, squeeze to a quarter of the block's input)."""

    # (expansion, kernel, first stride, channels, repeats): the paper's Table 1.
    STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2, act=nn.SiLU)]
        cin = 32
        for expand, kernel, stride, cout, repeats in self.STAGES:
            for i in range(repeats):
                layers.append(_InvertedResidual(cin, cout, stride if i == 0 else 1, expand, kernel=kernel, act=nn.SiLU,
                                                excite=True))
                cin = cout
        layers.append(_conv_bn(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class _ChannelsLastNorm(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.scale = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.scale
        return x + y.permute(0, 3, 1, 2)


class ConvNeXtTiny(nn.Module):
    """Liu et al. 2022, ConvNeXt-T (depths 3-3-9-3, widths 96-768), torchvision layout."""

    def __init__(self, num_classes: int = 1000, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768)) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), _ChannelsLastNorm(dims[0], eps=1e-6)]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i:
                layers += [_ChannelsLastNorm(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
            layers += [_ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)))
