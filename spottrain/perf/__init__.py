"""Performance models: cluster throughput (analytical + learned correction) and convergence.

Public API::

    Workload, ThroughputModel, ThroughputPrediction, predict_throughput, default_model
    ConvergenceModel
    Measurement, read_measurements, write_measurements, load_shipped
"""

from spottrain.perf.convergence import ConvergenceModel, LossCurve, convergence_coefficient
from spottrain.perf.measurements import Measurement, load_shipped, read_measurements, write_measurements
from spottrain.perf.throughput import (
    ExtrapolationWarning,
    ThroughputModel,
    ThroughputPrediction,
    default_model,
    predict_throughput,
)
from spottrain.perf.workload import Workload

__all__ = [
    "ConvergenceModel", "LossCurve", "convergence_coefficient",
    "ExtrapolationWarning", "Measurement", "ThroughputModel", "ThroughputPrediction", "Workload", "default_model",
    "load_shipped", "predict_throughput", "read_measurements", "write_measurements",
]
