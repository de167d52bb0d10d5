"""Workload profiler: measure a real PyTorch model's training step cheaply.

Importing this package does not import torch: :mod:`~spottrain.profiler.schema` (the profile
record) and :mod:`~spottrain.profiler.zoo_info` (facts about the zoo) are torch-free and
are what planning code reads. ``profile``, ``profile_zoo`` and ``zoo`` load torch on first use.
"""

from __future__ import annotations

from typing import Any

from spottrain.profiler.schema import PROFILE_SCHEMA_VERSION, PhaseTiming, Profile, load_profile
from spottrain.profiler.zoo_info import ZooEntry, canonical_model, zoo_entry, zoo_info, zoo_names

__all__ = [
    "PROFILE_SCHEMA_VERSION",
    "PhaseTiming",
    "Profile",
    "ZooEntry",
    "canonical_model",
    "load_profile",
    "profile",
    "profile_zoo",
    "zoo_entry",
    "zoo_info",
    "zoo_names",
]


def __getattr__(name: str) -> Any:
    # Lazy: keeps `import spottrain.profiler` torch-free for planning code.
    if name in ("profile", "profile_zoo", "profile_entry_point"):
        from spottrain.profiler import profiler

        return getattr(profiler, name)
    if name == "zoo":
        import importlib

        return importlib.import_module("spottrain.profiler.zoo")
    raise AttributeError(f"module 'spottrain.profiler' has no attribute {name!r}")
