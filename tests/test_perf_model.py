"""Throughput model internals: PS queueing, fast path, saved default fit, instance types, mixed clusters."""

import itertools
import math
from dataclasses import replace
import time

import numpy as np
import pytest

from spottrain.perf import Workload, default_model, load_shipped, predict_throughput, read_measurements
from spottrain.perf import analytical as an
from spottrain.perf.throughput import ThroughputModel, _Query, fit_default_model
from spottrain.types import ClusterSpec


def test_mva_one_worker_and_saturation():
    X, R = an.mva(np.array([0.1]), np.array([0.02]), np.array([1.0]))
    assert X[0] == pytest.approx(1 / 0.12) and R[0] == pytest.approx(0.02)
    xs = [an.mva_scalar(0.1, 0.02, n)[0] for n in (1, 2, 4, 8, 16, 64, 1000)]
    assert all(b > a for a, b in zip(xs, xs[1:-1]))  # more workers, more updates
    assert xs[-2] == pytest.approx(1 / 0.02, rel=1e-3) and xs[-1] <= 1 / 0.02 + 1e-9  # capped by the servers
    assert xs[2] < 4 / 0.12  # queueing already costs something at 4 workers
    for n in (1, 3, 9, 40):  # vectorised and scalar agree
        assert an.mva(np.array([0.3]), np.array([0.05]), np.array([float(n)]))[0][0] == pytest.approx(
            an.mva_scalar(0.3, 0.05, n)[0])



def test_mva_deterministic_service_has_a_sharper_knee():
    Z, D = 0.2, 0.0225  # capacity 1/D = 44.4 updates/s, reached by ~10 workers without queueing
    for n in (1, 2, 3, 5, 8, 10, 12, 20, 64):
        x1 = an.mva_scalar(Z, D, n, 1.0)[0]
        assert x1 == pytest.approx(an.mva_scalar(Z, D, n)[0])  # q = 1 is exact MVA (exponential service)
        prev = 0.0
        for q in (1.0, 0.5, 0.2, 0.05):
            x, r = an.mva_scalar(Z, D, n, q)
            assert x >= prev - 1e-12  # less residual service, less queueing
            assert x <= min(n / (Z + D), 1.0 / D) * (1 + 1e-12)  # never past the asymptotic bounds
            assert r >= D * (1 - 1e-12) and x == pytest.approx(n / (Z + r))
            assert an.mva(np.array([Z]), np.array([D]), np.array([float(n)]), q)[0][0] == pytest.approx(x)
            prev = x
    # two workers, deterministic service: the second waits half a service when it finds the server busy
    x, r = an.mva_scalar(Z, D, 2, 0.5)
    assert r == pytest.approx(D * (1 + 0.5 * D / (Z + D)))

def test_fast_path_equals_vectorised_predict():
    m = default_model()
    w = Workload.from_zoo("resnet50", 64)
    cases = itertools.product(["1xV100", "4xp3.2xlarge", "1xV100+2xK80", "2xA100:8", "8xK80", "3xT4:4+2xV100", "1xV100:8",
                               "2xH100-PCIe:4+1xRTX4090:2"],
                              [0, 1, 3], ["sync", "async"], ["fp32", "fp16"], [None, 160], ["host", "device"])
    for cluster, ps, sync, prec, tensors, source in cases:
        if ps == 0 and sync == "async":
            continue
        q = _Query(model="resnet50", batch_size=64, cluster=ClusterSpec.parse(cluster), ps=ps, sync=sync,
                   flops=w.flops_per_sample, grad=w.gradient_bytes, precision=prec, tensors=tensors, input=source)
        fast, vec = m.predict_one(q), m.predict([q], warn=False)[0]
        assert fast.throughput == pytest.approx(vec.throughput, rel=1e-9)
        assert fast.bottleneck == vec.bottleneck
        assert sum(g["samples_per_s"] for g in fast.per_group) == pytest.approx(fast.throughput, rel=1e-9)


def test_shipped_default_parameters_equal_a_fresh_fit():
    shipped, fresh = default_model(), fit_default_model()
    assert shipped.n_rows_ == fresh.n_rows_
    # A few globals sit on flat directions of the fit (the fraction of peak, the intra-node link's
    # efficiency and overlap, the fp16 all-reduce payload): with another CPU's floating-point
    # rounding the solver stops up to ~1e-3 from the shipped values, every prediction within 2e-4.
    # The predictions and their intervals are what must reproduce.
    np.testing.assert_allclose(shipped.theta_, fresh.theta_, rtol=1e-4, atol=3e-3)
    rows = load_shipped()
    got = [(p.throughput, p.high / p.low) for p in shipped.predict(rows, warn=False)]
    want = [(p.throughput, p.high / p.low) for p in fresh.predict(rows, warn=False)]
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-3)


