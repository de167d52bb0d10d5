"""Throughput model: beats naive baselines on held-out real rows, physical sanity, contract."""

import math
import warnings

import numpy as np
import pytest

from spottrain.errors import InputError, NotFittedError
from spottrain.perf import ThroughputModel, Workload, default_model, load_shipped, predict_throughput
from spottrain.perf.throughput import ExtrapolationWarning, _calibrated_for, _Query
from spottrain.types import ClusterSpec


@pytest.fixture(scope="module")
def cm():
    return load_shipped(("cmdare",))


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError):
        ThroughputModel().predict([])


def test_get_params_roundtrip():
    m = ThroughputModel(folds=3, correction="none")
    assert ThroughputModel(**m.get_params()).get_params() == m.get_params()


def test_cluster_scaling_beats_linear_baseline_on_held_out_series(cm):
    # Hold out the 2..8-worker P100 series of ResNet-32 (PS-bound): linear scaling overshoots.
    test = [m for m in cm if m.model == "t2t-res32" and m.cluster.nodes > 1 and m.ps == 1
            and m.cluster.groups[0].gpu == "P100"]
    train = [m for m in cm if m not in test]
    model = ThroughputModel(folds=0, correction="none").fit(train)
    pred = np.array([p.throughput for p in model.predict(test, warn=False)])
    y = np.array([m.throughput for m in test])
    one = next(m.throughput for m in cm if m.model == "t2t-res32" and str(m.cluster) == "1xP100" and m.ps == 1
               and "cluster" in m.extra.get("source", ""))
    linear = np.array([one * m.cluster.nodes for m in test])
    assert np.mean(np.abs(pred - y) / y) < np.mean(np.abs(linear - y) / y)


def test_cross_gpu_beats_peak_flops_ratio_on_p100(cm):
    from spottrain.perf.hardware import device

    train = [m for m in cm if m.cluster.groups[0].gpu == "K80"]
    test = [m for m in cm if m.cluster.groups[0].gpu == "P100" and m.cluster.total_gpus == 1]
    model = ThroughputModel(folds=0, correction="none").fit(train)
    pred = np.array([p.throughput for p in model.predict(test, warn=False)])
    y = np.array([m.throughput for m in test])
    k80 = {m.model: m.throughput for m in train if m.cluster.total_gpus == 1}
    ratio = device("P100").fp32_tflops / device("K80").fp32_tflops
    base = np.array([k80.get(m.model, np.nan) * ratio for m in test])
    ok = ~np.isnan(base)
    assert np.mean(np.abs(pred - y)[ok] / y[ok]) < np.mean(np.abs(base - y)[ok] / y[ok])


def test_monotonic_and_physical():
    w = Workload.from_zoo("resnet50", 64)
    one = predict_throughput(w, "1xV100")
    assert predict_throughput(w, "1xH100").throughput > one.throughput > predict_throughput(w, "1xK80").throughput
    node = [predict_throughput(w, f"1xV100:{n}").throughput for n in (1, 2, 4, 8)]
    assert all(b >= a for a, b in zip(node, node[1:]))  # more GPUs in a node never slower
    assert node[-1] <= 8 * node[0] * 1.001  # and never superlinear
    xs = [predict_throughput(w, f"{n}xV100").throughput for n in (1, 2, 4, 8)]
    # Across nodes over TCP, two nodes may be slower than one (Pollux's T4s: ResNet-18 at batch 32,
    # BERT at 4, NCF at 32-4103 per GPU all train slower on 2 nodes than on 1); beyond two, more
    # nodes are faster, and never superlinear.
    assert xs[1] < xs[2] < xs[3] <= 8 * xs[0] * 1.001
    slow = predict_throughput(w, "8xV100", network_gbps=1.0)
    assert slow.throughput < xs[-1] and slow.bottleneck == "network"
    one_ps = predict_throughput(w, "16xV100", ps=1, sync="async")
    four_ps = predict_throughput(w, "16xV100", ps=4, sync="async")
    assert four_ps.throughput > one_ps.throughput and one_ps.bottleneck == "ps"
    assert one.low < one.throughput < one.high


