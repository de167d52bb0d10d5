"""Inter-node all-reduce as achieved (Pollux's g4dn.12xlarge traces), cross-study intervals, one
measured row pulling a prediction, and the bad rows of a measurement table."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from spottrain.cli.main import main
from spottrain.perf import ThroughputModel, load_shipped
from spottrain.perf import analytical as an
from spottrain.perf.throughput import ExtrapolationWarning, _study_weights
from spottrain.types import ClusterSpec

HEADER = "model,batch_size,cluster,ps,sync,throughput,network_gbps,flops_per_sample,param_count"


@pytest.fixture(scope="module")
def pollux():
    return load_shipped(("pollux",))


@pytest.fixture(scope="module")
def few_nodes_fit(pollux):
    """Fitted on Pollux rows of at most 4 nodes (and one model fewer than the table: no NCF)."""
    train = [m for m in pollux if m.cluster.nodes <= 4 and m.model != "ncf-neumf"]
    return ThroughputModel(folds=0, correction="none").fit(train)


def test_achieved_network_rate_is_a_small_part_of_the_nominal_one(few_nodes_fit):
    # The traces' sync times say what the 50 Gbit/s NICs deliver to an all-reduce over TCP.
    cap = math.exp(few_nodes_fit.theta_[an.G_INDEX["log_ar_cap"]])
    achieved = float(an.achieved_gbps(50.0, math.log(cap)))
    assert 2.0 < achieved < 15.0, achieved


def test_sync_times_of_larger_clusters_beat_the_nominal_ring(few_nodes_fit, pollux):
    """Held out: every row of 6-16 nodes. The naive ring at the nominal 50 Gbit/s errs by ~90 %."""
    test = [m for m in pollux if m.cluster.nodes >= 6 and m.model != "ncf-neumf"]
    pred = np.array([p.sync_time_s for p in few_nodes_fit.predict(test, warn=False)])
    meas = np.array([m.sync_time_s for m in test])
    naive = np.array([2 * (m.cluster.total_gpus - 1) / m.cluster.total_gpus * 4 * m.param_count / 6.25e9 for m in test])
    ours = np.median(np.abs(pred / meas - 1))
    assert ours < 0.35, ours
    assert ours < 0.5 * np.median(np.abs(naive / meas - 1))
    step = np.array([p.throughput for p in few_nodes_fit.predict(test, warn=False)])
    assert np.mean(np.abs(step / np.array([m.throughput for m in test]) - 1)) < 0.15


def test_scalar_path_agrees_with_the_vectorised_one_across_nodes(few_nodes_fit, pollux):
    from spottrain.perf.throughput import _Query

    rows = [m for m in pollux if m.cluster.nodes > 1][::97]
    vec = few_nodes_fit.predict(rows, warn=False)
    for m, v in zip(rows, vec):
        one = few_nodes_fit.predict_one(_Query.of(m))
        assert one.throughput == pytest.approx(v.throughput, rel=1e-9)
        assert one.sync_time_s == pytest.approx(v.sync_time_s, rel=1e-9)


def test_a_bigger_study_does_not_outweigh_the_others():
    rows = load_shipped(("pollux", "transient_dl"))
    w = _study_weights(rows)
    pol = np.array([m.extra["source"].startswith("pollux") for m in rows])
    assert np.all(w[~pol] == 1.0)
    assert (w[pol] ** 2).sum() == pytest.approx(250.0)  # 1,220 rows count as 250


def test_one_measured_row_of_the_target_gpu_pulls_the_prediction_to_it(pollux):
    # A calibration that has never seen a T4 (every shipped study but Pollux's: none holds a T4), as
    # a user's prior would not have seen the user's own GPU; the user measures one configuration of
    # ResNet-50 on it. (Lambda's table alone, large batches only, leaves the model's batch dependence
    # on this GPU too flat for the interval at batch 163: 178 predicted, 214 measured.)
    prior = ThroughputModel(folds=0, correction="none").fit(
        load_shipped(("lambda", "cmdare", "transient_dl", "hopper_zoo")))
    row = next(m for m in pollux if m.model == "resnet50" and str(m.cluster) == "1xT4" and m.batch_size == 57)
    before = prior.predict([row], warn=False)[0]
    user = ThroughputModel(prior=prior, folds=0).fit([row])
    after = user.predict([row], warn=False)[0]
    assert abs(after.throughput / row.throughput - 1) < 0.05
    assert abs(after.throughput / row.throughput - 1) < 0.5 * abs(before.throughput / row.throughput - 1) + 1e-9
    # Another batch size on the same GPU moves with it, and its interval keeps the prior's width.
    other = next(m for m in pollux if m.model == "resnet50" and str(m.cluster) == "1xT4" and m.batch_size == 163)
    o_before, o_after = prior.predict([other], warn=False)[0], user.predict([other], warn=False)[0]
    assert abs(o_after.throughput / other.throughput - 1) < abs(o_before.throughput / other.throughput - 1)
    assert o_after.low <= other.throughput <= o_after.high
    assert math.log(o_after.high / o_after.low) >= 2 * user.regime_log_["single"] - 1e-9


def test_far_outside_the_data_widens_and_warns_once(tmp_path):
    train = load_shipped(("transient_dl",))  # K80/P100/V100, one model, parameter servers only
    model = ThroughputModel(folds=0, correction="none").fit(train)
    near = [m for m in train if m.cluster.nodes == 2][:1]
    far = [m.__class__(**{**m.__dict__, "cluster": m.cluster.parse(c), "ps": 0, "sync": "sync"})
           for m, c in zip(train[:3], ("4xV100:4", "8xA100:8", "2xT4:4"))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p_far = model.predict(far)
        p_near = model.predict(near)
    assert len([w for w in caught if issubclass(w.category, ExtrapolationWarning)]) == 1
    assert "and 2 more" in str(next(w.message for w in caught if issubclass(w.category, ExtrapolationWarning)))
    width = lambda p: math.log(p.high / p.low)  # noqa: E731
    assert all(p.extrapolated for p in p_far) and not p_near[0].extrapolated
    assert min(width(p) for p in p_far) > width(p_near[0]) + 0.2


def run(capsys, *args):
    code = None
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_table_marks_a_far_query_and_says_what_the_mark_means(tmp_path, capsys):
    from spottrain.perf.measurements import shipped_tables

    shipped = shipped_tables()["pollux"].read_text().splitlines()
    table = tmp_path / "m.csv"
    table.write_text("\n".join(shipped[:4]) + "\n")  # three one-GPU T4 rows of ResNet-18
    near, far = tmp_path / "near.csv", tmp_path / "far.csv"
    near.write_text("model,batch_size,cluster,ps,sync,precision\nresnet18-cifar,32,1xT4,0,sync,fp32\n")
    far.write_text("model,batch_size,cluster,ps,sync,precision\nresnet18-cifar,32,64xT4:4,0,sync,fp32\n"
                   "resnet18-cifar,32,1xT4,0,sync,fp32\n")
    code, out, err = run(capsys, "predict", "--measurements", str(table), "--queries", str(far))
    assert code in (None, 0), err
    assert err.count("outside the fitted data") == 1 and "64 nodes, fitted up to 1" in err
    assert out.count("*") == 2 and "* outside the fitted data: the interval is widened" in out
    code, out, err = run(capsys, "predict", "--measurements", str(table), "--queries", str(near))
    assert code in (None, 0), err
    assert "*" not in out and "outside the fitted data" not in out + err


@pytest.mark.parametrize("row,column,words", [
    ("resnet50,0,4xV100,0,sync,100,,,", "batch_size", "> 0"),
    ("resnet50,32,1xg4dn.12xlarge:5,0,sync,100,,,", "cluster", "4 GPU(s) per node"),
    ("resnet50,32,1113,0,sync,100,,,", "cluster", "NxGPU"),
    ("resnet50,32,2xT4:32,0,sync,100,,,", "cluster", "no node holds more than 16"),
])
def test_bad_measurement_rows_exit_2_naming_file_line_column(tmp_path, capsys, row, column, words):
    m = tmp_path / "m.csv"
    m.write_text(HEADER + "\nresnet50,32,1xV100,0,sync,300,,,\n" + row + "\n")
    q = tmp_path / "q.csv"
    q.write_text(HEADER + "\nresnet50,32,2xV100,0,sync,,,,\n")
    code, _, err = run(capsys, "predict", "--measurements", str(m), "--queries", str(q), "--no-from-store")
    assert code == 2
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "m.csv" in line and "line 3" in line and f"column {column}" in line and words in line


def test_a_sync_time_longer_than_its_step_is_refused(tmp_path, capsys):
    m = tmp_path / "m.csv"
    m.write_text("model,batch_size,cluster,ps,sync,throughput,step_time_s,sync_time_s\n"
                 "resnet50,32,2xT4:4,0,sync,,0.30,0.10\nresnet50,32,4xT4:4,0,sync,,0.30,0.45\n")
    q = tmp_path / "q.csv"
    q.write_text(HEADER + "\nresnet50,32,2xT4:4,0,sync,,,,\n")
    code, _, err = run(capsys, "predict", "--measurements", str(m), "--queries", str(q), "--no-from-store")
    assert code == 2
    assert "line 3" in err and "column sync_time_s" in err and "longer than the step time" in err


def test_step_time_gives_the_throughput_and_queries_get_sync_predictions(tmp_path, capsys):
    m = tmp_path / "m.csv"
    m.write_text("model,batch_size,cluster,ps,sync,throughput,network_gbps,step_time_s,sync_time_s\n"
                 "resnet50,57,1xT4,0,sync,,50,0.324,\nresnet50,57,4xT4:4,0,sync,,50,0.50,0.17\n")
    q = tmp_path / "q.csv"
    q.write_text(HEADER + "\nresnet50,57,8xT4:4,0,sync,,50,,\n")
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "predict", "--measurements", str(m), "--queries", str(q), "--out", str(out),
                       "--no-from-store")
    assert code in (0, None)
    import csv

    (row,) = list(csv.DictReader(out.open()))
    assert 0 < float(row["sync_time_s_pred"]) < float(row["step_time_s_pred"])
    assert float(row["throughput_low"]) < float(row["throughput_pred"]) < float(row["throughput_high"])


def test_a_gpu_missing_from_your_rows_keeps_the_between_study_width():
    """K80 rows of your own -> V100 and P100: their speed ratio comes from other studies, and the
    interval says so; the K80 configurations you did not measure stay narrower."""
    prior = ThroughputModel(folds=0, correction="none").fit(load_shipped(("lambda",)))
    k80 = [m for m in load_shipped(("cmdare",)) if m.cluster.groups[0].gpu == "K80" and m.cluster.nodes == 1]
    user = ThroughputModel(prior=prior, folds=5).fit(k80)
    others = [m for m in load_shipped(("cmdare",)) if m.cluster.groups[0].gpu in ("V100", "P100")
              and m.cluster.nodes == 1]
    k80_more = [m for m in load_shipped(("cmdare",)) if m.cluster.groups[0].gpu == "K80" and m.cluster.nodes > 1]
    p_other = user.predict(others, warn=False)
    p_k80 = user.predict(k80_more, warn=False)
    assert all(any("not in your measurements" in n for n in p.notes) for p in p_other)
    # Another machine of yours keeps the between-study floor of a user's table, not the pooled
    # calibration's narrower one (the prior's regime widths hold no study of yours).
    from spottrain.perf.throughput import POOLED_STUDY_LOG, STUDY_LOG, _Query

    assert STUDY_LOG > POOLED_STUDY_LOG
    level = dict(user._extrapolation(_Query.of(others[0])))
    sd = next(v for k, v in level.items() if "not in your measurements" in k)
    assert sd >= STUDY_LOG
    assert min(math.log(p.high / p.low) for p in p_other) > max(math.log(p.high / p.low) for p in p_k80)
    inside = np.mean([p.low <= m.throughput <= p.high for p, m in zip(p_other, others)])
    assert inside >= 0.8, inside


def test_another_gpu_of_yours_takes_half_of_what_your_rows_change(monkeypatch):
    """K80 rows of your own -> V100 and P100 (another machine): the prediction sits halfway, in log,
    between the calibration's and what a fit that transferred all of the K80 rows' change would say;
    the K80 configurations you did not measure keep all of it. The scalar path agrees."""
    from spottrain.perf import throughput as tp

    prior = ThroughputModel(folds=0, correction="none").fit(load_shipped(("lambda",)))
    cmdare = load_shipped(("cmdare",))
    k80 = [m for m in cmdare if m.cluster.groups[0].gpu == "K80" and m.cluster.nodes == 1]
    user = ThroughputModel(prior=prior, folds=0, correction="none").fit(k80)
    others = [m for m in cmdare if m.cluster.groups[0].gpu in ("V100", "P100") and m.cluster.nodes == 1][:6]
    k80_more = [m for m in cmdare if m.cluster.groups[0].gpu == "K80" and m.cluster.nodes > 1][:4]
    half = user.predict(others + k80_more, warn=False)
    monkeypatch.setattr(tp, "OTHER_MACHINE_SHARE", 1.0)
    whole = user.predict(others + k80_more, warn=False)
    calibrated = prior.predict(others, warn=False)
    for h, w, c in zip(half, whole, calibrated):
        assert math.log(h.throughput) == pytest.approx((math.log(w.throughput) + math.log(c.throughput)) / 2, abs=1e-9)
        assert math.log(h.high / h.low) == pytest.approx(math.log(w.high / w.low), abs=1e-9)
    # The rows changed these predictions (else there is nothing to halve) ...
    assert max(abs(math.log(w.throughput / c.throughput)) for w, c in zip(whole, calibrated)) > 0.02
    # ... and the K80 queries, on the machine the rows were measured on, keep the whole change.
    for h, w in zip(half[len(others):], whole[len(others):]):
        assert h.throughput == pytest.approx(w.throughput, rel=1e-12)
    monkeypatch.setattr(tp, "OTHER_MACHINE_SHARE", 0.5)
    for m, h in zip(others, half):
        one = user.predict_one(tp._Query.of(m))
        assert one.throughput == pytest.approx(h.throughput, rel=1e-6)
        assert one.low == pytest.approx(h.low, rel=1e-6)
    # ... and the note says the share the prediction keeps
    assert any("another machine: 50% of what your rows change" in n for n in half[0].notes)


def test_network_latency_is_paid_per_node_not_per_gpu():
    """A ring's steps between GPUs of one node cost microseconds; only the 2 (N-1) steps that cross
    the network pay its latency. NCF's one 6 MB bucket syncs as fast over 8 nodes of 4 GPUs as over
    8 nodes of 1 (Pollux: 20-24 ms both)."""
    theta = np.array([an.PRIOR[n][0] for n in an.GLOBALS])
    theta[an.G_INDEX["log_ar_lat"]] = math.log(1e-3)
    theta[an.G_INDEX["link_spread"]] = 0.0  # every link alike: the ring's step count alone

    def t_inter(gpn: int, grad: float) -> float:
        group = an.GroupInput(count=8, gpn=gpn, log_p=math.log(65.0), log_p32=math.log(8.1), log_bw=math.log(320.0),
                              link_gbs=16.0, net_gbs=50.0 / 8.0, effect=0.0, link_effect=0.0, pcie_gbs=16.0)
        _x, parts, _per = an.predict_one(theta, [group], b=32, flops=1e6, grad=grad, ntens=12, fp16=False, ps=0,
                                         asyn=False, model_effect=0.0)
        return parts["t_inter"]

    tiny = 8.0  # bytes: the bandwidth term vanishes, the latency term is all that is left
    assert t_inter(4, tiny) == pytest.approx(t_inter(1, tiny), rel=1e-3)
    assert t_inter(1, tiny) == pytest.approx(2 * 7 * 1e-3, rel=1e-3)  # one bucket, 2 (8-1) network steps
    # The bytes still travel the whole ring: 2 (n-1)/n of them, n = 32 or 8 GPUs.
    big = 4.0 * 25e6
    grows = t_inter(4, big) - t_inter(1, big)
    net = float(an.achieved_gbps(50.0, an.PRIOR["log_ar_cap"][0])) / 8.0 * 1e9
    assert grows == pytest.approx((2 * 31 / 32 - 2 * 7 / 8) * big / net, rel=1e-6)


def test_the_between_study_width_grows_with_the_steps_share_of_fixed_overhead():
    """Studies differ most in their per-step overhead (framework, host); a query whose step is mostly
    overhead (a small batch on a fast GPU) is as uncertain as that overhead, a long step is not."""
    from spottrain.perf.throughput import FP16_STACK_LOG, _Query

    model = ThroughputModel(folds=0, correction="none").fit(load_shipped(("cmdare", "lambda", "pollux")))
    assert model.spread_log_["study_over"] > model.spread_log_["study"] >= model.spread_log_["study_pooled"]

    def query(batch: int) -> _Query:
        m = load_shipped(("lambda",))[0]
        return _Query.of(dataclasses.replace(m, model="resnet50", batch_size=batch, cluster=m.cluster.parse("1xH100"),
                                             precision="fp16", flops_per_sample=24.6e9, param_count=25557032))

    small, large = query(2), query(512)
    (p_small, p_large) = model.predict([small, large], warn=False)
    one_small, one_large = model.predict_one(small), model.predict_one(large)
    assert one_small.high == pytest.approx(p_small.high, rel=1e-9)  # both paths give the same interval
    assert one_large.high == pytest.approx(p_large.high, rel=1e-9)
    half = lambda p: math.log(p.high / p.throughput)  # noqa: E731
    assert half(p_small) > half(p_large) + 0.02
    # The width comes from the share itself: no share, no overhead term.
    reasons = model._extrapolation(small)
    assert model._half_width(small, reasons, 1.0) > model._half_width(small, reasons, 0.0)
    level = model.spread_log_["study_pooled"]  # a query off the pooled calibration (no study of its own)
    base = model.regime_log_["single"]
    # fp16: at least the spread of software stacks' mixed-precision gain (FP16_STACK_LOG)
    extra = max(math.sqrt(sum(sd * sd for _n, sd in reasons) + level ** 2), max(level, FP16_STACK_LOG))
    expect = math.sqrt(base ** 2 + (1.645 * extra) ** 2)
    assert model._half_width(small, reasons, 0.0) == pytest.approx(expect, rel=1e-9)


def test_the_overhead_share_is_the_steps_elasticity_to_the_overhead():
    """The share that widens an unknown study's interval is d log(step) / d log(overhead): the step's
    sensitivity to a study's per-step overhead, through the p-norm with the GPU's work and the smooth
    max with the input pipeline. Where decoding images on the host sets the pace, the GPU's fixed
    per-step time hardly matters."""
    theta = np.array([an.PRIOR[n][0] for n in an.GLOBALS])
    group = an.GroupInput(count=1, gpn=1, log_p=math.log(989.5), log_p32=math.log(67.0), log_bw=math.log(3350.0),
                          link_gbs=450.0, net_gbs=25.0, effect=0.0, link_effect=0.0, pcie_gbs=64.0)

    def step(pix: float, t_in: float, over: float = 0.0) -> tuple[float, float]:
        theta[an.G_INDEX["log_t_in"]] = math.log(t_in)
        _x, parts, _per = an.predict_one(theta, [group], b=32, flops=24.6e9, grad=4 * 25.6e6, ntens=161, fp16=True,
                                         ps=0, asyn=False, model_effect=0.0, pix=pix, study_over=over)
        return parts["t_w"], parts["over_share"]

    shares = []
    for pix, t_in in ((0.0, 3e-4), (3 * 224 * 224, 3e-4), (3 * 224 * 224, 1.5e-3), (3 * 224 * 224, 5e-3)):
        _t, share = step(pix, t_in)
        eps = 1e-5
        elasticity = (math.log(step(pix, t_in, eps)[0]) - math.log(step(pix, t_in, -eps)[0])) / (2 * eps)
        assert share == pytest.approx(elasticity, abs=1e-4)
        shares.append(share)
    assert shares[0] > 0.1  # batch 32 of ResNet-50 on an H100: much of the step is host time
    assert shares[-1] < 0.01 * shares[0]  # 5 ms of decoding per image: the input pipeline sets the pace


def test_the_network_share_is_the_steps_elasticity_to_the_achieved_rate():
    """With no all-reduce across nodes in the fit, a multi-node query's interval adds the network
    rate's prior spread times d log(step) / d log(TCP cap): the bandwidth part of the all-reduce, as
    much of it as the backward pass does not hide, as much as the cap (not the NIC) limits the rate.
    Not the exposed sync share: a latency-bound sync does not move with the rate, an all-reduce
    mostly hidden behind the backward pass moves the step by (1 - phi) of itself."""
    theta = np.array([an.PRIOR[n][0] for n in an.GLOBALS])

    def step(net_gbps: float, grad: float, b: int, nodes: int, d: float = 0.0, rate: str = "log_ar_cap",
             link_gbs: float = 16.0, two_node: float = 1.0) -> tuple[float, float]:
        th = theta.copy()
        th[an.G_INDEX[rate]] += d
        th[an.G_INDEX["log_two_node"]] = math.log(two_node)
        group = an.GroupInput(count=nodes, gpn=4, log_p=math.log(65.0), log_p32=math.log(8.1),
                              log_bw=math.log(320.0), link_gbs=link_gbs, net_gbs=net_gbps / 8.0, effect=0.0,
                              link_effect=0.0, pcie_gbs=16.0)
        _x, parts, _per = an.predict_one(th, [group], b=b, flops=24.6e9, grad=grad, ntens=161, fp16=False,
                                         ps=0, asyn=False, model_effect=0.0)
        return parts["t_w"], parts["cap_share"]

    def elasticity(case, **kw) -> float:
        eps = 1e-5
        return (math.log(step(*case, d=eps, **kw)[0]) - math.log(step(*case, d=-eps, **kw)[0])) / (2 * eps)

    shares = {}
    for case in ((50.0, 440e6, 8, 2), (50.0, 100e6, 200, 8), (50.0, 6.4e6, 32, 8), (50.0, 100e6, 4, 16)):
        _t, share = step(*case)
        assert share == pytest.approx(-elasticity(case), abs=1e-4), case  # a faster network, a shorter step
        shares[case] = share
    assert shares[(50.0, 440e6, 8, 2)] > 0.3  # BERT-sized gradients over two nodes: the network's step
    # Two nodes at a fraction of the rate of three or more: the bandwidth term is k S / (fraction x rate).
    assert step(*(50.0, 440e6, 8, 2), two_node=0.6)[1] == pytest.approx(
        -elasticity((50.0, 440e6, 8, 2), two_node=0.6), abs=1e-4)
    # RDMA nodes (400 Gbit/s, NVLink inside): no TCP cap; the share is the elasticity to the
    # fraction of the line rate reached.
    rdma = (400.0, 440e6, 8, 2)
    _t, share = step(*rdma, link_gbs=300.0)
    assert elasticity(rdma, link_gbs=300.0) == pytest.approx(0.0, abs=1e-9)
    assert share > 0.1 and share == pytest.approx(-elasticity(rdma, link_gbs=300.0, rate="log_rdma_eff"), abs=1e-4)


def test_the_network_share_of_both_paths_agrees(pollux):
    """The vectorised and the scalar path give a multi-node query the same interval when the fit has
    no row across nodes (the network rate's prior is then part of it)."""
    from spottrain.perf.throughput import _Query

    one_node = ThroughputModel(folds=0, correction="none").fit([m for m in pollux if m.cluster.nodes == 1])
    assert one_node.ar_nodes_ <= 1
    for m in [m for m in pollux if m.cluster.nodes > 1][::97]:
        q = _Query.of(m)
        fast, vec = one_node.predict_one(q), one_node.predict([q], warn=False)[0]
        assert fast.low == pytest.approx(vec.low, rel=1e-9) and fast.high == pytest.approx(vec.high, rel=1e-9)
        assert any("no all-reduce across nodes" in n for n in fast.notes)


def test_one_node_and_several_nodes_overlap_the_backward_pass_by_their_own_fractions():
    """Inside a node NCCL's kernels reduce at the link's rate and take SMs from the backward pass;
    across nodes they mostly wait on the network. One node's all-reduce hides by phi_intra, several
    nodes' by phi, and neither moves the other's step."""
    from spottrain.perf.throughput import default_model

    theta = np.array([an.PRIOR[n][0] for n in an.GLOBALS])

    def sync(nodes: int, phi: float, phi_intra: float) -> tuple[float, float]:
        th = theta.copy()
        th[an.G_INDEX["phi"]], th[an.G_INDEX["phi_intra"]] = phi, phi_intra
        group = an.GroupInput(count=nodes, gpn=4, log_p=math.log(65.0), log_p32=math.log(8.1),
                              log_bw=math.log(320.0), link_gbs=16.0, net_gbs=50.0 / 8.0, effect=0.0,
                              link_effect=0.0, pcie_gbs=16.0)
        _x, parts, _per = an.predict_one(th, [group], b=64, flops=24.6e9, grad=100e6, ntens=161, fp16=False,
                                         ps=0, asyn=False, model_effect=0.0)
        return parts["t_sync"], max(parts["t_intra"], parts["t_inter"])

    exposed, t_ar = sync(1, phi=1.0, phi_intra=0.0)
    assert exposed == pytest.approx(t_ar)  # one node, no overlap: the whole all-reduce waits
    assert sync(1, phi=0.0, phi_intra=0.0) == sync(1, phi=1.0, phi_intra=0.0)
    assert sync(1, phi=0.0, phi_intra=1.0)[0] < 0.5 * t_ar
    assert sync(2, phi=0.5, phi_intra=0.0) == sync(2, phi=0.5, phi_intra=1.0)
    assert sync(2, phi=1.0, phi_intra=0.0)[0] < sync(2, phi=0.0, phi_intra=1.0)[0]
    # The shipped calibration: Lambda's one-node rows hide less than Pollux's multi-node ones.
    fitted = default_model().theta_
    assert 0.0 <= fitted[an.G_INDEX["phi_intra"]] < fitted[an.G_INDEX["phi"]] <= 1.0


def test_groups_of_one_unseen_gpu_widen_the_interval_once(few_nodes_fit, pollux):
    """A placement of 4 + 2 GPUs of a type the fit never saw is one unknown GPU, not two: its
    interval and its notes are those of two nodes of 4 of that GPU."""
    row = next(m for m in pollux if m.cluster.nodes == 2 and m.model == "resnet50")
    uneven, even = (dataclasses.replace(row, cluster=ClusterSpec.parse(c)) for c in ("1xV100:4+1xV100:2", "2xV100:4"))
    for p in (few_nodes_fit.predict([uneven], warn=False)[0], few_nodes_fit.predict_one(_query(uneven))):
        assert sum("GPU V100 not in the fitted data" in n for n in p.notes) == 1, p.notes
        assert len(set(p.notes)) == len(p.notes)
    # Two node shapes beyond the fitted 4 GPUs per node: one reason, not two.
    big = dataclasses.replace(row, cluster=ClusterSpec.parse("1xT4:16+1xT4:12"))
    notes = few_nodes_fit.predict([big], warn=False)[0].notes
    assert sum("GPUs per node" in n for n in notes) == 1 and "16 GPUs per node, fitted up to 4" in notes
    p_uneven, p_even = (few_nodes_fit.predict([m], warn=False)[0] for m in (uneven, even))
    assert math.log(p_uneven.high / p_uneven.throughput) == pytest.approx(math.log(p_even.high / p_even.throughput),
                                                                          rel=1e-9)


def _query(m):
    from spottrain.perf.throughput import _Query

    return _Query.of(m)


def test_a_gpu_missing_from_your_rows_is_another_host_for_overhead_bound_steps():
    """Your H100 machine's rows -> an H200: another GPU type is another machine, whose host sets the
    per-step overhead as another study's would. A step that overhead sets (transformer-base, fp16,
    batch 64) gets a wider interval there than one the GPU's arithmetic sets (VGG-16, FP32, batch
    128); on the H100 you measured, the two are as wide as each other."""
    # Two studies: the prior has a between-study overhead spread (CM-DARE's TF1 hosts vs Lambda's).
    prior = ThroughputModel(folds=0, correction="none").fit(load_shipped(("lambda", "cmdare")))
    assert prior.spread_log_["study_over"] > 0.1
    ours = load_shipped(("hopper_zoo",))
    user = ThroughputModel(prior=prior, folds=5).fit([m for m in ours if m.cluster.groups[0].gpu == "H100"])

    def half(gpu: str, model: str, precision: str, batch: int) -> float:
        m = next(m for m in ours if (m.cluster.groups[0].gpu, m.model, m.precision, m.batch_size)
                 == (gpu, model, precision, batch))
        p = user.predict([m], warn=False)[0]
        return math.log(p.high / p.throughput)

    overhead, arithmetic = ("transformer-base", "fp16", 64), ("vgg16", "fp32", 128)
    assert half("H200", *overhead) > half("H200", *arithmetic) + 0.05
    assert half("H100", *overhead) == pytest.approx(half("H100", *arithmetic), rel=1e-9)


def test_an_unknown_network_rate_widens_the_slow_side_more_than_the_fast_one(pollux):
    """The network rate's prior is carried through the model, not linearised: at its 95th percentile
    the step loses at most the all-reduce it exposes (and the NIC's line rate caps the gain); at its
    5th it exposes more and more. Measured on the Pollux rows a one-node fit predicts across nodes:
    the fast side is narrower and the slow side wider than the linear share x prior sd, and with the
    network reason gone both sides fall back to the rest of the interval."""
    from spottrain.perf.throughput import Z90, _Query

    one_node = ThroughputModel(folds=0, correction="none").fit([m for m in pollux if m.cluster.nodes == 1])
    rows = [m for m in pollux if m.cluster.nodes == 2 and m.model == "resnet50"]
    preds = one_node.predict(rows, warn=False)
    sd = an.PRIOR["log_ar_cap"][1]
    net_bound = 0
    for m, p in zip(rows, preds):
        q = _Query.of(m)
        below, above = math.log(p.throughput / p.low), math.log(p.high / p.throughput)
        assert below >= above - 1e-12
        x0, parts, _ = one_node._scalar(q, one_node.theta_)
        net = one_node._network_note(q, parts["cap_share"])
        reasons = one_node._extrapolation(q, parts["cap_share"], parts["over_share"], net)
        assert net is not None and net in [n for n, _sd in reasons]
        core = one_node._half_width(q, [r for r in reasons if r[0] != net], parts["over_share"])
        linear = Z90 * sd * parts["cap_share"]
        up = math.log(one_node._scalar(q, one_node._net_theta(Z90))[0] / x0)
        down = math.log(x0 / one_node._scalar(q, one_node._net_theta(-Z90))[0])
        assert below == pytest.approx(math.hypot(core, down), rel=1e-9)
        assert above == pytest.approx(math.hypot(core, up), rel=1e-9)
        assert up <= linear + 1e-9 and down >= linear - 1e-9
        if linear > 0.3:  # the network's step: the two sides differ by a lot
            net_bound += 1
            assert down - up > 0.2, (m.cluster, m.batch_size, up, down, linear)
    assert net_bound >= 3


def test_a_cloud_without_all_reduce_rows_gets_the_network_prior_width(few_nodes_fit, pollux):
    """The achieved rate across nodes is fitted on Pollux's AWS rows (AWS caps one TCP flow at
    5 Gbit/s): on GCP or Azure it is as unknown as its prior, and the interval says so; on AWS,
    or where the cloud is not said, it stays the fitted one."""
    from spottrain.perf.throughput import _Query

    assert few_nodes_fit.ar_clouds_ == {"aws"}
    row = next(m for m in pollux if m.cluster.nodes == 4 and m.model == "bert_base_squad" and m.batch_size == 4)
    preds = {c: few_nodes_fit.predict([dataclasses.replace(row, cloud=c)], warn=False)[0] for c in ("aws", None, "gcp")}
    assert preds["gcp"].throughput == pytest.approx(preds["aws"].throughput)  # the same estimate, less sure
    assert preds["aws"].notes == preds[None].notes and not any("measured on aws only" in n for n in preds["aws"].notes)
    assert any("measured on aws only, not on gcp" in n for n in preds["gcp"].notes)
    width = {c: math.log(p.high / p.low) for c, p in preds.items()}
    assert width["gcp"] > width["aws"] + 0.3 and width[None] == pytest.approx(width["aws"])
    fast = few_nodes_fit.predict_one(_Query.of(dataclasses.replace(row, cloud="gcp")))
    assert fast.low == pytest.approx(preds["gcp"].low, rel=1e-9) and fast.notes == preds["gcp"].notes
    # An instance type says its cloud (a2-highgpu-4g: GCP's machine type of 4 A100s).
    gcp_nodes = dataclasses.replace(row, cloud=None, cluster=ClusterSpec.parse("4xa2-highgpu-4g"), network_gbps=50.0)
    assert any("not on gcp" in n for n in few_nodes_fit.predict([gcp_nodes], warn=False)[0].notes)


def test_your_own_rows_across_nodes_of_an_unsaid_cloud_are_your_cloud(few_nodes_fit, pollux):
    """Your multi-node rows without a cloud column measured your network, wherever it is: a fit on
    them (over the AWS-calibrated prior) widens no cloud's interval."""
    user_rows = [dataclasses.replace(m, cloud=None) for m in pollux if m.model == "resnet50" and m.cluster.nodes <= 3]
    user = ThroughputModel(prior=few_nodes_fit, folds=0).fit(user_rows)
    assert "" in user.ar_clouds_
    q = dataclasses.replace(user_rows[-1], cloud="azure")
    assert not any("not on azure" in n for n in user.predict([q], warn=False)[0].notes)


def test_a_model_saved_before_clouds_were_recorded_loads_and_says_nothing_of_clouds(few_nodes_fit, pollux):
    state = few_nodes_fit.to_dict()
    assert state["ar_clouds_"] == ["aws"]
    del state["ar_clouds_"]
    old = ThroughputModel.from_dict(state)
    row = next(m for m in pollux if m.cluster.nodes == 4)
    assert not any("not on gcp" in n for n in old.predict([dataclasses.replace(row, cloud="gcp")], warn=False)[0].notes)


def test_predict_cloud_flag(capsys, tmp_path):
    import json

    code, out, _ = run(capsys, "predict", "--model", "bert-base", "--batch-size", "8", "--cluster", "4xT4:4",
                       "--network-gbps", "50", "--cloud", "Azure", "--json", "--no-from-store")
    assert code in (0, None)
    assert any("not on azure" in n for n in json.loads(out)["notes"])
    code, _, err = run(capsys, "predict", "--model", "bert-base", "--cluster", "4xT4:4", "--cloud", "gpc")
    assert code == 2 and "--cloud" in err and "did you mean gcp" in err and "Traceback" not in err
    q = tmp_path / "q.csv"
    q.write_text(HEADER + ",cloud\nbert-base,8,4xT4:4,0,sync,,50,,,gcp\n")
    code, _, err = run(capsys, "predict", "--queries", str(q), "--cloud", "aws")
    assert code == 2 and "--queries and --cloud contradict" in err
    code, out, _ = run(capsys, "predict", "--queries", str(q), "--json", "--no-from-store")
    assert code in (0, None) and "not on gcp" in out


def _rdma_query(m, nodes: int):
    """Pollux's one-GPU BERT row moved onto ``nodes`` one-H100 nodes of 400 Gbit/s (RDMA: EFA,
    InfiniBand): a fast GPU, nothing but the network between the GPUs, the network the step."""
    return dataclasses.replace(m, cluster=ClusterSpec.parse(f"{nodes}xH100"), network_gbps=400.0, cloud=None,
                               throughput=None, step_time_s=None, sync_time_s=None)


def test_rdma_nodes_reach_part_of_their_line_rate_and_say_it_is_a_prior(few_nodes_fit, pollux):
    """No shipped row measures an all-reduce over RDMA: its rate is the prior's fraction of the line
    rate (about half, as published nccl-tests runs on p4dn and p5 reach), the interval carries that
    prior on both sides, the slow side wider, and both paths agree."""
    from spottrain.perf.throughput import _Query

    assert not few_nodes_fit.ar_rdma_
    assert float(an.achieved_gbps(400.0, 0.0)) == pytest.approx(400.0 * math.exp(an.PRIOR["log_rdma_eff"][0]))
    row = next(m for m in pollux if m.model == "bert_base_squad" and m.cluster.nodes == 1 and m.batch_size == 4)
    q = _rdma_query(row, 2)
    p = few_nodes_fit.predict([q], warn=False)[0]
    assert any("no all-reduce over RDMA" in n for n in p.notes)
    assert math.log(p.throughput / p.low) > math.log(p.high / p.throughput) + 0.05
    fast = few_nodes_fit.predict_one(_Query.of(q))
    assert fast.low == pytest.approx(p.low, rel=1e-9) and fast.high == pytest.approx(p.high, rel=1e-9)
    # One node has no all-reduce across nodes: nothing to say about the network.
    one = few_nodes_fit.predict([_rdma_query(row, 1)], warn=False)[0]
    assert not any("RDMA" in n for n in one.notes)


def test_rows_across_rdma_nodes_fit_their_fraction_of_the_line_rate(few_nodes_fit, pollux):
    """A user's rows across RDMA nodes calibrate the fraction. The rows here are synthetic: predicted
    by the calibration with the fraction set to 0.3, then fitted over the calibration (prior 0.55)."""
    truth = ThroughputModel.from_dict(few_nodes_fit.to_dict())
    truth.theta_[an.G_INDEX["log_rdma_eff"]] = math.log(0.3)
    base = [m for m in pollux if m.model == "bert_base_squad" and m.cluster.nodes == 1 and m.cluster.total_gpus == 1]
    queries = [_rdma_query(m, n) for m in base for n in (2, 3, 4)]
    synthetic_rows = [dataclasses.replace(q, throughput=p.throughput)
                      for q, p in zip(queries, truth.predict(queries, warn=False))]
    user = ThroughputModel(prior=few_nodes_fit, folds=0, correction="none").fit(synthetic_rows)
    assert user.ar_rdma_
    fitted = math.exp(user.theta_[an.G_INDEX["log_rdma_eff"]])
    assert 0.2 < fitted < 0.4, fitted
    p = user.predict([queries[0]], warn=False)[0]
    assert not any("RDMA" in n for n in p.notes)


def test_an_rdma_ring_step_costs_microseconds_not_a_tcp_round_trip():
    """NCF's one 6 MB bucket over 8 nodes: 14 ring steps between nodes. Over TCP each pays the
    fitted socket latency (~0.4 ms); over RDMA NCCL's ~20 us. The sync time says so."""
    from spottrain.perf import Workload, predict_throughput

    w = Workload(model="ncf-custom", batch_size=512, flops_per_sample=2.6e5, param_count=1_602_657,
                 gradient_bytes=4 * 1_602_657, tensor_count=12)
    tcp = predict_throughput(w, "8xT4", network_gbps=100.0)
    rdma = predict_throughput(w, "8xT4", network_gbps=400.0)
    assert rdma.sync_time_s < 1e-3 < tcp.sync_time_s


def _two_node_rate(model) -> float:
    return math.exp(model.theta_[an.G_INDEX["log_two_node"]])


def test_two_nodes_reach_a_fitted_fraction_of_the_rate_of_three_or_more(few_nodes_fit, pollux, monkeypatch):
    """Pollux's two-node placements sync about twice as slowly as three or four nodes of the same
    GPUs. The TCP all-reduce's rates (two nodes', the TCP rate, the links' spread) are fitted last,
    together: every other parameter is what the fit without that stage gives, so only all-reduce rows
    across nodes move, and the two-node ones move to the data."""
    from spottrain.perf import throughput as tp

    assert 0.4 < _two_node_rate(few_nodes_fit) < 0.9
    monkeypatch.setattr(tp, "_fit_network", lambda resid, z, n, mean, sd: z)
    train = [m for m in pollux if m.cluster.nodes <= 4 and m.model != "ncf-neumf"]
    without = ThroughputModel(folds=0, correction="none").fit(train)
    ks = [an.G_INDEX[n] for n in tp.NETWORK_STAGE]
    assert without.theta_[an.G_INDEX["log_two_node"]] == pytest.approx(0.0, abs=0.01)  # held at the prior meanwhile
    assert without.theta_[an.G_INDEX["link_spread"]] == pytest.approx(an.PRIOR["link_spread"][0], abs=0.01)
    assert np.delete(few_nodes_fit.theta_, ks) == pytest.approx(np.delete(without.theta_, ks), rel=1e-9, abs=1e-12)
    assert few_nodes_fit.model_effects_ == without.model_effects_
    two = [m for m in train if m.cluster.nodes == 2]
    y = np.array([m.throughput for m in two])

    def mape(model) -> float:
        return float(np.mean(np.abs(np.array([p.throughput for p in model.predict(two, warn=False)]) / y - 1)))

    assert mape(few_nodes_fit) < 0.6 * mape(without)
    one_node = [m for m in train if m.cluster.nodes == 1]
    for a, b in zip(few_nodes_fit.predict(one_node, warn=False), without.predict(one_node, warn=False)):
        assert a.throughput == pytest.approx(b.throughput, rel=1e-9)


def test_a_ring_runs_at_its_slowest_links_pace():
    """A ring of N TCP nodes crosses N links and waits for the slowest: with the links' rates spread
    by sd s (log), its all-reduce takes exp(s z_N) longer than at the typical link's rate, z_N the
    expected largest of N standard normals. RDMA fabrics are not slowed this way."""
    theta = np.array([an.PRIOR[n][0] for n in an.GLOBALS])
    k = an.G_INDEX["link_spread"]

    def t_inter(nodes: int, spread: float, net_gbps: float = 50.0) -> float:
        th = theta.copy()
        th[k] = spread
        group = an.GroupInput(count=nodes, gpn=4, log_p=math.log(65.0), log_p32=math.log(8.1), log_bw=math.log(320.0),
                              link_gbs=16.0, net_gbs=net_gbps / 8.0, effect=0.0, link_effect=0.0, pcie_gbs=16.0)
        return an.predict_one(th, [group], b=32, flops=1e6, grad=4e8, ntens=200, fp16=False, ps=0, asyn=False,
                              model_effect=0.0)[1]["t_inter"]

    for n in (2, 4, 16):
        assert t_inter(n, 0.4) / t_inter(n, 0.0) == pytest.approx(math.exp(0.4 * float(an.slowest_link(n))), rel=1e-9)
    assert 0.54 < an.slowest_link(2) < 0.62 and 1.74 < an.slowest_link(16) < 1.80  # exact: 0.564, 1.766
    assert an.slowest_link(1) == 0.0
    assert t_inter(16, 0.4, net_gbps=400.0) == pytest.approx(t_inter(16, 0.0, net_gbps=400.0), rel=1e-12)


def test_the_links_spread_carries_a_fit_on_2_4_nodes_to_16(few_nodes_fit, pollux, monkeypatch):
    """Fitted on Pollux's rows of 2-4 nodes, the spread says how much slower 6-16 nodes sync than the
    ring's bytes and steps alone: held at 0 (every link alike), those rows come out too fast, and
    the more so the larger the ring."""
    spread = few_nodes_fit.theta_[an.G_INDEX["link_spread"]]
    assert 0.1 < spread < 0.8, spread
    monkeypatch.setitem(an.PRIOR, "link_spread", (0.0, 1e-6))
    train = [m for m in pollux if m.cluster.nodes <= 4 and m.model != "ncf-neumf"]
    alike = ThroughputModel(folds=0, correction="none").fit(train)
    assert alike.theta_[an.G_INDEX["link_spread"]] == pytest.approx(0.0, abs=1e-5)
    big = [m for m in pollux if m.cluster.nodes >= 12 and m.model != "ncf-neumf"]
    y = np.log([m.throughput for m in big])

    def bias(model) -> float:
        return float(np.mean(np.log([p.throughput for p in model.predict(big, warn=False)]) - y))

    assert bias(alike) > 0.1  # predicted > 10 % too fast
    assert abs(bias(few_nodes_fit)) < 0.6 * bias(alike)


def test_the_two_node_rate_is_in_both_paths(few_nodes_fit, pollux):
    """(Its share of the network's elasticity: test_the_network_share_is_the_steps_elasticity_to_the_achieved_rate.)"""
    from spottrain.perf.throughput import _Query

    rows = [m for m in pollux if m.cluster.nodes == 2][::11]
    for m, v in zip(rows, few_nodes_fit.predict(rows, warn=False)):
        one = few_nodes_fit.predict_one(_Query.of(m))
        assert one.throughput == pytest.approx(v.throughput, rel=1e-9)
        assert one.sync_time_s == pytest.approx(v.sync_time_s, rel=1e-9)


def test_your_one_node_rows_keep_the_priors_two_node_rate(few_nodes_fit, pollux):
    user_rows = [m for m in pollux if m.model == "resnet50" and m.cluster.nodes == 1]
    user = ThroughputModel(prior=few_nodes_fit, folds=0).fit(user_rows)
    assert _two_node_rate(user) == pytest.approx(_two_node_rate(few_nodes_fit), rel=1e-3)


def test_a_model_saved_before_the_two_node_rate_loads_and_predicts_as_it_did(few_nodes_fit, pollux):
    """A model saved without the two-node rate and the links' spread (an older spottrain), or without
    the spread alone, loads with them where they change nothing (a rate of 1, every link alike),
    which is how it predicted; a model of another analytical form is still refused."""
    from spottrain.errors import InputError

    row = next(m for m in pollux if m.cluster.nodes == 2)
    for first in ("log_two_node", "link_spread"):
        k = an.G_INDEX[first]
        state = few_nodes_fit.to_dict()
        state["globals"] = state["globals"][:k]
        state["theta_"] = state["theta_"][:k]
        old = ThroughputModel.from_dict(state)
        as_before = ThroughputModel.from_dict(few_nodes_fit.to_dict())
        for name in an.GLOBALS[k:]:
            assert old.theta_[an.G_INDEX[name]] == an.NEUTRAL[name]
            as_before.theta_[an.G_INDEX[name]] = an.NEUTRAL[name]
        assert old.predict([row], warn=False)[0].throughput == pytest.approx(
            as_before.predict([row], warn=False)[0].throughput, rel=1e-12)
        with pytest.raises(InputError, match="refit"):
            ThroughputModel.from_dict({**state, "globals": state["globals"][:-3]})


def test_a_larger_ring_gets_the_width_its_size_class_measured():
    """Rows across nodes get a width per ring size where the fit holds 10+ rows of that size: in
    Pollux's rows the pace of 9-16 nodes varies more from run to run than that of 3-4 nodes, so a
    16-node query's interval is wider than a 4-node one's, and a size the fit never saw falls back
    to the width of every row across nodes."""
    from spottrain.perf.throughput import _Query, _width_keys

    model = ThroughputModel(folds=0, correction="none").fit(load_shipped(("pollux",)))
    widths = model.regime_log_
    assert widths["inter:9-"] > widths["inter:3-"]
    base = load_shipped(("pollux",))[0]

    def half(nodes: int) -> float:
        m = dataclasses.replace(base, cluster=base.cluster.parse(f"{nodes}xg4dn.12xlarge"))
        (p,) = model.predict([m], warn=False)
        return math.log(p.high / p.throughput)

    assert half(16) > half(4)
    q = _Query.of(dataclasses.replace(base, cluster=base.cluster.parse("16xg4dn.12xlarge")))
    assert _width_keys(q)[0] == "inter:9-" and model._half_width(q, [], 0.0) >= widths["inter:9-"]
    # a fit with no ring of 9+ nodes has no such class: those queries take the regime's width
    small = ThroughputModel(folds=0, correction="none").fit(
        [m for m in load_shipped(("pollux",)) if m.cluster.nodes <= 4])
    assert "inter:9-" not in small.regime_log_ and small._half_width(q, [], 0.0) >= small.regime_log_["inter"]