def test_grouped_jacobian_equals_one_evaluation_per_parameter(monkeypatch):
    # Two studies (study levels and overheads), sync times across nodes, several GPUs per node (link
    # effects), fp16 rows (precision effects) and GPU x model effects: every kind of parameter whose
    # residual entries the fit's grouped Jacobian reads. An entry missing from a support reads as 0.
    from spottrain.perf import throughput

    rows = load_shipped(("pollux",))[::10] + load_shipped(("lambda",))[::2]
    assert any(m.sync_time_s is not None for m in rows) and any(m.precision == "fp16" for m in rows)
    seen: dict = {}
    grouped = throughput._grouped_jacobian

    def spy(fun, supports):
        def recorded(z):
            seen["x"] = z.copy()
            return fun(z)
        seen["fun"], seen["supports"] = fun, supports
        return grouped(recorded, supports)

    monkeypatch.setattr(throughput, "_grouped_jacobian", spy)
    model = ThroughputModel().fit(rows)
    assert model.link_effects_ and len(model.study_effects_) == 2 and model.inter_effects_
    fun, supports = seen["fun"], seen["supports"]
    _, jac = grouped(fun, supports)
    rng = np.random.default_rng(0)
    for x in (seen["x"], seen["x"] + rng.normal(0.0, 0.05, len(supports))):
        f0 = fun(x)
        dense = np.empty((len(f0), len(x)))
        for k in range(len(x)):
            h = np.finfo(float).eps ** 0.5 * (1.0 if x[k] >= 0 else -1.0) * max(1.0, abs(x[k]))
            xx = x.copy()
            xx[k] += h
            dense[:, k] = (fun(xx) - f0) / (xx[k] - x[k])
        np.testing.assert_array_equal(jac(x), dense)


def test_uncached_prediction_is_fast():
    w = Workload.from_zoo("resnet50", 64)

    def per_call(gbps: float) -> float:
        t = time.perf_counter()
        n = 0
        for i in range(1, 65):
            for ps in (0, 1, 2):
                predict_throughput(w, f"{i}xV100", ps=ps, sync="sync", network_gbps=gbps)  # unseen keys: no memo hit
                n += 1
        return (time.perf_counter() - t) / n

    # the first sweep pays every path's one-time costs (lazy imports, the parameter servers' tables),
    # which a worker of the parallel suite may not have paid yet; the later sweeps' keys are unseen too
    per_call(9.5)
    assert min(per_call(9.6), per_call(9.7)) < 300e-6  # ~50 us here; loose for slow CI machines


def test_instance_types_use_catalog_gpu_count_and_network():
    from spottrain.catalog import load_catalog

    w = Workload.from_zoo("resnet50", 64)
    offer = load_catalog().instance("p3.2xlarge")[0]
    by_instance = predict_throughput(w, "4xp3.2xlarge", ps=1, sync="async")
    by_gpu = predict_throughput(w, f"4x{offer.gpu}", ps=1, sync="async", network_gbps=offer.network_gbps)
    assert by_instance.throughput == pytest.approx(by_gpu.throughput)
    big = load_catalog().instance("p3.8xlarge")[0]
    p = predict_throughput(w, "2xp3.8xlarge")
    assert p.per_group[0]["gpus_per_node"] == big.gpu_count
    assert p.throughput == pytest.approx(
        predict_throughput(w, f"2xV100:{big.gpu_count}", network_gbps=big.network_gbps).throughput)
    # a slower network makes the PS-async cluster slower, never faster
    assert predict_throughput(w, "4xV100", ps=1, sync="async", network_gbps=1.0).throughput < by_gpu.throughput


def test_heterogeneous_clusters_behave():
    w = Workload.from_zoo("resnet50", 64)
    one = {g: predict_throughput(w, f"1x{g}", ps=1, sync="async").throughput for g in ("V100", "K80")}
    asyn = predict_throughput(w, "1xV100+2xK80", ps=1, sync="async")
    sync = predict_throughput(w, "1xV100+2xK80", ps=1, sync="sync")
    v100, k80 = asyn.per_group
    assert v100["samples_per_s"] > k80["samples_per_s"] / 2  # a V100 node outruns a K80 node
    assert max(one.values()) < asyn.throughput <= one["V100"] + 2 * one["K80"] + 1e-9  # helps, sublinear
    assert sync.throughput < asyn.throughput  # sync waits for the K80s
    assert sync.throughput <= 3 * predict_throughput(w, "1xK80", ps=1, sync="sync").throughput + 1e-9
    # order of the groups does not matter
    assert predict_throughput(w, "2xK80+1xV100", ps=1, sync="async").throughput == pytest.approx(asyn.throughput)


