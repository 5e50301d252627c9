"""Errors the planner raises on purpose."""

from __future__ import annotations

from cosample.errors import CosampleError


class PlannerError(CosampleError):
    """Bad input or a failed solve; the message names the field or server and the problem."""


class InfeasibleError(PlannerError):
    """Some servers' forwarding load alone exceeds their capacity; ``overloads`` maps name -> pps."""

    def __init__(self, overloads: dict[str, float]) -> None:
        self.overloads = dict(overloads)
        listing = ", ".join(f"{name} by {excess:,.0f} pps" for name, excess in overloads.items())
        super().__init__(
            f"infeasible data centre: forwarding load exceeds capacity on {len(overloads)} "
            f"server(s): {listing}; raise their capacity_pps or move traffic away"
        )


class SolverError(PlannerError):
    """An LP backend is missing or did not return an optimal solution."""


class ShareInfeasibleError(PlannerError):
    """The services' minimum shares cannot all be monitored within the hosts' capacities."""
