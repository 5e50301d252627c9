"""The gain grid: shares, feasibility frontier, gains checked against the paper's LP."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cosample.experiments import heatmap
from cosample.experiments.errors import ExperimentError
from cosample.experiments.heatmap import (
    COLUMNS,
    HeatmapSetup,
    datacentre,
    gain_cell,
    gain_grid,
    geometric_shares,
    parse_grid,
    summarise,
    traffic_matrix,
)
from cosample.experiments.sensitivity import run, scenarios, summary
from cosample.planner import solve
from cosample.planner.baseline import noncollab_pps


def test_geometric_shares_follow_p_to_the_i_minus_one():
    shares = geometric_shares(4, 0.5)
    assert shares.sum() == pytest.approx(1.0)
    assert shares / shares[0] == pytest.approx([1, 0.5, 0.25, 0.125])
    assert geometric_shares(5, 1.0) == pytest.approx(np.full(5, 0.2))


@pytest.mark.parametrize("servers", [2, 3, 10])
def test_infeasible_exactly_above_the_frontier(servers):
    """The busiest server carries load * n * share_1 * C, so the frontier is load = 1/(n share_1)."""
    setup = HeatmapSetup(servers=servers)
    p_values, load_values = parse_grid("17x23")
    frame = gain_grid(setup, p_values, load_values)
    frontier = 1.0 / (servers * np.array([geometric_shares(servers, p)[0] for p in frame["p"]]))
    expected = frame["load"].to_numpy() <= frontier * (1 + 1e-9)
    assert (frame["feasible"].to_numpy() == expected).all()
    assert frame.loc[~frame["feasible"], "gain"].isna().all()
    assert frame.loc[frame["feasible"], "gain"].notna().any()


def test_columns_and_one_row_per_cell():
    frame = gain_grid(HeatmapSetup(servers=5), *parse_grid("4x6"))
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == 24
    assert not frame.duplicated(["p", "load"]).any()


@pytest.mark.parametrize(
    "p, load, cross",
    [(0.2, 0.15, 0.0), (0.5, 0.25, 0.0), (0.8, 0.4, 0.0), (0.3, 0.12, 0.3), (0.9, 0.5, 0.5)],
)
def test_gain_equals_the_full_lp_over_the_baseline(p, load, cross):
    setup = HeatmapSetup(servers=6, cross_fraction=cross)
    dc = datacentre(setup, p, load)
    assert dc is not None
    lp = solve(dc, solver="full", lp_backend="highs", margin=0.0).bounds.lp  # the paper's objective
    row = gain_cell(setup, p, load)
    assert row["collaborative_pps"] == pytest.approx(lp, rel=1e-6)
    assert row["gain"] == pytest.approx(lp / noncollab_pps(dc) - 1, rel=1e-6, abs=1e-9)


def test_light_load_gains_nothing_and_gain_never_exceeds_alpha_over_beta():
    setup = HeatmapSetup(servers=10)
    frame = gain_grid(setup, *parse_grid("20"))
    light = frame[frame["max_server_load"] <= 1 / (1 + setup.alpha)]  # everyone samples all
    assert not light.empty and light["gain"].abs().max() < 1e-9
    assert frame["gain"].max() <= setup.alpha / setup.beta - 1 + 1e-9
    assert frame["gain"].min() >= -1e-12


def test_no_gain_when_mirroring_costs_as_much_as_sampling():
    frame = gain_grid(HeatmapSetup(servers=5, alpha=0.5, beta=0.5), *parse_grid("10"))
    assert frame["gain"].abs().max() < 1e-9


def test_cross_traffic_spreads_evenly_and_keeps_the_volume():
    setup = HeatmapSetup(servers=4, cross_fraction=0.5, capacity_pps=100.0)
    matrix = traffic_matrix(setup, 0.5, 0.5)
    assert matrix.sum() == pytest.approx(0.5 * 4 * 100.0)
    assert np.diag(matrix) == pytest.approx(matrix.sum(axis=1) / 2)
    off = matrix[~np.eye(4, dtype=bool)].reshape(4, 3)
    assert (off == off[:, :1]).all()


def test_every_server_exactly_full_has_no_gain_but_is_feasible():
    row = gain_cell(HeatmapSetup(servers=10), 1.0, 1.0)
    assert row["feasible"] and np.isnan(row["gain"])
    numbers = summarise(gain_grid(HeatmapSetup(servers=10), [1.0], [0.5, 1.0]))
    assert (numbers.cells, numbers.feasible_cells, numbers.gain_cells) == (2, 2, 1)


def test_summary_over_defined_cells():
    frame = gain_grid(HeatmapSetup(servers=3), *parse_grid("10"))
    numbers = summarise(frame)
    defined = frame["gain"].dropna()
    assert numbers.gain_cells == len(defined) and numbers.feasible_cells == frame["feasible"].sum()
    assert numbers.max_gain == defined.max() and numbers.mean_gain == pytest.approx(defined.mean())
    assert frame.loc[frame["gain"].idxmax(), "p"] == numbers.p_at_max
    assert "max gain" in numbers.report()


@pytest.mark.parametrize("text", ["abc", "0", "3x0", "2x3x4", "-5", ""])
def test_bad_grid_is_one_clear_error(text):
    with pytest.raises(ExperimentError, match="--grid"):
        parse_grid(text)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"servers": 0}, "servers"),
        ({"alpha": 0}, "alpha"),
        ({"beta": float("nan")}, "beta"),
        ({"cross_fraction": 1.5}, "cross_fraction"),
        ({"servers": 1, "cross_fraction": 0.1}, "2 servers"),
    ],
)
def test_bad_setup_names_the_field(kwargs, field):
    with pytest.raises(ExperimentError, match=field):
        HeatmapSetup(**kwargs)


def test_bad_p_or_load_names_it():
    with pytest.raises(ExperimentError, match="p: must be in"):
        gain_cell(HeatmapSetup(), 0.0, 0.5)
    with pytest.raises(ExperimentError, match="load: must be"):
        gain_cell(HeatmapSetup(), 0.5, -1.0)


def test_sensitivity_scenarios_and_summary():
    base = HeatmapSetup(servers=4)
    chosen = scenarios(
        base, servers=(2, 4, 8), cross_fractions=(0.5,), calibrated=[("cal", 0.3, 0.2)]
    )
    assert [s.setup.servers for s in chosen] == [4, 2, 8, 4, 4]
    assert chosen[-1].setup.alpha == 0.3 and chosen[3].setup.cross_fraction == 0.5
    frame = run(chosen, *parse_grid("5"))
    table = summary(frame)
    assert list(table["scenario"]) == [s.title for s in chosen]
    assert (table["cells"] == 25).all()
    assert table.loc[0, "max_gain"] == pytest.approx(
        summarise(frame[frame.scenario == chosen[0].title]).max_gain
    )


@settings(max_examples=60, deadline=None)
@given(
    servers=st.integers(1, 12),
    alpha=st.floats(0.05, 3.0),
    beta=st.floats(0.01, 3.0),
    cross=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    p=st.floats(0.01, 1.0),
    load=st.floats(0.01, 1.0),
)
def test_gain_is_between_zero_and_alpha_over_beta(servers, alpha, beta, cross, p, load):
    """Collaboration never loses, and no sender gains more than sampling at beta instead of alpha."""
    if servers == 1:
        cross = 0.0
    row = gain_cell(
        HeatmapSetup(servers=servers, alpha=alpha, beta=beta, cross_fraction=cross), p, load
    )
    if not row["feasible"] or np.isnan(row["gain"]):
        return
    assert row["gain"] >= -1e-9
    assert row["gain"] <= max(alpha / beta - 1, 0.0) + 1e-9
    if beta >= alpha or servers == 1:
        assert abs(row["gain"]) < 1e-9


@pytest.mark.parametrize("servers, cross", [(3, 0.0), (7, 0.0), (10, 0.3)])
def test_cells_exactly_on_the_frontier_are_feasible(servers, cross):
    """Rounding must not turn 'exactly full' into 'infeasible' or into an error in the planner."""
    setup = HeatmapSetup(servers=servers, cross_fraction=cross)
    for p in np.linspace(0.05, 1.0, 39):
        forwarding = heatmap.forwarding_pps(traffic_matrix(setup, p, 1.0))
        load = setup.capacity_pps / forwarding.max()  # the busiest server exactly full
        row = gain_cell(setup, p, load)
        assert row["feasible"], (p, load)
        assert row["max_server_load"] == pytest.approx(1.0)
