"""The ledger of owned objects: write-ahead names by kind, private file, the earlier clsact file."""

from __future__ import annotations

import json
import stat

import pytest

from cosample.agents.errors import HostError
from cosample.agents.ledger import LEDGER_FILE, LEGACY_CLSACT_FILE, Ledger


def test_names_added_and_struck_out_persist_privately(tmp_path):
    ledger = Ledger(tmp_path / "state" / LEDGER_FILE)
    assert ledger.names("devices") == set()
    ledger.add("devices", "cosm-1")
    ledger.add("bridges", "br-a")
    ledger.add("devices", "cosm-1")
    again = Ledger(tmp_path / "state" / LEDGER_FILE)
    assert again.names("devices") == {"cosm-1"} and again.names("bridges") == {"br-a"}
    again.discard("devices", "cosm-1")
    assert Ledger(tmp_path / "state" / LEDGER_FILE).names("devices") == set()
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / LEDGER_FILE).stat().st_mode) == 0o600


def test_earlier_clsact_file_is_adopted_and_a_broken_ledger_is_an_error(tmp_path):
    (tmp_path / LEGACY_CLSACT_FILE).write_text(json.dumps(["tap1"]))
    ledger = Ledger(tmp_path / LEDGER_FILE)
    assert ledger.names("clsacts") == {"tap1"}
    ledger.add("devices", "cosm-2")
    assert json.loads((tmp_path / LEDGER_FILE).read_text())["clsacts"] == ["tap1"]
    (tmp_path / LEDGER_FILE).write_text("{ broken")
    with pytest.raises(HostError, match="unreadable ledger"):
        ledger.names("devices")
