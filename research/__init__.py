"""Benchmarks and measurement campaigns behind the documented results: not installed with cosample.

Each module is run from a clone, at the repository's root, as ``python -m research.NAME`` (the
commands are beside their results in docs/ and docs/notes/); they import the installed
``cosample`` package, never the other way round. What ``cosample experiment`` runs for users
(the paper's figures, the testbed) is in ``cosample.experiments`` (experiments/) instead.
A module that starts ``python -m research.NAME`` children runs them in ``ROOT``.
"""

from pathlib import Path

#: The clone's root: ``python -m research.NAME`` subprocesses run there, so they find this package.
ROOT = Path(__file__).resolve().parents[1]
