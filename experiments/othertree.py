"""Another revision's code beside this one, for benchmarks that compare old and new in one run.

A tree is a folder whose ``cosample/`` holds that revision's packages, as
``python -m research.revision REV DIR`` lays it out from a clone (the installed package never
runs git). Whole processes import it with the folder on ``PYTHONPATH``; in-process comparisons
load it under another name.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from cosample.experiments.errors import ExperimentError


def checked(tree: str | Path) -> Path:
    """``tree`` if it holds a laid-out ``cosample`` package, else a clear error."""
    tree = Path(tree)
    if not (tree / "cosample" / "__init__.py").is_file():
        raise ExperimentError(
            f"{tree}: no cosample/__init__.py; lay a revision out with "
            "`python -m research.revision REV DIR` from a clone"
        )
    return tree


def load_package(tree: str | Path, scratch: Path) -> str:
    """``tree``'s whole ``cosample`` package as the package ``cosample_<name>``, its imports of
    itself rewritten, so that old modules run with old modules (a decoder with its estimator)
    beside this tree's in one process; importable from ``scratch``. Returns the name."""
    tree = checked(tree)
    name = "cosample_" + re.sub(r"[^0-9A-Za-z]", "_", tree.resolve().name)
    source = tree / "cosample"
    for folder, _, files in os.walk(source, followlinks=True):
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                target = scratch / name / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(_IMPORT.sub(rf"\g<1>{name}", path.read_text()))
    sys.path.insert(0, str(scratch))
    return name


#: ``from cosample.x import``, ``import cosample.x``, ``import_module("cosample.x")``.
_IMPORT = re.compile(r"(^\s*(?:from|import)\s+|import_module\([\"'])cosample(?=[.\s])", re.M)
