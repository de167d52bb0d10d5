"""spottrain: plan, predict and run deep-learning training on revocable cloud GPUs.

The public API is re-exported here. Planning code (catalog, performance and transience
models, planner, simulator) never imports torch, so every name is loaded lazily on first use:
``import spottrain`` stays fast and torch-free until you touch the profiler or the runtime.

>>> import spottrain
>>> spottrain.gpu_spec("v100").name
'V100'
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    # bottom layer: errors, nouns, saved files, policies
    **dict.fromkeys(
        ["SpottrainError", "InputError", "UnknownNameError", "InfeasibleError", "NotFittedError",
         "CheckpointError", "SchemaVersionError"], "spottrain.errors"),
    **dict.fromkeys(["ClusterGroup", "ClusterSpec"], "spottrain.types"),
    **dict.fromkeys(["Plan", "PlanGroup", "PlanWorkload", "PlanPrediction"], "spottrain.plan_file"),
    **dict.fromkeys(["JobState", "NodeView", "NodeOption", "Decision", "get_policy", "register_policy"],
                    "spottrain.policies"),
    # catalog
    **dict.fromkeys(["Catalog", "Offer", "GpuSpec", "load_catalog", "gpu_spec", "canonical_gpu", "known_gpus"],
                    "spottrain.catalog"),
    # performance models
    **dict.fromkeys(["Workload", "ThroughputModel", "ThroughputPrediction", "predict_throughput", "default_model",
                     "ConvergenceModel", "LossCurve", "read_measurements"], "spottrain.perf"),
    # transience models
    **dict.fromkeys(["Trace", "TraceEvent", "list_traces", "load_trace", "load_user_trace", "KaplanMeier",
                     "ExponentialLifetime", "WeibullLifetime", "BathtubLifetime", "lifetime_model",
                     "expected_revocations", "replacement_delay", "availability",
                     "optimal_checkpoint_interval_s", "young_daly_interval_s", "transience_cost"],
                    "spottrain.transience"),
    # decisions
    **dict.fromkeys(["plan", "PlanResult"], "spottrain.planner"),
    **dict.fromkeys(["refine", "plan_refined", "Refinement"], "spottrain.planner.refine"),
    **dict.fromkeys(["simulate_plans", "hindsight"], "spottrain.sim.hindsight"),
    **dict.fromkeys(["simulate", "SimulationResult", "SimParams", "timeline_run"], "spottrain.sim"),
    "reproduce_icac19": "spottrain.sim.reproduce",
    # end to end
    **dict.fromkeys(["run_demo", "DemoConfig"], "spottrain.demo"),
    "Report": "spottrain.report",
    "build_demo_report": "spottrain.report.demo_report",
    # torch: profiler and runtime
    **dict.fromkeys(["profile", "Profile", "PROFILE_SCHEMA_VERSION", "load_profile", "zoo_names"],
                    "spottrain.profiler"),
    "Store": "spottrain.store",
    **dict.fromkeys(["Trainer", "TrainConfig", "Checkpointer", "run_local", "LocalJob", "RunSummary"],
                    "spottrain.runtime"),
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'spottrain' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next access skips this function
    return value


def __dir__() -> list[str]:
    return __all__
