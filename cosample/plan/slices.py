"""Per-host plan slices: the part of a publication one agent needs, verifiable on its own.

A publisher serves, beside the whole plan, one small document per host at ``hosts/<name>``
next to the plan (``slice_location``). The publication has one signed *head*: per plan (one, or
the phases of a two-phase plan set) the top-level fields an agent reads (``HEAD_FIELDS``:
version, validity, id, sFlow settings, ...) and the root of a SHA-256 Merkle tree
(``cosample.plan.merkle``) whose leaves are the hosts' *views*, sorted by host name. A host's
view is, per plan, its own entry as the whole plan has it plus, for every peer it exchanges
traffic with, that peer's entry cut to what concerns this host (``slicebuild``): role, rates,
tunnel address, and only the mirrors, receives and appmon entries between the two. The slice
carries the head's bytes and signature, the view's bytes, its index and its Merkle path.

``read_slice`` checks, in this order: the head's signature (one Ed25519 signature per
publication, over the head's exact bytes), the view's hash up to the head's root, that the view
is this host's, and then builds each plan as the whole plan's reader would (same models, same
pair checks on the cut table, ``document.plans_from_document``): the agent's selection, rollback
refusal, expiry and transitions run on these plans unchanged. The plans' ``raw`` carry
``slice`` (host and root), so a plan read from a slice is told from the same plan read whole
(``document.same_content``).
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from pathlib import PurePath
from typing import Annotated, Any, Literal

from pydantic import Field

from cosample.plan.document import Plan, load_json, plans_from_document, validate_plan_part
from cosample.plan.errors import PlanError, SignatureError
from cosample.plan.formats import FORMAT_VERSION, PLANSET_FORMAT, SLICE_FORMAT, SLICE_HEAD_FORMAT
from cosample.plan.merkle import leaf_hash, root_from_proof
from cosample.plan.signing import verify
from cosample.validation import HostName, Strict

#: Where slices live, relative to the folder (or URL path) of the plan document.
SLICES_DIR = "hosts"
#: The plan's top-level fields a slice's head carries (what ``document.Plan`` reads, and the
#: transition's phase); the rest (summary, solver, cost) is for people and stays in the plan.
HEAD_FIELDS = (
    "format",
    "format_version",
    "version",
    "created",
    "expires",
    "not_before",
    "plan_id",
    "datacentre",
    "reset",
    "sflow",
    "ipfix",
    "transition",
)
HASH_NAME = "sha256"
#: A host name that is its own slice file name (``slice_file_name``).
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")
Hash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def slice_file_name(host: str) -> str:
    """The file (and URL path segment) of ``host``'s slice: the name itself when it is plain
    letters, digits, ``_``, ``-`` and ``.`` (not first), else ``~`` and its SHA-256 (no name can
    escape the folder or collide with another)."""
    if PLAIN_NAME.fullmatch(host):
        return host
    return "~" + hashlib.sha256(host.encode()).hexdigest()


def slice_location(plan_location: str, host: str) -> str:
    """``host``'s slice beside the plan at ``plan_location`` (an http(s) URL or a path)."""
    name = slice_file_name(host)
    if urllib.parse.urlsplit(plan_location).scheme:  # http, https, file
        return urllib.parse.urljoin(plan_location, f"{SLICES_DIR}/{urllib.parse.quote(name)}")
    return str(PurePath(plan_location).parent / SLICES_DIR / name)


class SliceDocument(Strict):
    """What ``hosts/<name>`` serves: the head and the view as their exact (signed, hashed) text."""

    format: Literal[SLICE_FORMAT]  # type: ignore[valid-type]  # pydantic reads the name
    format_version: Literal[FORMAT_VERSION]  # type: ignore[valid-type]  # pydantic reads the name
    head: str
    signature: str | None
    view: str
    index: Annotated[int, Field(ge=0)]
    path: list[Hash]


class TreeHead(Strict):
    hash: Literal[HASH_NAME]  # type: ignore[valid-type]  # pydantic reads the name
    leaves: Annotated[int, Field(ge=1)]
    root: Hash


class SliceHead(Strict):
    format: Literal[SLICE_HEAD_FORMAT]  # type: ignore[valid-type]  # pydantic reads the name
    format_version: Literal[FORMAT_VERSION]  # type: ignore[valid-type]  # pydantic reads the name
    plans: Annotated[list[dict[str, Any]], Field(min_length=1)]
    tree: TreeHead


class HostView(Strict):
    name: HostName
    hosts: Annotated[list[dict[str, Any]], Field(min_length=1)]


def read_slice(
    data: bytes, host: str, public_key: str | None, source: str = "slice"
) -> tuple[Plan, ...]:
    """The plans of ``host``'s slice, sorted by version; ``SignatureError`` when the head's
    signature (checked when ``public_key`` is given) or the Merkle path fails, ``PlanError``
    for anything else. Each error names ``source`` and the field."""
    document = validate_plan_part(SliceDocument, load_json(data, source), source)
    head_bytes, view_bytes = document.head.encode(), document.view.encode()
    if public_key is not None:
        signature = document.signature.encode() if document.signature is not None else None
        verify(head_bytes, signature, public_key, what=f"{source}: head signature")
    head = validate_plan_part(
        SliceHead, load_json(head_bytes, f"{source}: head"), f"{source}: head"
    )
    try:
        root = root_from_proof(
            leaf_hash(view_bytes),
            document.index,
            head.tree.leaves,
            [bytes.fromhex(step) for step in document.path],
        )
    except ValueError as exc:
        raise SignatureError(f"{source}: path: {exc}; refusing the slice") from None
    if root.hex() != head.tree.root:
        raise SignatureError(
            f"{source}: view: does not hash up to the head's Merkle root "
            f"{head.tree.root[:16]}... (altered, or a head from another "
            f"publication); refusing the slice"
        )
    view = validate_plan_part(HostView, load_json(view_bytes, f"{source}: view"), f"{source}: view")
    if view.name != host:
        raise PlanError(
            f"{source}: view.name: the slice is for host {view.name!r}, this host "
            f"is {host!r}; refusing it"
        )
    if len(view.hosts) != len(head.plans):
        raise PlanError(
            f"{source}: view.hosts: {len(view.hosts)} host tables for "
            f"{len(head.plans)} plans in the head"
        )
    marker = {"host": host, "root": head.tree.root}
    plans = [
        {**fields, "hosts": hosts, "slice": marker} for fields, hosts in zip(head.plans, view.hosts)
    ]
    whole = (
        plans[0]
        if len(plans) == 1
        else {"format": PLANSET_FORMAT, "format_version": FORMAT_VERSION, "plans": plans}
    )
    return plans_from_document(whole, source)
