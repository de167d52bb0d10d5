"""Members agree on checkpoints and membership every few fast steps, yet checkpoint at exact steps.

The step-boundary agreement is a collective; on steps much shorter than
:data:`~spottrain.runtime.api.BOUNDARY_EVERY_S` it runs only every few steps, at a step rank 0
announced in the previous agreement. A real 2-worker local run (gloo on CPU, the tiny ``mlp``
example: milliseconds per step) must agree fewer times than it steps, and still write its
step-count checkpoints at exactly every 7th step and complete every step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spottrain.runtime.summary import read_worker_events

pytestmark = pytest.mark.timeout(240)
STEPS, EVERY = 120, 7


def test_fast_steps_agree_every_few_steps_and_checkpoint_at_exact_steps(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--example", "mlp",
                          "--workers", "2", "--steps", str(STEPS), "--global-batch", "64", "--checkpoint-every",
                          str(EVERY), "--job-id", "boundary", "--run-dir", str(tmp_path / "run"),
                          "--store", str(tmp_path / "s.db")], capture_output=True, text=True, env=env, timeout=200,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    events = read_worker_events(tmp_path / "run")
    steps = [e["step"] for e in events if e["kind"] == "step"]
    assert steps == list(range(1, STEPS + 1))
    saved = sorted(e["step"] for e in events if e["kind"] == "ckpt")
    assert saved == [*range(EVERY, STEPS, EVERY), STEPS]  # every 7th step, then the final checkpoint
    done = [e for e in events if e["kind"] == "done"]
    assert len(done) == 1
    # at least one agreement per checkpoint, fewer than one per step
    assert len(saved) - 1 <= done[0]["agreements"] < STEPS - 1
