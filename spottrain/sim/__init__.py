"""Trace-driven simulation of training jobs on revocable clusters.

>>> from spottrain.sim import simulate                      # doctest: +SKIP
>>> res = simulate(plan, trace="bamboo-aws-p3", runs=1000)   # doctest: +SKIP

Modules: :mod:`~spottrain.sim.core` (discrete-event core), :mod:`~spottrain.sim.setup` (what
the runs of a plan share), :mod:`~spottrain.sim.job` (the job model), :mod:`~spottrain.sim.sources` (trace replay, sampled lifetimes),
:mod:`~spottrain.sim.markets` (markets of other instance types a policy may buy),
:mod:`~spottrain.sim.plan_transforms` (the literature's policies), :mod:`~spottrain.sim.montecarlo`,
:mod:`~spottrain.sim.hindsight` (candidate plans on common runs, hindsight-optimal plan),
:mod:`~spottrain.sim.reproduce` (ICAC'19 reproduction), :mod:`~spottrain.sim.timeline`.
"""

from spottrain.sim import plan_transforms  # noqa: F401
from spottrain.sim.montecarlo import PolicySummary, SimulationResult, simulate, timeline_run
from spottrain.sim.setup import RunResult, SimParams, SimSetup

__all__ = ["PolicySummary", "RunResult", "SimParams", "SimSetup", "SimulationResult", "simulate", "timeline_run"]
