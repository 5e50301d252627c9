"""tests/numeric.py: library-computed numbers compared within a tolerance, and still able to fail."""

import pytest
from numeric import same_numbers


def test_last_digit_differences_pass():
    # the example: the same refit with numpy 2.4.6 and scipy 1.17.1
    same_numbers({"ci": [-0.010758385137020668, 0.5]}, {"ci": [-0.010758385137020675, 0.5]})


@pytest.mark.parametrize(
    ("got", "expected", "where"),
    [
        ({"a": 1.0 + 1e-6}, {"a": 1.0}, r"\$\.a: "),
        ({"a": [1.0, 2.0]}, {"a": [1.0]}, r"\$\.a: 2 items"),
        ({"a": 1.0, "b": 1}, {"a": 1.0}, r"\$: keys"),
        ({"a": {"law": "log"}}, {"a": {"law": "linear"}}, r"\$\.a\.law"),
        ({"n": 14.0}, {"n": 14}, r"\$\.n"),  # an integer count stays an integer
        ({"x": None}, {"x": 0.5}, r"\$\.x: expected a number"),
    ],
)
def test_real_differences_fail_and_name_the_place(got, expected, where):
    with pytest.raises(AssertionError, match=where):
        same_numbers(got, expected)
