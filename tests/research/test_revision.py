"""``python -m research.revision``: a git revision laid out as an importable tree, the only place
that runs git for the before/after benchmarks."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from research import ROOT
from research.revision import export, main


def _in_git() -> bool:
    if shutil.which("git") is None:
        return False
    return (
        subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, check=False
        ).returncode
        == 0
    )


pytestmark = pytest.mark.skipif(not _in_git(), reason="not a git checkout")


def test_lays_out_the_packages_as_pyproject_maps_them(tmp_path):
    tree = export("HEAD", tmp_path / "tree")
    assert (tree / "cosample" / "__init__.py").is_file()
    assert (tree / "cosample" / "planner" / "planfile.py").is_file()
    assert (tree / "cosample" / "collector" / "estimate.py").is_file()
    committed = subprocess.run(
        ["git", "-C", str(ROOT), "show", "HEAD:collector/estimate.py"],
        capture_output=True,
        check=True,
    ).stdout
    assert (tree / "cosample" / "collector" / "estimate.py").read_bytes() == committed


def test_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "x").write_text("mine")
    with pytest.raises(SystemExit, match="not empty"):
        main(["HEAD", str(tmp_path)])
    assert [p.name for p in tmp_path.iterdir()] == ["x"]
