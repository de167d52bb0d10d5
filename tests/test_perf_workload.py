"""Workload: the zoo's known parameter-tensor counts reach the throughput model."""

from __future__ import annotations

import pytest

from spottrain.perf import ThroughputModel, Workload, default_model, predict_throughput
from spottrain.perf.workload import ZOO_TENSOR_COUNTS, estimate_tensor_count, known_tensor_count


def test_zoo_tensor_table_matches_the_zoo_constructions():
    torch = pytest.importorskip("torch")
    from spottrain.profiler.zoo import build_network
    from spottrain.profiler.zoo_info import zoo_names

    assert set(ZOO_TENSOR_COUNTS) == set(zoo_names())
    with torch.device("meta"):
        for name in zoo_names():
            net = build_network(name, device="meta")
            assert ZOO_TENSOR_COUNTS[name] == len(list(net.parameters())), name


def test_from_zoo_carries_the_known_count_and_aliases_resolve():
    assert Workload.from_zoo("vgg16", 32).tensor_count == 32
    assert known_tensor_count("ResNet-50") == 161
    assert known_tensor_count("not-a-zoo-model") is None


def test_parameter_server_prediction_uses_the_known_count():
    # VGG-16 has 32 large tensors; the size-based estimate (~245) would charge the servers ~8x the
    # per-tensor cost. The prediction must be the one for 32 tensors, not for the estimate.
    w = Workload.from_zoo("vgg16", 32)
    assert estimate_tensor_count(w.param_count) > 5 * w.tensor_count
    m = default_model()
    known = predict_throughput(w, "8xV100", ps=1, sync="async", model=m)
    unknown = Workload(model="my-vgg", batch_size=32, flops_per_sample=w.flops_per_sample, param_count=w.param_count,
                       gradient_bytes=w.gradient_bytes)
    est = predict_throughput(unknown, "8xV100", ps=1, sync="async", model=m)
    explicit = predict_throughput(Workload(**{**unknown.__dict__, "tensor_count": 32}), "8xV100", ps=1, sync="async",
                                  model=m)
    assert known.throughput > est.throughput
    assert explicit.throughput == pytest.approx(known.throughput, rel=0.05)  # same tensors; only the model effect differs
    assert isinstance(m, ThroughputModel)


def test_measurement_rows_naming_a_zoo_model_use_its_count(tmp_path):
    from spottrain.perf import read_measurements
    from spottrain.perf.throughput import _Query

    src = tmp_path / "m.csv"
    src.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\n"
                   "vgg16,32,2xV100,1,async,300,93000000000,138357544\n"
                   "my-net,32,2xV100,1,async,300,93000000000,138357544\n")
    zoo_row, own_row = read_measurements(str(src))
    assert _Query.of(zoo_row).n_tensors == 32
    assert _Query.of(own_row).n_tensors == pytest.approx(estimate_tensor_count(138357544))


def test_published_torchvision_classifiers_are_read_without_flops(tmp_path):
    """A torchvision classifier the zoo does not build reads from its name alone (case and separators
    free): FLOPs = 6 x its published forward multiply-adds, its parameters, its tensor count."""
    from spottrain.perf import read_measurements
    from spottrain.perf.workload import input_pixels, published_architecture

    arch = published_architecture("Inception-V3")
    assert arch is not None and arch.name == "inception_v3" and arch.side == 299
    assert published_architecture("resnet50") is None  # a zoo model keeps the zoo's figures
    assert published_architecture("my-own-net") is None
    p = tmp_path / "q.csv"
    p.write_text("model,batch_size,cluster\nDenseNet121,32,1xV100\nresnet34,64,1xT4\n")
    dense, r34 = read_measurements(p, query=True)
    assert dense.flops_per_sample == pytest.approx(6 * 2.83e9) and dense.param_count == 7_978_856
    assert r34.param_count == 21_797_672
    w = Workload.from_zoo("resnext50_32x4d", 64)
    assert (w.model, w.tensor_count, w.batch_size) == ("resnext50_32x4d", 161, 64)
    assert known_tensor_count("densenet-121") == 364
    assert input_pixels("inception_v3") == 3 * 299 * 299 and input_pixels("alexnet") == 3 * 224 * 224
    with pytest.raises(Exception, match="flops_per_sample"):
        p.write_text("model,batch_size,cluster\nmy-own-net,32,1xV100\n")
        read_measurements(p, query=True)


def test_published_counts_match_the_same_architectures_built_here(monkeypatch):
    """ResNet-34, VGG-11 and VGG-13 built from the zoo's own layer classes have the parameters and
    tensors of the published table; ResNeXt and Wide ResNet keep ResNet-50's / -101's tensor list."""
    torch = pytest.importorskip("torch")
    from spottrain.profiler import _zoo_models
    from spottrain.profiler._zoo_models import VGG, BasicBlock, Bottleneck, ResNet
    from spottrain.perf.workload import published_architecture

    # Simonyan & Zisserman's configurations A and B (the zoo builds D and E: VGG-16, VGG-19)
    monkeypatch.setitem(_zoo_models.VGG_CONFIGS, 11, [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"])
    monkeypatch.setitem(_zoo_models.VGG_CONFIGS, 13, [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512,
                                                     512, "M"])

    with torch.device("meta"):
        built = {"resnet34": ResNet(BasicBlock, [3, 4, 6, 3], 1000, cifar=False), "vgg11": VGG(11), "vgg13": VGG(13),
                 "resnext50_32x4d": ResNet(Bottleneck, [3, 4, 6, 3], 1000, cifar=False),
                 "resnext101_32x8d": ResNet(Bottleneck, [3, 4, 23, 3], 1000, cifar=False)}
    for name, net in built.items():
        arch = published_architecture(name)
        assert arch.tensor_count == len(list(net.parameters())), name
        if not name.startswith("resnext"):  # grouped convolutions have fewer parameters than plain ones
            assert arch.param_count == sum(t.numel() for t in net.parameters()), name


def test_a_misspelt_published_classifier_is_suggested():
    from spottrain.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="did you mean densenet121"):
        Workload.from_zoo("densnet121")
