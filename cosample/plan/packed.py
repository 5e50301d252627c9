"""Byte strings laid end to end in one buffer, read as a sequence (a publication's views and
host names, ``slicebuild``).

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

try:  # the bisection over the names' bytes (no Python call per step); else bisect over str
    from cosample.plan._slices import find as _compiled_find
except ImportError:  # pragma: no cover - a host without a compiler
    _compiled_find = None

OFFSET = "q"  # the offsets: native int64, as _slices.c writes them


class _Packed:
    """Items laid end to end in ``buffer``: item ``k`` spans ``offsets[k]`` to
    ``offsets[k + 1]`` (``len + 1`` int64 values, as bytes as ``_slices.views`` writes them, or
    an ``array``), less ``self.SEPARATOR`` bytes at its end."""

    __slots__ = ("buffer", "offsets", "_at")
    SEPARATOR = 0

    def __init__(self, buffer: bytes, offsets: bytes | array) -> None:
        at = memoryview(offsets).cast("B").cast(OFFSET)
        if len(at) < 1 or at[0] != 0 or at[-1] != len(buffer):
            raise ValueError(f"offsets: {len(at)} values from {at[0] if len(at) else None} to "
                             f"{at[-1] if len(at) else None}, for a buffer of {len(buffer)} bytes")
        self.buffer, self.offsets, self._at = buffer, offsets, at

    def __len__(self) -> int:
        return len(self._at) - 1

    def _cut(self, k: int) -> bytes:
        count = len(self._at) - 1
        if k < 0:
            k += count
        if not 0 <= k < count:
            raise IndexError(f"index {k} out of range for {count} items")
        return self.buffer[self._at[k]:self._at[k + 1] - self.SEPARATOR]


class Views(_Packed, Sequence[bytes]):
    """A publication's views, each ``bytes`` when asked for."""

    __slots__ = ()

    @classmethod
    def of(cls, items: Iterable[bytes]) -> Views:
        """``items`` packed (the Python builder's views; tests)."""
        items = list(items)
        return cls(b"".join(items), array(OFFSET, accumulate(map(len, items), initial=0)))

    def __getitem__(self, k: int) -> bytes:  # type: ignore[override]
        return self._cut(k)

    def __iter__(self) -> Iterator[bytes]:
        buffer = self.buffer
        return (buffer[start:end] for start, end in pairwise(self._at.tolist()))


class Names(_Packed, Sequence[str]):
    """Host names in Python's sorted order, each followed by a newline (UTF-8; the newline is
    not part of the name, which may hold one). ``find`` bisects without a ``str`` per host."""

    __slots__ = ()
    SEPARATOR = 1

    @classmethod
    def of(cls, names: Iterable[str]) -> Names:
        """``names`` (sorted) packed (the Python builder's names; tests)."""
        encoded = [name.encode() + b"\n" for name in names]
        return cls(b"".join(encoded), array(OFFSET, accumulate(map(len, encoded), initial=0)))

    def __getitem__(self, k: int) -> str:  # type: ignore[override]
        return self._cut(k).decode()

    def __iter__(self) -> Iterator[str]:
        if self.buffer.count(b"\n") == len(self):  # no name holds a newline: split once
            return iter(self.buffer.decode().split("\n")[:-1])
        return (self[k] for k in range(len(self)))

    def find(self, name: str) -> int | None:
        """The index of ``name``, or None."""
        if _compiled_find is not None:
            k = _compiled_find(self.buffer, self.offsets, name.encode(errors="surrogatepass"))
            return k if k >= 0 else None
        k = bisect.bisect_left(self, name)
        return k if k < len(self) and self[k] == name else None
