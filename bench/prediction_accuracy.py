"""Prediction accuracy of spottrain's performance model on real measurements, against naive baselines.

    .venv/bin/python bench/prediction_accuracy.py [--quick]

Every figure is held-out: the model never sees the rows it is scored on. Baselines, computed on
the same held-out rows: *linear scaling* (N GPUs x the measured 1-GPU throughput of the same
model and GPU) and *peak-FLOPS ratio* (throughput measured on another GPU x ratio of peak FP32
TFLOPS; for unseen models: the median achieved fraction of peak on the training rows).
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from spottrain.perf import ThroughputModel, Workload, load_shipped, predict_throughput, read_measurements
from spottrain.perf.convergence import (ConvergenceModel, curve_sets, curves_from_rows, first_crossing,
                                       load_accuracy_curves)
from spottrain.perf.hardware import device
from spottrain.perf.validation import cross_validate, mape

warnings.filterwarnings("ignore")


def gpu_of(m):
    return m.cluster.groups[0].gpu


def single(m):
    return m.cluster.total_gpus == 1


def fit(rows, prior="physics", correction="none", folds=0):
    return ThroughputModel(prior=prior, correction=correction, folds=folds).fit(rows)


def predict(model, rows):
    return np.array([p.throughput for p in model.predict(rows, warn=False)])


def obs(rows):
    return np.array([m.throughput for m in rows])


def linear_baseline(train, test):
    """N x 1-GPU throughput of the same (model, GPU, precision, ps) in train; NaN when unknown."""
    ref = {}
    for m in train:
        if single(m):
            ref.setdefault((m.model, gpu_of(m), m.precision), []).append(m.throughput)
    out = []
    for m in test:
        r = ref.get((m.model, gpu_of(m), m.precision))
        out.append(statistics.mean(r) * m.cluster.total_gpus if r else math.nan)
    return np.array(out)


def peak_baseline(train, test):
    """Throughput of the same model on another GPU x peak FP32 ratio (else median FLOPS fraction)."""
    frac = [m.throughput * m.flops_per_sample / (device(gpu_of(m)).fp32_tflops * 1e12 * m.cluster.total_gpus)
            for m in train]
    med = statistics.median(frac)
    by_model = {}
    for m in train:
        if single(m):
            by_model.setdefault((m.model, m.precision), []).append(m)
    out = []
    for m in test:
        p_t = device(gpu_of(m)).fp32_tflops
        refs = by_model.get((m.model, m.precision))
        if refs:
            vals = [r.throughput * p_t / device(gpu_of(r)).fp32_tflops for r in refs]
            out.append(statistics.mean(vals) * m.cluster.total_gpus)
        else:
            out.append(med * p_t * 1e12 * m.cluster.total_gpus / m.flops_per_sample)
    return np.array(out)


def score(pred, y):
    ok = ~np.isnan(pred)
    return mape(pred[ok], y[ok]) if ok.any() else math.nan


ROWS = []


def report(name, n, ours, base_lin=math.nan, base_peak=math.nan, goal="", extra=""):
    ROWS.append((name, n, ours, base_lin, base_peak, goal, extra))
    print(f"{name:58s} {n:5d} {ours:7.1f} {base_lin:9.1f} {base_peak:9.1f}  {goal:8s} {extra}", flush=True)


def held_out_groups(rows, key, test_filter, whole_group=False):
    """(group, training rows, held-out rows) for each group of the rows ``test_filter`` selects."""
    for g in sorted({key(m) for m in rows if test_filter(m)}):
        test = [m for m in rows if key(m) == g and test_filter(m)]
        train = [m for m in rows if key(m) != g] if whole_group else [m for m in rows if not (key(m) == g and test_filter(m))]
        yield g, train, test


def leave_groups_out(rows, key, test_filter, prior="physics", whole_group=False):
    """For each group, train on every row outside the group's test rows, predict them.

    ``whole_group``: train on no row of the group at all (unseen model / unseen GPU); else the
    group's other rows (its 1-worker or 1-PS measurements) stay in training. ``prior`` may be a
    function of the group, so that a prior never contains the held-out GPU.
    """
    pred, lin, peak, ys = [], [], [], []
    for g, train, test in held_out_groups(rows, key, test_filter, whole_group):
        model = fit(train, prior(g) if callable(prior) else prior)
        pred.extend(predict(model, test)); lin.extend(linear_baseline(train, test)); peak.extend(peak_baseline(train, test))
        ys.extend(obs(test))
    pred, lin, peak, ys = map(np.array, (pred, lin, peak, ys))
    return len(ys), score(pred, ys), score(lin, ys), score(peak, ys)


STUDIES = {"CM-DARE": "cmdare", "transient-dl": "transient_dl", "Lambda": "lambda", "Pollux": "pollux",
           "ours (H100, H200)": "hopper_zoo"}


def _interval_stats(model, test):
    """(predictions, % of rows inside the ~90 % interval, median width high/low)."""
    preds = model.predict(test, warn=False)
    y = obs(test)
    lo, hi = np.array([p.low for p in preds]), np.array([p.high for p in preds])
    return (np.array([p.throughput for p in preds]), float(np.mean((lo <= y) & (y <= hi)) * 100),
            float(np.median(hi / lo)))


def own_linear_baseline(test):
    """N x the held-out study's own 1-GPU rate of the same (model, GPU, precision, batch): a baseline
    allowed to see one measured row per configuration that the model never sees."""
    ref = {(m.model, gpu_of(m), m.precision, m.batch_size): m.throughput for m in test if single(m)}
    return np.array([ref.get((m.model, gpu_of(m), m.precision, m.batch_size), math.nan) * m.cluster.total_gpus
                     if not single(m) else math.nan for m in test])


def nominal_ring_sync(m):
    """The naive all-reduce time: ring over the nominal NIC (and PCIe inside a node), no overlap."""
    S, n = 4.0 * m.param_count, m.cluster.total_gpus
    if m.cluster.nodes > 1:
        return 2.0 * (n - 1) / n * S / ((m.network_gbps or 50.0) / 8.0 * 1e9)
    gpn = max(g.gpus_per_node for g in m.cluster.groups)
    return 2.0 * (gpn - 1) / gpn * S / (device(gpu_of(m)).pcie_gbs * 1e9)


def regime_coverage(model, test) -> str:
    """The coverage of each regime's rows (one GPU, one node, across nodes, parameter servers) where a
    study holds two or more: one regime's rows can sit well outside 85-95 % inside a total that meets it."""
    from spottrain.perf.throughput import _Query, _regime

    regimes = np.array([_regime(_Query.of(m)) for m in test])
    if len(set(regimes)) < 2:
        return ""
    preds = model.predict(test, warn=False)
    inside = np.array([p.low <= m.throughput <= p.high for p, m in zip(preds, test)])
    parts = [f"{r} {np.mean(inside[regimes == r]) * 100:.0f} % of {int(np.sum(regimes == r))}"
             for r in ("single", "intra", "inter", "ps") if np.any(regimes == r)]
    return "; by regime: " + ", ".join(parts)