def test_more_servers_relieve_a_saturated_ps():
    w = Workload(model="x", batch_size=32, flops_per_sample=1e8, param_count=5_000_000, gradient_bytes=2e7,
                 tensor_count=300)
    one, two = (predict_throughput(w, "16xV100", ps=k, sync="async") for k in (1, 2))
    assert one.bottleneck == "ps" and two.throughput > one.throughput


def test_tensor_count_column_roundtrip(tmp_path):
    from spottrain.perf import write_measurements

    src = tmp_path / "m.csv"
    src.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count,tensor_count\n"
                   "a,32,2xV100,1,async,100,1e9,1000000,57\nb,32,2xV100,1,async,100,1e9,1000000,\n")
    rows = read_measurements(src)
    assert rows[0].tensor_count == 57 and rows[1].tensor_count is None
    write_measurements(rows, tmp_path / "out.csv")
    again = read_measurements(tmp_path / "out.csv")
    assert [r.tensor_count for r in again] == [57, None]
    bad = tmp_path / "bad.csv"
    bad.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count,tensor_count\n"
                   "a,32,2xV100,1,async,100,1e9,1000000,-3\n")
    with pytest.raises(Exception, match="line 2.*tensor_count"):
        read_measurements(bad)


def test_unseen_model_from_cmdare_uses_tensor_count_structure():
    # Leave ResNet-32 out entirely; the 1-PS P100 series is predicted from other models' rows.
    cm = load_shipped(("cmdare",))
    test = [m for m in cm if m.model == "t2t-res32" and m.ps == 1]
    model = ThroughputModel(folds=0, correction="none").fit([m for m in cm if m.model != "t2t-res32"])
    pred = np.array([p.throughput for p in model.predict(test, warn=False)])
    y = np.array([m.throughput for m in test])
    assert float(np.mean(np.abs(pred - y) / y)) < 0.15


def test_mixed_precision_effect_is_per_model_and_fp16_only():
    lam = load_shipped(("lambda",))
    m = ThroughputModel(folds=0, correction="none").fit(lam)
    prec_keys = {k for k in m.model_effects_ if "|" in k}
    assert prec_keys == {f"{name}|fp16" for name in {r.model for r in lam if r.precision == "fp16"}}
    assert all("|" not in k for k in m.fitted_models_)
    assert all(abs(m.model_effects_[k]) < 0.5 for k in prec_keys)  # a tight prior: a correction, not a model
    # A model measured only in fp32 gets no fp16 effect: its fp16 rows keep the model effect alone.
    fp32_only = ThroughputModel(folds=0, correction="none").fit([r for r in lam if r.precision == "fp32"])
    assert not any("|" in k for k in fp32_only.model_effects_)
    # The effect moves fp16 predictions only, through both the vectorised and the scalar path.
    w = Workload.from_zoo("resnet50", 256)
    qs = {p: _Query(model="resnet50", batch_size=256, cluster=ClusterSpec.parse("1xA100"), ps=0, sync="sync",
                    flops=w.flops_per_sample, grad=w.gradient_bytes, precision=p) for p in ("fp32", "fp16")}
    before = {p: m.predict([q], warn=False)[0].throughput for p, q in qs.items()}
    m.model_effects_["resnet50|fp16"] += 0.2
    after = {p: m.predict([q], warn=False)[0].throughput for p, q in qs.items()}
    assert after["fp32"] == pytest.approx(before["fp32"], rel=1e-12)
    assert after["fp16"] > before["fp16"] * 1.1
    assert m.predict_one(qs["fp16"]).throughput == pytest.approx(after["fp16"], rel=1e-9)
    # Saved and restored with the other effects.
    assert ThroughputModel.from_dict(m.to_dict()).model_effects_["resnet50|fp16"] == pytest.approx(
        m.model_effects_["resnet50|fp16"])


