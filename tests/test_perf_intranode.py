"""Intra-node all-reduce: fp16 payload and the per-GPU-type interconnect effect."""

import math

import pytest

from spottrain.perf import Workload, default_model, load_shipped
from spottrain.perf import analytical as an
from spottrain.perf.throughput import ThroughputModel, _Query
from spottrain.types import ClusterSpec


def _q(model, b, cluster, prec):
    w = Workload.from_zoo(model, b, precision=prec)
    return _Query(model=w.model, batch_size=b, cluster=ClusterSpec.parse(cluster), ps=0, sync="sync",
                  flops=w.flops_per_sample, grad=w.gradient_bytes, precision=prec, tensors=w.tensor_count)


def test_fp16_payload_is_between_fp16_and_fp32_gradients():
    for g16 in (-40.0, -2.0, 0.0, 3.0, 40.0):
        assert 0.5 <= an.ar16_fraction(g16) <= 1.0
    assert an.ar16_fraction(-40.0) == pytest.approx(0.5) and an.ar16_fraction(40.0) == pytest.approx(1.0)
    m = default_model()
    frac = an.ar16_fraction(m.theta_[an.G_INDEX["g16"]])
    S = Workload.from_zoo("bert-base", 32).gradient_bytes
    gr = an.GroupInput(count=1, gpn=8, log_p=math.log(378.0), log_p32=math.log(51.0), log_bw=math.log(2000.0),
                       link_gbs=64.0, net_gbs=1.25, effect=0.0, link_effect=0.3, pcie_gbs=64.0)
    kw = dict(b=32, flops=6e10, grad=S, ntens=153, ps=0, asyn=False, model_effect=0.0)
    _, p32, _ = an.predict_one(m.theta_, [gr], fp16=False, **kw)
    _, p16, _ = an.predict_one(m.theta_, [gr], fp16=True, **kw)
    link = 64.0e9 * math.exp(m.theta_[an.G_INDEX["log_link_eff"]] + 0.3)
    assert p32["t_intra"] == pytest.approx(2 * 7 / 8 * S / link)
    assert p16["t_intra"] == pytest.approx(frac * p32["t_intra"])
    # A link effect below the host-staged floor is cut at the floor: PCIe / 2 at the line
    # efficiency, shared by the node's 8 GPUs (x 2/8), whatever the fitted link efficiency.
    slow = an.GroupInput(**{**gr.__dict__, "link_effect": -5.0})
    _, ps, _ = an.predict_one(m.theta_, [slow], fp16=False, **kw)
    assert ps["t_intra"] == pytest.approx(2 * 7 / 8 * S / (an.LINE_EFF * 32.0e9 * 2 / 8))
    two = an.GroupInput(**{**slow.__dict__, "gpn": 2})
    _, p2, _ = an.predict_one(m.theta_, [two], fp16=False, **kw)
    assert p2["t_intra"] == pytest.approx(2 * 1 / 2 * S / (an.LINE_EFF * 32.0e9))


@pytest.fixture(scope="module")
def lambda_fit():
    return ThroughputModel(folds=0, correction="none").fit(load_shipped(("lambda",)))


def test_link_effects_only_for_gpus_measured_with_several_gpus_per_node(lambda_fit):
    lam = load_shipped(("lambda",))
    multi = {m.cluster.groups[0].gpu for m in lam if m.cluster.total_gpus > 1}
    single_only = {m.cluster.groups[0].gpu for m in lam} - multi
    m = lambda_fit
    assert single_only and not (single_only & set(m.link_effects_))
    assert set(m.link_effects_) >= {"V100", "H100", "RTX4090"}
    back = ThroughputModel.from_dict(m.to_dict())
    assert back.link_effects_ == pytest.approx(m.link_effects_)


