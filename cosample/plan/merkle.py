"""A SHA-256 Merkle tree over byte strings (pure): one signed root proves any one leaf.

Leaves are hashed as ``SHA-256(0x00 || leaf)`` and inner nodes as ``SHA-256(0x01 || left ||
right)`` (the domain separation of RFC 6962), so no leaf can pass for an inner node. A level of
odd length passes its last node up unchanged. The proof of leaf ``index`` in a tree of ``size``
leaves is the list of its siblings from the bottom up; which levels have a sibling follows from
``index`` and ``size``, both of which the verifier knows (the size is in the signed head), so a
proof carries hashes only.

A level is kept as one ``bytes`` of 32-byte hashes, not a list of small objects: 10^6 leaves
cost 64 MB for the whole tree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

try:  # the same levels, compiled with the slices' builder (setup.py); agents need neither
    from cosample.plan._slices import parents as _compiled_parents
except ImportError:  # pragma: no cover - a host without a compiler
    _compiled_parents = None

HASH_BYTES = 32
LEAF_PREFIX, NODE_PREFIX = b"\x00", b"\x01"


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


class MerkleTree:
    """The levels of the tree over ``leaf_hashes`` (each ``HASH_BYTES`` long); ``root``, ``size``
    and ``proof(index)``."""

    def __init__(self, leaf_hashes: Sequence[bytes]) -> None:
        self._build(b"".join(leaf_hashes))

    @classmethod
    def over(cls, level: bytes) -> "MerkleTree":
        """The tree over the leaf hashes laid end to end in ``level`` (no list of 10^6 hashes)."""
        tree = cls.__new__(cls)
        tree._build(level)
        return tree

    def _build(self, level: bytes) -> None:
        if not level or len(level) % HASH_BYTES:
            raise ValueError(
                f"a Merkle tree needs at least one leaf hash of {HASH_BYTES} bytes, "
                f"given {len(level)} bytes"
            )
        self.size = len(level) // HASH_BYTES
        self.levels = [level]
        parents = _compiled_parents or _parents
        while len(self.levels[-1]) > HASH_BYTES:
            self.levels.append(parents(self.levels[-1]))

    @property
    def root(self) -> bytes:
        return self.levels[-1]

    def proof(self, index: int) -> list[bytes]:
        """The siblings of leaf ``index`` from the bottom up (levels without one are skipped)."""
        if not 0 <= index < self.size:
            raise IndexError(f"leaf {index} of a tree of {self.size}")
        path = []
        for level in self.levels[:-1]:
            sibling = index ^ 1
            if sibling * HASH_BYTES < len(level):
                path.append(level[sibling * HASH_BYTES : (sibling + 1) * HASH_BYTES])
            index //= 2
        return path


def root_from_proof(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes:
    """The root that ``path`` leads to from the leaf hash ``leaf`` at ``index`` of ``size``;
    ``ValueError`` if the path does not fit such a tree (wrong length, a hash not 32 bytes)."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} outside a tree of {size} leaves")
    node, width, used = leaf, size, 0
    while width > 1:
        if index ^ 1 < width:
            if used == len(path):
                raise ValueError(f"path too short: {len(path)} hashes for leaf {index} of {size}")
            sibling = path[used]
            if len(sibling) != HASH_BYTES:
                raise ValueError(f"path[{used}]: {len(sibling)} bytes, a hash has {HASH_BYTES}")
            node = node_hash(node, sibling) if index % 2 == 0 else node_hash(sibling, node)
            used += 1
        index, width = index // 2, (width + 1) // 2
    if used != len(path):
        raise ValueError(f"path too long: {len(path)} hashes, leaf {index} of {size} needs {used}")
    return node


def _parents(level: bytes) -> bytes:
    """The level above ``level``: pairs hashed, an odd last node passed up as it is (one list
    comprehension: 10^6 nodes in about a quarter of a second)."""
    count = len(level) // HASH_BYTES
    even = (count - count % 2) * HASH_BYTES
    sha, prefix, pair = hashlib.sha256, NODE_PREFIX, 2 * HASH_BYTES
    parents = b"".join(
        [sha(prefix + level[start : start + pair]).digest() for start in range(0, even, pair)]
    )
    return parents + level[even:] if count % 2 else parents
