"""A run times its gradient all-reduce and stores it with its measurement rows.

A real 2-worker local run (gloo on CPU) must store a row whose ``sync_time_s`` is positive and
shorter than its step time, equal to the mean of the per-step all-reduce waits its chief logged
over the steps the row keeps (warm-up and stalls left out). ``predict --from-store`` reads the
column as the measurement table's ``sync_time_s`` (which it refuses when longer than the step).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from spottrain.runtime.record import steady_step_times
from spottrain.runtime.summary import read_worker_events
from spottrain.store import Store

pytestmark = pytest.mark.timeout(240)


def test_a_two_worker_run_stores_its_all_reduce_time(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--example", "mlp",
                          "--workers", "2", "--steps", "60", "--global-batch", "64", "--checkpoint-every", "1000",
                          "--job-id", "sync-run", "--run-dir", str(tmp_path / "run"), "--store", str(tmp_path / "s.db")],
                         capture_output=True, text=True, env=env, timeout=200, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    with Store(tmp_path / "s.db") as store:
        rows = store.measurements()
    assert len(rows) == 1 and rows[0]["workers"] == 2
    row = rows[0]
    assert 0 < row["sync_time_s"] < row["step_time_s"]
    # what the chief logged per step, over the steps the row keeps
    events = read_worker_events(tmp_path / "run")
    logged = [e["sync_time_s"] for e in events if e["kind"] == "step"]
    assert len(logged) == 60 and all(x >= 0 for x in logged)
    kept, _ = steady_step_times(events)[2]
    assert len(kept) == row["steps"]
    assert row["sync_time_s"] == pytest.approx(statistics.fmean(g["sync_time_s"] for g in kept))

