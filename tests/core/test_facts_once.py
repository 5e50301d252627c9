"""Facts defined once: no source file outside their home writes them again as literals.

The paper's coefficients live in ``costmodel/paper.py``, the plan format's name in
``cosample/plan/formats.py``, the time format in ``cosample/times.py``, each other format's name
in the module that declares it (docs/architecture.md, "Facts defined once"). A copy elsewhere would drift
when the home changes. Tests may spell values out (they pin behaviour); docstrings and comments
may cite them (they are not tokens of code).
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOMES = {
    "costmodel/paper.py": {("NUMBER", "1.54"), ("NUMBER", "0.46")},
    "cosample/plan/formats.py": {
        ("STRING", '"cosample.plan"'),
        ("STRING", '"cosample.planset"'),
        ("STRING", '"cosample.plan-report"'),
    },
    "cosample/times.py": {("STRING", '"%Y-%m-%dT%H:%M:%SZ"')},
    "collector/snapshotwire.py": {("STRING", '"cosample.snapshot"')},
    "collector/inventory.py": {("STRING", '"cosample.addresses"')},
    "controller/inventory.py": {("STRING", '"cosample.inventory"')},
    "appmon/snapshot.py": {("STRING", '"cosample.appmon-snapshot"')},
}
WATCHED = set().union(*HOMES.values())
SOURCES = sorted(
    path
    for path in ROOT.rglob("*.py")
    if not {".venv", ".git", "tests", "build"} & set(path.relative_to(ROOT).parts)
)


def literals(source: str) -> set[tuple[str, str]]:
    found = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = tokenize.tok_name[token.type]
        if kind in ("NUMBER", "STRING") and (kind, token.string.replace("'", '"')) in WATCHED:
            found.add((kind, token.string.replace("'", '"')))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_copy_of_a_fact_outside_its_home(path):
    allowed = HOMES.get(path.relative_to(ROOT).as_posix(), set())
    assert literals(path.read_text(encoding="utf-8")) - allowed == set()


def test_the_scan_finds_copies():
    assert literals('ALPHA = 1.54\nFORMAT = "cosample.plan"\n"""docstring: alpha 1.54"""\n') == {
        ("NUMBER", "1.54"),
        ("STRING", '"cosample.plan"'),
    }
    assert literals("beta = 0.460\n") == set()  # another spelling is another token; kept simple
    assert all(literals((ROOT / home).read_text()) == expected for home, expected in HOMES.items())
