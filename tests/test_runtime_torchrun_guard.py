"""The managed-torchrun task stops on the user's input error instead of letting torchrun retry it.

The task's own ``run`` script (as SkyPilot would run it on a node, with the ``SKYPILOT_*``
variables set and ``conda`` a no-op) is executed here with real ``torchrun`` and two workers.
A worker whose trainer refuses its input (a global batch smaller than the world) must run once
(``TORCHELASTIC_RESTART_COUNT`` 0 only), and the script must end with code 87 and the worker's
one-line message; a worker that crashes for another reason is still restarted by torchrun.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spottrain.runtime import torchrun_guard
from spottrain.runtime.elastic import EXIT_INPUT
from spottrain.runtime.skypilot import INPUT_ERROR_ENV, RDZV_PORT_ENV, SkyTask, task_config

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[1]

TRAIN = """
import os, sys, time
attempt = os.environ['TORCHELASTIC_RESTART_COUNT']
with open(os.environ["RUNS_LOG"], "a") as fh:
    fh.write(f"{os.environ['RANK']} {attempt}\\n")
from spottrain.runtime.api import TrainConfig
from spottrain.runtime.examples import build_trainer
if sys.argv[1] == "crash":
    # once both workers of this attempt have started (torchrun stops the other when one fails)
    end = time.monotonic() + 60
    while time.monotonic() < end and sum(ln.split()[1] == attempt for ln in open(os.environ["RUNS_LOG"])) < 2:
        time.sleep(0.05)
    raise RuntimeError("a crash that is not the user's input")
build_trainer("mlp", TrainConfig.from_env(steps=5, global_batch_size=1)).fit()  # 1 < world 2: refused
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_task(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], list[tuple[int, int]]]:
    (tmp_path / "train.py").write_text(TRAIN)
    task = SkyTask(name="guard", command=["python", "train.py", mode], num_nodes=1, accelerators="V100:2",
                   use_spot=True, max_restarts=1)
    script = "conda() { :; }\n" + task_config(task)["run"]
    runs = tmp_path / "runs.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "RUNS_LOG": str(runs), "OMP_NUM_THREADS": "1",
           "TMPDIR": str(tmp_path), "SKYPILOT_NUM_NODES": "1", "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "127.0.0.1",
           "SKYPILOT_TASK_ID": f"guard-{mode}-{os.getpid()}", "SKYPILOT_NUM_GPUS_PER_NODE": "2",
           # a port of its own: the previous test's rendezvous store may still hold the default one
           RDZV_PORT_ENV: str(_free_port())}
    out = subprocess.run(["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=200)
    started = [tuple(int(x) for x in line.split()) for line in runs.read_text().splitlines()] if runs.exists() else []
    return out, started  # type: ignore[return-value]


def test_input_error_under_torchrun_ends_the_task_with_one_line_and_no_restart(tmp_path: Path) -> None:
    out, started = _run_task(tmp_path, "input")
    assert out.returncode == EXIT_INPUT, out.stderr[-2000:]
    assert sorted(started) == [(0, 0), (1, 0)]  # each worker ran once: torchrun did not restart them
    lines = out.stderr.splitlines()
    idx = lines.index("spottrain: stopped on the input error above; not restarted")
    assert lines[idx - 1] == "error: global batch 1 is smaller than the world size 2"
    assert not list(tmp_path.glob("spottrain-input-error.*"))  # the script removed its node-local file


def test_other_failures_are_still_restarted_by_torchrun(tmp_path: Path) -> None:
    out, started = _run_task(tmp_path, "crash")
    assert out.returncode not in (0, EXIT_INPUT)
    assert sorted(started) == [(0, 0), (0, 1), (1, 0), (1, 1)], out.stderr[-2000:]  # --max-restarts=1: a second attempt
    assert "not restarted" not in out.stderr and not list(tmp_path.glob("spottrain-input-error.*"))


def test_the_guard_and_the_task_name_the_same_file_variable() -> None:
    assert torchrun_guard.ENV_MARKER == INPUT_ERROR_ENV
    assert "-m spottrain.runtime.torchrun_guard train.py" in task_config(
        SkyTask(name="x", command=["python", "train.py"], num_nodes=2, accelerators=None, use_spot=True))["run"]
