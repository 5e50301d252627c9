"""Host names picked out of the fleet's by index, made into a sequence without a tuple of them.

A cycle at 10^6 servers names hundreds of thousands of servers that are over the limit,
settling, saturated or unmeasured; the status shows the first ``LIST_LIMIT`` of each and counts
the rest. Built as tuples, those lists and the garbage collector's scan of them once the cycle
ends were a measurable part of it (docs/results/controller.md, "Controller cycle"). ``HostNames``
keeps the fleet's names (shared, not copied) and the picked indices; a name is looked up when
it is read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class HostNames(Sequence[str]):
    """``names[i]`` for each ``i`` of ``index`` (in that order), then ``extra``: an immutable
    sequence of str that compares equal to any sequence of the same names (a tuple too)."""

    __slots__ = ("_names", "_index", "_extra")

    def __init__(
        self,
        names: Sequence[str],
        index: np.ndarray | Sequence[int] = (),
        extra: Sequence[str] = (),
    ) -> None:
        self._names = names
        self._index = np.asarray(index, dtype=np.int64)
        self._extra = tuple(extra)

    @classmethod
    def where(cls, names: Sequence[str], mask: np.ndarray) -> "HostNames":
        """The names where ``mask`` holds."""
        return cls(names, np.flatnonzero(mask))

    def __len__(self) -> int:
        return int(self._index.size) + len(self._extra)

    @overload
    def __getitem__(self, k: int) -> str: ...
    @overload
    def __getitem__(self, k: slice) -> tuple[str, ...]: ...

    def __getitem__(self, k: int | slice) -> str | tuple[str, ...]:
        if isinstance(k, slice):
            return tuple(self[i] for i in range(*k.indices(len(self))))
        size = int(self._index.size)
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError("host index out of range")
        return self._names[int(self._index[k])] if k < size else self._extra[k - size]

    def __iter__(self) -> Iterator[str]:
        names = self._names
        yield from (names[i] for i in self._index.tolist())
        yield from self._extra

    def __add__(self, other: Sequence[str]) -> "HostNames":
        """These names, then ``other``'s (the fleet's by index when both pick from the same)."""
        if isinstance(other, HostNames) and other._names is self._names and not self._extra:
            return HostNames(self._names, np.concatenate((self._index, other._index)), other._extra)
        return HostNames(self._names, self._index, self._extra + tuple(other))

    def __radd__(self, other: Sequence[str]) -> Sequence[str]:
        """``other``'s names, then these (no names before them: these as they are)."""
        return self if len(other) == 0 else tuple(other) + tuple(self)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # equal to tuples, not hashed like them

    def __repr__(self) -> str:
        shown = ", ".join(repr(name) for name in self[:3])
        return f"HostNames({len(self)}: {shown}{', ...' if len(self) > 3 else ''})"
