"""What the planner needs to know about the built-in model zoo, without importing torch.

For each zoo model: its canonical name and aliases, the exact parameter count of our
construction and the published figure it matches, the per-sample input, the data set it
usually trains on (size in samples and what one sample is), and FLOPs per sample for forward
and forward+backward, and the elements its forward pass writes per sample.

FLOPs come from :class:`torch.utils.flop_counter.FlopCounterMode` (2 FLOPs per multiply-add;
convolutions, matrix products and attention; element-wise ops and normalisation are not
counted; grouped convolutions' weight gradients per group, see :mod:`spottrain.profiler.flops`)
applied to the zoo's own models at their default input shape, batch 2, on the
``meta`` device, for one forward pass and for forward + backward. The table between the
``BEGIN GENERATED`` / ``END GENERATED`` markers is written by::

    python -m spottrain.profiler.gen_zoo_flops          # rewrites this file's table
    python -m spottrain.profiler.gen_zoo_flops --check  # exits 1 if it is stale

so that torch-free code (performance model, planner) can derive a workload from a zoo name.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from spottrain.errors import UnknownNameError


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """A training set, in the units the model consumes (samples)."""

    name: str
    train_samples: int
    """Samples in one epoch (images, sequences, sentence pairs)."""
    sample: str
    """What one sample is."""
    source: str


@dataclass(frozen=True, kw_only=True)
class ZooEntry:
    """One built-in model."""

    name: str
    """Canonical name (``resnet50``)."""
    family: str
    task: str
    param_count: int
    """Exact parameter count of the zoo's construction (tests check it)."""
    published_param_count: int
    """The published / reference figure, exact where one is published (torchvision, Hugging Face)."""
    param_source: str
    """Where the published figure comes from."""
    input_shape: tuple[int, ...]
    """Shape of one sample (without the batch dimension)."""
    input_dtype: str
    """``float32`` for images/features, ``int64`` for token ids."""
    num_classes: int
    """Classes (or vocabulary size for language models)."""
    dataset: Dataset
    default_batch_size: int
    """Per-GPU batch size the reference training recipe uses."""
    aliases: tuple[str, ...] = ()
    description: str = ""
    flops_per_sample_forward: float | None = None
    """FLOPs of one forward pass per sample (generated table)."""
    flops_per_sample_backward: float | None = None
    """FLOPs of one backward pass per sample (generated table)."""
    activations_per_sample: float | None = None
    """Elements the forward pass's operations write per sample, views excluded (generated table):
    with the FLOPs, the network's arithmetic intensity."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def flops_per_sample(self) -> float | None:
        """Forward + backward FLOPs per sample (one training step's work per sample)."""
        if self.flops_per_sample_forward is None or self.flops_per_sample_backward is None:
            return None
        return self.flops_per_sample_forward + self.flops_per_sample_backward

    @property
    def gradient_bytes_fp32(self) -> int:
        """Bytes of fp32 gradients per step (all parameters are trainable in the zoo)."""
        return 4 * self.param_count


IMAGENET = Dataset(
    name="imagenet",
    train_samples=1_281_167,
    sample="one 224x224 RGB image",
    source="ILSVRC-2012 training set (Russakovsky et al. 2015)",
)
CIFAR10 = Dataset(
    name="cifar10",
    train_samples=50_000,
    sample="one 32x32 RGB image",
    source="CIFAR-10 training set (Krizhevsky 2009)",
)
MNIST = Dataset(name="mnist", train_samples=60_000, sample="one 28x28 grey image, flattened to 784", source="MNIST (LeCun et al. 1998)")
PTB = Dataset(
    name="ptb",
    train_samples=929_589 // 35,
    sample="one sequence of 35 tokens (929,589 training tokens / BPTT length 35)",
    source="Penn Treebank, Mikolov et al. 2010 preprocessing (as in Zaremba et al. 2014)",
)
WMT14 = Dataset(
    name="wmt14-en-de",
    train_samples=4_500_000,
    sample="one sentence pair, padded/truncated to 64 source + 64 target BPE tokens",
    source="WMT 2014 English-German, 'about 4.5 million sentence pairs' (Vaswani et al. 2017)",
)
MNLI = Dataset(
    name="mnli",
    train_samples=392_702,
    sample="one sentence pair, 128 WordPiece tokens",
    source="GLUE MultiNLI training set (Williams et al. 2018)",
)
OPENWEBTEXT = Dataset(
    name="openwebtext",
    train_samples=9_035_582_489 // 1024,
    sample="one sequence of 1024 GPT-2 BPE tokens (about 9.04e9 training tokens / 1024)",
    source="OpenWebText as tokenised by nanoGPT's prepare.py (approximate)",
)

_ENTRIES = (
    ZooEntry(
        name="mlp-tiny", family="mlp", task="classification", param_count=101_770, published_param_count=101_770,
        param_source="784-128-10 fully connected network: 784*128+128 + 128*10+10",
        input_shape=(784,), input_dtype="float32", num_classes=10, dataset=MNIST, default_batch_size=64,
        aliases=("mlp", "tiny", "mlp-mnist"),
        description="Two-layer perceptron on MNIST-shaped input; a few ms per step on a CPU (tests, demo).",
    ),
    ZooEntry(
        name="resnet18", family="resnet", task="classification", param_count=11_689_512, published_param_count=11_689_512,
        param_source="He et al. 2016; torchvision resnet18 (11,689,512)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=256,
        aliases=("resnet-18", "rn18", "resnet18-imagenet"),
        description="ResNet-18, ImageNet 224x224.",
    ),
    ZooEntry(
        name="resnet50", family="resnet", task="classification", param_count=25_557_032, published_param_count=25_557_032,
        param_source="He et al. 2016; torchvision resnet50 (25,557,032)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("resnet-50", "rn50", "resnet50-imagenet", "resnet50-v1.5"),
        description="ResNet-50 (v1.5: stride on the 3x3 conv), ImageNet 224x224.",
    ),
    ZooEntry(
        name="resnet101", family="resnet", task="classification", param_count=44_549_160, published_param_count=44_549_160,
        param_source="He et al. 2016; torchvision resnet101 (44,549,160)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("resnet-101", "rn101", "resnet101-imagenet", "resnet101-v1.5"),
        description="ResNet-101 (v1.5), ImageNet 224x224.",
    ),
    ZooEntry(
        name="resnet152", family="resnet", task="classification", param_count=60_192_808, published_param_count=60_192_808,
        param_source="He et al. 2016; torchvision resnet152 (60,192,808)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("resnet-152", "rn152", "resnet152-imagenet", "resnet152-v1.5"),
        description="ResNet-152 (v1.5), ImageNet 224x224.",
    ),
    ZooEntry(
        name="resnet18-cifar", family="resnet", task="classification", param_count=11_173_962, published_param_count=11_173_962,
        param_source="32x32 ResNet-18 variant (3x3 stem, no max-pool, 10 classes) as in kuangliu/pytorch-cifar",
        input_shape=(3, 32, 32), input_dtype="float32", num_classes=10, dataset=CIFAR10, default_batch_size=128,
        aliases=("resnet-18-cifar", "resnet18-cifar10"),
        description="ResNet-18 adapted to CIFAR-10 32x32.",
    ),
    ZooEntry(
        name="resnet50-cifar", family="resnet", task="classification", param_count=23_520_842, published_param_count=23_520_842,
        param_source="32x32 ResNet-50 variant (3x3 stem, no max-pool, 10 classes) as in kuangliu/pytorch-cifar",
        input_shape=(3, 32, 32), input_dtype="float32", num_classes=10, dataset=CIFAR10, default_batch_size=128,
        aliases=("resnet-50-cifar", "resnet50-cifar10"),
        description="ResNet-50 adapted to CIFAR-10 32x32.",
    ),
    ZooEntry(
        name="resnet32", family="resnet", task="classification", param_count=464_154, published_param_count=460_000,
        param_source="He et al. 2016 Table 6: ResNet-32 on CIFAR-10, 0.46M (option-A shortcuts)",
        input_shape=(3, 32, 32), input_dtype="float32", num_classes=10, dataset=CIFAR10, default_batch_size=128,
        aliases=("resnet-32", "resnet32-cifar", "resnet32-cifar10"),
        description="ResNet-32 for CIFAR-10 (the CM-DARE / TensorFlow benchmark model); small and fast on a CPU.",
    ),
    ZooEntry(
        name="vgg16", family="vgg", task="classification", param_count=138_357_544, published_param_count=138_357_544,
        param_source="Simonyan & Zisserman 2015 config D; torchvision vgg16 (138,357,544)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("vgg-16", "vgg16-imagenet"),
        description="VGG-16 without batch norm, ImageNet 224x224.",
    ),
    ZooEntry(
        name="vgg19", family="vgg", task="classification", param_count=143_667_240, published_param_count=143_667_240,
        param_source="Simonyan & Zisserman 2015 config E; torchvision vgg19 (143,667,240)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("vgg-19", "vgg19-imagenet"),
        description="VGG-19 without batch norm, ImageNet 224x224.",
    ),
    ZooEntry(
        name="mobilenet-v2", family="mobilenet", task="classification", param_count=3_504_872,
        published_param_count=3_504_872,
        param_source="Sandler et al. 2018, width 1.0; torchvision mobilenet_v2 (3,504,872)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=32,
        aliases=("mobilenetv2", "mobilenet_v2", "mobilenet"),
        description="MobileNetV2 (inverted residuals, 3x3 depthwise convolutions), ImageNet 224x224: few FLOPs, "
                    "much activation traffic per FLOP.",
    ),
    ZooEntry(
        name="efficientnet-b0", family="efficientnet", task="classification", param_count=5_288_548,
        published_param_count=5_288_548,
        param_source="Tan & Le 2019, B0; torchvision efficientnet_b0 (5,288,548)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("efficientnetb0", "efficientnet_b0", "effnet-b0"),
        description="EfficientNet-B0 (MBConv: 3x3 and 5x5 depthwise convolutions, squeeze-and-excitation, SiLU), "
                    "ImageNet 224x224.",
    ),
    ZooEntry(
        name="convnext-tiny", family="convnext", task="classification", param_count=28_589_128,
        published_param_count=28_589_128,
        param_source="Liu et al. 2022, ConvNeXt-T; torchvision convnext_tiny (28,589,128)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("convnext-t", "convnext_tiny", "convnext"),
        description="ConvNeXt-T (7x7 depthwise convolutions, LayerNorm, 4x MLPs), ImageNet 224x224.",
    ),
    ZooEntry(
        name="vit-b16", family="vit", task="classification", param_count=86_567_656, published_param_count=86_567_656,
        param_source="Dosovitskiy et al. 2021 ViT-B/16; torchvision vit_b_16 (86,567,656)",
        input_shape=(3, 224, 224), input_dtype="float32", num_classes=1000, dataset=IMAGENET, default_batch_size=64,
        aliases=("vit-b-16", "vit_b_16", "vit-base", "vit"),
        description="Vision Transformer base, 16x16 patches, ImageNet 224x224 (197 tokens of width 768).",
    ),
    ZooEntry(
        name="transformer-base", family="transformer", task="translation", param_count=63_084_544, published_param_count=65_000_000,
        param_source=(
            "Vaswani et al. 2017 Table 3, base model: 65M. Ours: d=512, 6+6 layers, 8 heads, d_ff=2048, one shared "
            "37,000-token BPE vocabulary for source, target and the pre-softmax projection (tied), sinusoidal positions "
            "(no parameters), torch.nn.Transformer layout with final encoder/decoder LayerNorms: 63,084,544"
        ),
        input_shape=(2, 64), input_dtype="int64", num_classes=37_000, dataset=WMT14, default_batch_size=64,
        aliases=("transformer", "transformer-wmt", "transformer-base-wmt"),
        description="Transformer encoder-decoder for English-German translation; a sample is a (source, target) pair of 64 tokens each.",
    ),
    ZooEntry(
        name="lstm-lm", family="lstm", task="language-modelling", param_count=19_780_400, published_param_count=20_000_000,
        param_source=(
            "Zaremba et al. 2014 'medium' PTB model: 2 layers x 650 units, 10k vocabulary, untied, about 20M "
            "(as cited by Press & Wolf 2017); PyTorch's LSTM has two bias vectors per gate, hence 19,780,400"
        ),
        input_shape=(35,), input_dtype="int64", num_classes=10_000, dataset=PTB, default_batch_size=20,
        aliases=("lstm", "lstm-ptb", "lstm-medium"),
        description="Word-level LSTM language model on Penn Treebank, BPTT 35.",
    ),
    ZooEntry(
        name="bert-base", family="bert", task="classification", param_count=109_483_778, published_param_count=109_483_778,
        param_source=(
            "Devlin et al. 2019: BERT-base 110M; Hugging Face bert-base-uncased with a 2-label sequence-classification "
            "head: 109,483,778 (encoder + pooler 109,482,240)"
        ),
        input_shape=(128,), input_dtype="int64", num_classes=2, dataset=MNLI, default_batch_size=32,
        aliases=("bert", "bert-base-uncased", "bert-base-like"),
        description="BERT-base encoder fine-tuned for sentence-pair classification, sequence length 128.",
    ),
    ZooEntry(
        name="bert-large", family="bert", task="classification", param_count=335_143_938, published_param_count=335_143_938,
        param_source=(
            "Devlin et al. 2019: BERT-large 340M; Hugging Face bert-large-uncased with a 2-label sequence-classification "
            "head: 335,143,938 (encoder + pooler 335,141,888)"
        ),
        input_shape=(128,), input_dtype="int64", num_classes=2, dataset=MNLI, default_batch_size=32,
        aliases=("bert-large-uncased", "bert-large-like"),
        description="BERT-large encoder (24 layers, 1024 wide, 16 heads) fine-tuned for sentence-pair classification, "
                    "sequence length 128.",
    ),
    ZooEntry(
        name="gpt2-small", family="gpt2", task="language-modelling", param_count=124_439_808, published_param_count=124_439_808,
        param_source="Radford et al. 2019 GPT-2 small ('117M' in the paper); Hugging Face gpt2 with tied embeddings: 124,439,808",
        input_shape=(1024,), input_dtype="int64", num_classes=50_257, dataset=OPENWEBTEXT, default_batch_size=8,
        aliases=("gpt2", "gpt-2", "gpt-2-small", "gpt2-124m"),
        description="GPT-2 small decoder, causal language modelling at context 1024.",
    ),
    ZooEntry(
        name="gpt2-medium", family="gpt2", task="language-modelling", param_count=354_823_168, published_param_count=354_823_168,
        param_source="Radford et al. 2019 GPT-2 medium ('345M' in the paper); Hugging Face gpt2-medium with tied embeddings: 354,823,168",
        input_shape=(1024,), input_dtype="int64", num_classes=50_257, dataset=OPENWEBTEXT, default_batch_size=4,
        aliases=("gpt-2-medium", "gpt2-355m", "gpt2-345m"),
        description="GPT-2 medium decoder (24 layers, 1024 wide, 16 heads), causal language modelling at context 1024.",
    ),
)

# BEGIN GENERATED FLOPS (python -m spottrain.profiler.gen_zoo_flops)
FLOPS_PER_SAMPLE: dict[str, tuple[float, float]] = {
    # name: (forward, backward) FLOPs per sample; torch 2.13.0, batch 2, meta device
    'mlp-tiny': (2.032640e+05, 2.058240e+05),
    'resnet18': (3.628147e+09, 7.020265e+09),
    'resnet50': (8.178369e+09, 1.612071e+10),
    'resnet101': (1.560281e+10, 3.096959e+10),
    'resnet152': (2.302725e+10, 4.581848e+10),
    'resnet18-cifar': (1.110845e+09, 2.218152e+09),
    'resnet50-cifar': (2.595660e+09, 5.187781e+09),
    'resnet32': (1.377252e+08, 2.745656e+08),
    'vgg16': (3.094053e+10, 6.170765e+10),
    'vgg19': (3.926412e+10, 7.835484e+10),
    'mobilenet-v2': (6.015485e+08, 1.181421e+09),
    'efficientnet-b0': (7.716295e+08, 1.521583e+09),
    'convnext-tiny': (8.911063e+09, 1.779322e+10),
    'vit-b16': (3.512766e+10, 7.002410e+10),
    'transformer-base': (8.212972e+09, 1.642594e+10),
    'lstm-lm': (9.282000e+08, 1.849640e+09),
    'bert-base': (2.234843e+10, 4.469687e+10),
    'bert-large': (7.892213e+10, 1.578443e+11),
    'gpt2-small': (2.916483e+11, 5.832966e+11),
    'gpt2-medium': (8.269511e+11, 1.653902e+12),
}
ACTIVATIONS_PER_SAMPLE: dict[str, float] = {
    # name: elements the forward pass writes per sample (views excluded); torch 2.13.0, batch 2, meta device
    'mlp-tiny': 2.770000e+02,
    'resnet18': 8.436891e+06,
    'resnet50': 3.778808e+07,
    'resnet101': 5.658004e+07,
    'resnet152': 7.978441e+07,
    'resnet18-cifar': 2.036959e+06,
    'resnet50-cifar': 1.163672e+07,
    'resnet32': 1.066196e+06,
    'vgg16': 3.023202e+07,
    'vgg19': 3.284117e+07,
    'mobilenet-v2': 2.580968e+07,
    'efficientnet-b0': 2.220664e+07,
    'convnext-tiny': 2.932308e+07,
    'vit-b16': 9.238675e+07,
    'transformer-base': 4.004814e+07,
    'lstm-lm': 2.929451e+06,
    'bert-base': 5.127367e+07,
    'bert-large': 1.360020e+08,
    'gpt2-small': 1.657706e+09,
    'gpt2-medium': 4.146944e+09,
}
# END GENERATED FLOPS


def _with_flops(entry: ZooEntry) -> ZooEntry:
    fwd, bwd = FLOPS_PER_SAMPLE.get(entry.name, (None, None))
    return ZooEntry(**{**{f: getattr(entry, f) for f in entry.__dataclass_fields__},
                       "flops_per_sample_forward": fwd, "flops_per_sample_backward": bwd,
                       "activations_per_sample": ACTIVATIONS_PER_SAMPLE.get(entry.name)})


ZOO: dict[str, ZooEntry] = {e.name: _with_flops(e) for e in _ENTRIES}
_ALIASES: dict[str, str] = {}
for _e in _ENTRIES:
    _ALIASES[_e.name] = _e.name
    for _a in _e.aliases:
        _ALIASES[_a] = _e.name


def _letters(name: str) -> str:
    """``name`` lower-cased with every separator (space, ``-``, ``_``, ``/``, brackets) dropped."""
    return re.sub(r"[^a-z0-9.]", "", name.lower())


_BY_LETTERS: dict[str, str] = {}
for _a, _c in _ALIASES.items():
    _BY_LETTERS.setdefault(_letters(_a), _c)


def zoo_names() -> list[str]:
    """Canonical names of the built-in models, in a stable order."""
    return list(ZOO)


def canonical_model(name: str) -> str:
    """Canonical zoo name for ``name`` or an alias (case- and separator-insensitive).

    >>> canonical_model("ResNet-50")
    'resnet50'

    Raises :class:`UnknownNameError` with the near miss for anything else.
    """
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    # then separators and brackets aside, as papers' tables write names: "ResNet-50 v1.5", "ViT-B/16"
    hit = _ALIASES.get(key) or _BY_LETTERS.get(_letters(name))
    if hit is None:
        raise UnknownNameError("model", name, list(_ALIASES))
    return hit


def is_zoo_model(name: str) -> bool:
    """True when ``name`` (or an alias) is a zoo model."""
    try:
        canonical_model(name)
    except UnknownNameError:
        return False
    return True


def zoo_entry(name: str) -> ZooEntry:
    """The :class:`ZooEntry` for a zoo name or alias."""
    return ZOO[canonical_model(name)]


def zoo_info(name: str) -> dict[str, Any]:
    """Plain-dict view of a zoo model: ``param_count``, ``flops_per_sample`` (fwd+bwd),
    ``flops_per_sample_forward``/``_backward``, ``input_shape``, ``gradient_bytes`` (fp32),
    ``dataset`` ... (JSON-ready)."""
    entry = zoo_entry(name)
    data = asdict(entry)
    data["input_shape"] = list(entry.input_shape)
    data["aliases"] = list(entry.aliases)
    data["flops_per_sample"] = entry.flops_per_sample
    data["gradient_bytes"] = entry.gradient_bytes_fp32
    return data
