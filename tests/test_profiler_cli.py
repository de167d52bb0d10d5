"""`spottrain profile` and `spottrain profiles` from the command line."""

import json
import subprocess
import sys

import pytest

REQUIRED = ["model", "batch_size", "param_count", "gradient_bytes", "flops_per_sample_forward",
            "flops_per_sample_backward", "step_time_s", "samples_per_s", "device"]


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", *args], capture_output=True, text=True, cwd=cwd)


def test_profile_json_store_show_rm(tmp_path):
    store = str(tmp_path / "s.db")
    out = cli("profile", "--model", "mlp", "-b", "8", "--iterations", "3", "--warmup", "1", "--json",
              "--store", store, "--out", str(tmp_path / "p.json"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert all(k in data for k in REQUIRED)
    assert data["model"] == "mlp-tiny" and data["batch_size"] == 8
    assert json.loads((tmp_path / "p.json").read_text()) == data
    rows = json.loads(cli("profiles", "list", "--json", "--store", store).stdout)
    assert len(rows) == 1 and rows[0]["model"] == "mlp-tiny"
    shown = json.loads(cli("profiles", "show", str(rows[0]["id"]), "--json", "--store", store).stdout)
    assert shown == data
    human = cli("profiles", "show", "mlp-tiny", "--store", store)
    assert human.returncode == 0 and "forward" in human.stdout
    assert cli("profiles", "rm", str(rows[0]["id"]), "--store", store).returncode == 0
    assert json.loads(cli("profiles", "list", "--json", "--store", store).stdout) == []
    # --out never silently overwrites.
    again = cli("profile", "--model", "mlp-tiny", "--out", str(tmp_path / "p.json"), "--no-store")
    assert again.returncode == 2 and "--force" in again.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "resnet51"], "did you mean"),
        (["--model", "nosuchpkg_q:build"], "nosuchpkg_q"),
        (["--model", "mlp-tiny", "--precision", "fp7"], "precision"),
        (["--model", "mlp-tiny", "--data", "x:y"], "--loss-steps"),
        ([], "--model"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    out = cli("profile", *args, "--store", str(tmp_path / "s.db"), "--iterations", "2", "--warmup", "0")
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_user_entry_point_from_cwd(tmp_path):
    (tmp_path / "mynet.py").write_text(
        "import torch\n"
        "def build(batch_size=2):\n"
        "    m = torch.nn.Linear(3, 1)\n"
        "    return m, (torch.randn(batch_size, 3),)\n"
    )
    out = cli("profile", "--model", "mynet:build", "-b", "5", "--iterations", "2", "--warmup", "1", "--json",
              "--no-store", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"] == "mynet:build" and data["param_count"] == 4 and data["batch_size"] == 5


def test_list_models():
    out = cli("profile", "--list-models", "--json")
    names = [m["name"] for m in json.loads(out.stdout)]
    assert {"resnet50", "resnet32", "vgg16", "bert-base", "gpt2-small", "transformer-base", "lstm-lm"} <= set(names)


def test_ctrl_c_during_measurement_leaves_store_empty_and_consistent(tmp_path):
    import os
    import signal
    import sqlite3
    import time

    store = tmp_path / "s.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "spottrain.cli.main", "profile", "--model", "resnet32", "-b", "32",
         "--iterations", "1000", "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 60
    while not store.exists() and time.time() < deadline:  # the store is opened before measuring
        time.sleep(0.1)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    conn = sqlite3.connect(store)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM profiles").fetchone()[0] == 0
    conn.close()
    assert json.loads(cli("profiles", "list", "--json", "--store", str(store)).stdout) == []
