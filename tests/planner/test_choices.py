"""Solver and backend names are defined once and every place that offers them agrees."""

from __future__ import annotations

from cosample.cli import build_parser
from cosample.planner import SOLVERS as PLANNER_SOLVERS
from cosample.planner.choices import (
    ALL_SOLVERS,
    DEFAULT_LP_BACKEND,
    DEFAULT_SOLVER,
    LP_BACKENDS,
    SOLVERS,
)
from cosample.planner.lp import BACKENDS


def _choices(argv, option):
    parser = build_parser()
    subparsers = [a for a in parser._actions if a.dest == "command"][0].choices
    command = subparsers[argv[0]]
    if len(argv) > 1:
        command = [a for a in command._actions if a.dest.endswith("_command")][0].choices[argv[1]]
    return [a for a in command._actions if option in a.option_strings][0]


def test_the_clis_offer_the_defined_names():
    for argv in (["plan"], ["testbed", "run"]):
        solver = _choices(argv, "--solver")
        assert tuple(solver.choices) == SOLVERS and solver.default == DEFAULT_SOLVER
    backend = _choices(["plan"], "--lp-backend")
    assert tuple(backend.choices) == tuple(LP_BACKENDS) and backend.default == DEFAULT_LP_BACKEND


def test_solve_accepts_every_name_and_the_lp_knows_every_backend():
    assert PLANNER_SOLVERS == ALL_SOLVERS and set(SOLVERS) < set(ALL_SOLVERS)
    assert BACKENDS is LP_BACKENDS
