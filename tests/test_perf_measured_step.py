"""A batch size measured on one GPU: multi-GPU predictions at that per-GPU batch take the measured
compute step and model only the gradient exchange (ThroughputModel._step_anchor)."""

import copy
import dataclasses
import math
import statistics

import pytest

from spottrain.perf import default_model, load_shipped
from spottrain.perf.throughput import STEP_REACH, ThroughputModel, _Query


@pytest.fixture(scope="module")
def pollux_resnet50():
    rows = [m for m in load_shipped(("pollux",)) if m.model == "resnet50"]
    one_node = [m for m in rows if m.cluster.nodes == 1]
    multi = [m for m in rows if m.cluster.nodes > 1]
    user = ThroughputModel(prior=default_model(), folds=0, correction="none").fit(one_node)
    return one_node, multi, user


def without_steps(model):
    clone = copy.copy(model)
    clone.measured_steps_ = {}
    return clone


def one_gpu_rate(rows, batch):
    return statistics.mean(m.throughput for m in rows if m.cluster.total_gpus == 1 and m.batch_size == batch)


def test_a_batch_measured_on_one_gpu_is_predicted_as_measured(pollux_resnet50):
    one_node, _multi, user = pollux_resnet50
    single = [m for m in one_node if m.cluster.total_gpus == 1]
    assert len({m.batch_size for m in single}) >= 5
    plain = without_steps(user).predict(single, warn=False)
    for m, p, q in zip(single, user.predict(single, warn=False), plain):
        assert p.throughput == pytest.approx(one_gpu_rate(single, m.batch_size), rel=1e-9)
        assert p.throughput != pytest.approx(q.throughput, rel=1e-3)  # the fit alone misses them


def test_a_multi_node_step_is_the_measured_compute_plus_the_modelled_exchange(pollux_resnet50):
    one_node, multi, user = pollux_resnet50
    for m, p in zip(multi, user.predict(multi, warn=False)):
        step_one_gpu = m.batch_size / one_gpu_rate(one_node, m.batch_size)
        # the step (T = compute + exposed all-reduce) less its exposed all-reduce is the measured compute
        assert p.iteration_time_s - p.sync_time_s == pytest.approx(step_one_gpu, rel=1e-9)


def test_between_measured_batches_the_residual_is_interpolated_and_fades_past_them(pollux_resnet50):
    one_node, _multi, user = pollux_resnet50
    plain = without_steps(user)
    single = sorted({m.batch_size for m in one_node if m.cluster.total_gpus == 1})
    base = next(m for m in one_node if m.cluster.total_gpus == 1)
    resid = {b: math.log(one_gpu_rate(one_node, b) / plain.predict([dataclasses.replace(base, batch_size=b)],
                                                                    warn=False)[0].throughput) for b in single}
    lo, hi = single[0], single[1]
    mid = round(math.sqrt(lo * hi))
    assert lo < mid < hi
    q = dataclasses.replace(base, batch_size=mid)
    got = math.log(user.predict([q], warn=False)[0].throughput / plain.predict([q], warn=False)[0].throughput)
    share = (math.log(mid) - math.log(lo)) / (math.log(hi) - math.log(lo))
    assert got == pytest.approx(resid[lo] + share * (resid[hi] - resid[lo]), abs=1e-9)
    # half way to twice the largest batch: half the largest batch's residual; past twice: none
    top = single[-1]
    half = dataclasses.replace(base, batch_size=round(top * math.exp(STEP_REACH / 2)))
    far = dataclasses.replace(base, batch_size=top * 3)
    assert 0.0 < abs(math.log(user.predict([half], warn=False)[0].throughput
                              / plain.predict([half], warn=False)[0].throughput)) < abs(resid[top])
    assert user.predict([far], warn=False)[0].throughput == pytest.approx(plain.predict([far], warn=False)[0].throughput,
                                                                          rel=1e-12)


def test_the_scalar_path_and_a_saved_model_take_the_same_measured_steps(pollux_resnet50):
    _one_node, multi, user = pollux_resnet50
    loaded = ThroughputModel.from_dict(user.to_dict())
    for m in multi[::40]:
        q = _Query.of(m)
        vec = user.predict([q], warn=False)[0]
        assert user.predict_one(q).throughput == pytest.approx(vec.throughput, rel=1e-9)
        assert loaded.predict([q], warn=False)[0].throughput == pytest.approx(vec.throughput, rel=1e-9)
        assert vec.throughput != pytest.approx(without_steps(user).predict([q], warn=False)[0].throughput, rel=1e-4)


def test_the_calibration_applies_a_study_s_measured_steps_to_that_study_s_rows_only():
    # The shipped calibration holds Pollux's one-GPU T4 steps. A row of Pollux (as in the bench's
    # leave-one-model-out rows) takes them; a user's query, whose software no study names, does not.
    cal = default_model()
    assert any(k.startswith("pollux") for k in cal.measured_steps_)
    m = next(m for m in load_shipped(("pollux",)) if m.model == "resnet50" and m.cluster.nodes > 1)
    plain = without_steps(cal)
    assert cal.predict([m], warn=False)[0].throughput != pytest.approx(plain.predict([m], warn=False)[0].throughput,
                                                                       rel=1e-4)
    q = _Query.of(m)
    assert cal.predict([q], warn=False)[0].throughput == pytest.approx(plain.predict([q], warn=False)[0].throughput,
                                                                       rel=1e-12)
    assert cal.predict_one(q).throughput == pytest.approx(plain.predict_one(q).throughput, rel=1e-12)
    unnamed = dataclasses.replace(m, extra={})
    assert cal.predict([unnamed], warn=False)[0].throughput == pytest.approx(
        plain.predict([unnamed], warn=False)[0].throughput, rel=1e-12)


def test_a_table_that_spells_a_zoo_network_its_own_way_shares_its_fitted_speed(pollux_resnet50):
    # "ResNet-50" in a user's table or query is the zoo's resnet50: the shipped rows' fitted effect,
    # and the user's measured step at that name.
    one_node, _multi, _user = pollux_resnet50
    prior = default_model()
    query = dataclasses.replace(one_node[0], model="resnet50", cluster=type(one_node[0].cluster).parse("1xV100"))
    spelled = [dataclasses.replace(query, model=name) for name in ("ResNet-50", "resnet_50", "RESNET50")]
    (ref,), others = prior.predict([query], warn=False), prior.predict(spelled, warn=False)
    assert {(p.throughput, p.low, p.high, p.notes) for p in others} == {(ref.throughput, ref.low, ref.high, ref.notes)}
    assert not ref.notes  # a fitted network, not one "predicted from its FLOPs"
    single = [dataclasses.replace(m, model="ResNet-50") for m in one_node if m.cluster.total_gpus == 1]
    user = ThroughputModel(prior=prior, folds=0, correction="none").fit(single)
    for m, p in zip(single, user.predict([dataclasses.replace(m, model="resnet50") for m in single], warn=False)):
        assert p.throughput == pytest.approx(one_gpu_rate(single, m.batch_size), rel=1e-9)
