"""A git revision's source, laid out as an importable tree, for before/after comparisons.

The benchmarks never run git themselves: those that compare with older code
(``bench_controller``, ``collector_loss``, ``collector_planchange``) take ``--baseline-tree DIR``,
a folder this module fills from a clone:

    python -m research.revision 127e2e2 /tmp/cosample-127e2e2
    python -m research.collector_loss --baseline-tree /tmp/cosample-127e2e2

``DIR/source`` holds the revision's files; ``DIR/cosample`` maps its packages as pyproject.toml's
``package-dir`` does, so ``DIR`` on ``PYTHONPATH`` imports that revision's ``cosample``.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from research import ROOT


def export(revision: str, folder: Path, repository: Path = ROOT) -> Path:
    """``revision`` of ``repository`` laid out under ``folder`` (created; must be empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise SystemExit(f"{folder}: not empty; give a new folder")
    archive = subprocess.run(
        ["git", "-C", str(repository), "archive", revision],
        capture_output=True,
        timeout=120,
        check=True,
    ).stdout
    source = folder / "source"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(source, filter="data")
    layout = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, where in sorted(layout["package-dir"].items()):  # parents before children
        target = folder.joinpath(*package.split("."))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source / where, target_is_directory=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision")
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    print(export(args.revision, args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