def test_dispatch_hides_under_gpu_work_and_device_input_has_no_host_cap():
    """A step is at least its longest part and at most the sum of its parts (p-norm, 1 < p), and
    batches already on the GPU are never slower than ones a host pipeline decodes."""
    m = default_model()
    p = an.overlap_p(m.theta_)
    assert 1.0 < p < 50.0
    for ntens, work in [(161, 0.004), (161, 0.3), (32, 0.05), (300, 1e-4)]:
        t0, t_disp = an.fixed_times(m.theta_, ntens)
        t_step = t0 + (t_disp ** p + work ** p) ** (1 / p)
        assert t0 + max(work, t_disp) <= t_step <= t0 + work + t_disp
        assert an.work_time(t_step, m.theta_, ntens) == pytest.approx(work, rel=1e-6)
    w = Workload.from_zoo("resnet50", 256)
    rates = {}
    for source in ("host", "device"):
        q = _Query(model="resnet50", batch_size=256, cluster=ClusterSpec.parse("1xH200"), ps=0, sync="sync",
                   flops=w.flops_per_sample, grad=w.gradient_bytes, precision="fp16", input=source)
        rates[source] = m.predict_one(q).throughput
    assert rates["device"] >= rates["host"]


def test_unseen_gpu_takes_its_architectures_fitted_effect():
    """A GPU no row measured inherits the mean fitted effect of its architecture's measured GPUs on
    the same precision path (an H100's slow fp16 path says something of an H200's), nothing across
    architectures."""
    rows = [m for m in load_shipped(("hopper_zoo",)) if m.cluster.groups[0].gpu == "H100"]
    m = ThroughputModel(folds=0, correction="none").fit(rows)
    fitted = m.gpu_effects_["H100/fp16"]
    assert abs(fitted) > 0.01
    assert m._gpu_effect("H200", "fp16") == pytest.approx(fitted)
    assert m._gpu_effect("GH200", "fp32") == pytest.approx(m.gpu_effects_["H100/fp32"])
    assert m._gpu_effect("A100", "fp16") == 0.0  # Ampere: no fitted GPU of its architecture
    w = Workload.from_zoo("resnet50", 128)
    q = _Query(model="resnet50", batch_size=128, cluster=ClusterSpec.parse("1xH200"), ps=0, sync="sync",
               flops=w.flops_per_sample, grad=w.gradient_bytes, precision="fp16", input="device")
    assert m.predict_one(q).throughput == pytest.approx(m.predict([q], warn=False)[0].throughput, rel=1e-9)


