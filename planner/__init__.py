"""Collaborative sampling plans: who samples what locally, who mirrors what to whom."""

from cosample.planner.datacentre import DataCentre
from cosample.planner.errors import InfeasibleError, PlannerError, SolverError
from cosample.planner.solve import SOLVERS, solve
from cosample.planner.solution import Solution

__all__ = ["DataCentre", "InfeasibleError", "PlannerError", "SOLVERS", "Solution", "SolverError",
           "solve"]
