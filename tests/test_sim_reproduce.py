"""The ICAC'19 reproduction predicts with the features the throughput model was fitted on."""

from __future__ import annotations

from spottrain.perf import load_shipped
from spottrain.sim import reproduce


def _cmdare_res32() -> list:
    return [m for m in load_shipped(("cmdare",)) if m.model == "t2t-res32"]


def test_workload_features_match_cmdare_res32() -> None:
    rows = _cmdare_res32()
    assert rows
    pred = reproduce._Predictor()
    for gpu, w in pred._workloads.items():
        for m in rows:
            assert w.flops_per_sample == m.flops_per_sample
            assert w.param_count == m.param_count
            assert w.gradient_bytes == m.gradient_bytes
            assert w.tensor_count == m.tensor_count, gpu


def test_predicts_cmdare_k80_clusters_it_was_fitted_on() -> None:
    # The model must reproduce its own training rows for ResNet-32 on K80 with one PS (async):
    # these are the configurations of the ICAC'19 K80 clusters.
    pred = reproduce._Predictor()
    rows = [m for m in _cmdare_res32() if m.cluster.groups[0].gpu == "K80" and m.ps == 1 and m.sync == "async"]
    assert len(rows) >= 8
    for m in rows:
        n = m.cluster.groups[0].count
        got = pred.throughput("K80", n, 1)
        assert abs(got / m.throughput - 1) < 0.07, (n, got, m.throughput)


def test_calibration_reproduces_the_profile_it_was_given() -> None:
    # The profile (CM-DARE's single-worker speed) was measured with one PS: the calibrated model
    # must give that speed back for one worker and one PS, not count the PS a second time.
    pred = reproduce._Predictor(calibrate=True)
    assert set(pred.profiles) >= {"K80", "P100", "V100"}
    for gpu, step_s in pred.profiles.items():
        got = pred.throughput(gpu, 1, 1)
        assert abs(got * step_s / reproduce.BATCH - 1) < 0.01, (gpu, got, reproduce.BATCH / step_s)


def test_study_rates_are_the_ones_its_cost_files_imply() -> None:
    # The P100/V100 rates are inputs recovered from the study's own bills; every folder that
    # billed those GPUs (1 worker, 4 workers, the 1-vs-2-PS series) must imply the same rate.
    folders = {
        "P100": [("training/p100_v100_spot/p100", 1, 1), ("training/p100_v100_spot/4p100", 4, 1)],
        "V100": [("training/p100_v100_spot/v100", 1, 1), ("training/p100_v100_spot/4v100", 4, 1)]
        + [(f"training/experiment_1ps_vs_2ps/{ps}ps{n}v", n, ps) for n in (2, 5, 8) for ps in (1, 2)],
        "K80": [("training/experiment_1ps_vs_2ps/2ps4k", 4, 2)],
    }
    for gpu, cases in folders.items():
        for folder, workers, ps in cases:
            got = reproduce.study_rate_usd_per_s(folder, workers, ps)
            assert abs(got / reproduce.STUDY_SPOT_USD_PER_S[gpu] - 1) < 1e-3, (gpu, folder, got)


def test_cost_prediction_uses_study_rates() -> None:
    rep = reproduce.reproduce_icac19(runs=50, seed=1)
    rows = {r.cluster: r for r in rep.clusters}
    for name in ("1xP100 spot", "1xV100 spot"):
        r = rows[name]
        # One worker, no PS billed: cost is duration x the study's rate for that GPU.
        rate = reproduce.STUDY_SPOT_USD_PER_S[r.gpu]
        assert abs(r.predicted_cost_usd / (r.predicted_duration_s * rate) - 1) < 0.02, name
        assert r.price_source.startswith("paper")
