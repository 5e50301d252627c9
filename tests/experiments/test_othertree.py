"""Another revision's code beside this one: laid out by ``research.revision``, loaded under
another name by ``experiments/othertree.py`` (never from git in the installed package)."""

from __future__ import annotations

import importlib
import shutil
import subprocess

import pytest

from cosample.experiments.errors import ExperimentError
from cosample.experiments.othertree import _IMPORT, checked, load_package
from research import ROOT, collector_loss
from research.revision import export

needs_git = pytest.mark.skipif(
    shutil.which("git") is None
    or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode
    != 0,
    reason="not a git checkout",
)


def test_rewrites_imports_of_itself_only():
    text = (
        "from cosample.collector import decode\nimport cosample.times\n"
        "    from cosample.plan.document import parse_plan\n"
        'FORMAT = "cosample.snapshot"\nimport cosampler\n'
        'm = importlib.import_module("cosample.lab")\n'
    )
    assert _IMPORT.sub(r"\g<1>old", text) == (
        "from old.collector import decode\nimport old.times\n"
        "    from old.plan.document import parse_plan\n"
        'FORMAT = "cosample.snapshot"\nimport cosampler\n'
        'm = importlib.import_module("old.lab")\n'
    )


def test_a_folder_without_a_tree_is_refused(tmp_path):
    with pytest.raises(ExperimentError, match="no cosample/__init__.py"):
        checked(tmp_path)


@needs_git
def test_the_same_revision_loaded_twice_gives_the_same_numbers(tmp_path, capsys):
    tree = export("HEAD", tmp_path / "head")
    name = load_package(tree, tmp_path / "scratch")
    estimate = importlib.import_module(f"{name}.collector.estimate")
    assert estimate.__file__.startswith(str(tmp_path / "scratch"))
    assert collector_loss.main(["--baseline-tree", str(tree)]) == 0
    rows = [line.strip(" |").split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert len(rows) == 8
    for row in rows:  # old and new columns: the same code, the same estimates
        assert row[1:3] == row[3:5]
