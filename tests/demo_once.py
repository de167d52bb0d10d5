"""Run the quick demo once per test session; the pipeline and browser tests share the result.

Under ``pytest -n`` every worker is a process of its own: the first to ask runs the demo and
leaves the result (JSON) in the session's shared temporary directory, under a lock, and the
others read it instead of running the demo again (about a minute of CPU each).
"""

from __future__ import annotations

import fcntl
import functools
import json
from pathlib import Path

from spottrain.files import write_atomic

SHARED_DIR: Path | None = None
"""The session's directory that every xdist worker sees (set by conftest); None: one process."""


@functools.cache
def quick_demo_result() -> dict:
    from spottrain.demo import DemoConfig, run_demo

    if SHARED_DIR is None:
        return json.loads(json.dumps(run_demo(DemoConfig(quick=True))))
    cache = SHARED_DIR / "quick-demo.json"
    with open(SHARED_DIR / "quick-demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache.exists():
            write_atomic(cache, json.dumps(run_demo(DemoConfig(quick=True))))
        return json.loads(cache.read_text())
