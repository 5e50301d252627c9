"""The collector's limit on a plan document: above the agents' (it reads the whole plan, which
agents fetching slices never do), so a 10^6-server two-phase plan set (about 340 MB) is read;
a document above it is refused and the plan before it stays in force."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest
from collector_plans import plan_document

from cosample.cli import main
from cosample.collector.planwatch import PlanWatcher
from cosample.collector.service import Service, Settings
from cosample.experiments.collector_planchange import MEASURE, MIRROR
from cosample.plan.formats import COLLECTOR_MAX_PLAN_MIB, DEFAULT_MAX_PLAN_MIB

NOW = datetime.fromtimestamp(float(int(time.time())), timezone.utc)


def test_a_plan_above_the_limit_is_refused_and_the_last_stays(tmp_path):
    path = tmp_path / "plan.json"
    first, second = sorted(
        (
            json.dumps(plan_document(MIRROR, version=1)).encode(),
            json.dumps(plan_document(MEASURE, version=2)).encode(),
        ),
        key=len,
    )
    first_version = json.loads(first)["version"]
    path.write_bytes(first)
    watcher = PlanWatcher(str(path), insecure_unsigned=True, max_bytes=len(second) - 1)
    assert len(first) < len(second)
    assert watcher.poll(NOW).attribution.plan_version == first_version
    path.write_bytes(second)  # one byte above the limit
    watcher.poll(NOW)
    assert watcher.running.version == first_version and watcher.refused
    assert str(len(second) - 1) in watcher.last_error.replace(",", "")
    exact = PlanWatcher(str(path), insecure_unsigned=True, max_bytes=len(second))
    assert exact.poll(NOW).attribution.plan_version == json.loads(second)["version"]


def test_the_service_reads_plans_up_to_its_own_default(tmp_path):
    assert COLLECTOR_MAX_PLAN_MIB * 2**20 > 340e6 > DEFAULT_MAX_PLAN_MIB * 2**20
    settings = Settings(
        listen=("127.0.0.1", 0), plan=str(tmp_path / "plan.json"), name="c", insecure_unsigned=True
    )
    assert Service(settings).watcher.reader.max_bytes == COLLECTOR_MAX_PLAN_MIB * 2**20
    smaller = Settings(
        listen=("127.0.0.1", 0),
        plan=str(tmp_path / "plan.json"),
        name="c",
        insecure_unsigned=True,
        max_plan_bytes=1000,
    )
    assert Service(smaller).watcher.reader.max_bytes == 1000


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_bad_limit_is_one_error(tmp_path, capsys, value):
    try:
        code = main(
            [
                "collector",
                "run",
                "--plan",
                str(tmp_path / "plan.json"),
                "--listen",
                "127.0.0.1:0",
                "--insecure-unsigned",
                "--max-plan-mib",
                value,
            ]
        )
    except SystemExit as exited:  # argparse: not a number
        code = exited.code
    assert code not in (0, None)
    assert "--max-plan-mib" in capsys.readouterr().err
