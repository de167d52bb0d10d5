"""Shared test setup: no test reads or writes the developer's own store.

``predict``, ``plan`` and ``converge`` read the measured rows of the user's runs from the
store by default (``--from-store``), and ``spottrain run`` / ``profile`` write to it. Every test
gets ``$SPOTTRAIN_STORE`` in its own temporary directory (subprocesses inherit it), so results
do not depend on what this machine has run before and tests leave nothing behind.
"""

import pytest


@pytest.fixture(autouse=True)
def _private_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SPOTTRAIN_STORE", str(tmp_path_factory.mktemp("store") / "spottrain.db"))
