"""Collaborative sampling plans: who samples what locally, who mirrors what to whom.

The public names are imported on first use (PEP 562), so that ``cosample --help`` and the
other components' commands, which import ``cosample.planner.cli``, do not load numpy and PuLP.
"""

from importlib import import_module

_EXPORTS = {
    "DataCentre": "cosample.planner.datacentre",
    "InfeasibleError": "cosample.planner.errors",
    "PlannerError": "cosample.planner.errors",
    "SolverError": "cosample.planner.errors",
    "SOLVERS": "cosample.planner.solvers",
    "solve": "cosample.planner.solvers",
    "Solution": "cosample.planner.solution",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cosample.planner' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
