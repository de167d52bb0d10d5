"""`spottrain runs list/show/rm`: the runs in the store and what they left for the models."""

import json

import pytest

from spottrain.store import Store
from test_own_runs import run_cli

ROW = {"model": "resnet50", "batch_size": 64, "cluster": "1xV100:4", "gpu": "V100", "workers": 4, "ps": 0,
       "sync": "sync", "throughput": 500.0, "step_time_s": 256 / 500.0, "steps": 30, "warmup_steps": 3}
"""A synthetic measured row (500 samples/s: well below what the calibration predicts)."""


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """Two recorded runs (synthetic figures): one with a measured row and a loss curve with its
    noise scale, one with a loss curve alone."""
    path = tmp_path / "s.db"
    with Store(path) as db:
        db.record_run("gpu-run", status="completed", meta={"backend": "local"})
        db.add_measurements("gpu-run", [ROW])
        db.add_loss_points("gpu-run", "resnet50", [{"step": 10 * k, "loss": 2.0 / k, "global_batch_size": 256,
                                                    "workers": 4, "grad_sqr": 1.0, "grad_var": 100.0}
                                                   for k in range(1, 21)])
        db.record_run("cpu-run", status="failed", meta={"backend": "skypilot"})
        db.add_loss_points("cpu-run", "example-mlp", [{"step": 10, "loss": 1.0, "global_batch_size": 64, "workers": 1}])
    monkeypatch.setenv("SPOTTRAIN_STORE", str(path))
    return path


def test_list_says_what_each_run_left(store, capsys):
    code, out, err = run_cli(capsys, "runs", "list", "--json")
    assert code == 0, err
    runs = {r["run_id"]: r for r in json.loads(out)}
    assert (runs["gpu-run"]["measured_rows"], runs["gpu-run"]["loss_points"], runs["gpu-run"]["noise_scale"]) == (1, 20, True)
    assert (runs["cpu-run"]["status"], runs["cpu-run"]["backend"], runs["cpu-run"]["models"]) == ("failed", "skypilot",
                                                                                                  ["example-mlp"])
    assert runs["cpu-run"]["noise_scale"] is False
    code, out, _ = run_cli(capsys, "runs", "list", "--json", "--model", "resnet50")
    assert [r["run_id"] for r in json.loads(out)] == ["gpu-run"]
    code, out, _ = run_cli(capsys, "runs", "list")
    assert code == 0 and "gpu-run" in out and "20 + noise scale" in out


def test_show_gives_the_rows_and_the_curve(store, capsys):
    code, out, err = run_cli(capsys, "runs", "show", "gpu-run", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["rows"][0]["throughput"] == 500.0 and [p["step"] for p in d["loss_curve"]] == list(range(10, 201, 10))
    code, out, _ = run_cli(capsys, "runs", "show", "gpu-run")
    assert "measured rows" in out and "1xV100:4" in out and "first and last 6 of 20 points" in out
    code, out, err = run_cli(capsys, "runs", "show", "nope")
    assert code == 2 and out == "" and "unknown run 'nope'" in err and "Traceback" not in err


def test_rm_takes_a_run_out_of_the_models_all_or_none(store, capsys):
    args = ("predict", "--model", "resnet50", "--batch-size", "64", "--cluster", "1xV100:4", "--json")
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "using 1 measured row" in err
    with_row = json.loads(out)["throughput"]
    code, _, err = run_cli(capsys, "runs", "rm", "gpu-run", "nope")
    assert code == 2 and "no run nope" in err and "nothing removed" in err
    with Store(store, read_only=True) as db:
        assert len(db.measurements()) == 1 and len(db.loss_points(run_id="gpu-run")) == 20
    code, _, err = run_cli(capsys, "runs", "rm", "gpu-run")
    assert code == 0 and f"removed 1 run(s) from {store}" in err
    with Store(store, read_only=True) as db:
        assert db.measurements() == [] and db.loss_points(run_id="gpu-run") == []
        assert [r.run_id for r in db.list_runs()] == ["cpu-run"] and db.events("gpu-run") == []
    code, out, err = run_cli(capsys, *args)
    assert code == 0 and "measured row" not in err and json.loads(out)["throughput"] > with_row
    code, _, err = run_cli(capsys, "converge", "--model", "resnet50", "--target-loss", "0.5")
    assert code == 2 and "no loss curves of resnet50" in err


def test_no_store_yet_is_said_and_nothing_is_created(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "none" / "s.db"
    monkeypatch.setenv("SPOTTRAIN_STORE", str(missing))
    code, out, err = run_cli(capsys, "runs", "list", "--json")
    assert code == 0 and json.loads(out) == [] and f"no runs recorded in {missing} yet" in err
    code, _, err = run_cli(capsys, "runs", "rm", "x")
    assert code == 2 and "no store here" in err
    assert not missing.parent.exists()
