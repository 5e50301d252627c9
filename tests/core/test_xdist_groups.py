"""tests/xdist_groups.py: the modules that need root run in their rig's group, the others in
none, and the scheduler keeps a group together."""

from pathlib import Path

import pytest
from xdist_groups import RootGroupScheduling, module_group, scope_of_module

ROOT = Path(__file__).resolve().parents[2]


def scopes_only() -> RootGroupScheduling:
    """The scheduler with what ``_split_scope`` reads and no workers."""
    scheduler = RootGroupScheduling.__new__(RootGroupScheduling)
    scheduler.rootpath = ROOT
    return scheduler


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("tests/costmodel/test_integration.py", "measure"),  # OneHostTestbed
        ("tests/costmodel/test_cpu_integration.py", "measure"),  # cosample calibrate --testbed
        ("tests/experiments/test_appmon_costs.py", "measure"),  # the mirroring rig
        ("tests/appmon/test_ground_truth.py", "measure"),  # the web rig
        ("tests/agents/test_dataplane.py", "root"),  # Lab, real-datapath OVS in namespaces
        ("tests/agents/test_sandbox.py", "root"),  # the sandbox fixture: root links, VXLAN
        ("tests/agents/test_hardening.py", "root"),
        ("tests/testbed/test_integration.py", "root"),  # the emulated data centre
        ("tests/ops/test_quickstart.py", "machines"),  # emulated machines, namespaces only
        ("tests/core/test_numeric.py", None),
        ("tests/planner/test_sample_choice.py", None),
    ],
)
def test_a_module_runs_in_the_group_of_the_rig_it_builds(path, group):
    assert module_group(ROOT / path) == group


def test_a_root_mark_or_fixture_puts_a_module_in_the_root_group(tmp_path):
    cases = {
        "marked.py": "@pytest.mark.root\ndef test_x(): ...\n",
        "fixture.py": "def test_x(tmp_path, root_links): ...\n",
        "plain.py": "from cosample.dataplane.run import run\ndef test_x(tmp_path): ...\n",
    }
    for name, source in cases.items():
        (tmp_path / name).write_text(source)
    assert module_group(tmp_path / "marked.py") == module_group(tmp_path / "fixture.py") == "root"
    assert module_group(tmp_path / "plain.py") is None


def test_the_scheduler_gives_a_group_one_scope():
    scheduler = scopes_only()
    scopes = {
        scheduler._split_scope(nodeid)
        for nodeid in (
            "tests/agents/test_sandbox.py::test_second_run_writes_nothing[today]",
            "tests/agents/test_hardening.py::test_secure_by_default",
        )
    }
    assert scopes == {"root"}
    alone = "tests/core/test_numeric.py::test_last_digit_differences_pass"
    assert scheduler._split_scope(alone) == alone


def test_the_modules_that_run_mypy_share_one_scope_at_the_usual_priority():
    """bin/lint and bin/check-types on one worker, one after the other (the second reads the
    first's mypy cache), and not raised as a root group is."""
    scheduler = scopes_only()
    scopes = {
        scheduler._split_scope(nodeid)
        for nodeid in (
            "tests/core/test_layers.py::test_bin_lint_runs_as_documented",
            "tests/core/test_types.py::test_the_product_packages_type_check",
        )
    }
    assert scopes == {"mypy"}
    assert module_group(ROOT / "tests/core/test_layers.py") is None
    assert module_group(ROOT / "tests/core/test_types.py") is None


def test_a_module_with_a_shared_set_up_is_one_unit(tmp_path):
    """A module-scoped fixture, in the module or its folder's conftest.py, is made once per
    worker: the module's tests go to one worker. An ``autouse`` one (a patch) does not count."""
    scheduler = scopes_only()
    ops = "tests/ops/test_prometheus.py"  # the fleet and Prometheus of tests/ops/conftest.py
    scopes = {scheduler._split_scope(f"{ops}::{name}") for name in ("test_a", "test_b")}
    assert scopes == {str(ROOT / ops)}
    planner = "tests/planner/test_quantised.py::test_monotone_in_margin"  # autouse: alone
    assert scheduler._split_scope(planner) == planner
    (tmp_path / "own.py").write_text('@pytest.fixture(scope="module")\ndef rig(): ...\n')
    (tmp_path / "patched.py").write_text('@pytest.fixture(autouse=True, scope="module")\n')
    assert scope_of_module(tmp_path / "own.py") == str(tmp_path / "own.py")
    assert scope_of_module(tmp_path / "patched.py") is None
