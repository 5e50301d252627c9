"""Research stays out of the product: the installed package holds what its commands run.

``cosample.experiments`` (experiments/) is installed because ``cosample experiment`` and
``cosample testbed`` run it; every module in it must be reached by imports from those commands'
parsers or from a ``python -m cosample.experiments.NAME`` command a product module tells the
operator to run. Benchmarks and campaigns live in ``research/``, which is not installed and which
nothing installed imports (docs/architecture.md, "Folders").
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
#: What the ``cosample`` command registers from experiments/ (cosample/cli.py).
COMMAND_ROOTS = ("cosample.experiments.cli", "cosample.experiments.testbed.cli")
COMMAND = re.compile(r"python -m (cosample\.experiments\.[\w.]+)")


def installed_folders() -> dict[str, Path]:
    return {package: ROOT / folder for package, folder in LAYOUT["package-dir"].items()}


def module_path(module: str) -> Path | None:
    """The file of ``module`` under the layout of pyproject.toml, or None."""
    folders = installed_folders()
    for package in sorted(folders, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            rest = module.removeprefix(package).lstrip(".")
            base = folders[package].joinpath(*rest.split(".")) if rest else folders[package]
            for candidate in (base / "__init__.py", base.with_suffix(".py")):
                if candidate.is_file():
                    return candidate
            return None
    return None


def imported(path: Path, prefix: str) -> set[str]:
    """The modules under ``prefix`` that ``path`` imports, at module level or in a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(prefix)}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
            found.add(node.module)
            found |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if module_path(f"{node.module}.{a.name}") is not None
            }
    return found


def reached(roots: set[str], prefix: str = "cosample.experiments") -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen or (path := module_path(module)) is None:
            continue
        seen.add(module)
        todo += imported(path, prefix)
    return seen


def installed_files() -> list[Path]:
    return sorted(
        path
        for folder in set(installed_folders().values())
        for path in folder.rglob("*.py")
        if "__pycache__" not in path.parts
    )


def commands_named_by_the_product() -> set[str]:
    product = [p for p in installed_files() if not p.is_relative_to(ROOT / "experiments")]
    return {m.rstrip(".") for p in product for m in COMMAND.findall(p.read_text())}


def experiments_modules() -> set[str]:
    folder = ROOT / "experiments"
    return {
        ".".join(
            ("cosample.experiments", *p.relative_to(folder).with_suffix("").parts)
        ).removesuffix(".__init__")
        for p in folder.rglob("*.py")
        if "__pycache__" not in p.parts
    }


def test_research_is_not_installed():
    assert not any(p.startswith("research") for p in LAYOUT["packages"])
    assert "research" not in {Path(f).parts[0] for f in LAYOUT["package-dir"].values()}


def test_nothing_installed_imports_research():
    importers = [
        p.relative_to(ROOT).as_posix() for p in installed_files() if imported(p, "research")
    ]
    assert importers == []


def test_every_installed_experiment_is_run_by_a_command():
    roots = set(COMMAND_ROOTS) | commands_named_by_the_product()
    assert "cosample.experiments.appmon_costs" in roots  # planner/appmon_costs.py names it
    unreached = experiments_modules() - reached(roots) - {"cosample.experiments"}
    assert sorted(unreached) == [], "benchmarks and campaigns belong in research/"


#: ``python -m NAME`` of this repository's modules, in docs and code.
RUN = re.compile(r"python -m ((?:cosample|research)(?:\.\w+)*)")


def runnable(module: str) -> bool:
    """Whether ``python -m module`` finds it in this tree (research/ from a clone's root); a
    placeholder in capitals (``research.NAME``) stands for any."""
    if re.search(r"[A-Z]{2,}", module.rsplit(".", 1)[-1]):
        return True
    if module.split(".")[0] == "research":
        path = ROOT.joinpath(*module.split("."))
        return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
    path = module_path(module)
    return path is not None and (
        path.name != "__init__.py" or path.with_name("__main__.py").is_file()
    )


def test_every_python_m_command_names_a_module():
    """A command a doc or a module cites runs: after a move, no stale ``python -m`` is left.
    docs/data holds what runs printed then, and stays as it was."""
    texts = [
        p
        for suffix in ("*.md", "*.py", "*.ipynb")
        for p in ROOT.rglob(suffix)
        if not {".git", ".venv", "data"} & set(p.relative_to(ROOT).parts)
    ]
    stale = sorted(
        f"{p.relative_to(ROOT)}: python -m {m}"
        for p in texts
        for m in set(RUN.findall(p.read_text(encoding="utf-8")))
        if not runnable(m)
    )
    assert stale == []


def test_the_checks_see_a_stray_benchmark(tmp_path):
    stray = tmp_path / "bench_x.py"
    stray.write_text("from research import ROOT\nimport cosample.experiments.files\n")
    assert imported(stray, "research") == {"research"}
    assert imported(stray, "cosample.experiments") == {"cosample.experiments.files"}
    assert "cosample.experiments.files" in reached({"cosample.experiments.cli"})
    assert "cosample.experiments.testbed.build" in reached(set(COMMAND_ROOTS))
    assert module_path("cosample.experiments.absent") is None
    assert runnable("research.revision") and runnable("cosample.experiments.appmon_costs")
    assert runnable("cosample") and not runnable("cosample.experiments.bench_controller")
