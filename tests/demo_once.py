"""Run the quick demo once per test session; the pipeline and browser tests share the result."""

from __future__ import annotations

import functools


@functools.cache
def quick_demo_result() -> dict:
    from spottrain.demo import DemoConfig, run_demo

    return run_demo(DemoConfig(quick=True))
