"""The transient-aware elastic training runtime (torch.distributed underneath).

Attributes are loaded lazily so that torch-free parts (the SkyPilot spec writer, fault
schedules, notice watchers) do not import torch.

>>> from spottrain.runtime import Trainer, TrainConfig        # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Trainer": "api", "TrainConfig": "api",
    "Checkpointer": "checkpoint", "load_checkpoint": "checkpoint", "CheckpointInfo": "checkpoint",
    "DeterministicSampler": "sampler",
    "LocalJob": "local", "run_local": "local",
    "RunSummary": "summary",
    "Injection": "faults", "parse_injections": "faults", "load_injection_trace": "faults",
    "SkyTask": "skypilot", "task_config": "skypilot", "task_from_plan": "skypilot", "write_task": "skypilot",
    "AwsSpotWatcher": "watcher", "GcpPreemptionWatcher": "watcher", "Notice": "watcher", "start_watcher": "watcher",
    "EXAMPLES": "examples",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spottrain.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"spottrain.runtime.{module}"), name)
