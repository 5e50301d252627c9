"""The controller benchmark on a tiny fleet: its three cycles run (publish, keep, publish again
after the traffic moved: two phases), and ``--baseline-tree`` runs another
revision's code beside this tree's on the same snapshot (structure only, never timings)."""

from __future__ import annotations

import shutil
import subprocess

import pandas as pd
import pytest

from research import bench_controller
from research.bench_controller import REPOSITORY
from research.revision import export


def _in_git() -> bool:
    if shutil.which("git") is None:
        return False
    done = subprocess.run(
        ["git", "-C", str(REPOSITORY), "rev-parse", "HEAD"], capture_output=True, check=False
    )
    return done.returncode == 0


needs_git = pytest.mark.skipif(not _in_git(), reason="not a git checkout")


@needs_git
def test_side_by_side_run(tmp_path, capsys):
    csv = tmp_path / "rows.csv"
    tree = export("HEAD", tmp_path / "HEAD")
    assert (
        bench_controller.main(
            ["--sizes", "300", "--baseline-tree", str(tree), "--repeats", "2", "--csv", str(csv)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    rows = pd.read_csv(csv)
    assert set(rows["code"]) == {"old", "new"}
    new = rows[rows["code"] == "new"]
    assert (
        list(new.sort_values(["repeat", "cycle"])["result"])
        == ["published", "kept", "published"] * 2
    )
    assert list(new.sort_values(["repeat", "cycle"])["two_phase"]) == [False, False, True] * 2
    assert new["code_path"].str.startswith(str(REPOSITORY)).all()
    old = rows[rows["code"] == "old"]
    assert not old["code_path"].fillna("").str.startswith(str(REPOSITORY)).any()
    published = rows[rows["result"] == "published"]
    assert (published["agents_accept"] == True).all()  # noqa: E712 - a column of booleans
    assert "old = HEAD, new = this tree" in printed
    assert "300 cycle 1 (published)" in printed and "new/old CPU" in printed


def test_plain_run_without_baseline(tmp_path, capsys):
    csv = tmp_path / "rows.csv"
    assert bench_controller.main(["--sizes", "300", "--csv", str(csv)]) == 0
    rows = pd.read_csv(csv)
    assert list(rows["result"]) == ["published", "kept", "published"]
    assert list(rows["two_phase"]) == [False, False, True]  # the traffic moved: two phases
    assert rows["agents_accept"].iloc[[0, 2]].tolist() == [True, True]  # the plan and the set
    printed = capsys.readouterr().out
    assert "300 cycle 3 (published, two phases" in printed and "new/old" not in printed
    assert "300 restart on the state left: CPU" in printed
    assert (rows["restart_cpu"] > 0).all()


def test_a_folder_without_a_tree_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        bench_controller.main(["--sizes", "300", "--baseline-tree", str(tmp_path)])
    assert exited.value.code == 2
    assert f"{tmp_path}: no cosample/__init__.py" in capsys.readouterr().err


def test_memory_compared_without_slices(tmp_path, capsys):
    """``--compare-memory``: this tree with the memory defaults ("old") and as ``controller
    run`` keeps it ("new"), alternating; ``--no-slices`` reaches the controller's target."""
    csv = tmp_path / "rows.csv"
    assert (
        bench_controller.main(
            ["--sizes", "300", "--no-slices", "--compare-memory", "--csv", str(csv)]
        )
        == 0
    )
    rows = pd.read_csv(csv)
    assert (
        sorted(zip(rows["code"], rows["keep_memory"])) == [("new", True)] * 3 + [("old", False)] * 3
    )
    assert not rows["slices"].any()
    assert (rows["code_path"].str.startswith(str(REPOSITORY))).all()  # both: this tree
    assert "old = this tree with the memory defaults" in capsys.readouterr().out


def test_the_compiled_transition_compared(capsys):
    """``--compare-compiled``: phase 1 and the whole render by both transitions, alternating,
    each run checked to give the same bytes (a difference or a declined compiled path exits)."""
    import json

    assert bench_controller.main(["--compare-compiled", "300", "--repeats", "2"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["servers"] == 300 and row["phase1_bytes"] > 300 * 50  # an entry per host
    for label in ("python", "compiled", "render_python", "render_compiled"):
        assert len(row[f"{label}_cpu_seconds"]) == 2
