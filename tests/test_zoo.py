"""The built-in zoo: parameter counts match the published architectures; FLOPs are counted."""

import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from spottrain.errors import UnknownNameError
from spottrain.profiler import zoo
from spottrain.profiler.zoo_info import ZOO, canonical_model, zoo_info

# Published figures (torchvision / Hugging Face / papers), typed in independently of the zoo table.
EXACT = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,  # torchvision resnet101
    "resnet152": 60_192_808,  # torchvision resnet152
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "gpt2-small": 124_439_808,
    "bert-base": 109_483_778,  # bert-base-uncased + 2-label classification head
    "bert-large": 335_143_938,  # bert-large-uncased + 2-label classification head
    "gpt2-medium": 354_823_168,  # Hugging Face gpt2-medium
    "resnet18-cifar": 11_173_962,
    "resnet50-cifar": 23_520_842,
    "mlp-tiny": 784 * 128 + 128 + 128 * 10 + 10,
}
APPROX = {  # name: (published, relative tolerance)
    "resnet32": (0.46e6, 0.02),  # He et al. 2016, Table 6
    "bert-base": (110e6, 0.01),  # Devlin et al. 2019
    "gpt2-small": (124e6, 0.01),
    "transformer-base": (65e6, 0.05),  # Vaswani et al. 2017, Table 3 (ours: shared 37k vocab)
    "lstm-lm": (20e6, 0.02),  # Zaremba et al. 2014 medium
}


def _params_on_meta(name):
    model, _ = zoo.build(name, 1, device="meta")
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_published_parameter_counts(name):
    assert _params_on_meta(name) == EXACT[name]


@pytest.mark.parametrize("name", sorted(APPROX))
def test_approximate_published_parameter_counts(name):
    published, tol = APPROX[name]
    assert abs(_params_on_meta(name) - published) / published < tol


def test_zoo_info_counts_agree_with_construction():
    for name, entry in ZOO.items():
        assert _params_on_meta(name) == entry.param_count, name


def test_resnet50_forward_flops_match_published_4_1_gmacs():
    model, batch = zoo.build("resnet50", 2, device="meta")
    with FlopCounterMode(display=False) as fwd:
        loss = model(*batch)
    with FlopCounterMode(display=False) as bwd:
        loss.backward()
    per_sample = fwd.get_total_flops() / 2
    assert abs(per_sample - 8.2e9) / 8.2e9 < 0.02
    # Backward computes gradients for inputs and weights: about twice the forward work.
    ratio = bwd.get_total_flops() / fwd.get_total_flops()
    assert 1.8 < ratio < 2.2


def test_generated_flops_table_is_current():
    from spottrain.profiler.gen_zoo_flops import count_zoo_flops

    for name in ("mlp-tiny", "resnet32", "lstm-lm"):
        fwd, bwd = count_zoo_flops(name)
        entry = ZOO[name]
        assert entry.flops_per_sample_forward == pytest.approx(fwd, rel=1e-5)
        assert entry.flops_per_sample_backward == pytest.approx(bwd, rel=1e-5)


def test_every_zoo_model_has_flops_and_a_dataset():
    for name in ZOO:
        info = zoo_info(name)
        assert info["flops_per_sample"] > info["flops_per_sample_forward"] > 0
        assert info["dataset"]["train_samples"] > 0
        assert info["gradient_bytes"] == 4 * info["param_count"]


def test_mlp_flops_analytic():
    # 2 FLOPs per multiply-add: forward 2*(784*128 + 128*10) per sample.
    assert ZOO["mlp-tiny"].flops_per_sample_forward == 2 * (784 * 128 + 128 * 10)


def test_aliases_and_near_miss():
    assert canonical_model("ResNet-50") == "resnet50"
    assert canonical_model("gpt2") == "gpt2-small"
    assert canonical_model("bert_base") == "bert-base"
    # as published tables write them
    assert [canonical_model(n) for n in ("ResNet-50 v1.5", "Transformer (base)", "ViT-B/16", "ResNet-18 (CIFAR-10)")] == [
        "resnet50", "transformer-base", "vit-b16", "resnet18-cifar"]
    with pytest.raises(UnknownNameError, match="did you mean"):
        canonical_model("resnet-51")
    with pytest.raises(UnknownNameError):
        zoo.build("alexnet-9000", 1)


