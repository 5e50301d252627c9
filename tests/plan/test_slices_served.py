"""Slices as the controller serves them (the real HTTP and directory targets) and as a real agent
on a real OVS reads them (run under the shared lock: the agent sandbox has fixed names)."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request

import pytest

from cosample.controller.publish import DirectoryTarget, HttpTarget, Rendered, render
from cosample.plan.errors import PlanMissingError
from cosample.plan.signing import generate_keypair
from cosample.plan.slices import read_slice, slice_location
from cosample.plan.source import fetch


@pytest.fixture
def keys(tmp_path):
    generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    return str(tmp_path / "k"), str(tmp_path / "k.pub")


@pytest.fixture
def server():
    target = HttpTarget("127.0.0.1", 0, dict, lambda: b"")
    yield target
    target.close()


def get(url, etag=None):
    request = urllib.request.Request(url, headers={"If-None-Match": etag} if etag else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers.get("ETag"), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("ETag"), b""


def test_the_http_target_serves_each_hosts_slice_with_its_own_tag(server, keys, make_plan):
    key, public = keys
    assert get(slice_location(server.describe(), "s1"))[0] == 404  # nothing published yet
    server.publish(render(make_plan(), 100, key))
    url = slice_location(server.describe(), "s1")
    status, etag, body = get(url)
    assert status == 200 and etag and read_slice(body, "s1", public)[0].version == 100
    assert get(url, etag)[0] == 304
    other = get(slice_location(server.describe(), "s2"))
    assert other[0] == 200 and other[1] != etag
    assert get(slice_location(server.describe(), "s9"))[0] == 404
    first = fetch(url, timeout_s=5)  # the agents' own fetcher, conditional
    assert fetch(url, timeout_s=5, previous=first).unchanged
    server.publish(render(make_plan(), 101, key))
    changed = fetch(url, timeout_s=5, previous=first)
    assert not changed.unchanged and read_slice(changed.data, "s1", public)[0].version == 101
    # a signed plan whose slices could not be signed: the plan alone (agents fall back to it)
    rendered = render(make_plan(), 102, key)
    server.publish(Rendered(rendered.data, rendered.signature, (102,), rendered.final))
    assert get(url)[0] == 404 and get(server.describe())[0] == 200


def test_the_directory_target_writes_slices_behind_its_pointer(tmp_path, keys, make_plan):
    key, public = keys
    target = DirectoryTarget(tmp_path / "pub")
    target.publish(render(make_plan(), 100, key))
    location = slice_location(str(tmp_path / "pub" / "plan.json"), "s1")
    assert location == str(tmp_path / "pub" / "hosts" / "s1")
    assert read_slice(fetch(location).data, "s1", public)[0].version == 100
    target.publish(render(make_plan(), 101, key))
    assert read_slice(fetch(location).data, "s1", public)[0].version == 101
    assert sorted(p.name for p in (tmp_path / "pub" / "versions" / "101" / "hosts").iterdir()) == [
        "s1",
        "s2",
        "s3",
        "s4",
    ]
    whole_only = DirectoryTarget(tmp_path / "pub", slices=False)
    whole_only.publish(render(make_plan(), 102, key))
    with pytest.raises(PlanMissingError, match="not found"):
        fetch(location)
    assert fetch(str(tmp_path / "pub" / "plan.json")).data.count(b'"version":102') == 1


# a real agent on a real OVS ------------------------------------------------------------------
def _polls(a):
    fetches = a.metrics.plan_fetches
    return (
        fetches.labels(result="downloaded")._value.get(),
        fetches.labels(result="unchanged")._value.get(),
    )


@pytest.mark.ovs
def test_an_agent_converges_from_its_slice_and_keeps_every_check(sandbox, make_plan, server, keys):
    """Over the controller's HTTP target: the agent applies its slice (one small download,
    then 304s), reaches the state the whole plan gives, and refuses a rollback."""
    from agentsandbox import agent, fingerprint

    ovs, config, _, _ = sandbox
    key, public = keys
    server.publish(render(make_plan(), 100, key))
    a = agent(config, plan=server.describe(), public_key=public, insecure_unsigned=False)
    report = a.cycle()
    assert report.result == "ok" and report.plan_version == 100 and report.commands
    assert a.running.raw["slice"]["host"] == "s1"  # read from the slice, not the whole plan
    state = fingerprint(a)
    assert a.cycle().result == "ok" and _polls(a) == (1, 1)  # an unchanged slice: a 304
    whole = agent(
        config, plan=server.describe(), public_key=public, insecure_unsigned=False, slices="never"
    )
    report = whole.cycle()  # the whole plan asks for exactly what the slice did
    assert report.result == "ok" and report.commands == () and fingerprint(whole) == state

    server.publish(render(make_plan(sampling=64, local_rate=1 / 64), 99, key))
    report = a.cycle()
    assert report.result == "rejected" and "rollback refused" in report.errors[0]
    assert report.plan_version == 100 and fingerprint(a) == state
    server.publish(render(make_plan(sampling=64, local_rate=1 / 64), 101, key))
    report = a.cycle()
    assert report.result == "ok" and report.plan_version == 101 and _polls(a) == (3, 1)
    assert fingerprint(a) != state


@pytest.mark.ovs
def test_an_agent_refuses_a_tampered_or_foreign_slice_and_keeps_its_plan(
    sandbox, make_plan, keys, tmp_path
):
    """From a published folder: a slice changed on disk, another host's slice, an unsigned
    one: each refused with its reason, the host stays on its last good plan."""
    from agentsandbox import agent, fingerprint

    ovs, config, _, _ = sandbox
    key, public = keys
    folder = tmp_path / "pub"
    DirectoryTarget(folder).publish(render(make_plan(), 100, key))
    a = agent(config, plan=str(folder / "plan.json"), public_key=public, insecure_unsigned=False)
    assert a.cycle().result == "ok"
    state = fingerprint(a)
    DirectoryTarget(folder).publish(render(make_plan(sampling=64, local_rate=1 / 64), 101, key))
    mine = folder / "versions" / "101" / "hosts" / "s1"
    good = mine.read_bytes()
    cases = [
        (
            good.replace(b'\\"sflow_sampling\\":64', b'\\"sflow_sampling\\":32'),
            "does not hash up to the head's Merkle root",
        ),
        ((folder / "hosts" / "s2").read_bytes(), "the slice is for host 's2'"),
    ]
    unsigned = folder.parent / "unsigned"
    DirectoryTarget(unsigned).publish(render(make_plan(), 101, None))
    cases.append(((unsigned / "hosts" / "s1").read_bytes(), "head signature: missing"))
    for data, why in cases:
        assert data != good
        mine.write_bytes(data)
        report = a.cycle()
        assert report.result == "rejected" and why in report.errors[0], report.errors
        assert report.plan_version == 100 and fingerprint(a) == state
    mine.write_bytes(good)
    assert a.cycle().plan_version == 101 and fingerprint(a) != state
    shutil.rmtree(unsigned)


def test_a_publication_restored_after_a_restart_is_sliced_and_signed_again(server, keys, make_plan):
    """The controller's ``_restore``: only the published bytes and the key; the target slices
    the bytes again (one plan or a plan set), signed, before it serves them."""
    from cosample.plan.signing import sign_bytes

    key, public = keys
    for previous in (None, make_plan(version=100)):
        rendered = render(
            make_plan(sender_mirrors=(("s2", 0.4),)),
            101,
            key,
            previous,
            now=None if previous is None else _now(),
            settle_s=60.0,
        )
        fresh = HttpTarget("127.0.0.1", 0, dict, lambda: b"")
        try:
            fresh.restore(
                Rendered(
                    rendered.data,
                    sign_bytes(rendered.data, key),
                    rendered.versions,
                    rendered.final,
                    key=key,
                )
            )
            _, _, body = get(slice_location(fresh.describe(), "s1"))
            plans = read_slice(body, "s1", public)
            assert [p.version for p in plans] == list(rendered.versions)
        finally:
            fresh.close()


def _now():
    from cosample.times import utcnow

    return utcnow().replace(microsecond=0)