def refit_spread(train, test, refits: int, drop: float = 0.1) -> str:
    """How far the held-out MAPE moves when the fit loses ``drop`` of its training rows at random
    (``refits`` seeded draws): the part of a figure that is the fit's, not the model's. One study's
    rows that no other study measures (Pollux's multi-node all-reduce) tilt the shared compute
    parameters, so a held-out study's figure moves by a point or two with which of them are fitted."""
    if refits <= 0:
        return ""
    y = obs(test)
    got = []
    for seed in range(refits):
        keep = np.random.default_rng(seed).random(len(train)) >= drop
        model = fit([m for m, k in zip(train, keep) if k])
        got.append(score(predict(model, test), y))
    return f"; {refits} refits without a random {drop:.0%} of the training rows: {min(got):.1f}-{max(got):.1f}"


def same_information(model, test) -> str:
    """The held-out study's multi-GPU rows predicted with what the linear baseline sees: its own 1-GPU
    rows, as a user's ``predict --measurements`` table on the leave-one-study-out fit. The baseline's
    column scores only those rows, with rows the model never saw; this is the comparison on equal terms."""
    lin = own_linear_baseline(test)
    scored = [m for m, v in zip(test, lin) if not math.isnan(v)]
    user = [m for m in test if single(m)]
    if not scored or not user:
        return ""
    users = ThroughputModel(prior=model, folds=5 if len(user) >= 10 else 0).fit(user)
    y = obs(scored)
    return (f"; on the {len(scored)} multi-GPU rows the linear column scores: without the study's rows"
            f" {score(predict(model, scored), y):.1f}, with its {len(user)} 1-GPU rows as a user's table"
            f" {score(predict(users, scored), y):.1f} (linear {score(lin[~np.isnan(lin)], y):.1f})")


def cross_study_rows(refits: int = 0) -> dict:
    """Headline protocol: leave one study out, then Pollux leave one model out (multi-node all-reduce)."""
    rows = {name: load_shipped((table,)) for name, table in STUDIES.items()}
    for name, test in rows.items():
        train = [m for other, rs in rows.items() if other != name for m in rs]
        model = fit(train)
        pred, cover, width = _interval_stats(model, test)
        y = obs(test)
        report(f"LEAVE ONE STUDY OUT: {name}", len(test), score(pred, y), score(own_linear_baseline(test), y),
               score(peak_baseline(train, test), y), "<= 15",
               f"~90 % interval covers {cover:.1f} % (goal 85-95), median width x{width:.2f}"
               + regime_coverage(model, test) + refit_spread(train, test, refits) + same_information(model, test))
    po = rows["Pollux"]
    others = [m for name, rs in rows.items() if name != "Pollux" for m in rs]
    _multi_node_rows(po, others, one_node_known=True)
    _multi_node_user_rows(po, others)
    _multi_node_rows(po, others, one_node_known=False)
    _multi_node_floor_rows(po, others)
    return rows


def _multi_node_floor_rows(po, others) -> None:
    """What Pollux's multi-node rows allow any model of (model, batch, nodes, GPUs): (i) their own
    noise, each row against the mean of the other placements of the same shape (same model, batch
    size, nodes, GPUs and largest node: 1+3 and 2+2 GPUs over two nodes), which no model of those
    inputs tells apart; (ii) the model fitted on every row (every study, all of Pollux), scored on
    them in-sample: a held-out prediction of this form is not expected to beat it."""
    shape = lambda m: (m.model, m.precision, m.batch_size, m.cluster.nodes, m.cluster.total_gpus,  # noqa: E731
                       max(g.gpus_per_node for g in m.cluster.groups))
    multi = [m for m in po if m.cluster.nodes > 1]
    groups: dict = {}
    for m in multi:
        groups.setdefault(shape(m), []).append(math.log(m.throughput))
    noise = [abs(math.exp((sum(v) - x) / (len(v) - 1) - x) - 1) * 100 for v in groups.values() if len(v) > 1 for x in v]
    report("Pollux multi-node: noise between placements of one shape", len(noise), float(np.mean(noise)), math.nan,
           math.nan, "-", "each row against the mean of the other placements of its (model, batch, nodes, GPUs, "
           "largest node); a floor for any model of those inputs")
    model = fit(others + po)
    report("Pollux multi-node: the model fitted on every row (in-sample)", len(multi),
           score(predict(model, multi), obs(multi)), math.nan, math.nan, "-",
           "every study and all of Pollux in the fit; the held-out rows above are not expected to beat it")


def _multi_node_rows(po, others, one_node_known: bool) -> None:
    """Pollux's multi-node rows of each model predicted by a fit on the other studies and Pollux's
    other models; with ``one_node_known`` the held model's one-node rows (1-4 GPUs) are in the fit
    too, as a user who measured one node before renting several (the network is then what is
    predicted), else the model is unseen (its compute speed is predicted too)."""
    pred, ys, lin, covered, widths, sync_p, sync_y, sync_naive = [], [], [], [], [], [], [], []
    for held in sorted({m.model for m in po}):
        train = others + [m for m in po if m.model != held or (one_node_known and m.cluster.nodes == 1)]
        test = [m for m in po if m.model == held and m.cluster.nodes > 1]
        model = fit(train)
        p, cover, width = _interval_stats(model, test)
        pred.extend(p); ys.extend(obs(test)); covered.append(cover * len(test)); widths.append(width)
        lin.extend(own_linear_baseline([m for m in po if m.model == held and single(m)] + test)[-len(test):])
        sync_p.extend(p_.sync_time_s for p_ in model.predict(test, warn=False))
        sync_y.extend(m.sync_time_s for m in test)
        sync_naive.extend(nominal_ring_sync(m) for m in test)
    pred, ys, lin = np.array(pred), np.array(ys), np.array(lin)
    what = "one node of the model measured" if one_node_known else "model unseen"
    report(f"Pollux multi-node all-reduce, {what}", len(ys), score(pred, ys), score(lin, ys), math.nan,
           "<= 10" if one_node_known else "-",
           f"~90 % interval covers {sum(covered) / len(ys):.1f} %, median width x{statistics.median(widths):.2f}; "
           "linear: N x the model's own 1-GPU rate")
    if one_node_known:
        sp, sy, sn = np.array(sync_p), np.array(sync_y), np.array(sync_naive)
        report(f"Pollux sync (all-reduce) time, {what}", len(sy), score(sp, sy), score(sn, sy), math.nan, "-",
               f"median APE {np.median(np.abs(sp / sy - 1)) * 100:.1f} %; 'linear' column: ring at the nominal "
               "50 Gbit/s, no overlap")


