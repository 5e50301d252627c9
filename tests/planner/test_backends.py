"""One LP suite, run once per backend; a backend missing here is skipped with the reason."""

from __future__ import annotations

import tempfile

import pytest

from cosample.planner import SolverError, solve
from cosample.planner.choices import LP_BACKENDS
from cosample.planner.commands import example_datacentre
from cosample.planner.lp import backend_available


@pytest.fixture(params=sorted(LP_BACKENDS))
def lp_backend(request):
    reason = backend_available(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


@pytest.mark.parametrize("formulation", ["full", "reduced"])
def test_backend_reaches_the_exact_solvers_bound_on_the_example(lp_backend, formulation):
    dc = example_datacentre()
    lp = solve(dc, formulation, lp_backend=lp_backend)
    assert lp.lp_backend == lp_backend
    exact = solve(dc)
    assert lp.bounds.lp == pytest.approx(exact.bounds.lp, rel=1e-6)  # the paper's LP optimum
    assert lp.collected_pps <= exact.collected_pps * (1 + 1e-9)  # distinct: never above exact
    n, senders = dc.size, 3
    expected = n * n if formulation == "full" else senders * (n - senders) + senders
    assert lp.variables == expected


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(SolverError, match="unknown LP backend 'gurobi'"):
        solve(example_datacentre(), "full", lp_backend="gurobi")


def test_a_solve_leaves_no_file_behind(lp_backend, tmp_path, monkeypatch):
    """PuLP's command-line backends write the model and the solver's report to temporary files
    (GLPK_CMD does not remove its report): a planning daemon would fill /tmp, one file a solve."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    solve(example_datacentre(), "reduced", lp_backend=lp_backend)
    assert list(tmp_path.iterdir()) == []
