"""Shared test setup: no test reads or writes the developer's own store.

``predict``, ``plan`` and ``converge`` read the measured rows of the user's runs from the
store by default (``--from-store``), and ``spottrain run`` / ``profile`` write to it. Every test
gets ``$SPOTTRAIN_STORE`` in its own temporary directory (subprocesses inherit it), so results
do not depend on what this machine has run before and tests leave nothing behind.
"""

import os
import signal
import subprocess
import sys

import demo_once
import pytest


def pytest_configure(config):
    # A shell without job control starts a background command with Ctrl-C ignored, and an ignored
    # signal stays ignored in every process started from it: the tests that press Ctrl-C on a
    # profile and on a store writer would wait for an exit that never comes. Python's own
    # handler here is reset to the default in each child at exec, as in a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _shared_between_workers(tmp_path_factory):
    # pytest-xdist's workers each have a base temporary directory under the session's one
    if os.environ.get("PYTEST_XDIST_WORKER"):
        demo_once.SHARED_DIR = tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def mlp_run(tmp_path_factory):
    """A real 2-worker local run of the mlp example (job ``mlp-run``), 60 steps at global batch 64,
    every forward pass sleeping 10 ms, recorded with ``--store`` in ``s.db`` (the store of
    ``$SPOTTRAIN_STORE``, ``unused.db``, is never made); the launcher's output in ``stderr.txt``.
    On the CPU wherever it runs: on a one-GPU machine the two workers would share the GPU, and
    such a run stores no row (its speed is not the GPU's).
    The modules that read a run's rows, curves and all-reduce times share it: on a shared worker
    of ``pytest -n`` (the process group) it runs once."""
    root = tmp_path_factory.mktemp("mlp-run")
    env = {**os.environ, "SPOTTRAIN_EXAMPLE_SLEEP_S": "0.01", "SPOTTRAIN_STORE": str(root / "unused.db"),
           "SPOTTRAIN_DEVICE": "cpu"}
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "local", "--example", "mlp",
                          "--workers", "2", "--steps", "60", "--global-batch", "64", "--checkpoint-every", "1000",
                          "--job-id", "mlp-run", "--run-dir", str(root / "run"), "--store", str(root / "s.db")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    (root / "stderr.txt").write_text(out.stderr + out.stdout)
    return root


@pytest.fixture(autouse=True)
def _private_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPOTTRAIN_STORE", str(tmp_path_factory.mktemp("store") / "spottrain.db"))
    # Output as piped to a file (the CLI's own width then), whatever width the runner set:
    # pytest-xdist's workers inherit COLUMNS=80.
    monkeypatch.delenv("COLUMNS", raising=False)


# Modules whose tests start training processes, launchers or network namespaces: under
# ``pytest -n`` they run one after another on one worker (as without -n), so their liveness
# deadlines and fixed namespace names never meet another such test; the rest spreads over the
# other workers.
_PROCESS_MODULES = ("test_runtime_", "test_own_runs", "test_own_curves", "test_readme_steps", "test_layers", "test_policies_registry")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.split(".")[-1].startswith(_PROCESS_MODULES):
            item.add_marker(pytest.mark.xdist_group("processes"))
