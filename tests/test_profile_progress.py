"""`spottrain profile` says what it will cost before it starts and reports progress off a terminal."""

import subprocess
import sys


def test_profile_estimate_then_progress_lines_when_piped(tmp_path):
    r = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "profile", "--model", "mlp-tiny", "--batch-size", "8",
                        "--no-store", "--out", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    est = next(i for i, x in enumerate(lines) if x.startswith("profile: 6 steps of batch 8 to run on CPU"))
    first = next(i for i, x in enumerate(lines) if x.startswith("profile: first step "))
    measures = [i for i, x in enumerate(lines) if x.startswith("profile: measure ")]
    # CPU default: 5 measured steps after one warm-up, each on its own line, after the estimate
    assert [lines[i].split()[2] for i in measures] == [f"{k}/5" for k in range(1, 6)]
    assert est < first < measures[0]
    assert "expected about" in lines[first]
    assert any(x.startswith("profile: warm-up 1/1") for x in lines)
    assert "FLOP each" in lines[est] and "peak memory about" in lines[est]
    assert "e+" not in r.stdout and "e-0" not in r.stdout  # step times in plain units
    assert "median over 5 iterations" in r.stdout