def test_host_link_effects_stay_with_the_table_they_were_measured_on(lambda_fit):
    """Lambda's 8x A100-80GB host all-reduces at a few GB/s; neither the shipped calibration nor a
    model that takes the Lambda fit as its prior carries that to other A100-80GB nodes."""
    assert lambda_fit.link_effects_["A100-80GB"] < -1.0
    assert default_model().link_effects_ == {}
    q = _q("bert-base", 32, "1xA100-80GB:8", "fp32")
    one = _q("bert-base", 32, "1xA100-80GB", "fp32")
    host = lambda_fit.predict_one(q).throughput / lambda_fit.predict_one(one).throughput
    cloud = default_model().predict_one(q).throughput / default_model().predict_one(one).throughput
    assert host < 4.0 < 6.0 < cloud <= 8.0
    other = [m for m in load_shipped(("cmdare",))][:12]
    child = ThroughputModel(prior=lambda_fit, folds=0, correction="none").fit(other)
    assert child.link_effects_ == {}


def test_intra_node_scaling_stays_physical():
    m = default_model()
    for gpu in ("V100", "A100-80GB", "H100", "RTX4090", "A10", "T4"):
        for model, b in (("resnet50", 128), ("bert-base", 32), ("bert-base", 128)):
            for prec in ("fp32", "fp16"):
                xs = [m.predict_one(_q(model, b, f"1x{gpu}:{g}" if g > 1 else f"1x{gpu}", prec)).throughput
                      for g in (1, 2, 4, 8)]
                assert all(x <= g * xs[0] * (1 + 1e-9) for x, g in zip(xs, (1, 2, 4, 8)))  # never super-linear
                if b >= 128:  # steps long enough to carry the all-reduce: more GPUs, more samples/s
                    assert all(b_ > a for a, b_ in zip(xs, xs[1:])), (gpu, model, prec, xs)


def test_a_poorly_connected_node_is_no_slower_than_staging_through_host_memory(lambda_fit):
    m = lambda_fit
    assert m.link_effects_
    for name in m.link_effects_:
        from spottrain.perf.hardware import device

        d = device(name)
        q32 = _q("bert-base", 32, f"1x{name}:8", "fp32")
        x = m.predict_one(q32)
        # The 8-GPU step is at most compute + the all-reduce over the host-staged floor (PCIe / 2 at
        # the line efficiency, shared by the node's 8 GPUs).
        S = Workload.from_zoo("bert-base", 32).gradient_bytes
        t_floor = 2 * 7 / 8 * S / (float(an.host_staged_gbs(d.pcie_gbs, 8)) * 1e9)
        t1 = 32 / m.predict_one(_q("bert-base", 32, f"1x{name}", "fp32")).throughput
        assert x.iteration_time_s <= t1 + t_floor + 1e-9


def test_fp16_payload_is_not_halved_by_rows_that_cannot_tell():
    """Pollux's ResNet-50 (fp16, fp32 gradients all-reduced) across nodes, its multi-node rows out
    of the fit: Lambda's fp16 rows (BERT with fp16 weights among them) and one node's rows must not
    halve every fp16 model's all-reduce. The payload stays near fp32's and the held-out sync times
    are predicted at their measured size (with a prior of log sd 1 the payload fell to 0.63 of
    fp32's and the sync times were predicted at 0.61x, the throughput at 29 % error)."""
    import numpy as np

    po = load_shipped(("pollux",))
    train = load_shipped(("lambda",)) + [m for m in po if m.model != "resnet50" or m.cluster.nodes == 1]
    held = [m for m in po if m.model == "resnet50" and m.cluster.nodes > 1]
    fit = ThroughputModel(folds=0, correction="none").fit(train)
    assert an.ar16_fraction(fit.theta_[an.G_INDEX["g16"]]) > 0.85
    preds = fit.predict(held, warn=False)
    sync = np.median([p.sync_time_s / m.sync_time_s for p, m in zip(preds, held)])
    assert 0.8 < sync < 1.25
    assert np.mean([abs(p.throughput / m.throughput - 1) for p, m in zip(preds, held)]) < 0.2
