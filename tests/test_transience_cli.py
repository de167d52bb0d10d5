"""`spottrain transience` end to end."""

import json
import math
import subprocess
import sys

import pytest


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "transience", *args],
                          capture_output=True, text=True, timeout=120)


def test_json_schema_gcp_v100():
    r = _cli("--gpu", "V100", "--cloud", "gcp", "--json", "--nodes", "4")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["cloud"] == "gcp" and d["gpu"] == "V100" and d["max_lifetime_s"] == 86400
    assert d["chosen"] in ("exponential", "weibull", "bathtub")
    names = {m["model"] for m in d["models"]}
    assert {"kaplan-meier", "exponential", "weibull"} <= names
    assert [m["model"] for m in d["models"] if m["chosen"]] == [d["chosen"]]
    assert d["revocations_observed"] > 0 and d["mtbf_s"] > 0 and 0 < d["p_revoked_within_1h"] < 1
    assert {"mean_s", "p95_s"} <= set(d["replacement_delay"])
    assert 0 <= d["availability"]["p_obtain_4"] <= 1
    job = d["job"]
    assert job["nodes"] == 4 and job["expected_slowdown"] >= 1 and job["optimal_interval_s"] > 0
    # Young/Daly for the cluster: its MTBF is the node's over the node count
    assert job["young_daly_interval_s"] == pytest.approx(math.sqrt(2 * job["checkpoint_cost_s"] * d["mtbf_s"] / 4))


def test_plot_written_and_not_overwritten(tmp_path):
    png = tmp_path / "v100.png"
    r = _cli("--gpu", "V100", "--cloud", "gcp", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    before = png.stat().st_mtime_ns
    r = _cli("--gpu", "V100", "--cloud", "gcp", "--plot", str(png))
    assert r.returncode == 2 and "--force" in r.stderr and "Traceback" not in r.stderr
    assert png.stat().st_mtime_ns == before
    r = _cli("--gpu", "V100", "--cloud", "gcp", "--plot", str(png), "--force")
    assert r.returncode == 0, r.stderr


def test_unknown_gpu_near_miss_exit_2():
    r = _cli("--gpu", "V10", "--cloud", "gcp")
    assert r.returncode == 2
    assert "V100" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_no_data_falls_back_and_says_so():
    r = _cli("--gpu", "T4", "--cloud", "gcp", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pooled_from"]


@pytest.mark.parametrize("nodes, expect", [("1", "1 node "), ("4", "4 nodes ")])
def test_obtain_line_names_each_cluster_size_once(nodes, expect):
    r = _cli("--gpu", "V100", "--cloud", "aws", "--nodes", nodes)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("P(obtain now)"))
    assert expect in line and "1 nodes" not in line
