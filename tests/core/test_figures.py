"""Every figure in docs/figures/ is shown or cited by a document: a figure no page names is
unexplained (which run, which command) and goes stale unseen."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures"


def documents() -> list[Path]:
    skip = {".git", ".venv", "node_modules"}
    return [p for p in ROOT.rglob("*.md") if not skip & set(p.relative_to(ROOT).parts)]


def unreferenced(figures: list[Path], texts: list[str]) -> list[str]:
    """The figures whose path under docs/ ("figures/NAME") no text names."""
    return sorted(f.name for f in figures if not any(f"figures/{f.name}" in t for t in texts))


def test_every_figure_is_referenced_by_a_document():
    figures = sorted(p for p in FIGURES.iterdir() if p.is_file())
    assert figures, "docs/figures/ is empty: the scan looks in the wrong place"
    texts = [p.read_text(encoding="utf-8") for p in documents()]
    assert unreferenced(figures, texts) == []


def test_the_check_sees_an_orphan(tmp_path):
    shown, orphan = tmp_path / "shown.png", tmp_path / "orphan.png"
    page = "![the heatmap](figures/shown.png), and orphan.png in prose does not count"
    assert unreferenced([shown, orphan], [page]) == ["orphan.png"]
