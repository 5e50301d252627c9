"""Comparing numbers that numerical libraries computed: within a stated tolerance, never exactly.

A refit of the same committed data with another numpy, scipy or BLAS build agrees with the
committed result only to the last few digits (summation order, vectorised kernels), so a test
that compares such floats with ``==`` can pass only on the machine that wrote it.
"""

from __future__ import annotations

import math

#: A refit of committed data agrees with the committed result to this relative tolerance: the
#: libraries' last-digit differences are ~1e-15 relative; anything beyond 1e-9 is a real change.
REFIT_REL = 1e-9
#: ... and to this absolute one, for values that are 0 or cross it (an interval's bound).
REFIT_ABS = 1e-12


def same_numbers(got, expected, rel: float = REFIT_REL, abs_: float = REFIT_ABS, path: str = "$"):
    """Assert ``got`` equals ``expected`` (JSON-like: dicts, lists, strings, numbers, None), the
    same keys, lengths, types and strings, floats within ``rel``/``abs_``; the message names the
    first place where they differ."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), f"{path}: expected an object, got {got!r}"
        assert sorted(got) == sorted(expected), f"{path}: keys {sorted(got)} != {sorted(expected)}"
        for key in expected:
            same_numbers(got[key], expected[key], rel, abs_, f"{path}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(got, (list, tuple)), f"{path}: expected a list, got {got!r}"
        assert len(got) == len(expected), f"{path}: {len(got)} items != {len(expected)}"
        for index, (a, b) in enumerate(zip(got, expected)):
            same_numbers(a, b, rel, abs_, f"{path}[{index}]")
    elif isinstance(expected, float) and not isinstance(got, bool):
        assert isinstance(got, (int, float)), f"{path}: expected a number, got {got!r}"
        assert math.isclose(got, expected, rel_tol=rel, abs_tol=abs_), (
            f"{path}: {got!r} != {expected!r} (relative tolerance {rel:g}, absolute {abs_:g})"
        )
    else:
        assert type(got) is type(expected) and got == expected, f"{path}: {got!r} != {expected!r}"