def test_small_models_really_train_on_cpu():
    for name in ("mlp-tiny", "resnet32"):
        model, batch = zoo.build(name, 2)
        loss = model(*batch)
        assert loss.ndim == 0 and torch.isfinite(loss)
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ["transformer-base", "lstm-lm", "bert-base", "gpt2-small"])
def test_sequence_models_shapes_on_meta(name):
    model, batch = zoo.build(name, 2, device="meta")
    loss = model(*batch)
    assert loss.ndim == 0


def test_zoo_info_is_torch_free():
    code = (
        "import sys; import spottrain.profiler.zoo_info, spottrain.profiler.schema, spottrain.profiler;"
        "print(any(m == 'torch' or m.startswith('torch.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_generated_flops_table_check_runs_and_is_current():
    # The command a maintainer runs after adding a zoo model (it once failed on the package's
    # zoo_info function shadowing the module of that name).
    from spottrain.profiler.gen_zoo_flops import main as gen_main

    assert gen_main(["--check"]) == 0


def test_deeper_resnets_have_he_et_al_gmacs():
    # He et al. 2016, Table 1: 7.6 and 11.3 G multiply-adds forward at 224x224 (v1); v1.5, with the
    # stride on the 3x3 convolution as torchvision builds it: 7.8 and 11.5.
    for name, gmac in (("resnet101", 7.8e9), ("resnet152", 11.5e9)):
        assert ZOO[name].flops_per_sample_forward == pytest.approx(2 * gmac, rel=0.03)


def test_mobilenet_and_vit_have_their_published_multiply_adds():
    # Sandler et al. 2018, Table 4: MobileNetV2 (1.0) 300 M multiply-adds; Dosovitskiy et al. 2021 /
    # torchvision: ViT-B/16 at 224x224 17.56 G.
    for name, gmac in (("mobilenet-v2", 0.300e9), ("vit-b16", 17.56e9)):
        assert ZOO[name].flops_per_sample_forward == pytest.approx(2 * gmac, rel=0.03)
        # Backward: gradients of inputs and weights, each about the forward's work.
        assert ZOO[name].flops_per_sample_backward == pytest.approx(2 * ZOO[name].flops_per_sample_forward, rel=0.05)


def test_grouped_convolution_backward_is_counted_per_group():
    # PyTorch's own formula charges a depthwise convolution's weight gradient as a dense one's
    # (here 64x its work); ours counts it per group: the backward is twice the forward, dense or not.
    torch = pytest.importorskip("torch")
    from torch import nn

    from spottrain.profiler.flops import counting_flops

    for groups in (1, 4, 64):
        conv = nn.Conv2d(64, 64, 3, padding=1, groups=groups, bias=False)
        x = torch.randn(2, 64, 8, 8, requires_grad=True)
        with counting_flops() as fwd:
            y = conv(x)
        with counting_flops() as bwd:
            y.sum().backward()
        assert fwd.get_total_flops() == 2 * 2 * 64 * 8 * 8 * 9 * (64 // groups)
        assert bwd.get_total_flops() == 2 * fwd.get_total_flops(), groups


def test_activation_table_counts_what_the_forward_pass_writes():
    # mlp-tiny (784-128-10 with ReLU) writes per sample: 128 (first layer) + 128 (ReLU) + 10 (logits),
    # then the loss's log-softmax (10) and the loss itself (one per batch of 2).
    assert ZOO["mlp-tiny"].activations_per_sample == pytest.approx(128 + 128 + 10 + 10 + 0.5, abs=1.0)
    # MobileNetV2 writes ~7x more per FLOP than ResNet-50: its depthwise layers do 18 FLOPs per element.
    ratio = lambda n: ZOO[n].flops_per_sample / ZOO[n].activations_per_sample  # noqa: E731
    assert ratio("resnet50") / ratio("mobilenet-v2") > 7
