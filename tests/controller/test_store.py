"""The controller's state: the plan in force is linked to the published file when it can be,
copied otherwise, and read back the same either way."""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timezone

from cosample.controller.store import PLAN_FILE, Store
from cosample.files import write_bytes_atomic

NOW = datetime.now(timezone.utc).replace(microsecond=0)


def plan_bytes(version: int) -> bytes:
    return json.dumps({"format": "cosample.plan", "version": version, "hosts": {}}).encode()


def test_published_file_is_linked_and_later_publications_leave_it_alone(tmp_path):
    store = Store(tmp_path / "state")
    published = tmp_path / "pub" / "plan.json"
    first = plan_bytes(1)
    write_bytes_atomic(published, first, mode=0o644, parents=True)
    store.record(1, "a", first, NOW, published)
    assert os.path.samefile(store.directory / PLAN_FILE, published)
    second = plan_bytes(2)
    write_bytes_atomic(published, second, mode=0o644)  # the publisher renames a new file over it
    assert (store.directory / PLAN_FILE).read_bytes() == first  # the old link keeps its bytes
    store.record(2, "b", second, NOW, published)
    assert Store(tmp_path / "state").current_plan()["version"] == 2
    assert Store(tmp_path / "state").last_version() == 2
    assert not [p for p in store.directory.iterdir() if p.name.startswith(".")]


def test_a_copy_when_there_is_no_file_or_it_is_not_the_bytes(tmp_path):
    store = Store(tmp_path / "state")
    data = plan_bytes(3)
    store.record(3, "c", data, NOW)  # the HTTP target: no file
    assert (store.directory / PLAN_FILE).read_bytes() == data
    other = tmp_path / "other.json"
    other.write_bytes(b"{}")  # not what was published: never linked
    store.record(4, "d", plan_bytes(4), NOW, other)
    assert not os.path.samefile(store.directory / PLAN_FILE, other)
    store.record(5, "e", plan_bytes(5), NOW, tmp_path / "missing.json")
    assert store.current_plan()["version"] == 5
    assert stat.S_IMODE(os.stat(store.directory / PLAN_FILE).st_mode) == 0o600
