"""What the controller writes in its log: a state an operator must act on (a collector gone
stale, nothing re-planned) is one WARNING line when it starts and one INFO line when it ends,
however many cycles it lasts (cosample/statelog.py)."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone

from controller_helpers import inventory_doc, snapshot_doc

from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings

BUSY_S1 = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}


def warnings(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelname == "WARNING"]


def test_a_stale_collector_is_one_warning_however_long_it_lasts(tmp_path, caplog):
    clock = [datetime.now(timezone.utc).replace(microsecond=0)]
    snapshot = tmp_path / "snapshot.json"
    controller = Controller(
        inventory_from_dict(inventory_doc([3000, 3000, 3000])),
        Settings((str(snapshot),), interval_s=30, tau_s=30, settle_s=60),
        DirectoryTarget(tmp_path / "pub"),
        tmp_path / "state",
        clock=lambda: clock[0],
    )

    def cycle(age_s: float | None):
        if age_s is not None:
            written = clock[0] - timedelta(seconds=age_s)
            snapshot.write_text(
                json.dumps(snapshot_doc(written, BUSY_S1, servers=["s1", "s2", "s3"]))
            )
        status = controller.cycle()
        clock[0] += timedelta(seconds=30)
        return status

    with caplog.at_level(logging.INFO, logger="cosample.controller"):
        for _ in range(3):
            assert cycle(0).result in ("published", "kept")
        assert warnings(caplog, "cosample.controller") == []
        for age in (200, 230, 260, 290):  # four cycles stale, the age growing
            assert cycle(age).result == "stale"
        stale = warnings(caplog, "cosample.controller")
        assert len(stale) == 2, stale  # the collector's staleness, and nothing re-planned
        assert "snapshot is 200 s old" in stale[0] and "collector stale" in stale[0]
        assert (
            stale[1].startswith("no fresh snapshot from any collector") and "expires at" in stale[1]
        )
        assert cycle(0).result in ("published", "kept")
    resolved = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resolved: ")]
    assert len(resolved) == 2 and len(warnings(caplog, "cosample.controller")) == 2
