"""Byte strings laid end to end in one buffer, read as a sequence: a publication's views and
host names (``slicebuild``), and the hosts' mirror and receive lists the planner's compiled
writer returns (``cosample.planner.hostlists.Lists``).

At 10^6 hosts a publication's views were 10^6 ``bytes`` (550 MB for a plan set) and its names
10^6 ``str``, each allocated, and freed a publication later (0.3-0.4 s of CPU per publication,
measured apart from the cycle: docs/results.md, "Plan slices"). One buffer and its offsets are
two objects; an item is cut out when it is asked for (a slice document, one file of the folder
target).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, pairwise
from typing import Any, Final, TypeVar

try:  # the bisection over the names' bytes (no Python call per step); else bisect over str
    from cosample.plan._slices import find as _compiled_find
except ImportError:  # pragma: no cover - a host without a compiler
    _compiled_find = None

OFFSET: Final = "q"  # the offsets: native int64, as the compiled builders write them
_P = TypeVar("_P", bound="Packed")


class Packed(Sequence[Any]):
    """Items laid end to end in ``buffer``: item ``k`` spans ``offsets[k]`` to
    ``offsets[k + 1]`` (``len + 1`` int64 values spanning the buffer: bytes as the compiled
    builders write them, an ``array`` or a numpy array), less ``SEPARATOR`` bytes at its end,
    read as ``_item`` makes it. A slice (step 1) shares the buffer and its offsets."""

    __slots__ = ("buffer", "offsets", "_at")
    SEPARATOR = 0

    def __init__(self, buffer: bytes, offsets: Any) -> None:
        at = memoryview(offsets).cast("B").cast(OFFSET)
        if len(at) < 1 or at[0] != 0 or at[-1] != len(buffer):
            raise ValueError(
                f"offsets: {len(at)} values from {at[0] if len(at) else None} to "
                f"{at[-1] if len(at) else None}, for a buffer of {len(buffer)} bytes"
            )
        self.buffer, self.offsets, self._at = buffer, offsets, at

    def __len__(self) -> int:
        return len(self._at) - 1

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            first, last, step = key.indices(len(self))
            if step != 1:
                raise ValueError(f"{type(self).__name__}: a slice with a step")
            return self._sliced(first, max(first, last))
        k = range(len(self))[key]  # IndexError beyond the items
        return self._item(self.buffer[self._at[k] : self._at[k + 1] - self.SEPARATOR])

    def __iter__(self) -> Iterator[Any]:
        buffer, item, separator = self.buffer, self._item, self.SEPARATOR
        return (item(buffer[start : end - separator]) for start, end in pairwise(self._at.tolist()))

    def tolist(self) -> list[Any]:
        return list(self)

    def _sliced(self: _P, first: int, last: int) -> _P:
        """Items ``first`` to ``last`` (excluded): the same buffer, a view of the offsets (a
        slice need not span the buffer, so it skips the constructor's check)."""
        part = object.__new__(type(self))
        part.buffer, part.offsets = self.buffer, self._at[first : last + 1]
        part._at = part.offsets
        return part

    @staticmethod
    def _item(data: bytes) -> Any:
        return data

    @classmethod
    def _joined(cls: type[_P], items: list[bytes]) -> _P:
        """``items`` (each with its separator) laid end to end."""
        return cls(b"".join(items), array(OFFSET, accumulate(map(len, items), initial=0)))


class Views(Packed):
    """A publication's views, each ``bytes`` when asked for."""

    __slots__ = ()

    @classmethod
    def of(cls, items: Iterable[bytes]) -> Views:
        """``items`` packed (the Python builder's views; tests)."""
        return cls._joined(list(items))


class Names(Packed):
    """Host names in Python's sorted order, each followed by a newline (UTF-8; the newline is
    not part of the name, which may hold one). ``find`` bisects without a ``str`` per host."""

    __slots__ = ()
    SEPARATOR = 1

    @classmethod
    def of(cls, names: Iterable[str]) -> Names:
        """``names`` (sorted) packed (the Python builder's names; tests)."""
        return cls._joined([name.encode() + b"\n" for name in names])

    @staticmethod
    def _item(data: bytes) -> str:
        return data.decode()

    def __iter__(self) -> Iterator[str]:
        if (
            self._at[0] == 0
            and self._at[-1] == len(self.buffer)
            and self.buffer.count(b"\n") == len(self)
        ):  # no name holds a newline: split once
            return iter(self.buffer.decode().split("\n")[:-1])
        return super().__iter__()

    def find(self, name: str) -> int | None:
        """The index of ``name``, or None."""
        if _compiled_find is not None:
            k = _compiled_find(self.buffer, self.offsets, name.encode(errors="surrogatepass"))
            return k if k >= 0 else None
        k = bisect.bisect_left(self, name)
        return k if k < len(self) and self[k] == name else None
