"""`spottrain converge`: the convergence model fitted on a past run's loss-curve CSV, end to end."""

import csv
import json

import pytest

from spottrain.cli.main import main
from spottrain.perf.convergence import (ConvergenceModel, curves_from_rows, first_crossing, load_accuracy_curves,
                                       read_loss_curves)


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _write_real_curves(path, workers):
    """The shipped transient-dl ResNet-32 runs (accuracy per evaluation, one row per run and step)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "workers", "batch_size", "step", "accuracy"])
        for r in load_accuracy_curves():
            if int(r["workers"]) in workers:
                w.writerow([r["curve"], r["workers"], r["batch_size"], r["step"], r["accuracy"]])


def test_reader_pools_runs_like_the_shipped_curves(tmp_path):
    path = tmp_path / "runs.csv"
    _write_real_curves(path, {1, 2, 4, 8})
    ref = curves_from_rows(load_accuracy_curves())
    got = {c.workers: c for c in read_loss_curves(path)}
    assert set(got) == {1, 2, 4, 8}
    for n, c in got.items():
        assert c.steps == pytest.approx(ref[n].steps) and c.losses == pytest.approx(ref[n].losses)


def test_held_out_worker_count_from_the_cli_is_the_library_answer_and_near_the_measurement(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    _write_real_curves(path, {1, 2, 4})
    code, out, _ = run(capsys, "converge", "--curves", str(path), "--target-loss", "0.15", "--workers", "8", "--json")
    assert code in (0, None)
    pred = json.loads(out)["predictions"][0]
    lib = ConvergenceModel(lr_boundaries="auto", form="staleness").fit(read_loss_curves(path))
    assert pred["steps"] == pytest.approx(lib.steps_to_target(0.15, batch_size_global=128, workers=8))
    assert pred["samples"] == pytest.approx(pred["steps"] * 128)
    measured = first_crossing(curves_from_rows(load_accuracy_curves())[8], 0.15)  # never seen by the fit
    assert abs(pred["steps"] - measured) / measured < 0.15
    # the ~90 % interval: calibrated on the fit's own held-out worker counts (1, 2, 4), and holding the measurement
    assert pred["steps_low"] < pred["steps"] < pred["steps_high"]
    assert pred["steps_low"] <= measured <= pred["steps_high"]
    assert json.loads(out)["steps_log_error_q90"] == pytest.approx(lib.steps_log_error_q90())


def test_sync_counts_the_global_batch_and_no_staleness(tmp_path, capsys):
    path = tmp_path / "one.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{5.0 / (s + 50) + 0.1:.6f}\n" for s in range(10, 2000, 40)))
    code, out, _ = run(capsys, "converge", "--curves", str(path), "--target-loss", "0.15", "--batch-size", "32",
                       "--workers", "1", "--workers", "4", "--sync", "sync", "--lr-boundaries", "none", "--json")
    assert code in (0, None)
    one, four = json.loads(out)["predictions"]
    assert one["steps"] == pytest.approx(50.0, rel=0.05)  # 5 / (s + 50) + 0.1 = 0.15 at s = 50
    assert four["steps"] == pytest.approx(one["steps"]) and four["samples"] == pytest.approx(4 * one["samples"])


def test_unreachable_target_says_so(tmp_path, capsys):
    path = tmp_path / "one.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{5.0 / (s + 50) + 0.1:.6f}\n" for s in range(10, 2000, 40)))
    code, out, _ = run(capsys, "converge", "--curves", str(path), "--target-loss", "0.05", "--batch-size", "32")
    assert code in (0, None) and "not reached" in out


@pytest.mark.parametrize(("text", "where"), [
    ("step,value\n1,2\n", "line 1, column loss"),
    ("step,loss,batch_size\n1,2,8\nx,3,8\n", "line 3, column step"),
    ("step,loss,batch_size\n1,2,0\n", "line 2, column batch_size"),
    ("step,accuracy,batch_size\n1,1.5,32\n", "line 2, column accuracy"),
    ("step,loss,workers,batch_size\n1,2,2.5,32\n", "line 2, column workers"),
    ("step,loss,batch_size,staleness\n1,2,8,-0.5\n", "line 2, column staleness"),
    ("step,loss\n1,2\n", "line 2, column batch_size: expected a per-worker batch size"),
    ("step,loss\n", "no data rows"),
])
def test_bad_tables_name_the_line_and_column(tmp_path, capsys, text, where):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, _, err = run(capsys, "converge", "--curves", str(path), "--target-loss", "0.1")
    assert code == 2 and where in err and "Traceback" not in err


def test_bad_options(tmp_path, capsys):
    path = tmp_path / "one.csv"
    path.write_text("step,loss\n" + "".join(f"{s},{5.0 / (s + 50) + 0.1:.6f}\n" for s in range(10, 2000, 40)))
    for args, where in ((("--target-loss", "-1"), "--target-loss"), (("--target-loss", "0.1", "--sync", "x"), "--sync"),
                        (("--target-loss", "0.1", "--lr-boundaries", "soon"), "--lr-boundaries")):
        code, _, err = run(capsys, "converge", "--curves", str(path), "--batch-size", "8", *args)
        assert code == 2 and where in err
    code, _, err = run(capsys, "converge", "--curves", str(tmp_path / "missing.csv"), "--target-loss", "0.1")
    assert code == 2 and "file not found" in err



def _pollux_path(name="cifar10"):
    from importlib import resources

    return str(resources.files("spottrain").joinpath("data", "measurements", "curves", f"pollux_{name}.csv"))


def test_sync_curves_at_several_batches_use_the_batch_model_per_global_batch(capsys):
    """--sync sync with the Pollux CIFAR-10 runs: one row per global batch, the library's answer,
    accuracy targets in the curve's own metric."""
    from spottrain.perf.batch_scaling import BatchScalingModel

    path = _pollux_path()
    code, out, err = run(capsys, "converge", "--curves", path, "--sync", "sync", "--target", "0.85",
                         "--workers", "3", "--workers", "6", "--batch-size", "256", "--json")
    assert code in (0, None), err
    doc = json.loads(out)
    assert doc["model"] == "batch_scaling" and doc["uses_noise_scale"] and doc["warnings"] == []
    lib = BatchScalingModel().fit(read_loss_curves(path))
    rows = doc["predictions"]
    assert [(r["workers"], r["global_batch"]) for r in rows] == [(3, 768), (6, 1536)]
    for r in rows:
        assert r["target"] == pytest.approx(0.85) and r["target_loss"] == pytest.approx(0.15)
        assert r["steps"] == pytest.approx(lib.steps_to_target(0.15, batch_size_global=r["global_batch"]))
        assert r["samples"] == pytest.approx(r["steps"] * r["global_batch"])
        assert r["steps_low"] < r["steps"] < r["steps_high"] and not r["extrapolated"]
    assert rows[1]["steps"] < rows[0]["steps"] < 2 * rows[1]["steps"]  # fewer steps, not half as many


