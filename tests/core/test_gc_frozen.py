"""What collection made is frozen out of the cyclic collector's sight, and the collector runs
less often, in every test process (tests/conftest.py, ``pytest_collection_finish``)."""

from __future__ import annotations

import gc
import os
import sys

import pytest


@pytest.mark.skipif(
    os.environ.get("COSAMPLE_TEST_GC") == "python",
    reason="COSAMPLE_TEST_GC=python: as Python has it",
)
def test_the_collected_suite_is_frozen_and_the_young_generation_larger():
    conftest = sys.modules["tests.conftest"]  # the suite's root conftest, as pytest loaded it
    assert gc.get_threshold() == conftest.GC_THRESHOLDS
    # every collected item, its module and their imports: far more than a bare interpreter's
    assert gc.get_freeze_count() > 50_000, gc.get_freeze_count()


def test_the_tests_own_cycles_are_still_collected():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
