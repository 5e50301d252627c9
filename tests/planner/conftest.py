"""The planner's tests check what the solvers prove, not how fast this machine is: the
quantised MILP's wall-clock budget (``quantised_milp.TIME_LIMIT_S``, past which the solver
falls back to the greedy and states its gap) is lifted, so a loaded machine does not turn a
proof into a gap (a 4-server example ran out of the 10 s under three concurrent builds)."""

from __future__ import annotations

import pytest

from cosample.planner import quantised_milp


@pytest.fixture(autouse=True, scope="module")
def _no_wall_clock_budget():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quantised_milp, "TIME_LIMIT_S", 1e6)
        yield
