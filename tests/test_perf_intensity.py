"""Arithmetic intensity from the elements a forward pass writes: a network of depthwise
convolutions is memory-bound whatever its layer width says, and says so."""

from __future__ import annotations

import math

import pytest

from spottrain.perf import ThroughputModel, Workload, default_model, predict_throughput, read_measurements
from spottrain.perf.measurements import Measurement
from spottrain.perf.throughput import _Query
from spottrain.types import ClusterSpec


def _unknown_copy(w: Workload) -> Workload:
    """The same FLOPs, parameters and tensors under a name no table knows: intensity from the width."""
    return Workload(model="someones-net", batch_size=w.batch_size, flops_per_sample=w.flops_per_sample,
                    param_count=w.param_count, gradient_bytes=w.gradient_bytes, tensor_count=w.tensor_count,
                    precision=w.precision)


def _query(w: Workload, cluster: str) -> _Query:
    """``w`` on ``cluster`` with batches made on the GPU (no host data loader to wait for)."""
    return _Query(model=w.model, batch_size=w.batch_size, cluster=ClusterSpec.parse(cluster), ps=0, sync="sync",
                  flops=w.flops_per_sample, grad=w.gradient_bytes, tensors=w.tensor_count, input="device")


def test_depthwise_network_is_slower_than_its_width_says_and_says_so():
    mobile = Workload.from_zoo("mobilenet-v2", 256)
    m = default_model()
    known = m.predict_one(_query(mobile, "1xH100"))
    width_only = m.predict_one(_query(_unknown_copy(mobile), "1xH100"))
    # 3x3 depthwise convolutions write ~7x more per FLOP than a dense network of that width: the
    # memory term, not the FLOPs, sets the step.
    assert known.throughput < width_only.throughput / 2
    assert known.bottleneck == "memory"
    assert any("FLOPs per activation element" in n for n in known.notes)
    assert not any("activation element" in n for n in width_only.notes)
    # The roofline's slope beyond the fitted networks is physics, not data: the interval says so.
    assert math.log(known.high / known.low) > math.log(width_only.high / width_only.low) + 0.5
    # Measured (bench/data/gpu_speeds_h100_lease5.csv, gpu_speeds_h200_lease7.csv): 2,393 images/s on an
    # H100, 2,566 on an H200. Both inside the interval; from the width alone, neither is.
    h200 = m.predict_one(_query(mobile, "1xH200"))
    h200_width = m.predict_one(_query(_unknown_copy(mobile), "1xH200"))
    for pred, blind, measured in ((known, width_only, 2392.556), (h200, h200_width, 2566.119)):
        assert pred.low < measured < pred.high
        assert not blind.low < measured < blind.high


def test_dense_networks_keep_their_width_prediction():
    # Within the dense networks' scatter about the width's line (ResNet-50 a little below, BERT a
    # little above), or above it (VGG-16, the CIFAR ResNet-18: the fit saw them no faster than their
    # width says), the width alone sets the intensity; below it, the excess traffic counts.
    def below(name):
        w = Workload.from_zoo(name)
        return _query(w, "1xA100").intensity_below(set())  # as a network no fit has rows of

    assert [below(n) for n in ("resnet50", "bert-base", "vgg16", "resnet18-cifar", "vit-b16")] == [0.0] * 5
    assert below("gpt2-small") < -0.3  # vocabulary-sized logits: 0.8 below the line
    assert below("mobilenet-v2") < below("efficientnet-b0") < -1.0
    assert below("convnext-tiny") == 0.0  # its 4x MLPs do most of its FLOPs and writes


def test_a_fitted_network_keeps_its_fitted_speed():
    # GPT-2 small writes more per FLOP than its width says, but the calibration has its rows: its own
    # fitted speed carries that, and telling the model its activations changes nothing. A network
    # the calibration never saw is predicted from them.
    from dataclasses import replace

    m = default_model()
    gpt2 = _query(Workload.from_zoo("gpt2-small", 8), "1xA100")
    assert gpt2.intensity_below(set()) < -0.3 and "gpt2-small" in m.fitted_models_
    assert gpt2.intensity_below(m.fitted_models_) == 0.0
    dense = replace(gpt2, acts=gpt2.flops / 5000.0)  # a dense network's intensity
    assert m.predict_one(gpt2).throughput == m.predict_one(dense).throughput
    assert m.predict([gpt2], warn=False)[0].throughput == m.predict([dense], warn=False)[0].throughput
    unseen, unseen_dense = replace(gpt2, model="my-lm", acts=gpt2.n_acts), replace(dense, model="my-lm")
    assert m.predict_one(unseen).throughput < m.predict_one(unseen_dense).throughput