def test_unseen_gpu_takes_its_dies_fitted_effect_before_its_architectures():
    """An A100 (40 GB) no row measured borrows how the fitted boards of its GA100 die fall from their
    datasheets, not the mean over every Ampere board (the GA102 cards too); an A10G borrows its GA102
    siblings'; a GPU whose die no row measured falls back to its architecture, and the warning names
    the boards it borrowed from."""
    rows = [m for m in load_shipped(("lambda",)) if m.cluster.total_gpus == 1
            and m.cluster.groups[0].gpu in ("A100-80GB", "A100-PCIe", "RTX3090", "A10", "RTX4090")]
    m = ThroughputModel(folds=0, correction="none").fit(rows)
    eff = m.gpu_effects_
    ga100 = np.mean([eff["A100-80GB/fp16"], eff["A100-PCIe/fp16"]])
    ga102 = np.mean([eff["RTX3090/fp16"], eff["A10/fp16"]])
    assert abs(ga100 - ga102) > 0.02  # the two dies do fall differently from their datasheets
    assert m._gpu_effect("A100", "fp16") == pytest.approx(ga100)
    assert m._gpu_effect("A30", "fp16") == pytest.approx(ga100)
    assert m._gpu_effect("A10G", "fp16") == pytest.approx(ga102)
    assert m._gpu_effect("L40S", "fp16") == pytest.approx(eff["RTX4090/fp16"])  # AD102, as the RTX 4090
    assert m._gpu_effect("L4", "fp16") == pytest.approx(eff["RTX4090/fp16"])  # AD104: no die fitted, Ada
    # ... and the die's (GPU, model) effects: how a model's kernels suit the die, not the architecture.
    pairs = [m.inter_effects_[f"{g}/fp16|bert_large_squad"] for g in ("A100-80GB", "A100-PCIe")]
    assert abs(np.mean(pairs)) > 0.005
    assert m._inter_effect("A100", "fp16", "bert_large_squad") == pytest.approx(np.mean(pairs))
    assert m._inter_effect("A100-80GB", "fp16", "bert_large_squad") == pytest.approx(pairs[0])
    assert m._inter_effect("L4", "fp16", "bert_large_squad") == 0.0  # borrowed by die only
    assert m._inter_effect("A100", "fp16", "no-such-model") == 0.0
    row = next(r for r in rows if r.model == "bert_large_squad" and r.precision == "fp16")
    bq = replace(_Query.of(row), cluster=ClusterSpec.parse("1xA100"))
    with_pairs = m.predict([bq], warn=False)[0].throughput
    assert m.predict_one(bq).throughput == pytest.approx(with_pairs, rel=1e-9)
    kept = m.inter_effects_
    m.inter_effects_ = {k: v for k, v in kept.items() if not k.endswith("/fp16|bert_large_squad")}
    m.__dict__.pop("_arch_effect_cache", None)  # what unseen boards borrowed, derived from the effects
    without = m.predict([bq], warn=False)[0].throughput
    m.inter_effects_ = kept
    m.__dict__.pop("_arch_effect_cache", None)
    assert abs(math.log(with_pairs / without)) > 0.002  # the borrowed pair effect moved the prediction
    w = Workload.from_zoo("resnet50", 128)
    q = _Query(model="resnet50", batch_size=128, cluster=ClusterSpec.parse("1xA100"), ps=0, sync="sync",
               flops=w.flops_per_sample, grad=w.gradient_bytes, precision="fp16", input="host")
    pred = m.predict([q], warn=False)[0]
    assert m.predict_one(q).throughput == pytest.approx(pred.throughput, rel=1e-9)
    assert any("A100-80GB, A100-PCIe of its GA100 die" in n for n in pred.notes)
    # Its interval adds the spread of boards about their die's mean (at least 0.1), not the spread of
    # every GPU's effect; a board of a die no row measured (the L4's AD104) keeps the latter.
    assert m.spread_log_["die"] == pytest.approx(0.1) and m.spread_log_["gpu"] > m.spread_log_["die"]
    wide = m.spread_log_.pop("die")
    assert m.predict([q], warn=False)[0].high / m.predict([q], warn=False)[0].low > pred.high / pred.low
    m.spread_log_["die"] = wide
    l4 = m.predict([replace(q, cluster=ClusterSpec.parse("1xL4"))], warn=False)[0]
    m.spread_log_["die"] = 1.0  # the L4's width does not read it
    l4_again = m.predict([replace(q, cluster=ClusterSpec.parse("1xL4"))], warn=False)[0]
    assert (l4.low, l4.high) == pytest.approx((l4_again.low, l4_again.high))
    # The same query with the Ampere mean in place of the die's: the die's effect is what moved it.
    m.gpu_effects_.update({"A100-80GB/fp16": ga102, "A100-PCIe/fp16": ga102})
    m.__dict__.pop("_arch_effect_cache", None)
    moved = m.predict([q], warn=False)[0].throughput
    assert math.log(pred.throughput / moved) == pytest.approx(ga100 - ga102, abs=0.02)


def test_die_spread_needs_three_boards_that_share_a_die_and_grows_as_they_disagree():
    from spottrain.perf.throughput import DIE_FLOOR, _die_spread

    two = {"A100/fp16": 0.0, "A100-80GB/fp16": 0.4, "A10/fp16": 0.1, "H100/fp16": -0.2}
    assert _die_spread(two) is None  # one die with two boards: two deviations, no spread to read
    agree = {**two, "A100-80GB/fp16": 0.01, "A100-PCIe/fp16": -0.01}
    assert _die_spread(agree) == DIE_FLOOR
    apart = {**two, "A100-PCIe/fp16": 0.8}
    wider = {**two, "A100-PCIe/fp16": 1.6, "A100-80GB/fp16": 0.8}
    assert DIE_FLOOR < _die_spread(apart) < _die_spread(wider)


def test_the_residual_correction_stays_in_the_structure_it_was_fitted_on():
    """A correction learnt on one-node rows never applies to a multi-node or mixed-GPU query, nor does a
    feature that never varied in the rows weigh at all."""
    from spottrain.perf.correction import ResidualCorrection

    rows = [m for m in load_shipped(("pollux",)) if m.model == "ncf-neumf" and m.cluster.nodes == 1]
    rng = np.random.default_rng(0)
    corr = ResidualCorrection().fit(rows, rng.normal(0.0, 0.2, len(rows)) + 0.3 * np.log([m.cluster.total_gpus for m in rows]))
    inside = corr.predict(rows)
    assert np.any(np.abs(inside) > 0.05)  # it does correct the rows' own structure
    multi = [m for m in load_shipped(("pollux",)) if m.model == "ncf-neumf" and m.cluster.nodes > 1][:50]
    assert np.all(corr.predict(multi) == 0.0)
    assert np.all(np.isfinite(corr.scale_)) and corr.coef_[0] == 0.0  # log nodes: constant in the rows
