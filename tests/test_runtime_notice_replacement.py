"""A node that leaves after a preemption notice is replaced, as a revoked one is.

The leaver's process is still exiting when the policy is asked about it; it was counted as a
pending node (started, not a member), so ``replace-same`` saw no deficit and the job went on one
node short for good (found in the 30-minute soak: every later fault aimed at that slot found no
worker). Real processes: three workers, a SIGTERM to one of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runtime_pace import Pace
from spottrain.runtime.faults import parse_injections
from spottrain.runtime.local import LocalJob, run_local

pytestmark = pytest.mark.timeout(180)


def test_a_worker_that_left_after_a_notice_is_replaced(tmp_path: Path) -> None:
    # Slow steps until the replacement has joined, then full speed. The slow steps alone (180 left
    # after the notice, ~9 s) are a bet that its start-up (Python and torch imports, several times
    # longer on a loaded machine) ends first; if not, the job finishes one node short. So after
    # step 100 (the notice at step 20, its 2 s wait for a decision and the leave at a step boundary
    # are behind) the workers wait for that join instead of racing it.
    pace = Pace(tmp_path / "pace", 0.05, hold_at_step=100)
    job = LocalJob(command=[sys.executable, "-m", "spottrain.runtime.examples", "mlp"], workers=3,
                   run_dir=tmp_path / "run", job_id="notice-replace",
                   env={"SPOTTRAIN_STEPS": "200", **pace.env}, steps=200, checkpoint_dir=tmp_path / "ck",
                   injections=parse_injections("sigterm:1@step20", workers=3), replacement_delay_s=0.5,
                   timeout_s=150)
    decisions: list[dict] = []

    def then(kind: str, data: dict) -> None:
        if kind == "decision":
            decisions.append(data)

    s = run_local(job, on_event=pace.fast_after("joined", then=then))
    assert s.ok, s.failure
    assert s.notices == 1 and s.lost_steps == 0
    revoked = [d for d in decisions if d["event"] == "revoked" and d["worker"] == "w1"]
    assert len(revoked) == 1 and revoked[0]["request"] == 1, decisions
    assert s.replacements == 1
    worlds = [m["world"] for m in s.membership]
    assert worlds[0] == 3 and 2 in worlds and worlds[-1] == 3  # one short after the notice, whole again
