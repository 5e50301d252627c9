"""Building a publication's per-host slices (the publisher's side of ``cosample.plan.slices``).

``build_slices`` takes the plans of one publication (one plan, or the phases of a plan set),
cuts each host's view out of each plan (``host_views``), hashes the views into one Merkle tree,
writes the head and signs it once. The result keeps the views' bytes and the tree; a slice
document is put together when it is asked for (a path is ``log2(hosts)`` hashes), so 10^6 slices
are never held as 10^6 documents.

The views are built by the compiled builder (``_slices.c``) from the host tables' JSON bytes,
without a Python object per host: the views and the names each laid end to end in one buffer
(``packed``), 10^6 hosts in about 2 s of CPU instead of 20 (docs/results.md, "Plan slices").
What it does not take (or where it is not built), the Python builder here does, with the same
bytes (tests/plan/test_slices_compiled.py).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from cosample.plan.formats import FORMAT_VERSION, SLICE_FORMAT, SLICE_HEAD_FORMAT
from cosample.plan.hostfields import PEER_FIELDS
from cosample.plan.merkle import HASH_BYTES, LEAF_PREFIX, MerkleTree
from cosample.plan.packed import Names, Views
from cosample.plan.signing import sign_bytes
from cosample.plan.slices import HASH_NAME, HEAD_FIELDS, PLAIN_NAME, slice_file_name

try:  # compiled by pip install (setup.py); without it, the same views in Python
    from cosample.plan import _slices
except ImportError:  # pragma: no cover - a host without a compiler
    _slices = None

# PEER_FIELDS (cosample.plan.hostfields): a peer's fields every view of it keeps (its lists are
# cut to the pairs with the viewer); the local mechanism's fields too: a ``sample`` peer's entry
# is valid only with them.
_SORTED = orjson.OPT_SORT_KEYS
if _slices is not None:
    _slices.configure(PEER_FIELDS)


def host_views(hosts: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every host's view of one plan (``view``), by host name."""
    related = relations(hosts)
    return {name: view(name, entry, hosts, related) for name, entry in hosts.items()}


def relations(hosts: Mapping[str, Any]) -> dict[str, list[tuple[str, str | None, Any]]]:
    """Per host, what its view holds besides its own entry: ``(peer, None, None)`` for a peer
    it needs the tunnel address of, ``(peer, key, item)`` for an item of the peer's list
    ``key`` about it. Peers are the hosts it mirrors to, receives from, sends application
    traffic to or analyses for; a name the plan does not have is left out, so the agent's pair
    checks refuse the view as they refuse the whole plan. References, not copies: the views
    are made one at a time (10^6 of them at once would cost gigabytes)."""
    related: defaultdict[str, list[tuple[str, str | None, Any]]] = defaultdict(list)
    for name, entry in hosts.items():
        for key, other in _LISTS:
            items = entry.get(key)
            if not items:
                continue
            mine = related[name]
            for item in items:
                peer = item.get(other)
                if peer is None or peer == name or peer not in hosts:
                    continue
                mine.append((peer, None, None))
                # a sniffer's entry too: its analysis host receives the compact records
                related[peer].append((name, key, item))
    return related


def view(
    name: str,
    entry: Any,
    hosts: Mapping[str, Any],
    related: Mapping[str, list[tuple[str, str | None, Any]]],
) -> dict[str, Any]:
    """``name``'s host table of one plan: its own entry as it is, and each peer's
    ``PEER_FIELDS`` with only the mirrors to it, the receives from it and the appmon entries
    toward it."""
    table = {name: entry}
    for peer, key, item in related.get(name, ()):
        cut = table.get(peer)
        if cut is None:
            whole = hosts[peer]
            cut = table[peer] = {field: whole[field] for field in PEER_FIELDS if field in whole}
        if key is not None:
            listed = cut.get(key)
            if listed is None:
                cut[key] = [item]
            else:
                listed.append(item)
    return table


_LISTS = (("mirrors", "to"), ("receives", "from"), ("appmon", "to"))


