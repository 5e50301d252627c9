"""The application part of the loop against files: the analysers' snapshots (written by the
analyser's own model) give the services' request rates, renormalised by the running plan's
share; the controller moves a busy server's analysis off-host (overload) and back (fewer
mirrored bytes, after confirmation), does not move on noise, refuses implausible rates, and
takes signed snapshots only when asked to."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from controller_helpers import inventory_doc, snapshot_doc

from cosample.appmon.snapshot import AppSnapshot, ServiceTime, ServiceWindow
from cosample.authenticity import SIGNATURE_SUFFIX, Signer
from cosample.controller.apploop import AppJudgement, app_decision
from cosample.controller.appmeasure import measure, plan_entries, service_name, success_rates
from cosample.controller.decide import Policy
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings
from cosample.plan.document import parse_document
from cosample.plan.signing import generate_keypair

NOW = datetime.now(timezone.utc).replace(microsecond=0)
PACKETS = 5.0
SERVICE = {
    "server": "s1",
    "address": "10.1.0.5",
    "port": 80,
    "interface": "vm1a",
    "packets_per_request": PACKETS,
}
NAME = "10.1.0.5:80"


def app_snapshot(end: datetime, rates: dict[str, float], window_s: float = 10.0) -> str:
    services = [
        ServiceWindow(
            service=name,
            requests=int(rate * window_s),
            requests_per_s=rate,
            responses=int(rate * window_s),
            matched=int(rate * window_s),
            status_classes={"2xx": int(rate * window_s)},
            success_rate=1.0,
            service_time_s=ServiceTime(
                mean=0.002, min=0.001, max=0.01, p50=0.002, p95=0.004, p99=0.006
            ),
        )
        for name, rate in rates.items()
    ]
    return AppSnapshot(
        analyser="a1",
        window_start=end - timedelta(seconds=window_s),
        window_s=window_s,
        frames=1,
        connections=1,
        services=services,
        dropped={},
        ignored={},
    ).to_json()


class Rig:
    """A controller reading a collector file and an analyser file we rewrite each cycle."""

    def __init__(self, tmp_path, capacities=(10000, 20000), analyser_keys=()):
        self.tmp_path, self.clock = tmp_path, NOW
        self.snapshot = tmp_path / "snapshot.json"
        self.analyser = tmp_path / "app.json"
        document = inventory_doc(list(capacities))
        document["services"] = [SERVICE]
        self.inventory = inventory_from_dict(document)
        self.settings = Settings(
            (str(self.snapshot),),
            interval_s=30,
            tau_s=30,
            settle_s=30,
            analysers=(str(self.analyser),),
            analyser_keys=analyser_keys,
        )
        self.controller = Controller(
            self.inventory,
            self.settings,
            DirectoryTarget(tmp_path / "pub"),
            tmp_path / "state",
            clock=lambda: self.clock,
        )

    def cycle(self, rate: float, reported: float | None = None, sign=None):
        """One cycle with the web service at ``rate`` requests/s (its server's VMs sending
        rate x PACKETS packets/s); the analyser reports ``reported`` (default: the rate)."""
        own = rate * PACKETS
        self.snapshot.write_text(
            json.dumps(
                snapshot_doc(
                    self.clock, {"s1": {"s1": own + 200}, "s2": {"s2": 300}}, servers=["s1", "s2"]
                )
            )
        )
        text = app_snapshot(self.clock, {NAME: rate if reported is None else reported})
        self.analyser.write_text(text)
        if sign is not None:
            (self.tmp_path / ("app.json" + SIGNATURE_SUFFIX)).write_text(sign.sign(text.encode()))
        status = self.controller.cycle()
        self.clock += timedelta(seconds=30)
        return status

    def mechanism(self) -> tuple[str, str | None]:
        plan = parse_document((self.tmp_path / "pub" / "plan.json").read_bytes())[-1]
        entries = [(h, e) for h, host in plan.hosts.items() for e in (host.appmon or ())]
        assert len(entries) == 1
        host, entry = entries[0]
        assert host == "s1" and entry.share == 1.0
        return entry.mechanism, entry.to


def test_analysis_moves_off_host_when_busy_and_back_when_quiet(tmp_path):
    # s1 at 320 requests/s: 1,800 pps forwarded (a 4x step, within the plausibility screen's
    # jump factor) + 320 x 5.25 for the sniffer = 3,480 > 90 % of 3,200; mirrored: 2,219 fits
    rig = Rig(tmp_path, capacities=(3200, 20000))
    timeline = [rig.cycle(50) for _ in range(3)]
    assert timeline[-1].result == "published" or any(s.result == "published" for s in timeline)
    assert rig.mechanism() == ("sniffer", None)  # room on s1: analysed on-site, no fabric
    busy = [rig.cycle(320) for _ in range(4)]
    assert busy[0].result == "published"  # the running plan's sniffer overloads s1 at once
    assert any("overload" in r for r in busy[0].reasons)
    assert rig.mechanism() == ("selective_mirror", "s2")
    # later publications are the sFlow part's (the risen server's budget once settled): the
    # analysis stays where it went
    assert not any("application" in r for s in busy[1:] for r in s.reasons)
    assert rig.mechanism() == ("selective_mirror", "s2")
    # every plan published keeps s1 within the limit the decision holds it to
    assert busy[-1].predicted_max_use <= 0.95
    quiet = [rig.cycle(50) for _ in range(8)]
    back = [s for s in quiet if s.result == "published"]
    # one publication brings it back: the application rule's (no fabric for as many requests)
    # or the sFlow part's gain on the quiet traffic, whichever is confirmed first
    assert len(back) == 1
    assert "application fabric" in back[0].reasons[-1] or back[0].reasons[0].startswith("gain")
    assert quiet.index(back[0]) >= 2  # confirmed over cycles, not at the first quiet one
    assert rig.mechanism() == ("sniffer", None)
    status = back[0].applications
    assert status["running"][0]["mechanism"] == "mirror"
    assert status["candidate"][0]["mechanism"] == "sniffer"
    # the status shows this cycle's renormalised rate with its interval (share 1: counted)
    (measured,) = status["rates_measured"]
    assert measured["service"] == NAME and measured["share"] == 1.0
    assert measured["requests_per_s_ci95"] == [measured["requests_per_s"]] * 2 == [50.0, 50.0]
    # and the success rate beside it, with its interval (share 1: the rate itself)
    assert measured["success_rate"] == 1.0 and measured["success_rate_ci95"] == [1.0, 1.0]


def test_noise_does_not_move_the_analysis(tmp_path):
    rig = Rig(tmp_path)
    rng = np.random.default_rng(5)
    statuses = [rig.cycle(50 * (1 + rng.uniform(-0.1, 0.1))) for _ in range(12)]
    assert sum(s.result == "published" for s in statuses) == 1


def test_rates_are_renormalised_by_the_running_plans_share():
    services = [type("S", (), {"address": "10.1.0.5", "port": 80})()]
    plan = {
        "hosts": {
            "s1": {
                "appmon": [
                    {
                        "service": {"address": "10.1.0.5", "port": 80},
                        "share": 0.25,
                        "mechanism": "sniffer",
                    }
                ]
            }
        }
    }
    listed, to, share = plan_entries(plan, services)
    assert listed[0] and to[0] == "" and share[0] == 0.25
    snap = AppSnapshot.model_validate_json(app_snapshot(NOW, {NAME: 30.0, "10.9.9.9:80": 5}))
    measurement, unknown, intervals = measure([("a", snap)], (service_name("10.1.0.5", 80),), share)
    assert measurement.own_pps[0] == pytest.approx(120.0)
    assert unknown == ("10.9.9.9:80",)
    assert intervals == {NAME: None}  # no per-connection counts: no honest interval at 1/4
    # with them: the connection-level interval around the renormalised rate, wider when the
    # same requests come on fewer connections
    widths = []
    for connections in (300, 10):
        entry = snap.services[0].model_copy(
            update={
                "request_connections": connections,
                "request_squares": connections * (300 // connections) ** 2,
            }
        )
        counted = snap.model_copy(update={"services": [entry]})
        _, _, intervals = measure([("a", counted)], (NAME,), share)
        low, high = intervals[NAME]
        assert low < 120.0 < high
        widths.append(high - low)
    assert widths[1] > 2 * widths[0]
    # the success rate's connection-level interval, from the analyser whose rate is taken:
    # none without per-connection sums at 1/4, and wider when the failures come on one
    # connection than when they are spread over many
    assert success_rates([("a", snap)], (NAME,), share) == {NAME: (1.0, None)}
    widths = []
    # 300 final responses on 30 connections of 10, 290 of them 2xx: one failure on each of 10
    # connections, or all 10 on one connection (the sums n_i^2, ok_i n_i, ok_i^2)
    for sums in ((3000, 20 * 100 + 10 * 90, 20 * 100 + 10 * 81), (3000, 29 * 100, 29 * 100)):
        entry = snap.services[0].model_copy(
            update={
                "responses": 300,
                "status_classes": {"2xx": 290, "5xx": 10},
                "success_rate": 290 / 300,
                "final_connections": 30,
                "final_squares": sums[0],
                "final_ok_products": sums[1],
                "ok_squares": sums[2],
            }
        )
        counted = snap.model_copy(update={"services": [entry]})
        ((rate, (low, high)),) = success_rates([("a", counted)], (NAME,), share).values()
        assert rate == pytest.approx(290 / 300) and low < rate < high
        widths.append(high - low)
    assert widths[1] > 2 * widths[0]
    # two analysers (a move in progress): the higher rate
    other = AppSnapshot.model_validate_json(app_snapshot(NOW, {NAME: 10.0}))
    both, _, _ = measure([("a", snap), ("b", other)], (NAME,), np.ones(1))
    assert both.own_pps[0] == 30.0
    assert measure([], (NAME,), np.ones(1))[0] is None


def test_an_implausible_rate_is_refused_and_the_plan_kept(tmp_path):
    rig = Rig(tmp_path)
    for _ in range(3):
        rig.cycle(50)
    before = rig.mechanism()
    # s1 can forward 10,000 pps, 2,000 requests/s of 5 packets: 10,000 reported is not evidence
    status = rig.cycle(50, reported=10_000)
    assert status.result == "kept"
    assert status.applications["refused"][0]["reason"] == "above_capacity"
    assert any("service rate refused" in p for p in status.problems)
    assert rig.mechanism() == before


def test_signed_snapshots_only_with_keys(tmp_path):
    generate_keypair(tmp_path / "a.pem", tmp_path / "a.pub")
    generate_keypair(tmp_path / "b.pem", tmp_path / "b.pub")
    rig = Rig(tmp_path, analyser_keys=(str(tmp_path / "a.pub"),))
    status = rig.cycle(50, sign=Signer(tmp_path / "b.pem"))  # the wrong key
    assert status.applications["analysers_up"] == 0
    assert any("signature" in p for p in status.problems)
    status = rig.cycle(50, sign=Signer(tmp_path / "a.pem"))
    assert status.applications["analysers_up"] == 1


def test_app_decision_confirms_and_waits():
    policy = Policy()
    lighter = AppJudgement((50.0, 50.0), (70_000.0, 0.0), same=False)
    streak, reasons = 0, []
    for _ in range(3):
        reason, streak = app_decision(
            lighter, streak, policy, warm=True, settling=False, quiet=False
        )
        reasons.append(reason)
    assert reasons[:2] == [None, None] and "fabric" in reasons[2]
    # while quiet or settling the streak counts but nothing is published
    reason, streak = app_decision(lighter, 5, policy, warm=True, settling=False, quiet=True)
    assert reason is None and streak == 6
    # fewer requests monitored is never "lighter"
    worse = AppJudgement((50.0, 40.0), (70_000.0, 0.0), same=False)
    assert app_decision(worse, 5, policy, warm=True, settling=False, quiet=False) == (None, 0)
    more = AppJudgement((20.0, 50.0), (0.0, 70_000.0), same=False)
    reason, _ = app_decision(more, 2, policy, warm=True, settling=False, quiet=False)
    assert "application gain" in reason
    same = AppJudgement((20.0, 50.0), (0.0, 70_000.0), same=True)
    assert app_decision(same, 2, policy, warm=True, settling=False, quiet=False) == (None, 0)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"server": "s9"}, r"services\[0\]\.server.*unknown server"),
        ({"port": 0}, r"services\.0\.port|services\[0\]\.port"),
    ],
)
def test_inventory_services_are_checked(change, message):
    from cosample.controller.errors import InventoryError

    document = inventory_doc([10000, 20000])
    document["services"] = [{**SERVICE, **change}]
    with pytest.raises(InventoryError, match=message):
        inventory_from_dict(document, source="inv.yaml")


def test_inventory_services_once_per_address_and_port():
    from cosample.controller.errors import InventoryError

    document = inventory_doc([10000, 20000])
    document["services"] = [SERVICE, {**SERVICE, "server": "s2"}]
    with pytest.raises(InventoryError, match=r"services\[1\]\.port.*services\[0\]"):
        inventory_from_dict(document, source="inv.yaml")


def test_cli_reads_a_signed_analyser_and_requires_its_key(tmp_path, capsys):
    from cosample.cli import main

    generate_keypair(tmp_path / "a.pem", tmp_path / "a.pub")
    document = inventory_doc([10000, 20000])
    document["services"] = [SERVICE]
    (tmp_path / "dc.json").write_text(json.dumps(document))
    now = datetime.now(timezone.utc).replace(microsecond=0)
    (tmp_path / "snap.json").write_text(
        json.dumps(snapshot_doc(now, {"s1": {"s1": 450}, "s2": {"s2": 300}}, servers=["s1", "s2"]))
    )
    text = app_snapshot(now, {NAME: 50.0})
    (tmp_path / "app.json").write_text(text)
    (tmp_path / ("app.json" + SIGNATURE_SUFFIX)).write_text(
        Signer(tmp_path / "a.pem").sign(text.encode())
    )
    base = [
        "controller",
        "run",
        "--inventory",
        str(tmp_path / "dc.json"),
        "--collector",
        str(tmp_path / "snap.json"),
        "--publish",
        str(tmp_path / "pub"),
        "--insecure-unsigned",
        "--insecure-unsigned-snapshots",
        "--state-dir",
        str(tmp_path / "state"),
        "--cycles",
        "1",
        "--tau",
        "1s",
        "--analyser",
        f"a1={tmp_path / 'app.json'}",
    ]
    assert main(base) == 2  # neither --analyser-key nor --insecure-unsigned-analysers
    assert "--analyser" in capsys.readouterr().err
    assert main(base + ["--analyser-key", str(tmp_path / "a.pub")]) == 0
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["applications"]["analysers_up"] == 1
    assert status["applications"]["rates_present"] == [50.0]


def test_a_partly_covered_window_counts_over_the_seconds_it_covered():
    """An analyser the agents start or stop within a window saw part of it (``covered_s``):
    the rate is over the seconds covered, and a window covered less than half is left out."""
    snap = AppSnapshot.model_validate_json(app_snapshot(NOW, {NAME: 30.0}))  # 300 in 10 s
    rates = []
    for covered in (10.0, 6.0, 4.0):
        partial = snap.model_copy(update={"covered_s": covered})
        measurement, _, intervals = measure([("a", partial)], (NAME,), np.ones(1))
        rates.append(measurement.own_pps[0] if measurement.measured[0] else None)
    assert rates == [30.0, 50.0, None]
