"""The layers a tool enforces: the import contract (pyproject.toml, ``[tool.importlinter]``) holds
on the package as installed, imports at call time say why, and either check fails when broken.

``bin/check-layers`` lays the package out as setuptools installs it (``package-dir``: the
component folders under ``cosample.*``) and runs ``lint-imports`` there; the docs' layers
(docs/architecture.md, "Layers") are the contract's, line for line.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "bin" / "check-layers"


def check_layers(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_the_package_keeps_its_layers():
    done = check_layers()
    assert done.returncode == 0, done.stdout + done.stderr
    kept = len(contract()["contracts"])
    assert f"Contracts: {kept} kept, 0 broken." in done.stdout


def test_the_layout_is_the_package_as_installed(tmp_path):
    """Each module laid out is the file the installed package imports under that name, and
    every installed package is there (so the graph the contract is checked on is the real one)."""
    done = check_layers("--layout", str(tmp_path))
    assert done.returncode == 0, done.stderr
    laid = {
        ".".join(path.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): path
        for path in tmp_path.rglob("*.py")
    }
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(packages["packages"]) <= laid.keys()
    assert {"cosample.planner.solution", "cosample.agents.state", "cosample.cli"} <= laid.keys()
    for name, path in laid.items():
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        assert Path(spec.origin).resolve() == path.resolve(), name


def a_copy(tmp_path: Path) -> Path:
    """The repository's package folders and pyproject.toml, copied (the tree stays untouched)."""
    copy = tmp_path / "tree"
    folders = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"
        ].values()
    )
    for folder in folders:
        shutil.copytree(
            ROOT / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    shutil.copy(ROOT / "pyproject.toml", copy)
    return copy


#: One forbidden import per contract, each in a module of its own: (module, line, what is reported)
FORBIDDEN = [
    # the agents run on every host: nothing of the collector (independent, same layer)
    (
        "agents/state.py",
        "import cosample.collector.decode",
        "cosample.agents.state -> cosample.collector.decode",
    ),
    # the shared base imports no component
    (
        "cosample/plan/formats.py",
        "import cosample.planner.choices",
        "cosample.plan.formats -> cosample.planner.choices",
    ),
    # a circle, however it is hidden
    (
        "planner/problem.py",
        "import cosample.planner.solution",
        "No cycles are allowed in cosample.planner",
    ),
    # appmon borrows nothing of the collector
    (
        "appmon/windows.py",
        "import cosample.collector.decode",
        "cosample.appmon.windows -> cosample.collector.decode",
    ),
    # production code does not load the rigs
    (
        "controller/decide.py",
        "import cosample.lab.ovs",
        "cosample.controller.decide -> cosample.lab.ovs",
    ),
]


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> subprocess.CompletedProcess[str]:
    """The check on a copy of the tree with every import of ``FORBIDDEN`` added."""
    copy = a_copy(tmp_path_factory.mktemp("broken"))
    for module, line, _ in FORBIDDEN:
        source = copy / module
        source.write_text(source.read_text() + f"\n{line}  # noqa\n")
    return check_layers("--root", str(copy))


@pytest.mark.parametrize("module,line,reported", FORBIDDEN)
def test_a_forbidden_import_is_reported(broken, module, line, reported):
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert reported in broken.stdout


def test_each_contract_can_break(broken):
    assert f"Contracts: 0 kept, {len(contract()['contracts'])} broken." in broken.stdout


def test_an_import_at_call_time_without_its_reason_is_reported(tmp_path):
    copy = a_copy(tmp_path)
    source = copy / "agents" / "state.py"
    source.write_text(
        source.read_text() + "\n\ndef _later():\n    import json\n\n    return json\n"
    )
    done = check_layers("--root", str(copy))
    assert done.returncode == 1
    assert (
        "agents/state.py:" in done.stdout
        and "import json  <- an import at call time" in done.stdout
    )
    # with its reason beside it, it is accepted
    source.write_text(source.read_text().replace("    import json\n", "    import json  # why\n"))
    assert check_layers("--root", str(copy)).returncode == 0


def test_the_docs_show_the_contracts_layers():
    """docs/architecture.md's layer list is the contract's, top to bottom, line for line."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Layers", 1)[1].split("\n#", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block, "docs/architecture.md, Layers: no layer list"
    shown = [row.strip() for row in block[1].splitlines() if row.strip()]
    (layers,) = [c["layers"] for c in contract()["contracts"] if c["type"] == "layers"]
    assert shown == layers


def test_bin_lint_runs_as_documented():
    """CONTRIBUTING.md's command: ruff's lint and format checks and the layer check."""
    done = subprocess.run(
        [str(ROOT / "bin" / "lint")], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: " in done.stdout and "0 broken" in done.stdout