class SliceSet:
    """One publication's slices: ``document(file_name)`` (None: no such host) and its ``etag``.
    ``names`` are sorted: a plain name (its own file name) is found by bisection over their
    buffer (``Names.find``), the few others through a dict of their hashed file names (a dict
    of 10^6 names costs half a second)."""

    def __init__(
        self,
        head: bytes,
        signature: bytes | None,
        names: Names,
        views: Views,
        tree: MerkleTree | None,
    ) -> None:
        self.head, self.signature, self.names, self.views, self.tree = (
            head,
            signature,
            names,
            views,
            tree,
        )
        self._hashed = {slice_file_name(names[k]): k for k in _not_plain(names)}
        self._head_text = head.decode()
        self._signature_text = signature.decode().strip() if signature is not None else None

    def __len__(self) -> int:
        return len(self.names)

    def position(self, file_name: str) -> int | None:
        """The index of the host whose slice file is ``file_name``, or None."""
        k = self._hashed.get(file_name)
        if k is not None or not PLAIN_NAME.fullmatch(file_name):
            return k
        return self.names.find(file_name)

    def document(self, file_name: str) -> bytes | None:
        k = self.position(file_name)
        if k is None:
            return None
        assert self.tree is not None  # a host was found: the tree has its leaf
        return orjson.dumps(
            {
                "format": SLICE_FORMAT,
                "format_version": FORMAT_VERSION,
                "head": self._head_text,
                "signature": self._signature_text,
                "view": self.views[k].decode(),
                "index": k,
                "path": [step.hex() for step in self.tree.proof(k)],
            }
        )

    def etag(self, file_name: str) -> str | None:
        """Changes whenever the document does (root, view or signature)."""
        k = self.position(file_name)
        if k is None:
            return None
        assert self.tree is not None  # a host was found: the tree has its leaf
        leaf = self.tree.levels[0][k * HASH_BYTES : (k + 1) * HASH_BYTES]
        digest = hashlib.sha256(self.tree.root + leaf + (self.signature or b""))
        return '"' + digest.hexdigest()[:32] + '"'

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every (file name, document), in name order: ``document``'s bytes, without looking
        each host up by its file name, and every level of the tree written as hex once (the
        folder target writes all of them: per host, 10^6 lookups and 2·10^7 ``hex`` calls)."""
        tree = self.tree
        if tree is None:
            return
        hashed = {k: file_name for file_name, k in self._hashed.items()}
        width = 2 * HASH_BYTES
        levels = [(level.hex(), len(level) // HASH_BYTES) for level in tree.levels[:-1]]
        fixed = {
            "format": SLICE_FORMAT,
            "format_version": FORMAT_VERSION,
            "head": self._head_text,
            "signature": self._signature_text,
        }
        dumps = orjson.dumps
        for k, (name, view) in enumerate(zip(self.names, self.views)):
            path, index = [], k
            for text, count in levels:
                sibling = index ^ 1
                if sibling < count:
                    path.append(text[sibling * width : (sibling + 1) * width])
                index >>= 1
            yield (
                hashed.get(k, name),
                dumps({**fixed, "view": view.decode(), "index": k, "path": path}),
            )


def _not_plain(names: Names) -> list[int]:
    """The indexes of the names that are not their own file name (``slice_file_name``): none,
    checked in one pass over their buffer, in the common case."""
    if names.buffer.count(b"\n") == len(names) and _PLAIN_NAMES.fullmatch(names.buffer):
        return []
    return [k for k, name in enumerate(names) if not PLAIN_NAME.fullmatch(name)]


# possessive (each name ends at its newline: nothing to give back), 4x as fast at 10^6 names
_PLAIN_NAMES = re.compile(rf"(?:{PLAIN_NAME.pattern}\n)*+".encode())


def build_slices(plans: Sequence[Mapping[str, Any]], key: str | None) -> SliceSet:
    """The slices of a publication of ``plans`` (their ``hosts`` dicts, or the planner's
    ``HostTable``), the head signed with the private key at ``key`` (None: unsigned)."""
    built = _compiled_views([plan.get("hosts") for plan in plans])
    if built is None:
        tables = [_table(plan.get("hosts")) for plan in plans]
        if not all(isinstance(table, Mapping) for table in tables):
            return _no_slices()  # not a plan agents accept
        built = _python_views(tables)
    names, leaves, level = built
    if not names:  # an empty host table: nothing to serve (agents refuse the plan anyway)
        return _no_slices()
    tree = MerkleTree.over(level)
    head = orjson.dumps(
        {
            "format": SLICE_HEAD_FORMAT,
            "format_version": FORMAT_VERSION,
            "plans": [
                {field: plan[field] for field in HEAD_FIELDS if field in plan} for plan in plans
            ],
            "tree": {"hash": HASH_NAME, "leaves": len(names), "root": tree.root.hex()},
        },
        option=_SORTED,
    )
    signature = sign_bytes(head, key) if key else None
    return SliceSet(head, signature, names, leaves, tree)


def _compiled_views(tables: list[Any]) -> tuple[Names, Views, bytes] | None:
    """Names, views and leaf hashes from the compiled builder (``_slices.c``: the host tables'
    bytes read once, no Python object per host); None when it is not built or the tables are
    not its fast case (then ``_python_views`` gives the same)."""
    if _slices is None:
        return None
    serialised = []
    for hosts in tables:
        joined = getattr(hosts, "json", None)  # the planner's HostTable: joined once (204 MB
        if isinstance(joined, bytes):  # at 10^6 hosts: asked twice, joined twice)
            serialised.append(joined)
        elif isinstance(hosts, Mapping):  # parsed (a plan set's phase, a restored plan)
            try:
                serialised.append(orjson.dumps(hosts, option=_SORTED))
            except (orjson.JSONEncodeError, TypeError):
                return None
        else:
            return None
    built = _slices.views(serialised)
    if built is None:
        return None
    names, name_offsets, views, view_offsets, leaves = built
    return Names(names, name_offsets), Views(views, view_offsets), leaves


def _python_views(tables: list[Mapping[str, Any]]) -> tuple[Names, Views, bytes]:
    """Names, views and leaf hashes in Python (``relations``, ``view``, orjson per view): what
    the compiled builder stands in for, and its reference."""
    names = sorted(set().union(*tables)) if len(tables) > 1 else sorted(tables[0])
    related = [relations(table) for table in tables]
    dumps = orjson.dumps
    leaves = [
        dumps(
            {
                "name": name,
                "hosts": [
                    view(name, table[name], table, links) if name in table else {}
                    for table, links in zip(tables, related)
                ],
            },
            option=_SORTED,
        )
        for name in names
    ]
    sha = hashlib.sha256
    return (
        Names.of(names),
        Views.of(leaves),
        b"".join([sha(LEAF_PREFIX + leaf).digest() for leaf in leaves]),
    )


def _no_slices() -> SliceSet:
    return SliceSet(b"", None, Names.of(()), Views.of(()), None)


def _table(hosts: Any) -> Mapping[str, Any]:
    """A plan's host table as dicts. The planner's ``HostTable`` (kept as bytes) is parsed here
    for the build only, not through its cache: the controller keeps the plan in force, and a
    parsed 10^6-host table would stay with it (gigabytes)."""
    serialised = getattr(hosts, "json", None)  # HostTable.json: its bytes
    return orjson.loads(serialised) if isinstance(serialised, bytes) else hosts
