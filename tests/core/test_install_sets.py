"""The lean install: the agent's commands run without the planner's and the lab's libraries.

``pip install cosample`` brings only what an agent host needs (pyproject.toml's
``dependencies``); numpy, scipy, PuLP, pandas and matplotlib come with extras. A child
interpreter that cannot import those libraries (a meta-path finder refuses them) plays the lean
host here; the real lean venv is measured in docs/dependencies.md, "Install sets".
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from plan_documents import plan_bytes, plan_document

from cosample.errors import EXTRA_OF_MODULE, missing_extra
from cosample.plan.signing import generate_keypair, sign_file

LEAN = f"""
import sys
from importlib.abc import MetaPathFinder
BLOCKED = {sorted(EXTRA_OF_MODULE)!r}
class Lean(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Lean())
from cosample.cli import main
status = main(sys.argv[1:])
sys.exit(status)
"""


def lean(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LEAN, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_agent_verifies_and_checks_a_signed_plan_without_the_heavy_libraries(tmp_path):
    created = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=1)
    plan = tmp_path / "plan.json"
    plan.write_bytes(plan_bytes(plan_document(created=created)))
    generate_keypair(tmp_path / "key", tmp_path / "key.pub")
    sign_file(plan, tmp_path / "key")
    done = lean(
        "agent", "validate", "--host", "s1", "--public-key", str(tmp_path / "key.pub"), str(plan)
    )
    assert done.returncode == 0, done.stderr
    assert "plan version 100 (4 hosts" in done.stdout and "valid" in done.stdout
    helped = lean("agent", "--help")
    assert helped.returncode == 0 and "run" in helped.stdout


def test_a_command_that_needs_an_extra_says_which(tmp_path):
    done = lean("plan", "-o", str(tmp_path / "plan.json"))
    assert done.returncode == 2
    assert "pip install 'cosample[planner]'" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize(
    "module, extra",
    [
        ("numpy", "planner"),
        ("numpy.linalg", "planner"),
        ("pandas", "all"),
        ("scipy.stats", "planner"),
    ],
)
def test_missing_extra_names_the_install_set(module, extra):
    hint = missing_extra(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert f"cosample[{extra}]" in hint and module in hint


def test_a_module_of_no_install_set_is_not_explained_away():
    assert missing_extra(ModuleNotFoundError("No module named 'nothere'", name="nothere")) is None


def test_the_agent_runs_its_analysers_without_the_appmon_extra():
    """The agent's cycle (runner, the analysers' supervisor, the records' pair keys) imports
    nothing of an install set: a lean agent host derives the record keys too."""
    script = LEAN.split("from cosample.cli import main")[0] + (
        "import cosample.agents.runner, cosample.agents.analyser_procs\n"
        "from cosample.dataplane.recordkeys import pair_key\n"
        "print(len(pair_key(bytes(32), 's1', 's4')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "32"