def test_a_gpu_named_as_torch_prints_it_is_predicted_as_its_own_board():
    # Azure's V100s are PCIe boards: 11 % less peak than the SXM2 board and no NVLink between them,
    # a board no shipped row measured, predicted from its die's fitted V100 and said to be so.
    w = Workload.from_zoo("resnet50", 64)
    pcie = predict_throughput(w, "1xTesla V100-PCIE-16GB:4")
    assert pcie.extrapolated and any("GPU V100-PCIe not in the fitted data" in n and "V100 of its GV100 die" in n
                                     for n in pcie.notes)
    sxm = predict_throughput(w, "1xTesla V100-SXM2-16GB:4")
    assert predict_throughput(w, "1xV100:4").throughput == sxm.throughput
    assert pcie.throughput < sxm.throughput and pcie.high - pcie.low > (sxm.high - sxm.low) * pcie.throughput / sxm.throughput


def test_extrapolation_widens_interval_and_warns():
    m = default_model()
    w = Workload(model="never-seen", batch_size=32, flops_per_sample=5e9, param_count=10_000_000, gradient_bytes=4e7)
    from spottrain.perf.throughput import _Query
    from spottrain.types import ClusterSpec

    q = _Query(model="never-seen", batch_size=32, cluster=ClusterSpec.parse("64xT4"), ps=0, sync="sync",
               flops=5e9, grad=4e7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = m.predict([q])[0]
    assert p.extrapolated and any(issubclass(c.category, ExtrapolationWarning) for c in caught)
    seen = predict_throughput(Workload.from_zoo("resnet50", 128), "1xV100")
    assert math.log(p.high / p.low) > math.log(seen.high / seen.low)
    assert predict_throughput(w, "64xT4").extrapolated


def test_mixed_precision_off_the_calibration_carries_the_stacks_spread(monkeypatch):
    """Software stacks differ most in what mixed precision gains them (NVIDIA's NHWC scripts train
    ResNet-50 in AMP 1.4x faster on a V100 than Lambda's runs of it): an fp16 query off the shipped
    calibration is at least as wide as that spread, an fp32 one keeps its width, and a query whose
    other reasons (an unseen model on an unseen GPU, far beyond the fitted sizes) are wider is not
    widened twice."""
    from spottrain.perf import throughput

    m = default_model()

    def query(model, precision, cluster, flops=None):
        w = Workload.from_zoo(model, 256) if flops is None else None
        return _Query(model=model, batch_size=256, cluster=ClusterSpec.parse(cluster), ps=0, sync="sync",
                      flops=flops or w.flops_per_sample, grad=4e7 if w is None else w.gradient_bytes,
                      precision=precision, tensors=None if w is None else w.tensor_count)

    seen16, seen32 = query("resnet50", "fp16", "1xV100"), query("resnet50", "fp32", "1xV100")
    far16 = query("never-seen", "fp16", "128xL4:4", flops=5e9)  # unseen model and GPU, far beyond the sizes
    width = lambda q: math.log(m.predict_one(q).high / m.predict_one(q).low)  # noqa: E731
    with_stack = [width(q) for q in (seen16, seen32, far16)]
    stack = throughput.FP16_STACK_LOG
    monkeypatch.setattr(throughput, "FP16_STACK_LOG", 0.0)
    without = [width(q) for q in (seen16, seen32, far16)]
    assert with_stack[0] > without[0] + 0.1
    assert with_stack[0] >= 2 * throughput.Z90 * stack - 1e-9
    assert with_stack[1] == pytest.approx(without[1])
    assert with_stack[2] == pytest.approx(without[2])
    # A shipped study's own fp16 row runs that study's stack, which the calibration fitted.
    row = next(r for r in load_shipped(("lambda",)) if r.precision == "fp16" and r.model == "resnet50")
    assert not m.predict([row], warn=False)[0].stack_borrowed and m.predict_one(_Query.of(row)).stack_borrowed
    # A profile timed the user's own stack in fp16: its mixed-precision gain is measured, not borrowed.
    monkeypatch.setattr(throughput, "FP16_STACK_LOG", stack)
    w = Workload(**{**Workload.from_zoo("resnet50", 256).__dict__, "precision": "fp16"})
    profiled = Workload(**{**w.__dict__, "step_time_s_ref": 0.1, "ref_gpu": "V100"})
    p_cal, p_own = predict_throughput(w, "1xA100-80GB"), predict_throughput(profiled, "1xA100-80GB")
    assert math.log(p_own.high / p_own.low) < math.log(p_cal.high / p_cal.low) - 0.1


def test_profile_step_time_calibrates_compute():
    w = Workload.from_zoo("resnet50", 64)
    slow = Workload(**{**w.__dict__, "step_time_s_ref": 1.0, "ref_gpu": "V100"})
    p = predict_throughput(slow, "1xV100")
    assert p.throughput == pytest.approx(64 / 1.0, rel=0.05)
    assert predict_throughput(slow, "1xH100").throughput > p.throughput


def test_a_profile_moves_another_gpu_types_prediction_half_as_far_as_its_own():
    """A profile's step says as much of the machine it ran on as of the model: its own GPU type is
    predicted as profiled, another GPU type halfway (in log) between the calibration alone and the
    profile's whole change, and the prediction says so; the interval moves with it."""
    w = Workload.from_zoo("resnet50", 64)
    slow = Workload(**{**w.__dict__, "step_time_s_ref": 0.5, "ref_gpu": "Tesla V100"})
    own = predict_throughput(slow, "1xV100")
    assert own.throughput == pytest.approx(64 / 0.5, rel=0.05)
    assert own.profiled_on is None
    for cluster in ("1xH100", "4xA10G"):
        alone = predict_throughput(w, cluster)
        whole = _calibrated_for(default_model(), slow).predict_one(
            _Query(model=w.model, batch_size=64, cluster=ClusterSpec.parse(cluster), ps=0, sync="sync",
                   flops=w.flops_per_sample, grad=w.gradient_bytes, precision="fp32", tensors=w.tensor_count))
        half = predict_throughput(slow, cluster)
        assert whole.throughput < half.throughput < alone.throughput  # the profile is slow; half of it is kept
        assert math.log(half.throughput) == pytest.approx(0.5 * (math.log(whole.throughput) + math.log(alone.throughput)))
        assert half.high / half.low == pytest.approx(whole.high / whole.low)
        assert half.profiled_on == "V100" and half.to_dict()["profiled_on"] == "V100"


def test_bad_arguments():
    w = Workload.from_zoo("resnet50", 64)
    with pytest.raises(InputError):
        predict_throughput(w, "4xV100", ps=0, sync="async")
    with pytest.raises(Exception, match="did you mean"):
        predict_throughput(w, "4xV10")
    with pytest.raises(InputError):
        predict_throughput(w, "4*V100")


def test_correction_never_worse_than_analytical_in_cv():
    rows = load_shipped(("transient_dl",))
    m = ThroughputModel(folds=4, correction="auto").fit(rows)
    used = m.correction_ is not None
    cv = m.cv_mae_log_
    assert (not used) or cv["corrected"] <= cv["analytical"]


def test_rows_of_one_node_keep_the_priors_width_for_queries_across_nodes():
    """One node's rows say nothing of the network: their own cross-validated width must not be the
    interval of a multi-node query; the prior's width for that regime is the floor."""
    from spottrain.perf.measurements import load_shipped

    pollux = [m for m in load_shipped(("pollux",)) if m.model == "resnet18-cifar"]
    prior = ThroughputModel(folds=0, correction="none").fit([m for m in pollux if m.batch_size != 182])
    own = [m for m in pollux if m.cluster.nodes == 1]
    assert len(own) >= 10
    user = ThroughputModel(prior=prior, folds=5).fit(own)
    one_node_width = max(user.regime_log_[r] for r in ("single", "intra"))
    assert one_node_width < prior.regime_log_["inter"]  # the floor matters for these rows
    assert user.regime_log_["inter"] >= prior.regime_log_["inter"]
    from spottrain.perf.throughput import _Query, _width_keys

    across = [m for m in pollux if m.cluster.nodes > 1 and m.batch_size == 182]
    assert len({m.cluster.nodes for m in across}) >= 4  # rings of several sizes, each with the prior's width
    for m, p in zip(across, user.predict(across, warn=False)):
        floor = next(prior.regime_log_[k] for k in _width_keys(_Query.of(m)) if k in prior.regime_log_)
        assert math.log(p.high / p.throughput) >= floor - 1e-9


def test_a_slow_machine_in_the_users_table_mostly_stays_with_its_gpu():
    """A user's table is one more study: its overall level has the between-study prior, so rows of
    one GPU running slower than the calibration move that GPU's predictions to them and carry only
    part of the slowdown to a GPU the table never measured (a level left free carried all of it:
    our H200 machine's rows then predicted the H100 machine's worse than the calibration alone)."""
    import dataclasses

    from spottrain.types import ClusterSpec

    prior = default_model()
    h200 = [m for m in load_shipped(("hopper_zoo",)) if str(m.cluster) == "1xH200"]
    # synthetic: the shipped H200 configurations on a machine 1/0.6 times slower than the calibration
    slow = [dataclasses.replace(m, throughput=p.throughput * 0.6, step_time_s=None)
            for m, p in zip(h200, prior.predict(h200, warn=False))]
    user = ThroughputModel(prior=prior, folds=0, correction="none").fit(slow)
    own = np.array([p.throughput / m.throughput for p, m in zip(user.predict(slow, warn=False), slow)])
    assert np.all(np.abs(own - 1.0) < 0.03)
    h100 = [dataclasses.replace(m, cluster=ClusterSpec.parse("1xH100")) for m in h200]
    carried = np.median([u.throughput / p.throughput
                         for u, p in zip(user.predict(h100, warn=False), prior.predict(h100, warn=False))])
    assert 0.64 < carried < 0.9  # some of it is the user's framework and models, not all of it


def test_rows_of_one_model_keep_the_priors_slopes_across_models():
    """One network's rows (ResNet-50 timed at several batch sizes and precisions on an H200) cannot
    tell the per-tensor dispatch from the per-step time, nor the intensity's growth with layer width
    from its level: a fit over the calibration keeps those two slopes at the calibration's values,
    and networks it never measured stay as well predicted as by the calibration alone. Rows of two
    networks (ResNet-50 and BERT-base on an H100) move them."""
    from pathlib import Path

    from spottrain.perf import analytical as an
    from spottrain.perf import read_measurements

    data = Path(__file__).resolve().parents[1] / "bench" / "data"
    prior = default_model()
    slopes = [an.G_INDEX["log_tau_t"], an.G_INDEX["w_ai"]]
    one = read_measurements(data / "zoo_anchor_h200.csv")
    assert len({m.model for m in one}) == 1 and len(one) >= 8
    user = ThroughputModel(prior=prior, folds=0, correction="none").fit(one)
    assert np.allclose(user.theta_[slopes], prior.theta_[slopes], atol=1e-5)
    unseen = read_measurements(data / "zoo_more_h200.csv")
    y = np.array([m.throughput for m in unseen])
    err = lambda model: np.mean(np.abs(np.array([p.throughput for p in model.predict(unseen, warn=False)]) / y - 1))  # noqa: E731
    assert err(user) < err(prior) + 0.05
    two = read_measurements(data / "zoo_anchor_h100.csv")
    assert len({m.model for m in two}) == 2
    moved = ThroughputModel(prior=prior, folds=0, correction="none").fit(two)
    assert not np.allclose(moved.theta_[slopes], prior.theta_[slopes], atol=1e-3)
