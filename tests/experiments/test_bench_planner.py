"""The planner benchmark in its tiny --quick mode: structure and agreement, never timings.

Its quick run is made once (``quick_run``) and read by the tests of its table, its report and
its disagreement: at n = 10 the exact solver's search over every applied plan runs to its time
limit (``cosample.planner.applied_milp.TIME_LIMIT_S``) on each of two data centres.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cosample.experiments import bench_planner
from cosample.experiments.bench_planner import (
    COLUMNS,
    QUICK_SIZES,
    SOLVERS,
    label,
    predicted_seconds,
    random_datacentre,
    speedup,
)
from cosample.planner.lp import backend_available


def test_random_datacentre_is_feasible_sparse_and_mixed():
    dc = random_datacentre(500, seed=1)
    dc.check_feasible()
    assert dc.traffic_pps.size == 500 * 4
    assert (dc.traffic_src != dc.traffic_dst).sum() == 500 * 3
    receivers = dc.spare_pps >= dc.alpha * dc.own_pps
    assert 0.1 < receivers.mean() < 0.9
    again = random_datacentre(500, seed=1)
    assert np.array_equal(again.traffic_pps, dc.traffic_pps)


def test_prediction_follows_the_last_two_points():
    assert predicted_seconds([(10, 1.0), (20, 4.0)], 40) == pytest.approx(16.0)
    assert predicted_seconds([(10, 2.0)], 20) == pytest.approx(8.0)  # n^2 with one point
    assert predicted_seconds([(10, 2.0), (20, 1.0)], 40) == pytest.approx(2.0)  # at least linear


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``python -m cosample.experiments.bench_planner --quick --csv FILE``, run once for the
    tests that read it (the module is one unit of work: tests/xdist_groups.py)."""
    csv = tmp_path_factory.mktemp("bench-planner") / "scaling.csv"
    done = subprocess.run(
        [sys.executable, "-m", "cosample.experiments.bench_planner", "--quick", "--csv", str(csv)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return SimpleNamespace(
        returncode=done.returncode, stdout=done.stdout, stderr=done.stderr, csv=csv
    )


def test_quick_run_table_and_report(quick_run):
    assert quick_run.returncode == 0, quick_run.stderr
    printed = quick_run.stdout
    table = pd.read_csv(quick_run.csv, keep_default_na=False)
    assert list(table.columns) == list(COLUMNS)
    available = [label(s, b) for s, b in SOLVERS if s == "exact" or backend_available(b) is None]
    assert "exact" in available and "full LP (glpk)" in available
    assert set(table["solver_label"]) == set(available)
    for n in QUICK_SIZES:
        rows = table[table["servers"] == n]
        assert sorted(rows["solver_label"]) == sorted(available)
        exact = rows[rows["solver_label"] == "exact"].iloc[0]
        assert exact["variables"] == 0
        lps = rows[rows["solver"] != "exact"]
        assert (lps["lp_objective_pps"] - exact["lp_objective_pps"]).abs().max() <= 1e-6 * exact[
            "lp_objective_pps"
        ]
        # as applied (1-in-N): the exact plan chose among plans the LPs' rounded ones are part of
        assert (lps["distinct_pps"] <= exact["distinct_pps"] * (1 + 1e-9)).all()
        assert (lps["planned_pps"] >= lps["distinct_pps"] * (1 - 1e-9)).all()  # rounding loses
        full = rows[rows["solver"] == "full"]["variables"]
        reduced = rows[rows["solver"] == "reduced"]["variables"]
        assert (full > reduced.max()).all() and (reduced > 0).all()
    assert table["agrees"].astype(str).eq("True").all()
    assert "objectives agree with the exact solver (relative 1e-06): yes" in printed
    ratio = speedup(table, 50)
    assert f"exact vs full LP (glpk) at n=50: {ratio:,.0f} times faster" in printed


def test_disagreement_is_reported_and_fails(quick_run, capsys):
    """The quick run's rows of n = 10 by the exact solver and the full LP (HiGHS), the LP's
    objective then moved by a relative 1e-5: the report says so and returns False."""
    table = pd.read_csv(quick_run.csv, keep_default_na=False)
    table = table[
        (table["servers"] == 10) & table["solver_label"].isin(["exact", "full LP (highs)"])
    ].reset_index(drop=True)
    assert list(table["solver_label"]) == ["exact", "full LP (highs)"]
    assert bench_planner.report(table, out=print) is True
    capsys.readouterr()
    table.loc[1, "lp_objective_pps"] *= 1 + 1e-5
    assert bench_planner.report(table, out=print) is False
    assert "objectives agree with the exact solver (relative 1e-06): NO" in capsys.readouterr().out


def test_timed_runs_take_the_best_of_repeats():
    """Without ``--quick`` every solve is timed over repeats (the exact solver's at least
    three, an LP's until 2 s in all or five); a small data centre keeps it short."""
    table = bench_planner.run((3,), (("exact", None), ("full", "highs")), 60.0, 10**6)
    repeats = dict(zip(table["solver_label"], table["repeats"]))
    assert repeats["exact"] >= 3 and 1 <= repeats["full LP (highs)"] <= 5, repeats
    assert (table["seconds"] > 0).all() and (table["cpu_seconds"] > 0).all()


def test_runs_as_a_module(quick_run):
    result = quick_run
    assert result.returncode == 0, result.stderr
    assert "planning time (s) by n and solver" in result.stdout
    assert ": yes" in result.stdout


def test_bad_option_is_one_error():
    result = subprocess.run(
        [sys.executable, "-m", "cosample.experiments.bench_planner", "--max-seconds", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "bench_planner: error: --max-seconds must be > 0, got -1.0"
