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
