"""Your own runs' loss curves: `spottrain run` stores the chief's training loss, `converge` and
`plan --target-loss` fit it."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spottrain.perf.convergence import first_crossing
from spottrain.perf.own_runs import NOISE_SMOOTHING, own_curves
from spottrain.runtime.api import LOSS_EVERY
from spottrain.runtime.record import loss_points
from spottrain.runtime.summary import read_worker_events
from spottrain.store import Store
from test_own_runs import run_cli


def test_a_real_run_stores_the_chiefs_loss_every_window(mlp_run):
    said = (mlp_run / "stderr.txt").read_text()
    assert (f"recorded in {mlp_run / 's.db'}: 1 measured row (1xcpu:2) and a training-loss curve of 6 points with "
            "the gradient noise scale (spottrain converge --model example-mlp reads it)") in said
    with Store(mlp_run / "s.db") as store:
        points = store.loss_points(model="example-mlp")
    assert [p["step"] for p in points] == list(range(LOSS_EVERY, 61, LOSS_EVERY))
    assert {(p["run_id"], p["global_batch_size"], p["workers"]) for p in points} == {("mlp-run", 64, 2)}
    # What is stored is what the chief's step events reported, and the example learns.
    events = read_worker_events(mlp_run / "run")
    reported = {e["step"]: e["loss"] for e in events if e.get("kind") == "step" and "loss" in e}
    assert {p["step"]: p["loss"] for p in points} == reported
    losses = [p["loss"] for p in points]
    assert all(math.isfinite(v) and v > 0 for v in losses) and losses[-1] < losses[0]


def test_converge_fits_your_runs_curve_without_a_table(mlp_run, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SPOTTRAIN_STORE", str(mlp_run / "s.db"))
    with Store(mlp_run / "s.db") as store:
        points = store.loss_points(model="example-mlp")
    steps, losses = [p["step"] for p in points], [p["loss"] for p in points]
    target = (losses[0] + losses[-1]) / 2
    code, out, err = run_cli(capsys, "converge", "--model", "example-mlp", "--target-loss", f"{target:.6f}", "--json")
    assert code == 0, err
    assert "fitted on the training loss of your 1 run(s)" in err and "global batch 64" in err
    d = json.loads(out)
    (row,) = d["predictions"]
    assert d["batch_sizes"] == [64.0] and row["sync"] == "sync" and row["global_batch"] == 64.0
    # At the run's own batch the answer is where its curve first crosses the target.
    curve = own_curves("example-mlp").curves[0]
    assert curve.steps == tuple(float(s) for s in steps) and curve.losses == tuple(losses)
    assert row["steps"] == pytest.approx(first_crossing(curve, target))
    assert row["steps_low"] < row["steps"] < row["steps_high"]
    # With --curves the table is fitted alone (its loss may be another metric), and the note says so.
    table = tmp_path / "c.csv"
    table.write_text("step,loss\n" + "".join(f"{s},{2.0 / (1 + s / 100):.5f}\n" for s in range(0, 2000, 100)))
    alone = ("converge", "--curves", str(table), "--target-loss", "0.5", "--batch-size", "32", "--json")
    code, out1, err1 = run_cli(capsys, *alone)
    code2, out2, err2 = run_cli(capsys, *alone, "--model", "example-mlp")
    assert code == code2 == 0 and err1 == "" and "not mixed with --curves" in err2
    assert json.loads(out2)["predictions"] == json.loads(out1)["predictions"]


def test_converge_without_curves_or_stored_runs_is_a_user_error(mlp_run, capsys, monkeypatch):
    monkeypatch.setenv("SPOTTRAIN_STORE", str(mlp_run / "s.db"))
    code, out, err = run_cli(capsys, "converge", "--model", "resnet50", "--target-loss", "1")
    assert code == 2 and out == "" and "no loss curves of resnet50" in err and "(it has curves of example-mlp)" in err
    assert "--curves: give --curves FILE" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "converge", "--model", "example-mlp", "--target-loss", "1", "--workers", "4")
    assert code == 2 and "--workers: your runs' curves are at global batch 64" in err
    code, _, err = run_cli(capsys, "converge", "--model", "example-mlp", "--target-loss", "1", "--no-from-store")
    assert code == 2 and "give --curves FILE" in err


def test_restarted_steps_keep_their_later_loss_and_reports_without_a_loss_are_not_points():
    events = [{"t": 1.0, "kind": "step", "step": 10, "world": 2, "loss": 2.0, "batch": 64},
              {"t": 2.0, "kind": "step", "step": 20, "world": 2, "loss": 1.5, "batch": 64},
              {"t": 2.5, "kind": "step", "step": 21, "world": 2},
              {"t": 3.0, "kind": "step", "step": 20, "world": 1, "loss": 1.4, "batch": 64},  # after a restart
              {"t": 4.0, "kind": "step", "step": 30, "world": 1, "loss": float("nan"), "batch": 64},
              {"t": 5.0, "kind": "step", "step": 40, "world": 1, "loss": 1.1, "batch": 64}]
    assert loss_points(events) == [
        {"step": 10, "loss": 2.0, "global_batch_size": 64, "workers": 2},
        {"step": 20, "loss": 1.4, "global_batch_size": 64, "workers": 1},
        {"step": 40, "loss": 1.1, "global_batch_size": 64, "workers": 1}]


def test_stored_curves_pool_runs_per_global_batch_and_stop_where_the_batch_changed(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as store:  # synthetic curves
        for run, batch, scale in (("a", 128, 1.0), ("b", 128, 1.02), ("c", 512, 1.0)):
            store.add_loss_points(run, "resnet32", [{"step": k * 10, "loss": scale * 2.0 / (1 + k), "workers": 4,
                                                     "global_batch_size": batch} for k in range(1, 6)])
        # scale-lr after a revocation: the global batch fell from 256 to 192 at step 30
        store.add_loss_points("d", "resnet32", [{"step": k * 10, "loss": 1.0 / k, "workers": 4 if k < 3 else 3,
                                                 "global_batch_size": 256 if k < 3 else 192} for k in range(1, 6)])
        store.add_loss_points("e", "resnet32", [{"step": 10, "loss": 1.0, "global_batch_size": 64, "workers": 1}])
        store.add_loss_points("f", "vgg16", [{"step": 10 * k, "loss": 1.0, "global_batch_size": 64, "workers": 1}
                                             for k in range(1, 5)])
    own = own_curves("resnet-32", store_path=path)  # an alias of the zoo's name
    assert [c.batch_size for c in own.curves] == [128.0, 512.0] and sorted(own.runs) == ["a", "b", "c"]
    pooled = own.curves[0]
    assert pooled.steps == (10.0, 20.0, 30.0, 40.0, 50.0)
    assert pooled.losses[0] == pytest.approx(1.01 * 2.0 / 2)  # the two runs' mean at each step
    assert sorted(own.skipped) == [
        "run d: 2 usable loss point(s) at its first global batch 256, fewer than 3",
        "run e: 1 usable loss point(s) at its first global batch 64, fewer than 3"]
    none = own_curves("bert-base", store_path=path)
    assert not none and none.exists and none.other_models == ["resnet32", "vgg16"]
    assert not own_curves("resnet32", store_path=tmp_path / "missing.db").exists


def test_plan_to_a_target_loss_uses_your_runs_curves(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s.db"
    points = [{"step": k * 100, "loss": 2.3 / (1 + 0.3 * k), "global_batch_size": 128, "workers": 4}
              for k in range(1, 40)]  # synthetic curve
    with Store(path) as store:
        store.add_loss_points("syn-run", "resnet32", points)
    monkeypatch.setenv("SPOTTRAIN_STORE", str(path))
    args = ("plan", "--model", "resnet32", "--batch-size", "128", "--target-loss", "0.3", "--deadline", "2h",
            "--no-refine", "--json")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "steps to the target loss from the training loss of your 1 run(s)" in err
    stored = json.loads(out)
    # The same curve given as --curves plans the same cluster at the same expected time.
    table = tmp_path / "c.csv"
    table.write_text("step,loss,batch_size\n" + "".join(f"{p['step']},{p['loss']!r},128\n" for p in points))
    code, out, err = run_cli(capsys, *args, "--curves", str(table))
    assert code == 0 and "your 1 run(s)" not in err
    given = json.loads(out)
    assert given["samples_total"] == pytest.approx(stored["samples_total"])
    assert [given["plan"][k] for k in ("groups", "prediction")] == [stored["plan"][k] for k in ("groups", "prediction")]
    code, out, err = run_cli(capsys, *args, "--no-from-store")
    assert code == 2 and "a run of this model by spottrain run" in err


# --------------------------------------------------------------------------- gradient noise scale

KNOWN_NOISE = Path(__file__).resolve().parents[1] / "bench" / "_known_noise.py"
"""A linear regression at learning rate 0 whose gradient noise is known exactly (shared with
bench/noise_scale.py)."""


def test_a_run_measures_the_gradient_noise_its_data_has(tmp_path):
    """A real 3-worker run (shards of 22, 21, 21 samples of a global batch of 64) of a linear
    regression whose per-sample gradients at its fixed weights are known: the stored |G|^2 and
    tr(Sigma), averaged over the run's windows, are the data's, and so is its loss."""
    import importlib.util

    (tmp_path / "linreg.py").write_text(KNOWN_NOISE.read_text())
    env = {**os.environ, "SPOTTRAIN_DEVICE": "cpu", "SPOTTRAIN_STORE": str(tmp_path / "unused.db")}
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--workers", "3",
                          "--steps", "400", "--global-batch", "64", "--checkpoint-every", "1000", "--job-id", "linreg",
                          "--run-dir", str(tmp_path / "run"), "--store", str(tmp_path / "s.db"), "--",
                          sys.executable, "linreg.py"], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    with Store(tmp_path / "s.db") as store:
        points = store.loss_points(model="linreg")
    assert len(points) == 400 // LOSS_EVERY and all(p["workers"] == 3 for p in points)
    spec = importlib.util.spec_from_file_location("known_noise", KNOWN_NOISE)
    known = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(known)
    true_sqr, true_var = known.exact()
    _, y = known.data()
    sqr = sum(p["grad_sqr"] for p in points) / len(points)
    var = sum(p["grad_var"] for p in points) / len(points)
    assert sqr == pytest.approx(true_sqr, rel=0.15) and var == pytest.approx(true_var, rel=0.15)
    assert sum(p["loss"] for p in points) / len(points) == pytest.approx(float((y ** 2).mean()), rel=0.05)
    own = own_curves("linreg", store_path=tmp_path / "s.db")
    (curve,) = own.curves
    assert len(curve.noise_scale) == len(points)
    assert curve.noise_scale[-1] == pytest.approx(true_var / true_sqr, rel=0.5)  # the last 20 windows' ratio


def test_gradient_noise_off_runs_ddps_own_all_reduce_and_stores_the_loss_alone(tmp_path, mlp_run):
    env = {**os.environ, "SPOTTRAIN_DEVICE": "cpu", "SPOTTRAIN_GRADIENT_NOISE": "0"}
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--example", "mlp",
                          "--workers", "2", "--steps", "30", "--global-batch", "64", "--job-id", "quiet",
                          "--run-dir", str(tmp_path / "run"), "--store", str(tmp_path / "s.db")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "a training-loss curve of 3 points (spottrain converge" in out.stderr
    with Store(tmp_path / "s.db") as store:
        points = store.loss_points()
    assert len(points) == 3 and all(p["grad_sqr"] is None and p["grad_var"] is None for p in points)
    assert own_curves("example-mlp", store_path=tmp_path / "s.db").curves[0].noise_scale is None
    # The hook's all-reduce is DDP's own: the same seed trains to the same losses with it and without.
    with Store(mlp_run / "s.db") as store:
        hooked = store.loss_points(model="example-mlp")[:3]
    assert [p["loss"] for p in points] == [p["loss"] for p in hooked]


def test_the_noise_scale_of_a_stored_curve_is_the_ratio_of_smoothed_parts(tmp_path):
    path = tmp_path / "s.db"
    sqr = [-1.0, 2.0, 2.0, 4.0, 1.0, 1.0, 1.0, 1.0]  # synthetic: the first window's |G|^2 came out < 0
    var = [10.0, 10.0, 20.0, 20.0, 40.0, 40.0, 40.0, 40.0]
    with Store(path) as store:
        store.add_loss_points("n", "resnet32", [{"step": 10 * (i + 1), "loss": 2.0 / (i + 1), "global_batch_size": 128,
                                                 "workers": 2, "grad_sqr": s, "grad_var": v}
                                                for i, (s, v) in enumerate(zip(sqr, var))])
        store.add_loss_points("m", "vgg16", [{"step": 10 * (i + 1), "loss": 1.0 / (i + 1), "global_batch_size": 64,
                                              "workers": 1} for i in range(4)])
    (curve,) = own_curves("resnet32", store_path=path).curves
    expect = []
    for i in range(len(sqr)):
        lo = max(0, i + 1 - NOISE_SMOOTHING)
        s, v = sum(sqr[lo:i + 1]), sum(var[lo:i + 1])
        expect.append(v / s if s > 0 else None)
    assert expect[0] is None and curve.noise_scale[0] == pytest.approx(expect[1])  # the first later one
    assert curve.noise_scale[1:] == pytest.approx(expect[1:])
    assert own_curves("vgg16", store_path=path).curves[0].noise_scale is None  # one worker measures none


def test_converge_carries_a_measured_noise_scale_to_other_batches(tmp_path, capsys, monkeypatch):
    path = tmp_path / "s.db"
    # synthetic: a curve at global batch 128 with a noise scale of 256 samples throughout
    points = [{"step": 50 * k, "loss": 2.0 / (1 + 0.1 * k), "global_batch_size": 128, "workers": 4, "grad_sqr": 1.0,
               "grad_var": 256.0} for k in range(1, 41)]
    with Store(path) as store:
        store.add_loss_points("with-noise", "resnet32", points)
        store.add_loss_points("without", "vgg16", [{k: v for k, v in p.items() if not k.startswith("grad")}
                                                  for p in points])
    monkeypatch.setenv("SPOTTRAIN_STORE", str(path))
    steps = {}
    for model in ("resnet32", "vgg16"):
        code, out, err = run_cli(capsys, "converge", "--model", model, "--target-loss", "0.5", "--global-batch", "128",
                                 "--global-batch", "512", "--json")
        assert code == 0, err
        d = json.loads(out)
        assert d["uses_noise_scale"] is (model == "resnet32")
        steps[model] = [r["steps"] for r in d["predictions"]]
    at_128, at_512 = steps["resnet32"]
    # A step at 512 is worth (1 + 512/256) / (1 + 128/256) = 2x one at 128 with this noise scale:
    # half the steps, where linear scaling says a quarter.
    assert at_512 == pytest.approx(at_128 / 2, rel=0.02)
    assert steps["vgg16"][0] == steps["vgg16"][1] == pytest.approx(at_128)  # without it: the steps stay (conservative)


def test_a_store_edited_or_broken_by_hand_is_a_note_not_a_crash(tmp_path, capsys, monkeypatch):
    import sqlite3

    path = tmp_path / "s.db"
    points = [{"step": 10 * k, "loss": 2.0 / k, "global_batch_size": 64, "workers": 2} for k in range(1, 7)]
    with Store(path) as store:  # synthetic curve
        store.add_loss_points("r", "resnet32", points)
    conn = sqlite3.connect(path)
    with conn:  # SQLite keeps what it is given: text in a number column, a negative batch
        conn.execute("UPDATE loss_points SET loss = 'nan-ish' WHERE step = 20")
        conn.execute("UPDATE loss_points SET step = 'ten' WHERE step = 30")
        conn.execute("UPDATE loss_points SET global_batch_size = -4 WHERE step = 40")
    conn.close()
    own = own_curves("resnet32", store_path=path)
    assert [c.steps for c in own.curves] == [(10.0, 50.0, 60.0)]
    assert sorted(line.split(": column ")[1] for line in own.skipped) == [
        "global_batch_size: expected a whole number >= 1, got -4",
        "loss: expected a finite number >= 0, got 'nan-ish'",
        "step: expected a whole number >= 0, got 'ten'"]
    monkeypatch.setenv("SPOTTRAIN_STORE", str(path))
    code, out, err = run_cli(capsys, "converge", "--model", "resnet32", "--target-loss", "0.5", "--json")
    assert code == 0 and err.count("skipped: column") == 3 and json.loads(out)["predictions"]
    # The file cut short: a warning and the user error of no curves, no traceback.
    path.write_bytes(path.read_bytes()[:600])
    code, out, err = run_cli(capsys, "converge", "--model", "resnet32", "--target-loss", "0.5")
    assert code == 2 and "store not read" in err and "Traceback" not in err
