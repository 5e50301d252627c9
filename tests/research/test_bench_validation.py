"""The validation benchmark on a tiny description: every loader runs and agrees, never timings."""

from __future__ import annotations

import importlib.util

import pytest

from cosample.planner.datacentre import DataCentre
from research import bench_validation


def test_the_generated_description_is_valid_and_complete():
    document = bench_validation.description(300)
    dc = DataCentre.from_dict(document)
    dc.check_feasible()
    assert dc.size == 300 and dc.server_extras["host0000257"]["tunnel_ip"] == "10.0.1.1"
    assert (dc.traffic_src != dc.traffic_dst).any()


@pytest.mark.parametrize(
    "library, make",
    [
        ("msgspec", bench_validation.msgspec_loader),
        ("jsonschema", bench_validation.jsonschema_loader),
    ],
)
def test_each_library_accepts_the_description_and_refuses_a_bad_one(library, make):
    if importlib.util.find_spec(library) is None:
        assert "not installed" in make()
        pytest.skip(f"{library} not installed (pip install '.[bench]')")
    import json

    loader = make()
    good = bench_validation.description(20)
    bad = json.loads(json.dumps(good))
    bad["servers"][3]["capacity_pps"] = -1
    if library == "msgspec":
        loader(json.dumps(good).encode())
        with pytest.raises(Exception, match="servers"):
            loader(json.dumps(bad).encode())
    else:
        loader(good)
        with pytest.raises(Exception, match="-1"):
            loader(bad)


def test_measure_reports_every_loader_or_why_not(capsys):
    assert bench_validation.main(["--servers", "50", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("50 servers, best of 1 rounds")
    for loader in (
        "pydantic",
        "json.loads",
        "(any library)",
        "msgspec",
        "jsonschema",
        "hand-written",
    ):
        assert f"| {loader} |" in out


def test_ratios_compare_like_with_like():
    rows = [
        ("pydantic", "total: file -> DataCentre (fresh process)", 2.0),
        ("pydantic", bench_validation.IN_PROCESS_TOTAL, 1.0),
        ("hand-written", "total: file -> DataCentre (commit abc, fresh process)", 3.0),
        ("msgspec", "total: parse and schema + cross-field rules and arrays", 0.5),
        ("jsonschema", "not installed", None),
    ]
    lines = bench_validation.table(rows).splitlines()
    assert lines[4].endswith("| 3.00 | 1.50 |")  # against pydantic's fresh-process load
    assert lines[5].endswith("| 0.50 | 0.50 |")  # against pydantic's sum of steps
    assert lines[6].endswith("| — | — |")
