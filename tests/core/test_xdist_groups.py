"""tests/xdist_groups.py: the tests that need root run in their rig's group, the others in none."""

from pathlib import Path

import pytest
from xdist_groups import root_group

ROOT = Path(__file__).resolve().parents[2]


class Item:
    """What root_group reads of a collected test."""

    def __init__(self, path, marks=(), fixturenames=()):
        self.path, self.fixturenames, self._marks = ROOT / path, list(fixturenames), set(marks)

    def get_closest_marker(self, name):
        return pytest.mark.root if name in self._marks else None


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("tests/costmodel/test_integration.py", "onehost"),  # OneHostTestbed
        ("tests/costmodel/test_cpu_integration.py", "onehost"),  # cosample calibrate --testbed
        ("tests/experiments/test_appmon_costs.py", "web"),  # the mirroring rig
        ("tests/appmon/test_ground_truth.py", "web"),  # the web rig
        ("tests/agents/test_dataplane.py", "root"),  # Lab, real-datapath OVS in namespaces
        ("tests/testbed/test_integration.py", "root"),  # the emulated data centre
        ("tests/core/test_numeric.py", None),
        ("tests/planner/test_sample_choice.py", None),
    ],
)
def test_a_module_runs_in_the_group_of_the_rig_it_builds(path, group):
    assert root_group(Item(path)) == group


def test_a_root_mark_or_fixture_elsewhere_means_the_root_group():
    assert root_group(Item("tests/core/test_numeric.py", marks={"root"})) == "root"
    assert (
        root_group(Item("tests/core/test_numeric.py", fixturenames=["sandbox", "tmp_path"]))
        == "root"
    )
    assert root_group(Item("tests/core/test_numeric.py", fixturenames=["tmp_path"])) is None
