"""The planner: the cheapest cluster that meets a deadline, the fastest within a budget.

Entry point :func:`plan`; the optimization problem is written down in
:mod:`spottrain.planner.formulation`.
"""

from spottrain.planner.api import PlanResult, plan

__all__ = ["PlanResult", "plan"]
