"""HostNames: names picked by index behave as the tuple of them would."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosample.controller.hostnames import HostNames

FLEET = tuple(f"s{k}" for k in range(20))


@given(
    st.lists(st.booleans(), min_size=len(FLEET), max_size=len(FLEET)),
    st.lists(st.sampled_from(["x", "y"]), max_size=3),
    st.integers(-25, 25),
    st.integers(-25, 25),
    st.sampled_from([None, 1, 2, -1]),
)
def test_it_is_the_tuple_of_the_names(mask, extra, k, stop, step):
    picked = HostNames.where(FLEET, np.array(mask)) + tuple(extra)
    expected = tuple(name for name, keep in zip(FLEET, mask) if keep) + tuple(extra)
    assert len(picked) == len(expected) and bool(picked) == bool(expected)
    assert tuple(picked) == expected and picked == expected and list(picked) == list(expected)
    assert picked[k:stop:step] == expected[k:stop:step]
    if -len(expected) <= k < len(expected):
        assert picked[k] == expected[k]
    else:
        with pytest.raises(IndexError):
            picked[k]
    assert ("s3" in picked) == ("s3" in expected)


def test_two_picks_of_one_fleet_join_by_index():
    over = HostNames(FLEET, [3, 1])
    both = over + HostNames(FLEET, [0])
    assert both == ("s3", "s1", "s0") and both._names is FLEET
    assert over + ("z",) + HostNames(FLEET, [2]) == ("s3", "s1", "z", "s2")
    assert () + over is over and ("z",) + over == ("z", "s3", "s1")


def test_it_is_not_equal_to_other_names_or_a_string():
    assert HostNames(FLEET, [1]) != ("s2",)
    assert HostNames(FLEET, [1, 2]) != ("s1",)
    assert HostNames(FLEET, [1]) != "s1"
    assert HostNames(FLEET) == () and not HostNames(FLEET)
    with pytest.raises(TypeError):
        hash(HostNames(FLEET, [1]))
