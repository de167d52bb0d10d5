"""spottrain: plan, predict and run deep-learning training on revocable cloud GPUs.

Planning code (catalog, performance and transience models, planner, simulator) never imports
torch; the profiler and the runtime do, and are imported lazily here.
"""

from __future__ import annotations

from spottrain.errors import (
    CheckpointError,
    InfeasibleError,
    InputError,
    NotFittedError,
    SchemaVersionError,
    SpottrainError,
    UnknownNameError,
)
from spottrain.types import ClusterGroup, ClusterSpec

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "ClusterGroup",
    "ClusterSpec",
    "InfeasibleError",
    "InputError",
    "NotFittedError",
    "SchemaVersionError",
    "SpottrainError",
    "UnknownNameError",
    "__version__",
]
