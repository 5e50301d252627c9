"""bench_views on a tiny fleet: every figure it prints is there, for this tree and beside a
baseline tree (structure only, never timings); a tree without the compiled builder is named."""

from __future__ import annotations

import json

import pytest

from research import bench_views
from research.bench_controller import REPOSITORY


def test_side_by_side_run(capsys):
    # the repository itself as the "baseline": its compiled builder is built in place
    assert (
        bench_views.main(["--servers", "300", "--repeats", "2", "--baseline-tree", str(REPOSITORY)])
        == 0
    )
    printed = capsys.readouterr().out
    rows = [
        json.loads(line.split(" ", 2)[2])
        if line.startswith("this tree")
        else json.loads(line.split(" ", 1)[1])
        for line in printed.splitlines()
        if line.startswith(("this tree {", "baseline {"))
    ]
    assert len(rows) == 4 and all(row["hosts"] == 300 for row in rows)
    for row in rows:
        assert row["set_views_mb"] > row["plan_views_mb"] > 0  # two phases' views, then one's
        assert row["kept_mb"] > 0 and row["build_peak_mb"] >= row["kept_mb"]
        assert "floor_set_again" in row  # both trees here lay the views out in one buffer
    assert "300 servers; views: two-phase plan set" in printed
    assert "build_set_again (s)" in printed and "baseline/this" in printed


def test_a_tree_without_the_compiled_builder_is_named(tmp_path, monkeypatch):
    bench_views.make_plan_set(300, tmp_path)
    from cosample.plan import slicebuild

    monkeypatch.setattr(slicebuild, "_slices", None)
    with pytest.raises(SystemExit, match="compiled builder declined"):
        bench_views.child(tmp_path)
