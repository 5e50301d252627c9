"""Per-host plan slices: the Merkle tree, the publisher's views, the agents' reader (pure logic;
the HTTP target and a real agent on real OVS are in test_slices_served.py)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from datetime import timedelta

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cosample.agents.config import make_config
from cosample.agents.desired import desired_state
from cosample.plan.document import parse_document
from cosample.plan.errors import PlanError, SignatureError
from cosample.plan.merkle import MerkleTree, leaf_hash, node_hash, root_from_proof
from cosample.plan.selection import select_plan
from cosample.plan.signing import generate_keypair
from cosample.plan.slicebuild import build_slices, host_views
from cosample.plan.slices import read_slice, slice_file_name, slice_location


# the tree --------------------------------------------------------------------------------------
def test_root_of_three_leaves_by_hand():
    a, b, c = (leaf_hash(x) for x in (b"a", b"b", b"c"))
    assert a == hashlib.sha256(b"\x00a").digest()
    assert MerkleTree([a, b, c]).root == node_hash(node_hash(a, b), c)
    assert MerkleTree([a]).root == a and MerkleTree([a]).proof(0) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=70), st.data())
def test_every_leaf_proves_and_nothing_else_does(leaves, data):
    hashes = [leaf_hash(leaf) for leaf in leaves]
    tree = MerkleTree(hashes)
    index = data.draw(st.integers(0, len(leaves) - 1))
    path = tree.proof(index)
    assert root_from_proof(hashes[index], index, len(leaves), path) == tree.root
    assert len(path) <= (len(leaves) - 1).bit_length()
    # another leaf's content at this index, a changed path hash, another index: another root
    assert root_from_proof(leaf_hash(leaves[index] + b"!"), index, len(leaves), path) != tree.root
    if path:
        k = data.draw(st.integers(0, len(path) - 1))
        bent = list(path)
        bent[k] = bytes([bent[k][0] ^ 1]) + bent[k][1:]
        assert root_from_proof(hashes[index], index, len(leaves), bent) != tree.root
        with pytest.raises(ValueError, match="too short"):
            root_from_proof(hashes[index], index, len(leaves), path[:-1])
    with pytest.raises(ValueError, match="too long"):
        root_from_proof(hashes[index], index, len(leaves), path + [b"\0" * 32])
    other = data.draw(st.integers(0, len(leaves) - 1))
    if other != index and hashes[other] != hashes[index]:
        try:
            assert root_from_proof(hashes[index], other, len(leaves), path) != tree.root
        except ValueError:
            pass  # the path does not even fit that index
    with pytest.raises(ValueError, match="outside"):
        root_from_proof(hashes[index], len(leaves), len(leaves), path)


def test_a_leaf_cannot_pass_for_an_inner_node():
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    # the bytes of an inner node offered as a leaf hash to a different, one-level tree
    assert leaf_hash(a + b) != node_hash(a, b)


# views -----------------------------------------------------------------------------------------
SERVICE = {"address": "10.0.0.12", "port": 8080}


@pytest.fixture
def rich_plan(make_plan):
    """s1 mirrors to s2 and s3; application monitoring from s1 and s2 to s4, s3 sniffs and
    sends its records to s2."""
    doc = make_plan(version=100)
    hosts = doc["hosts"]
    hosts["s1"]["appmon"] = [{"service": SERVICE, "mechanism": "selective_mirror", "to": "s4"}]
    hosts["s2"]["appmon"] = [
        {
            "service": {"address": "10.0.0.22", "port": 80},
            "mechanism": "port_mirror",
            "to": "s4",
            "interface": "vm2",
        }
    ]
    hosts["s3"]["appmon"] = [
        {
            "service": {"address": "10.0.0.32", "port": 80},
            "mechanism": "sniffer",
            "to": "s2",
            "interface": "vm3",
        }
    ]
    return doc


def test_views_hold_the_host_and_the_pairs_it_is_in(rich_plan):
    views = host_views(rich_plan["hosts"])
    assert set(views["s1"]) == {"s1", "s2", "s3", "s4"}
    assert views["s1"]["s1"] is rich_plan["hosts"]["s1"]
    assert views["s1"]["s2"]["receives"] == [{"from": "s1", "rate": 0.2, "pps": 0.2 * 4e5}]
    assert "capacity_pps" not in views["s1"]["s2"] and "appmon" not in views["s1"]["s2"]
    # s3's sniffer sends compact records to s2: s3 needs s2's address, s2 the sniffer's entry
    # (its analyser spec gets a receive_records item)
    assert set(views["s2"]) == {"s1", "s2", "s3", "s4"} and "s2" in views["s3"]
    assert [e["mechanism"] for e in views["s2"]["s3"]["appmon"]] == ["sniffer"]
    assert views["s2"]["s1"]["mirrors"] == [{"to": "s2", "rate": 0.2}]
    assert [e["mechanism"] for e in views["s4"]["s1"]["appmon"]] == ["selective_mirror"]
    assert [e["mechanism"] for e in views["s4"]["s2"]["appmon"]] == ["port_mirror"]
    assert set(views["s4"]) == {"s1", "s2", "s4"}


def _key(tmp_path, name="k"):
    generate_keypair(tmp_path / name, tmp_path / f"{name}.pub")
    return str(tmp_path / name), str(tmp_path / f"{name}.pub")


def _config(host):
    return make_config({"host": host, "collector": "127.0.0.1:6343"})


def test_each_host_reads_from_its_slice_what_it_reads_from_the_whole_plan(rich_plan, tmp_path):
    key, public = _key(tmp_path)
    slices = build_slices([rich_plan], key)
    whole = parse_document(json.dumps(rich_plan).encode())[0]
    for host in rich_plan["hosts"]:
        (plan,) = read_slice(slices.document(host), host, public, source=f"hosts/{host}")
        assert desired_state(plan, _config(host)) == desired_state(whole, _config(host))
        assert (plan.version, plan.plan_id, plan.expires, plan.sflow) == (
            whole.version,
            whole.plan_id,
            whole.expires,
            whole.sflow,
        )
        assert plan.raw["slice"]["host"] == host
    assert slices.document("s9") is None and slices.etag("s9") is None


def test_a_two_phase_plan_set_gives_each_host_both_phases(make_plan, now, tmp_path):
    from cosample.controller.publish import render

    key, public = _key(tmp_path)
    old = make_plan(version=100)
    new = make_plan(version=101, sender_mirrors=(("s2", 0.5), ("s4", 0.1)))
    rendered = render(new, 101, key, old, now, 60.0)
    whole = parse_document(rendered.data)
    assert [p.version for p in whole] == [101, 102]
    for host in new["hosts"]:
        plans = read_slice(rendered.slices.document(host), host, public)
        assert [p.version for p in plans] == [101, 102]
        assert [p.not_before for p in plans] == [p.not_before for p in whole]
        for mine, theirs in zip(plans, whole):
            assert desired_state(mine, _config(host)) == desired_state(theirs, _config(host))


# refusals --------------------------------------------------------------------------------------
def _fields(document: bytes) -> dict:
    return orjson.loads(document)


def _flip(text: str, position: int) -> str:
    character = text[position]
    return text[:position] + ("x" if character != "x" else "y") + text[position + 1 :]


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # read-only fixtures
@given(st.data())
def test_any_change_to_any_field_is_refused(make_plan, tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("keys")
    key, public = _key(folder)
    plan = make_plan(version=100)
    good = build_slices([plan], key).document("s1")
    fields = _fields(good)
    name = data.draw(
        st.sampled_from(["head", "view", "signature", "index", "path", "format", "format_version"])
    )
    if name in ("head", "view"):
        position = data.draw(st.integers(0, len(fields[name]) - 1))
        fields[name] = _flip(fields[name], position)
    elif name == "signature":
        tag, encoded = fields[name].split(":")  # sha256:BASE64 (the digest is signed)
        raw = bytearray(base64.b64decode(encoded, validate=True))
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        fields[name] = f"{tag}:{base64.b64encode(bytes(raw)).decode()}"
    elif name == "index":
        fields[name] = data.draw(st.integers(0, 10).filter(lambda k: k != fields["index"]))
    elif name == "path":
        k = data.draw(st.integers(0, len(fields[name]) - 1))
        fields[name][k] = _flip(fields[name][k], data.draw(st.integers(0, 63)))
    else:
        fields[name] = "cosample.plan" if name == "format" else 2
    with pytest.raises(PlanError) as refused:
        read_slice(orjson.dumps(fields), "s1", public, source="hosts/s1")
    assert "hosts/s1" in str(refused.value)


def test_refusals_say_what_is_wrong(make_plan, tmp_path):
    key, public = _key(tmp_path)
    _, other_public = _key(tmp_path, "other")
    plan = make_plan(version=100)
    slices = build_slices([plan], key)
    with pytest.raises(
        PlanError,
        match=r"view.name: the slice is for host 's2', this host is "
        r"'s1'",
    ):
        read_slice(slices.document("s2"), "s1", public, source="hosts/s1")
    later = build_slices([make_plan(version=101, sender_mirrors=(("s2", 0.4),))], key)
    mixed = dict(
        _fields(slices.document("s1")),
        head=_fields(later.document("s1"))["head"],
        signature=_fields(later.document("s1"))["signature"],
    )
    with pytest.raises(SignatureError, match="does not hash up to the head's Merkle root"):
        read_slice(orjson.dumps(mixed), "s1", public, source="hosts/s1")
    unsigned = build_slices([plan], None).document("s1")
    assert _fields(unsigned)["signature"] is None
    with pytest.raises(SignatureError, match="head signature: missing"):
        read_slice(unsigned, "s1", public, source="hosts/s1")
    assert read_slice(unsigned, "s1", None)[0].version == 100  # insecure_unsigned reads it
    with pytest.raises(SignatureError, match="head signature: does not verify"):
        read_slice(slices.document("s1"), "s1", other_public, source="hosts/s1")
    with pytest.raises(PlanError, match="not valid UTF-8 JSON"):
        read_slice(b"{", "s1", public, source="hosts/s1")


def test_a_bad_entry_in_a_signed_slice_is_refused_as_in_the_whole_plan(make_plan, tmp_path):
    key, public = _key(tmp_path)
    plan = make_plan(version=100)
    plan["hosts"]["s1"]["mirrors"][0]["rate"] = 0.25  # s2 receives 0.2 from s1: not a pair
    with pytest.raises(PlanError, match=r"hosts\.s1\.mirrors\[0\]\.to"):
        parse_document(json.dumps(plan).encode())
    with pytest.raises(PlanError, match=r"hosts/s1: hosts\.s1\.mirrors\[0\]\.to"):
        read_slice(build_slices([plan], key).document("s1"), "s1", public, source="hosts/s1")


def test_the_rollback_floor_holds_between_slices_and_whole_plans(make_plan, now, tmp_path):
    key, public = _key(tmp_path)
    plan = make_plan(version=100)
    whole = parse_document(json.dumps(plan).encode())[0]
    (sliced,) = read_slice(build_slices([plan], key).document("s1"), "s1", public)
    assert sliced.digest != whole.digest
    # the same publication read either way is not a reused version
    assert select_plan([sliced], whole, now).plan is sliced
    assert select_plan([whole], sliced, now).plan is whole
    changed = copy.deepcopy(plan)
    changed["plan_id"] = "cd" * 32
    (other,) = read_slice(build_slices([changed], key).document("s1"), "s1", public)
    assert "reused with different content" in select_plan([other], whole, now).refused[0]
    (older,) = read_slice(build_slices([make_plan(version=99)], key).document("s1"), "s1", public)
    assert "rollback refused" in select_plan([older], sliced, now).refused[0]
    expired = make_plan(version=101, created=now - timedelta(hours=7))
    (late,) = read_slice(build_slices([expired], key).document("s1"), "s1", public)
    assert "expired" in select_plan([late], sliced, now).refused[0]


# names -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["s1", "web-01.dc2", "rack_7"])
def test_plain_names_are_their_own_file(host):
    assert slice_file_name(host) == host


@pytest.mark.parametrize("host", [".", "..", "../etc", "a/b", ".hidden", "x" * 200, "é", "a b"])
def test_other_names_are_hashed_into_one_safe_file_name(host):
    name = slice_file_name(host)
    assert name.startswith("~") and "/" not in name and len(name) == 65
    assert name == slice_file_name(host) != slice_file_name(host + "!")


def test_slices_sit_beside_the_plan():
    assert slice_location("http://c:8080/plan.json", "s1") == "http://c:8080/hosts/s1"
    assert (
        slice_location("https://c/p/plan.json", "a/b")
        == f"https://c/p/hosts/{slice_file_name('a/b')}"
    )
    assert slice_location("/srv/plans/plan.json", "s1") == "/srv/plans/hosts/s1"
    assert slice_location("file:///srv/plan.json", "s1") == "file:///srv/hosts/s1"


@pytest.mark.parametrize("hosts", [1, 2, 5, 33])
@pytest.mark.parametrize("signed", [True, False])
def test_every_slice_written_at_once_is_the_one_served(make_plan, tmp_path, hosts, signed):
    """``items`` (the folder target's bulk path) gives each host ``document``'s bytes under its
    file name, in name order: plain names and names hashed into a file name, odd tree levels."""
    plan = make_plan()
    entry = next(iter(plan["hosts"].values()))
    names = ["s0", "a b", "é", "../x", "web-01.dc2"] + [f"h{i:03d}" for i in range(hosts)]
    plan["hosts"] = {name: entry for name in names[:hosts]}
    key = _key(tmp_path)[0] if signed else None
    slices = build_slices([plan], key)
    written = list(slices.items())
    assert [file_name for file_name, _ in written] == [
        slice_file_name(name) for name in sorted(names[:hosts])
    ]
    for file_name, document in written:
        assert document == slices.document(file_name)