def test_sync_extrapolated_batch_warns_once_and_widens(capsys):
    path = _pollux_path()
    code, out, err = run(capsys, "converge", "--curves", path, "--sync", "sync", "--target", "0.85",
                         "--target", "0.9", "--global-batch", "2048", "--global-batch", "16384", "--global-batch", "65536")
    assert code in (0, None)
    assert err.count("warning:") == 1 and "outside the measured batch sizes 128-4096" in err
    assert "extrapolated" in out and "16384" in out and "65536" in out
    code, out, _ = run(capsys, "converge", "--curves", path, "--sync", "sync", "--target", "0.85",
                       "--global-batch", "2048", "--global-batch", "16384", "--json")
    inside, far = json.loads(out)["predictions"]
    assert far["extrapolated"] and not inside["extrapolated"]
    assert far["steps_high"] / far["steps_low"] > inside["steps_high"] / inside["steps_low"]


@pytest.mark.parametrize("text, where", [
    ("step,accuracy,batch_size\n100,0.5,256\n200,0.6,0\n", "line 3, column batch_size"),
    ("step,accuracy,batch_size\n100,0.8,256\n200,0.7,256\n300,0.5,256\n", "line 4, column accuracy"),
])
def test_sync_bad_curve_rows_are_one_line_exit_2(tmp_path, capsys, text, where):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, out, err = run(capsys, "converge", "--curves", str(path), "--sync", "sync", "--target", "0.55")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(path) in err and where in err


def test_target_options_are_checked(capsys):
    path = _pollux_path("bert")
    code, _, err = run(capsys, "converge", "--curves", path, "--sync", "sync")
    assert code == 2 and "--target" in err
    code, _, err = run(capsys, "converge", "--curves", path, "--sync", "sync", "--target", "100")
    assert code == 2 and "short of the perfect f1 100" in err
    code, _, err = run(capsys, "converge", "--curves", path, "--target", "88", "--global-batch", "64")
    assert code == 2 and "--sync sync" in err


def test_async_default_on_synchronous_batch_curves_points_to_sync(capsys):
    code, out, err = run(capsys, "converge", "--curves", _pollux_path("ncf"), "--target", "0.68", "--workers", "2")
    assert code in (0, None) and "--sync sync" in err and "batch-size model" in err
