"""constraints.txt (bin/lock) pins what pyproject.toml asks for, the suite runs at those pins, and
the bootstrap installs again when the lock changes (docs/dependencies.md, "Pinned versions")."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {canonical(m.group(1)): m.group(2) for m in map(PIN.match, lines) if m is not None}


def requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [
        r for extra in project["optional-dependencies"].values() for r in extra
    ]
    names = {canonical(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in listed}
    return names - {"cosample"}


def test_every_requirement_of_every_extra_is_pinned():
    missing = requirements() - set(pins())
    assert not missing, f"not in constraints.txt: {sorted(missing)}; run bin/lock"
    assert {"pip", "setuptools", "wheel"} <= set(pins())  # the installer and the build backend


def test_the_suite_runs_at_the_pinned_versions():
    """What this virtualenv has is what the lock says (bin/bootstrap.sh installs with it): a
    package moved by hand, or a lock changed without installing it, shows here."""
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = {
        name: (installed[name], version)
        for name, version in pins().items()
        if name in installed
        and name not in {"pip", "setuptools", "wheel"}
        and installed[name] != version
    }
    assert not wrong, f"installed != pinned: {wrong}; run bin/test (it installs the lock)"
    assert requirements() - {"msgspec", "jsonschema"} <= set(installed)  # bench's are optional


def test_a_new_lock_means_a_new_install(tmp_path):
    for name in ("bin/bootstrap.sh", "pyproject.toml", "constraints.txt", "setup.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("collector/_sflow.c", "appmon/_fastpath.c"):  # what install_stamp hashes
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)

    def stamp() -> str:
        script = f"source {tmp_path / 'bin' / 'bootstrap.sh'}; install_stamp"
        return subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    before = stamp()
    assert re.fullmatch(r"[0-9a-f]{16}", before) and stamp() == before
    lock = tmp_path / "constraints.txt"
    lock.write_text(lock.read_text().replace("numpy==", "numpy==0.0.0.dev0+"))
    assert stamp() != before
