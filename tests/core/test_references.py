"""Docs and code cite only files that are in the repository, and Markdown links land on a heading.

A citation of a file the repository does not hold (a design note kept elsewhere, a renamed
module, a moved doc) leaves the reader with nothing to open. Checked in every Markdown, Python,
notebook, TOML and shell file of the repository:

- Markdown links ``[text](target#anchor)``: the target exists (relative to the linking file) and,
  for a Markdown target, the anchor is one of its headings (GitHub's slugs);
- any ``name.md`` mentioned: it exists beside the citing file, at the root or in ``docs/``, or
  (a bare name) somewhere in the repository, or it is a report the tools write (``WRITTEN``);
- any path into the repository's folders (``docs/...``, ``planner/...``, ``tests/...``) that
  names a file (has an extension) or a folder (ends in ``/``): it exists (``*`` wildcards must
  match something).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "out", "__pycache__", ".pytest_cache", ".hypothesis", "build", "dist"}
SUFFIXES = {".md", ".py", ".ipynb", ".toml", ".sh", ".cfg", ".txt"}
TOP_FOLDERS = sorted(
    {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    - SKIP_DIRS
    - {"cosample.egg-info"}
)

MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MARKDOWN_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b")
REPOSITORY_PATH = re.compile(
    r"(?<![\w/.:-])((?:%s)/[\w./*-]*[\w*/])" % "|".join(map(re.escape, TOP_FOLDERS))
)


def repository_files() -> list[Path]:
    """The files to check, the skipped folders pruned as the tree is walked (not walked and
    then dropped: ``.venv`` alone holds tens of thousands of files, and every worker of the
    suite collects this module)."""
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [
            name for name in subfolders if name not in SKIP_DIRS and not name.endswith(".egg-info")
        ]
        here = Path(folder)
        for name in names:
            path = here / name
            if path.suffix in SUFFIXES or here.name in ("bin", ".ci"):
                files.append(path)
    return sorted(files)


#: Every file to check but this one, whose last test cites missing files on purpose.
FILES = [path for path in repository_files() if path != Path(__file__).resolve()]
#: Markdown files the tools write (not citations): ``cosample testbed run`` writes ``report.md``.
WRITTEN = {"report.md"}
MARKDOWN_ANYWHERE = {path.name for path in FILES if path.suffix == ".md"} | {
    path.name for path in ROOT.glob("docs/data/**/*.md")
}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(
        r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower()
    )
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    found: set[str] = set()
    inside_code = False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside_code = not inside_code
        elif not inside_code and (match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            base, anchor, n = slug(match.group(1)), slug(match.group(1)), 0
            while anchor in found:
                n += 1
                anchor = f"{base}-{n}"
            found.add(anchor)
    return found


def is_template(name: str) -> bool:
    """``OUT/closedloop-SCENARIO.md``: a name with placeholders (a folder in capitals, or capitals
    inside a lower-case name) describes files a command writes; ``DESIGN.md`` is a citation."""
    *folders, stem = name[: -len(".md")].split("/")
    return any(folder.isupper() for folder in folders) or (
        stem != stem.upper() and bool(re.search(r"(?:^|[-_.])[A-Z]{2,}(?:$|[-_.])", stem))
    )


def without_urls(text: str) -> str:
    return re.sub(r"\b[a-z][a-z0-9+.-]*://\S+", " ", text)


def exists(path: Path) -> bool:
    if "*" in path.name or "*" in str(path.parent):
        return any(ROOT.glob(str(path.relative_to(ROOT)))) if path.is_relative_to(ROOT) else False
    return path.exists()


def broken_references(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    problems = []
    if path.suffix == ".md":
        for target in MARKDOWN_LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:
            file_part, _, fragment = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"link to {target!r}: no such file")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                problems.append(f"link to {target!r}: no heading with that anchor in {linked.name}")
    plain = without_urls(text)
    for name in set(MARKDOWN_NAME.findall(plain)):
        if name in WRITTEN or ("/" not in name and name in MARKDOWN_ANYWHERE) or is_template(name):
            continue
        if not any((base / name).exists() for base in (path.parent, ROOT, ROOT / "docs")):
            problems.append(f"cites {name!r}, which is not in the repository")
    for cited in set(REPOSITORY_PATH.findall(plain)):
        cited = cited.rstrip(".")
        names_a_file_or_folder = cited.endswith("/") or "." in cited.rsplit("/", 1)[-1]
        if names_a_file_or_folder and not exists(ROOT / cited):
            problems.append(f"cites {cited!r}, which is not in the repository")
    return problems


def test_the_scan_sees_the_repository():
    names = {path.relative_to(ROOT).as_posix() for path in FILES}
    assert {"README.md", "docs/model.md", "docs/ovs-facts.md", "planner/exact.py"} <= names
    assert {"docs", "planner", "tests"} <= set(TOP_FOLDERS)


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_cited_file_is_in_the_repository(path):
    assert broken_references(path) == []


def test_the_checks_catch_what_they_should(tmp_path):
    doc = ROOT / "docs" / "model.md"
    assert "why-the-plan-is-exact" in anchors(ROOT / "docs" / "planner.md")
    assert (
        slug("`cosample.dataplane`: what runs on production hosts")
        == "cosampledataplane-what-runs-on-production-hosts"
    )
    fake = tmp_path / "note.md"
    fake.write_text(
        f"See DESIGN.md section 4, [x]({ROOT}/docs/planner.md#nowhere), [y](gone.md), "
        "docs/absent.md and planner/absent.py; https://example.org/x.md is fine; "
        "prose like collector/agent/header is not a path.\n"
    )
    problems = broken_references(fake)
    assert any("'DESIGN.md'" in p for p in problems)
    assert not any("collector/agent" in p for p in problems)
    assert is_template("OUT/closedloop-SCENARIO.md") and is_template("report-NAME.md")
    assert not is_template("DESIGN.md") and not is_template("docs/model.md")
    assert any("#nowhere" in p and "no heading" in p for p in problems)
    assert any("'gone.md'" in p and "no such file" in p for p in problems)
    assert any("'docs/absent.md'" in p for p in problems) and any(
        "planner/absent.py" in p for p in problems
    )
    assert not any("example.org" in p for p in problems)
    assert broken_references(doc) == []