def _multi_node_user_rows(po, others) -> None:
    """The same multi-node rows as a user gets them: ``predict --measurements`` with the held model's
    one-node rows, the prior fitted on everything else (the other studies and Pollux's other models)."""
    pred, ys, covered, widths = [], [], 0, []
    for held in sorted({m.model for m in po}):
        prior = fit(others + [m for m in po if m.model != held])
        user = [m for m in po if m.model == held and m.cluster.nodes == 1]
        test = [m for m in po if m.model == held and m.cluster.nodes > 1]
        model = ThroughputModel(prior=prior, folds=5 if len(user) >= 10 else 0).fit(user)  # as predict_cmd fits
        p, cover, width = _interval_stats(model, test)
        pred.extend(p); ys.extend(obs(test)); covered += cover * len(test); widths.append(width)
    pred, ys = np.array(pred), np.array(ys)
    report("Pollux multi-node, predict --measurements with one node's rows", len(ys), score(pred, ys), math.nan,
           math.nan, "<= 10", f"~90 % interval covers {covered / len(ys):.1f} %, median width x{statistics.median(widths):.2f}; "
           "the prior fitted on the other studies and Pollux's other models")


def one_row_rows(rows) -> None:
    """One measured row of the target GPU pulls the prediction to it (Pollux T4 rows, prior = other studies)."""
    po = rows["Pollux"]
    prior = fit([m for name, rs in rows.items() if name != "Pollux" for m in rs])
    without, with_one, ys = [], [], []
    for held in sorted({m.model for m in po}):
        test = [m for m in po if m.model == held and single(m)]
        anchor = test[len(test) // 2]
        rest = [m for m in test if m is not anchor]
        user = ThroughputModel(prior=prior, folds=0, correction="none").fit([anchor])
        without.extend(predict(prior, rest)); with_one.extend(predict(user, rest)); ys.extend(obs(rest))
    ys = np.array(ys)
    report("T4 (Pollux) 1-GPU rows, one measured row of the model on T4", len(ys), score(np.array(with_one), ys),
           math.nan, score(np.array(without), ys), "-",
           "'peak-FLOPS' column here: the same prior without the row (the GPU and 2 of 4 models unseen)")


def own_cross_gpu_rows(rows) -> None:
    """Our own H100 and H200 rows: one machine's rows as a user's ``predict --measurements`` table
    (on the prior fitted on the published studies) predict the other machine's (another GPU and host,
    the same software); the 'peak-FLOPS' column is the same prior without the user's rows."""
    ours = rows["ours (H100, H200)"]
    prior = fit([m for name, rs in rows.items() if name != "ours (H100, H200)" for m in rs])
    for src, dst in (("H100", "H200"), ("H200", "H100")):
        user = [m for m in ours if gpu_of(m) == src]
        test = [m for m in ours if gpu_of(m) == dst]
        model = ThroughputModel(prior=prior, folds=5).fit(user)
        p, cover, width = _interval_stats(model, test)
        y = obs(test)
        report(f"ours: {dst} rows from the {src} machine's rows (predict --measurements)", len(test), score(p, y),
               math.nan, score(predict(prior, test), y), "-",
               f"~90 % interval covers {cover:.1f} %, median width x{width:.2f}; 'peak-FLOPS' column: the prior alone")


def one_gpu_user_rows(rows) -> None:
    """A user's rows of one GPU type as the ``predict --measurements`` table (on the prior fitted on the
    other studies), scored on the same study's rows of every other GPU type; each GPU type of the study
    in turn (3+ rows), pooled. What a user who measured one GPU learns of renting another: the same
    framework and software, another machine. The 'peak-FLOPS' column is the same prior without the
    user's rows."""
    for name in ("CM-DARE", "Lambda"):
        study = rows[name]
        prior = fit([m for other, rs in rows.items() if other != name for m in rs])
        pred, alone, ys, inside, widths, better = [], [], [], 0.0, [], 0
        gpus = [g for g in sorted({gpu_of(m) for m in study}) if sum(gpu_of(m) == g for m in study) >= 3]
        for g in gpus:
            user = [m for m in study if gpu_of(m) == g]
            test = [m for m in study if all(gr.gpu != g for gr in m.cluster.groups)]
            model = ThroughputModel(prior=prior, folds=5 if len(user) >= 10 else 0).fit(user)  # as predict_cmd fits
            p, cover, width = _interval_stats(model, test)
            a, y = predict(prior, test), obs(test)
            pred.extend(p); alone.extend(a); ys.extend(y); inside += cover * len(test); widths.append(width)
            better += score(p, y) < score(a, y)
        ys = np.array(ys)
        report(f"{name}: other GPUs' rows from one GPU's rows (predict --measurements)", len(ys),
               score(np.array(pred), ys), math.nan, score(np.array(alone), ys), "-",
               f"~90 % interval covers {inside / len(ys):.1f} %, median width x{statistics.median(widths):.2f}; each of "
               f"{len(gpus)} GPU types as the user's in turn, {better} of them better than the prior alone "
               "('peak-FLOPS' column)")


def unseen_board_of_a_fitted_die_rows(rows) -> None:
    """Each Lambda GPU type whose die has another fitted board (every A100, the A10 / RTX 3090 / RTX
    A6000 of GA102, the H100s and GH200 of GH100, the RTX 4090 / RTX 6000 Ada of AD102), its Lambda
    rows held out of a fit on every other row of every study: the board then borrows its die's fitted
    effect and width (``throughput._kin``, ``_die_spread``). The 'peak-FLOPS' column is the same fit
    with the dies unknown (the architecture's mean effect, the all-GPU width): what such a board got
    before the registry named dies."""
    from spottrain.perf import throughput as tp

    def by_architecture(model, test):
        die, spread = tp._die, model.spread_log_.pop("die", None)
        tp._die = lambda gpu: None
        try:
            tp._kin.cache_clear(); model.__dict__.pop("_arch_effect_cache", None)
            return model.predict(test, warn=False)
        finally:
            tp._die = die
            tp._kin.cache_clear(); model.__dict__.pop("_arch_effect_cache", None)
            if spread is not None:
                model.spread_log_["die"] = spread

    every = [m for rs in rows.values() for m in rs]
    got = {"die": [], "arch": []}
    ys = []
    for g in sorted({gpu_of(m) for m in rows["Lambda"]}):
        train = [m for m in every if all(gr.gpu != g for gr in m.cluster.groups)]
        kin = tp._kin(g, frozenset(gpu_of(m) for m in train))
        if kin is None or not kin.by_die:
            continue
        test = [m for m in rows["Lambda"] if gpu_of(m) == g]
        model = fit(train)
        got["die"].extend(zip(model.predict(test, warn=False), test))
        got["arch"].extend(zip(by_architecture(model, test), test))
        ys.extend(obs(test))
    ys = np.array(ys)
    pred = {k: np.array([p.throughput for p, _m in v]) for k, v in got.items()}
    cover = {k: np.mean([p.low <= m.throughput <= p.high for p, m in v]) * 100 for k, v in got.items()}
    width = {k: np.median([p.high / p.low for p, _m in v]) for k, v in got.items()}
    report("Lambda: a board of a fitted die held out (every other row fitted)", len(ys), score(pred["die"], ys),
           math.nan, score(pred["arch"], ys), "-",
           f"~90 % interval covers {cover['die']:.1f} %, median width x{width['die']:.2f}; with the dies unknown "
           f"('peak-FLOPS' column: the architecture's mean effect, the all-GPU width) {cover['arch']:.1f} %, "
           f"x{width['arch']:.2f}")


def _workload_of(m, **profile) -> Workload:
    """The workload of measurement row ``m`` (fp32 gradients, 4 bytes a parameter), with ``profile``'s
    fields (``step_time_s_ref``, ``ref_gpu``) when given: what ``spottrain profile`` of it would give."""
    return Workload(model=m.model, batch_size=m.batch_size, flops_per_sample=m.flops_per_sample,
                    param_count=m.param_count, gradient_bytes=4.0 * m.param_count, precision=m.precision,
                    tensor_count=m.tensor_count, **profile)


def profile_transfer_rows(rows) -> None:
    """A profile on one GPU type predicting the same model on another (``spottrain profile`` on the
    machine at hand, then ``predict`` / ``plan`` on a cloud GPU): every one-GPU row of a set as the
    profile (its step time, ``Workload.step_time_s_ref``), each other GPU type's row of the same model,
    precision and batch predicted. The other type takes half of what the profile changes
    (``throughput.OTHER_MACHINE_SHARE``); the note gives the whole change. 'peak-FLOPS' column: the
    same prior without the profile."""
    import dataclasses
    from spottrain.perf.throughput import _calibrated_for, _Query, default_model
    from spottrain.types import ClusterSpec

    leases = [m for f in ("zoo_lease5_h100", "zoo_lease6_h100", "zoo_lease7_h200")
              for m in read_measurements(BENCH_DATA / f"{f}.csv") if m.model in ("mobilenet-v2", "efficientnet-b0")]
    sets = [("4 models in no table (H100 <-> H200 leases)", default_model(),
             [*read_measurements(BENCH_DATA / "zoo_more_h100.csv"), *read_measurements(BENCH_DATA / "zoo_more_h200.csv")]),
            ("MobileNetV2, EfficientNet-B0 (H100 <-> H200 leases)", default_model(), leases)]
    for name in ("CM-DARE", "Lambda", "ours (H100, H200)"):
        sets.append((f"{name}, prior without the study", fit([m for k, v in rows.items() if k != name for m in v]), rows[name]))
    for label, prior, table in sets:
        by: dict = {}
        for m in table:
            if m.cluster.total_gpus == 1:
                by.setdefault((m.model, m.precision, m.batch_size), {})[gpu_of(m)] = m
        half, whole, alone, ys, inside, widths = [], [], [], [], [], []
        for (model, precision, batch), per_gpu in by.items():
            for src, ms in per_gpu.items():
                w = _workload_of(ms)
                profiled = dataclasses.replace(w, step_time_s_ref=batch / ms.throughput, ref_gpu=src)
                for dst, md in per_gpu.items():
                    if dst == src:
                        continue
                    p = predict_throughput(profiled, f"1x{dst}", model=prior)
                    q = _Query(model=model, batch_size=batch, cluster=ClusterSpec.parse(f"1x{dst}"), ps=0, sync="sync",
                               flops=w.flops_per_sample, grad=w.gradient_bytes, precision=precision,
                               tensors=w.tensor_count)
                    half.append(p.throughput); whole.append(_calibrated_for(prior, profiled).predict_one(q).throughput)
                    alone.append(predict_throughput(w, f"1x{dst}", model=prior).throughput)
                    ys.append(md.throughput); inside.append(p.low <= md.throughput <= p.high); widths.append(p.high / p.low)
        ys = np.array(ys)
        report(f"a profile on one GPU type -> another: {label}", len(ys), score(np.array(half), ys), math.nan,
               score(np.array(alone), ys), "-",
               f"~90 % interval covers {np.mean(inside) * 100:.1f} %, median width x{np.median(widths):.2f}; the "
               f"profile's whole change: {score(np.array(whole), ys):.1f}; 'peak-FLOPS' column: the prior alone")


BENCH_DATA = Path(__file__).resolve().parent / "data"


def mixed_precision_rows(rows) -> None:
    """What a software stack does to the mixed-precision gain (``throughput.FP16_STACK_LOG``). (i) Leave
    one study out, each held-out study that trained both precisions: the median log miss of its fp16
    rows less that of its fp32 rows (0 where the fitted studies' gain carries), and their root mean
    square, the shipped data's measure of the stack spread. (ii) NVIDIA's published DeepLearningExamples
    training speeds (``bench/data/nvidia_dle_published.csv``: ResNet-50 v1.5 and SSD300 in PyTorch,
    DGX-1 V100 and DGX A100, 1-8 GPUs, FP32 / TF32 / AMP; never fitted) predicted by the shipped
    calibration, as a user's query is, with the stack's spread and without it."""
    from spottrain.perf import throughput
    from spottrain.perf.throughput import default_model

    misses = {}
    for name, test in rows.items():
        precisions = np.array([m.precision for m in test])
        if len(set(precisions)) < 2:
            continue
        model = fit([m for other, rs in rows.items() if other != name for m in rs])
        r = np.log(obs(test) / predict(model, test))
        misses[name] = float(np.median(r[precisions == "fp16"]) - np.median(r[precisions != "fp16"]))
    dle = read_measurements(BENCH_DATA / "nvidia_dle_published.csv")
    train = [m for rs in rows.values() for m in rs]
    model = default_model()
    r = np.log(obs(dle) / predict(model, dle))
    half = np.array([m.precision == "fp16" for m in dle])
    misses["NVIDIA's published (shipped calibration)"] = float(np.median(r[half]) - np.median(r[~half]))
    rms = math.sqrt(statistics.fmean(v * v for v in misses.values()))
    report("mixed-precision gain, held-out study's fp16 miss less fp32's", len(misses), 100 * rms, math.nan, math.nan,
           "-", "the 'ours' column is their root mean square (log x 100), not a MAPE: "
           + ", ".join(f"{k} {v:+.2f}" for k, v in misses.items())
           + f"; FP16_STACK_LOG {throughput.FP16_STACK_LOG}")
    saved = throughput.FP16_STACK_LOG
    try:
        throughput.FP16_STACK_LOG = 0.0
        _p, cover0, width0 = _interval_stats(model, [m for m, h in zip(dle, half) if h])
    finally:
        throughput.FP16_STACK_LOG = saved
    for label, keep in (("FP32/TF32", ~half), ("AMP", half)):
        rs = [m for m, k in zip(dle, keep) if k]
        p, cover, width = _interval_stats(model, rs)
        before = f"; without the stack's spread {cover0:.1f} %, x{width0:.2f}" if label == "AMP" else ""
        report(f"NVIDIA's published speeds, {label} (never fitted), shipped calibration", len(rs),
               score(p, obs(rs)), math.nan, score(peak_baseline(train, rs), obs(rs)), "-",
               f"~90 % interval covers {cover:.1f} %, median width x{width:.2f}{before}; median log miss "
               f"{float(np.median(r[keep])):+.2f} (faster than predicted)")
    # What one measurement buys: each multi-GPU row with its configuration's 1-GPU row as the profile.
    key = lambda m: (m.model, gpu_of(m), m.precision, m.batch_size)  # noqa: E731
    ones = {key(m): m.throughput for m in dle if single(m)}
    multi = [m for m in dle if not single(m)]
    got, alone = [], []
    for m in multi:
        got.append(predict_throughput(_workload_of(m, step_time_s_ref=m.batch_size / ones[key(m)], ref_gpu=gpu_of(m)),
                                      str(m.cluster)))
        alone.append(predict_throughput(_workload_of(m), str(m.cluster)).throughput)
    y = obs(multi)
    inside = float(np.mean([p.low <= t <= p.high for p, t in zip(got, y)])) * 100
    linear = np.array([ones[key(m)] * m.cluster.total_gpus for m in multi])
    report("NVIDIA's published 4-8 GPU rows, its 1-GPU row as your profile", len(multi),
           score(np.array([p.throughput for p in got]), y), score(linear, y), math.nan, "-",
           f"~90 % interval covers {inside:.1f} %, median width x{float(np.median([p.high / p.low for p in got])):.2f};"
           f" the calibration alone: {score(np.array(alone), y):.1f}; 'linear' column: N x the 1-GPU row")


def unseen_model_rows(rows) -> None:
    """Four networks no shipped table holds (ResNet-101/152, BERT-large, GPT-2 medium), timed on an H100
    and an H200 of later leases (``bench/data/zoo_more_<gpu>.csv``), predicted by the shipped calibration
    (every study; what ``spottrain predict`` uses), then by a user's fit of that lease's ResNet-50 (and,
    on the H100, BERT-base) rows (``zoo_anchor_<gpu>.csv``) over it. Baseline: the calibration's median
    fraction of FP32 peak (``peak_baseline``; no other GPU measured these models)."""
    from spottrain.perf.throughput import default_model

    train = [m for rs in rows.values() for m in rs]
    for gpu in ("h100", "h200"):
        new = read_measurements(BENCH_DATA / f"zoo_more_{gpu}.csv")
        anchor = read_measurements(BENCH_DATA / f"zoo_anchor_{gpu}.csv")
        base = score(peak_baseline(train, new), obs(new))
        p, cover, width = _interval_stats(default_model(), new)
        report(f"4 models in no table ({gpu.upper()}, later lease), shipped calibration", len(new), score(p, obs(new)),
               math.nan, base, "-", f"~90 % interval covers {cover:.1f} %, median width x{width:.2f}")
        user = ThroughputModel(prior=default_model(), folds=5 if len(anchor) >= 10 else 0).fit(anchor)
        p, cover, width = _interval_stats(user, new)
        report("  the same, with the lease's ResNet-50/BERT-base rows as yours", len(new), score(p, obs(new)),
               math.nan, base, "-", f"~90 % interval covers {cover:.1f} %, median width x{width:.2f}; "
               f"{len(anchor)} rows")


def new_layer_rows(rows) -> None:
    """Four networks of layers no shipped table holds, timed on an H100 of a fifth and a sixth lease
    (``bench/data/zoo_lease5_h100.csv``, ``zoo_lease6_h100.csv``) after the calibration: MobileNetV2
    and EfficientNet-B0 (depthwise convolutions: 5-7x the activation traffic per FLOP of a dense
    network of their layer width), ConvNeXt-T (7x7 depthwise convolutions beside 4x MLPs) and
    ViT-B/16. Predicted by the shipped calibration, and by the same with the intensity from the
    width alone (the rows renamed: what a model that does not count activations predicts).
    EfficientNet-B0 and ConvNeXt-T were timed after a first form of the intensity term was built on
    MobileNetV2's rows; the form kept (counted from the dense networks' scatter) was chosen with
    their rows in view."""
    from dataclasses import replace

    from spottrain.perf.throughput import default_model

    train = [m for rs in rows.values() for m in rs]
    lease = [m for f in ("zoo_lease5_h100.csv", "zoo_lease6_h100.csv", "zoo_lease7_h200.csv")
             for m in read_measurements(BENCH_DATA / f) if m.model != "resnet50"]
    for name, gpu in (("mobilenet-v2", "H100"), ("efficientnet-b0", "H100"), ("convnext-tiny", "H100"), ("vit-b16", "H100"),
                      ("mobilenet-v2", "H200"), ("efficientnet-b0", "H200")):
        new = [m for m in lease if m.model == name and gpu_of(m) == gpu]
        blind = [replace(m, model=f"unnamed-{name}") for m in new]
        p, cover, width = _interval_stats(default_model(), new)
        pw, cover_w, width_w = _interval_stats(default_model(), blind)
        report(f"{name} (in no table, {gpu}), shipped calibration", len(new), score(p, obs(new)), math.nan,
               score(peak_baseline(train, new), obs(new)), "-",
               f"~90 % interval covers {cover:.1f} %, median width x{width:.2f}; intensity from the width alone: "
               f"{score(pw, obs(new)):.1f} % ({cover_w:.1f} % covered, x{width_w:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the correction's nested cross-validation")
    ap.add_argument("--refits", type=int, default=2,
                    help="refits per held-out study without a random 10%% of the training rows (0: none)")
    args = ap.parse_args()
    t0 = time.time()
    cm, td, lam = load_shipped(("cmdare",)), load_shipped(("transient_dl",)), load_shipped(("lambda",))
    tf_rows = cm + td
    print(f"rows: cmdare {len(cm)}, transient-dl {len(td)}, lambda {len(lam)}; machine: {platform.processor() or platform.machine()}, python {sys.version.split()[0]}")
    print(f"{'experiment (held-out MAPE %)':58s} {'rows':>5s} {'ours':>7s} {'linear':>9s} {'peak-FLOPS':>9s}  goal")
    # Headline rows first: leave one study out, Pollux leave one model out, one measured row.
    study_rows = cross_study_rows(args.refits)
    one_row_rows(study_rows)
    own_cross_gpu_rows(study_rows)
    one_gpu_user_rows(study_rows)
    unseen_board_of_a_fitted_die_rows(study_rows)
    profile_transfer_rows(study_rows)
    mixed_precision_rows(study_rows)
    unseen_model_rows(study_rows)
    new_layer_rows(study_rows)
    lam_prior = fit(lam)  # modern-GPU calibration, independent of the CM-DARE / transient-dl rows

    # 1. Single-GPU speed of unseen models (leave one model out: none of its rows, any GPU or size, is trained on).
    n, o, l, p = leave_groups_out(tf_rows, lambda m: m.model, single, prior=lam_prior, whole_group=True)
    report("single-GPU speed, unseen model (CM-DARE, LOMO)", n, o, l, p, "-")

    # 2. Cross-GPU: train on K80 rows only, predict V100 and P100 single-GPU speed; the prior is
    #    fitted on the Lambda rows of the other GPUs, so nothing measured on the target GPU is seen.
    train = [m for m in tf_rows if gpu_of(m) == "K80"]
    for tgt in ("V100", "P100"):
        test = [m for m in tf_rows if gpu_of(m) == tgt and single(m)]
        model = fit(train, fit([m for m in lam if gpu_of(m) != tgt]))
        report(f"cross-GPU K80 -> {tgt} (CM-DARE+transient-dl)", len(test), score(predict(model, test), obs(test)),
               math.nan, score(peak_baseline(train, test), obs(test)), "<= 10")

    # 3. Lambda: leave one GPU type out (single-GPU rows), prior = physics only.
    n, o, l, p = leave_groups_out(lam, lambda m: (gpu_of(m)), single, whole_group=True)
    report("cross-GPU, leave one GPU type out (Lambda, 1 GPU)", n, o, l, p, "<= 10")

    # 4. Cluster scaling 1 -> 8 workers (async PS, 1 PS): hold out N>1 of one (model, GPU) series.
    key = lambda m: (m.model, gpu_of(m), m.ps, m.extra.get("source"))
    n, o, l, p = leave_groups_out(cm, key, lambda m: m.cluster.nodes > 1 and m.ps == 1, prior=lam_prior)
    report("cluster scaling 2-8 workers, 1 PS (CM-DARE)", n, o, l, p, "<= 5")
    n, o, l, p = leave_groups_out(tf_rows, key, lambda m: m.cluster.nodes > 1 and m.ps == 1
                                  and m.extra.get("source", "").startswith("transient"), prior=lam_prior)
    report("cluster scaling 2-8 workers, 1 PS (transient-dl)", n, o, l, p, "<= 5")

    # 5. PS bottleneck: predict the 2-PS series of a model from its 1-PS rows and other models.
    n, o, l, p = leave_groups_out(tf_rows, key, lambda m: m.ps == 2, prior=lam_prior)
    report("2 parameter servers, held-out series (CM-DARE+transient)", n, o, l, p, "<= 5")

    # 5b. Harder holds: no 2-PS row at all in training (every 2-PS row from 1-PS rows); and across
    #     studies, the PS rows of one study predicted from the other's (same job, other GCE clusters).
    train, test = [m for m in tf_rows if m.ps != 2], [m for m in tf_rows if m.ps == 2]
    report("2 PS from 1-PS rows only (no 2-PS row in training)", len(test),
           score(predict(fit(train, lam_prior), test), obs(test)), score(linear_baseline(train, test), obs(test)),
           math.nan, "-")
    for src, dst in ((cm, td), (td, cm)):
        test = [m for m in dst if m.cluster.nodes > 1]
        name = "CM-DARE -> transient-dl" if src is cm else "transient-dl -> CM-DARE"
        report(f"across studies, 2-8 workers ({name})", len(test), score(predict(fit(src, lam_prior), test), obs(test)),
               score(linear_baseline(src, test), obs(test)), math.nan, "-")

    # 6. Intra-node data parallel 2-8 GPUs (Lambda), one (GPU, precision) series held out.
    n, o, l, p = leave_groups_out(lam, lambda m: (gpu_of(m), m.precision, m.model), lambda m: not single(m))
    report("intra-node 2-8 GPUs, held-out series (Lambda)", n, o, l, p, "<= 5")

    # 7. Random 5-fold CV per table: analytical alone vs with the learned correction.
    for name, rows in (("cmdare", cm), ("transient-dl", td), ("lambda", lam)):
        an = cross_validate(rows, lambda: ThroughputModel(folds=0, correction="none"), folds=5)
        lin = np.full(len(rows), np.nan)
        from spottrain.perf.validation import kfold_indices

        for tr, te in kfold_indices(len(rows), 5, 0):
            lin[te] = linear_baseline([rows[i] for i in tr], [rows[i] for i in te])
        extra = ""
        if not args.quick:
            co = cross_validate(rows, lambda: ThroughputModel(folds=5, correction="auto"), folds=5)
            extra = f"with correction (auto): {co['mape']:.1f}"
        report(f"random 5-fold CV, all rows ({name})", len(rows), an["mape"], score(lin, an["obs"]), math.nan, "<= 5", extra)

    # 8. Steps to target error (1 - accuracy), leave one worker count out: ours (staleness form, LR
    #    phases found in the training curves) vs spotDNN's loss model as published (one hyperbola).
    curves = curves_from_rows(load_accuracy_curves())
    errs, spot, base = _steps_errors(curves, lambda n_out: curves[1] if n_out != 1 else curves[2])
    report("steps to target error, leave one worker count out (transient-dl)", len(errs), float(np.mean(errs)),
           float(np.nanmean(base)), math.nan, "<= 8",
           f"baseline: steps of the 1-worker curve; spotDNN's loss model: {np.mean(spot):.1f}")

    # 8a. What the measured steps allow: (i) their own noise, the mean change of the measured step
    #     when the 10 runs behind each averaged curve are resampled (bootstrap, 200 draws); (ii) the
    #     error of the model form fitted on all four curves and scored on them in-sample, and on each
    #     curve alone: no held-out prediction of this form can be expected to beat these.
    rows8 = load_accuracy_curves()
    noise = _bootstrap_steps_noise(rows8, curves)
    report("steps to target: noise of the measured steps (bootstrap over runs)", len(noise), float(np.mean(noise)),
           math.nan, math.nan, "-", "mean |resampled - measured| / measured; a floor for any model")
    ins = _steps_in_sample(curves)
    report("steps to target: the form fitted on the scored curves (in-sample)", len(ins[0]), float(np.mean(ins[0])),
           math.nan, math.nan, "-", f"all four curves in one fit; each curve fitted alone: {np.mean(ins[1]):.1f}")

    # 8a'. A profile's case: the 1-worker curve alone (the worker dependence at its shipped defaults)
    #      predicting 2/4/8 workers. Baseline: the 1-worker curve's own steps (staleness ignored).
    errs, spot, base = [], [], []
    ours1 = ConvergenceModel(lr_boundaries="auto", form="staleness").fit([curves[1]])
    spot1 = ConvergenceModel().fit([curves[1]])
    for n in sorted(set(curves) - {1}):
        for target in (0.20, 0.15, 0.12):
            meas = first_crossing(curves[n], target)
            if meas is None:
                continue
            errs.append(abs(ours1.steps_to_target(target, batch_size_global=128, workers=n) - meas) / meas * 100)
            spot.append(abs(spot1.steps_to_target(target, batch_size_global=128, workers=n) - meas) / meas * 100)
            base.append(abs((first_crossing(curves[1], target) or math.nan) - meas) / meas * 100)
    report("steps to target from the 1-worker curve alone (2/4/8 workers)", len(errs), float(np.mean(errs)),
           float(np.nanmean(base)), math.nan, "-",
           f"baseline: the 1-worker curve's steps; spotDNN's loss model: {np.mean(spot):.1f}")

    # 8b. The same on the other shipped curve sets (2-8 K80 or V100 workers, 1 or 2 PS; one run each,
    #     so noisier): not tuned on, a check of how the convergence model carries over.
    #     Baseline: the steps of the nearest other worker count's curve in the same set.
    errs, spot, base = [], [], []
    for _key, cs in curve_sets(load_accuracy_curves("1ps_vs_2ps")).items():
        e, s_, b_ = _steps_errors(cs, lambda n_out, cs=cs: cs[min((n for n in cs if n != n_out),
                                                                  key=lambda n: (abs(n - n_out), n))])
        errs += e
        spot += s_
        base += b_
    report("steps to target, leave one worker count out (1/2 PS, K80/V100 sets)", len(errs), float(np.mean(errs)),
           float(np.nanmean(base)), math.nan, "-",
           f"baseline: steps of the nearest worker count's curve; spotDNN's loss model: {np.mean(spot):.1f}")

    # 8b'. Coverage of the ~90 % steps intervals (`steps_interval`) on the held-out worker counts of
    #      rows 8 and 8b (each model calibrated by leave-one-count-out on its own training curves),
    #      and on the 1-worker-curve case of row 8a' (the shipped default width).
    sets = [curves, *curve_sets(load_accuracy_curves("1ps_vs_2ps")).values()]
    hit, n, ratio = 0, 0, []
    for cs in sets:
        for n_out in sorted(cs):
            model = ConvergenceModel(lr_boundaries="auto", form="staleness").fit([c for k, c in cs.items() if k != n_out])
            for target in (0.20, 0.15, 0.12):
                meas = first_crossing(cs[n_out], target)
                if meas is not None:
                    lo, hi = model.steps_interval(target, batch_size_global=128, workers=n_out)
                    hit += lo <= meas <= hi
                    n += 1
                    ratio.append(hi / lo)
    report("90 % steps interval coverage, held-out worker counts (rows 8, 8b)", n, 100.0 * hit / n, math.nan,
           math.nan, "~90", f"median width high/low {statistics.median(ratio):.2f} (the 'ours' column is % covered)")
    hit, n = 0, 0
    for cs in sets:
        n0 = min(cs)
        model = ConvergenceModel(lr_boundaries="auto", form="staleness").fit([cs[n0]])
        for k, c in cs.items():
            for target in (0.20, 0.15, 0.12):
                meas = first_crossing(c, target) if k != n0 else None
                if meas is not None:
                    lo, hi = model.steps_interval(target, batch_size_global=128, workers=k)
                    hit += lo <= meas <= hi
                    n += 1
    report("90 % steps interval coverage, one curve (fewest workers) -> others", n, 100.0 * hit / n, math.nan,
           math.nan, "~90", "default width x/2.2 (DEFAULT_STEPS_LOG_Q90); the 'ours' column is % covered")

    # 8c. Calibration of the ~90 % intervals on held-out rows: each held-out series is predicted by
    #     a model fitted with its internal 5-fold cross-validation (as `spottrain predict
    #     --measurements` fits), so the interval comes from out-of-fold residuals, never the test rows.
    if not args.quick:
        for name, rows, kf, tf, pr in (
                ("1 PS, CM-DARE", cm, key, lambda m: m.cluster.nodes > 1 and m.ps == 1, lam_prior),
                ("2 PS, CM-DARE+transient-dl", tf_rows, key, lambda m: m.ps == 2, lam_prior),
                ("intra-node, Lambda", lam, lambda m: (gpu_of(m), m.precision, m.model), lambda m: not single(m), "physics")):
            hit, n, ratio = 0, 0, []
            for _g, train, test in held_out_groups(rows, kf, tf):
                model = ThroughputModel(prior=pr, folds=5, correction="none").fit(train)
                for m, p in zip(test, model.predict(test, warn=False)):
                    hit += p.low <= m.throughput <= p.high
                    n += 1
                    ratio.append(p.high / p.low)
            report(f"90 % interval coverage, held-out series ({name})", n, 100.0 * hit / n, math.nan, math.nan,
                   "~90", f"median width high/low {statistics.median(ratio):.2f} (the 'ours' column is % covered)")

    # 8d. Steps to target at an unseen global batch size (synchronous; Pollux curves, leave one batch out).
    from batch_convergence import rows as batch_convergence_rows  # bench/ is on sys.path

    for row in batch_convergence_rows():
        report(*row)

    # 9. Speed of predict_throughput.
    w = Workload.from_zoo("resnet50", 64)
    predict_throughput(w, "4xV100", ps=1, sync="async")
    k = 2000
    t = time.perf_counter()
    for i in range(k):
        predict_throughput(w, f"{1 + i % 64}xV100", ps=i % 3, sync="sync")
    per_call = (time.perf_counter() - t) / k * 1e6
    from spottrain.perf import default_model
    from spottrain.perf.measurements import Measurement
    from spottrain.types import ClusterSpec

    qs = [Measurement(model="resnet50", batch_size=64, cluster=ClusterSpec.parse(f"{1 + i % 64}xV100"), ps=i % 3,
                      sync="sync", throughput=None, flops_per_sample=w.flops_per_sample, param_count=w.param_count)
          for i in range(k)]
    times = []
    for _ in range(3):  # best of three: the machine is shared, and this runs after ten minutes of fits
        t = time.perf_counter()
        default_model().predict(qs, warn=False)
        times.append(time.perf_counter() - t)
    vec = min(times) / k * 1e6
    print(f"predict_throughput: {per_call:.1f} us/call (memoised repeats), vectorised predict: {vec:.1f} us/row "
          f"(best of 3); "
          f"total bench time {time.time() - t0:.0f} s")
    ROWS.append(("speed", k, per_call, vec, math.nan, "< 50 us", ""))


def _steps_errors(curves, reference, targets=(0.20, 0.15, 0.12)):
    """Leave one worker count out of ``curves``: % errors of ours, spotDNN's form and the baseline
    (the steps of ``reference(n_out)``'s curve) at each target the held-out curve reaches."""
    errs, spot, base = [], [], []
    for n_out in sorted(curves):
        train = [c for n, c in curves.items() if n != n_out]
        ours = ConvergenceModel(lr_boundaries="auto", form="staleness").fit(train)
        spotdnn = ConvergenceModel().fit(train)
        ref = reference(n_out)
        for target in targets:
            meas = first_crossing(curves[n_out], target)
            if meas is None:
                continue
            errs.append(abs(ours.steps_to_target(target, batch_size_global=128, workers=n_out) - meas) / meas * 100)
            spot.append(abs(spotdnn.steps_to_target(target, batch_size_global=128, workers=n_out) - meas) / meas * 100)
            base.append(abs((first_crossing(ref, target) or math.nan) - meas) / meas * 100)
    return errs, spot, base


def _bootstrap_steps_noise(rows, curves, targets=(0.20, 0.15, 0.12), draws=200, seed=0):
    """Per target reached: mean % change of the measured step over bootstrap resamples of the runs."""
    from collections import defaultdict

    rng = np.random.default_rng(seed)
    runs = defaultdict(lambda: defaultdict(list))
    for r in rows:
        runs[int(r["workers"])][r["curve"]].append(r)
    out = []
    for n, by_run in sorted(runs.items()):
        names = sorted(by_run)
        for target in targets:
            meas = first_crossing(curves[n], target)
            if meas is None:
                continue
            devs = []
            for _ in range(draws):
                pick = rng.choice(len(names), size=len(names), replace=True)
                sample = [dict(r, curve=f"{k}") for k, i in enumerate(pick) for r in by_run[names[i]]]
                s = first_crossing(curves_from_rows(sample)[n], target)
                if s is not None:
                    devs.append(abs(s - meas) / meas * 100)
            out.append(float(np.mean(devs)))
    return out


def _steps_in_sample(curves, targets=(0.20, 0.15, 0.12)):
    """% errors of the form fitted on all curves (scored on them) and on each curve alone."""
    both = ConvergenceModel(lr_boundaries="auto", form="staleness").fit(list(curves.values()))
    joint, alone = [], []
    for n, c in sorted(curves.items()):
        own = ConvergenceModel(lr_boundaries="auto", form="staleness").fit([c])
        for target in targets:
            meas = first_crossing(c, target)
            if meas is None:
                continue
            joint.append(abs(both.steps_to_target(target, batch_size_global=128, workers=n) - meas) / meas * 100)
            alone.append(abs(own.steps_to_target(target, batch_size_global=128, workers=n) - meas) / meas * 100)
    return joint, alone


if __name__ == "__main__":
    main()