def test_scalar_and_vectorised_paths_agree_beyond_the_range():
    m = default_model()
    q = _Query(model="mobilenet-v2", batch_size=128, cluster=ClusterSpec.parse("2xT4"), ps=0, sync="sync",
               flops=Workload.from_zoo("mobilenet-v2").flops_per_sample, grad=4.0 * 3_504_872)
    one = m.predict_one(q)
    many = m.predict([q], warn=False)[0]
    assert one.throughput == pytest.approx(many.throughput, rel=1e-9)
    assert (one.low, one.high) == pytest.approx((many.low, many.high), rel=1e-9)
    assert one.notes == many.notes


def test_a_measured_row_of_the_network_pulls_its_prediction():
    # bench/data/gpu_speeds_h100_lease5.csv: MobileNetV2, fp32, batch 128 on one H100, 2,344 images/s.
    row = Measurement(model="mobilenet-v2", batch_size=128, cluster=ClusterSpec.parse("1xH100"), ps=0, sync="sync",
                      throughput=2344.215, flops_per_sample=Workload.from_zoo("mobilenet-v2").flops_per_sample,
                      param_count=3_504_872, input="device")
    user = ThroughputModel(prior=default_model(), folds=0, correction="none").fit([row])
    same = Measurement(**{**row.__dict__, "throughput": None})
    assert abs(user.predict([same], warn=False)[0].throughput / 2344.215 - 1) < min(
        0.03, abs(default_model().predict([same], warn=False)[0].throughput / 2344.215 - 1))
    q = Measurement(**{**row.__dict__, "batch_size": 256, "throughput": None})
    pred = user.predict([q], warn=False)[0]
    prior = default_model().predict([q], warn=False)[0]
    # Measured at 256: 2,393 images/s (the same file). Its own row fits the network's speed: the
    # intensity's width goes (the other batch size keeps the few-rows width).
    assert abs(pred.throughput / 2392.556 - 1) < 0.1
    assert any("activation element" in n for n in prior.notes)
    assert not any("activation element" in n for n in pred.notes)


def test_activation_column_is_read_written_and_checked(tmp_path):
    from spottrain.errors import InputError
    from spottrain.perf.measurements import parse_row, write_measurements

    header = "model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count,activations_per_sample\n"
    p = tmp_path / "m.csv"
    p.write_text(header + "net,64,1xA100,0,sync,900,1.8e9,3500000,2.6e7\nnet,64,1xA100,0,sync,900,1.8e9,3500000,\n")
    rows = read_measurements(p)
    assert [r.activations_per_sample for r in rows] == [2.6e7, None]
    out = tmp_path / "o.csv"
    write_measurements(rows, out)
    assert [r.activations_per_sample for r in read_measurements(out)] == [2.6e7, None]
    # The row that says its activations is predicted from them, the other from its width.
    a, b = default_model().predict(read_measurements(out), warn=False)
    assert a.throughput < b.throughput
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "net,64,1xA100,0,sync,900,1.8e9,3500000,-4\n")
    values = dict(zip(header.strip().split(","), "net,64,1xA100,0,sync,900,1.8e9,3500000,-4".split(",")))
    for read in (lambda: read_measurements(bad), lambda: parse_row(values, file=str(bad), line=2)):
        with pytest.raises(InputError) as exc:
            read()
        assert "line 2" in str(exc.value) and "column activations_per_sample" in str(exc.value)


def test_profile_reports_the_activations_the_workload_carries():
    torch = pytest.importorskip("torch")
    from spottrain.profiler import zoo
    from spottrain.profiler.profiler import profile
    from spottrain.profiler.zoo_info import ZOO

    torch.manual_seed(0)
    model, _batch = zoo.build("resnet32", 2)  # the network with its loss, as the zoo's table counts it
    p = profile(lambda: model, lambda n: zoo.make_batch("resnet32", n), batch_size=2, iterations=1, warmup=0,
                name="resnet32")
    # The zoo's generated table counts the same forward pass (plus the loss, once per batch here).
    assert p.activations_per_sample == pytest.approx(ZOO["resnet32"].activations_per_sample, rel=1e-3)
    assert Workload.from_profile(p.to_dict()).activations_per_sample == p.activations_per_sample


def test_a_profiled_step_calibrates_a_depthwise_network_exactly():
    # A profile on an H100 (the lease-5 timing of MobileNetV2 at 128: 54.6 ms a step) sets the
    # network's whole speed: predicted back on that GPU it is the profiled step, and the intensity
    # note goes (the profile measured the traffic).
    w = Workload.from_zoo("mobilenet-v2", 128)
    profiled = Workload(**{**w.__dict__, "step_time_s_ref": 0.054602, "ref_gpu": "H100"})
    p = predict_throughput(profiled, "1xH100")
    assert p.throughput == pytest.approx(128 / 0.054602, rel=0.05)
    assert not any("activation element" in n for n in p.notes)
