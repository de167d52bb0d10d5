"""A run times its gradient all-reduce and stores it with its measurement rows.

A real 2-worker local run (gloo on CPU) must store a row whose ``sync_time_s`` is positive and
shorter than its step time, equal to the mean of the per-step all-reduce waits its chief logged
over the steps the row keeps (warm-up and stalls left out). ``predict --from-store`` reads the
column as the measurement table's ``sync_time_s`` (which it refuses when longer than the step).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from spottrain.runtime.record import steady_step_times
from spottrain.runtime.summary import read_worker_events
from spottrain.store import Store

pytestmark = pytest.mark.timeout(240)


def test_a_two_worker_run_stores_its_all_reduce_time(mlp_run: Path) -> None:
    with Store(mlp_run / "s.db") as store:
        rows = store.measurements()
    assert len(rows) == 1 and rows[0]["workers"] == 2
    row = rows[0]
    assert 0 < row["sync_time_s"] < row["step_time_s"]
    # what the chief logged per step, over the steps the row keeps
    events = read_worker_events(mlp_run / "run")
    logged = [e["sync_time_s"] for e in events if e["kind"] == "step"]
    assert len(logged) == 60 and all(x >= 0 for x in logged)
    kept, _ = steady_step_times(events)[2]
    assert len(kept) == row["steps"]
    assert row["sync_time_s"] == pytest.approx(statistics.fmean(g["sync_time_s"] for g in kept))

