"""One description of the benchmark machine, shared by the bench scripts."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def machine() -> str:
    """CPU model, core count and Python version, e.g. ``AMD EPYC, 2 cores, Python 3.11.7``."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
