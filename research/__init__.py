"""Measurement campaigns behind the cost model's documented choices: not installed with cosample.

Each module is run from a clone, at the repository's root, as ``python -m research.NAME`` (the
commands are in docs/costmodel.md and docs/notes/); they read and write tidy CSVs through the
installed ``cosample`` package, and their tests are in tests/research/.
"""

from pathlib import Path

#: The clone's root: ``python -m research.NAME`` subprocesses run there, so they find this package.
ROOT = Path(__file__).resolve().parents[1]
