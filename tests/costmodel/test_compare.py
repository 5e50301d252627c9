"""The side-by-side table: absolute extra cost per copy from each method's own rate-0 CPU cost."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cosample.costmodel.compare import main, rate0_cost_ns, summary_rows


def write_calibration(tmp_path, name, method, a, cost_ns, seconds):
    rows = []
    for block in range(3):
        for rate in (0.0, 1.0):
            rows.append(
                {
                    "mechanism": "mirror",
                    "rate": rate,
                    "block": block,
                    "throughput_pps": 1e9 / (cost_ns * (1 + a * rate)),
                    "forwarded_pps": 20_000.0,
                    "cpu_counted": 20_000.0 * cost_ns * (1 + a * rate) / 1e9,
                }
            )
    pd.DataFrame(rows).to_csv(tmp_path / f"{name}.csv", index=False)
    document = {
        "mechanisms": {
            "mirror": {
                "coefficient": a,
                "coefficient_ci": [a - 0.01, a + 0.01],
                "n_points": 6,
                "capacity_pps": 1e9 / cost_ns,
            }
        },
        "metadata": {
            "data": f"{name}.csv",
            "method": method,
            "target_met": {"mirror": True},
            "seconds": {"mirror": seconds},
        },
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document))
    return str(path)


def test_extra_cost_per_copy_uses_each_methods_own_c0(tmp_path, capsys):
    cpu = write_calibration(tmp_path, "cpu", "cpu", 0.05, 25_000, 120.0)
    flat = write_calibration(tmp_path, "flat", "throughput", 0.125, 10_000, 118.0)
    frame = summary_rows([cpu, flat]).set_index("method")
    assert frame.loc["cpu", "c0_ns"] == pytest.approx(25_000)
    assert frame.loc["throughput", "c0_ns"] == pytest.approx(10_000)
    # different a, the same 1250 ns per mirrored packet
    assert frame["extra_ns_per_copy"].to_numpy() == pytest.approx([1250, 1250])
    assert main([cpu, flat]) == 0
    table = capsys.readouterr().out
    assert "| mirror | cpu | - | none | 0.050 |" in table and "1,250" in table
    assert "| 120.0 | 40,000 | 25,000 |" in table  # seconds, T0 = budget / c0, c0


def test_rate0_cost_is_nan_without_cpu_columns_and_bad_files_are_named(tmp_path, capsys):
    assert pd.isna(rate0_cost_ns(pd.DataFrame({"rate": [0.0], "throughput_pps": [1.0]})))
    (tmp_path / "x.json").write_text("{}")
    assert main([str(tmp_path / "x.json")]) == 2
    assert "x.json" in capsys.readouterr().err


def test_a_mechanism_without_a_finite_fit_is_a_row_of_nan_not_a_crash(tmp_path, capsys):
    """A fit that came out non-finite is written as null (``fit.finite_or_none``): the table
    shows it as nan; it used to stop the whole comparison with a TypeError (None - None)."""
    path = write_calibration(tmp_path, "cpu", "cpu", 0.05, 25_000, 120.0)
    document = json.loads((tmp_path / "cpu.json").read_text())
    document["mechanisms"]["mirror"].update(
        coefficient=None, coefficient_ci=[None, None], capacity_pps=None
    )
    (tmp_path / "cpu.json").write_text(json.dumps(document))
    row = summary_rows([path]).iloc[0]
    assert pd.isna(row["a"]) and pd.isna(row["half_width"]) and pd.isna(row["extra_ns_per_copy"])
    assert row["c0_ns"] == pytest.approx(25_000)  # what the measurements still give
    assert main([path]) == 0
    assert "| mirror | cpu | - | none | nan | [nan, nan] | nan |" in capsys.readouterr().out
