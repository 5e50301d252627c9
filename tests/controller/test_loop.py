"""The controller loop against files: publish signed plans agents accept, survive restarts,
keep the plan in force when the collector is down or inconsistent, two phases on role changes."""

from __future__ import annotations

import json
import os
import socket
import stat
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from controller_helpers import inventory_doc, snapshot_doc
from hypothesis import given
from hypothesis import strategies as st

from cosample.cli import main
from cosample.collector.polling import plan_lead_s
from cosample.collector.snapshot import parse_snapshot
from cosample.controller.decide import quiet_s
from cosample.controller.estimate import measure
from cosample.controller.evaluate import PlanShares, evaluate, needs_two_phases, shares
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget, release
from cosample.controller.replan import replan
from cosample.controller.settings import Settings
from cosample.controller.smoothing import update
from cosample.plan.document import parse_document
from cosample.plan.signing import generate_keypair, verify
from cosample.planner.planfile import AGENT_FIELDS, SAMPLE_FIELDS

NOW = datetime.now(timezone.utc).replace(microsecond=0)
BUSY_S1 = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}
BUSY_S3 = {"s1": {"s1": 100}, "s2": {"s2": 200}, "s3": {"s3": 1500, "s2": 900}}


@pytest.fixture
def keys(tmp_path):
    generate_keypair(tmp_path / "key.pem", tmp_path / "key.pub")
    return tmp_path / "key.pem", tmp_path / "key.pub"


class Rig:
    """A controller reading a snapshot file we rewrite, publishing into a folder."""

    def __init__(self, tmp_path, key=None, capacities=(3000, 3000, 3000), tau_s=30.0):
        self.tmp_path, self.key = tmp_path, key
        self.clock = NOW
        self.snapshot = tmp_path / "snapshot.json"
        self.publish_dir = tmp_path / "pub"
        self.inventory = inventory_from_dict(inventory_doc(list(capacities)))
        self.settings = Settings(
            (str(self.snapshot),),
            interval_s=30,
            tau_s=tau_s,
            key=str(key) if key else None,
            settle_s=60,
        )
        self.controller = self.start()

    def start(self):
        return Controller(
            self.inventory,
            self.settings,
            DirectoryTarget(self.publish_dir),
            self.tmp_path / "state",
            clock=lambda: self.clock,
        )

    def cycle(self, traffic=None, age_s=0.0):
        if traffic is not None:
            self.snapshot.write_text(
                json.dumps(
                    snapshot_doc(
                        self.clock - timedelta(seconds=age_s), traffic, servers=["s1", "s2", "s3"]
                    )
                )
            )
        status = self.controller.cycle()
        self.clock += timedelta(seconds=30)
        return status

    def plans(self):
        data = (self.publish_dir / "plan.json").read_bytes()
        return data, parse_document(data)


def test_first_plan_is_signed_and_accepted_by_the_agents(tmp_path, keys):
    rig = Rig(tmp_path, key=keys[0])
    status = rig.cycle(BUSY_S1)
    assert status.result == "published" and status.reasons == ("no current plan",)
    data, (plan,) = rig.plans()
    verify(data, (rig.publish_dir / "plan.json.sig").read_bytes(), keys[1])
    assert plan.version == int(NOW.timestamp()) == status.plan_version
    assert plan.not_before == NOW + timedelta(seconds=plan_lead_s())  # the collector's lead
    assert plan.hosts["s1"].tunnel_ip == "192.0.2.1" and plan.hosts["s1"].mirrors
    state = tmp_path / "state"
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert {
        stat.S_IMODE(os.stat(p).st_mode) for p in state.iterdir() if p.name != "current-plan.json"
    } == {0o600}
    # the plan in force is the published file itself (a hard link, written once), not a copy
    assert os.path.samefile(state / "current-plan.json", rig.publish_dir / "plan.json")
    # the agents get their fields only; the rest of each entry is the report, in columns
    published = json.loads(data)
    # (``appmon`` only when the description lists services: the inventory has none; the sample
    # mechanism's fields only when a server may use it: the inventory gives no alpha_sample)
    assert {key for host in published["hosts"].values() for key in host} == set(AGENT_FIELDS) - {
        "appmon",
        *SAMPLE_FIELDS,
    } | {"bridge", "tunnel_ip", "vm_ports"}
    report = json.loads((state / "current-report.json").read_bytes())
    assert (report["plan_id"], report["version"]) == (plan.plan_id, plan.version)
    assert report["names"] == ["s1", "s2", "s3"] and len(report["load_pps"]) == 3
    assert (
        main(
            ["agent", "validate", str(rig.publish_dir / "plan.json"), "--public-key", str(keys[1])]
        )
        == 0
    )


def test_a_report_that_cannot_be_written_leaves_the_publication_standing(tmp_path, caplog):
    rig = Rig(tmp_path)
    (tmp_path / "state" / "current-report.json").mkdir(parents=True)  # cannot be replaced
    status = rig.cycle(BUSY_S1)
    assert status.result == "published" and status.plan_version is not None
    _, (plan,) = rig.plans()
    assert plan.version == status.plan_version
    assert "plan report not written" in caplog.text
    assert rig.controller.metrics.errors.labels(kind="report")._value.get() == 1


def test_versions_increase_across_restarts_and_steady_load_is_kept(tmp_path):
    rig = Rig(tmp_path)
    first = rig.cycle(BUSY_S1)
    for _ in range(3):
        assert rig.cycle(BUSY_S1).result == "kept"
    rig.controller = rig.start()  # a restart: state from the state directory
    rig.clock = NOW  # even with the clock back at the first publication
    assert rig.controller.current["version"] == first.plan_version
    status = rig.cycle(BUSY_S3)
    assert status.result == "published" and status.reasons[0].startswith("overload")
    assert min(status.published_versions) == first.plan_version + 1


def test_role_change_is_published_as_two_phases(tmp_path):
    rig = Rig(tmp_path)
    rig.cycle(BUSY_S1)
    held = rig.cycle(BUSY_S3)  # s3 jumps 15x: believed once a second, disjoint window shows it
    assert held.result == "kept" and [r["server"] for r in held.refused] == ["s3"]
    status = rig.cycle(BUSY_S3)
    assert status.two_phase and len(status.published_versions) == 2 and not status.refused
    _, (phase1, phase2) = rig.plans()
    assert (phase1.version, phase2.version) == status.published_versions
    # the collector's lead first (it knows phase 1 before any agent may apply it), then settle
    published, lead = rig.clock - timedelta(seconds=30), timedelta(seconds=plan_lead_s())
    assert phase1.not_before == published + lead
    assert phase2.not_before == published + lead + timedelta(seconds=60)
    assert phase1.hosts["s1"].mirrors == ()  # the old mirror s1 -> s3 is gone in phase 1
    assert status.plan_version == phase2.version


def test_collector_down_or_stale_keeps_the_plan(tmp_path):
    rig = Rig(tmp_path)
    published = rig.cycle(BUSY_S1)
    stale = rig.cycle(BUSY_S3, age_s=3600)
    assert stale.result == "stale" and stale.plan_version == published.plan_version
    assert "collector stale" in stale.problems[0]
    rig.snapshot.unlink()
    down = rig.cycle()
    assert down.result == "stale" and "not found" in down.problems[0]
    metrics = (tmp_path / "state" / "metrics.prom").read_text()
    assert "cosample_controller_snapshot_stale 1.0" in metrics
    assert "cosample_controller_collectors_up 0.0" in metrics
    assert "cosample_controller_collectors 1.0" in metrics
    assert json.loads((tmp_path / "state" / "status.json").read_text())["result"] == "stale"


def test_inconsistent_snapshot_is_an_error_and_nothing_is_published(tmp_path):
    rig = Rig(tmp_path)
    rig.cycle(BUSY_S1)
    before = (rig.publish_dir / "plan.json").read_bytes()
    rig.snapshot.write_text(
        json.dumps(snapshot_doc(rig.clock, {"s1": {"s9": 5000}}, servers=["s1"]))
    )
    status = rig.controller.cycle()
    assert status.result == "error" and "s9" in status.problems[0]
    assert (rig.publish_dir / "plan.json").read_bytes() == before
    rig.snapshot.write_text('{"format": "cosample.snapshot"')
    assert rig.controller.cycle().result == "stale"


def test_evaluation_agrees_with_the_planners_prediction(tmp_path):
    inventory = inventory_from_dict(inventory_doc([3000, 3000, 3000, 5000]))
    traffic = {
        "s1": {"s1": 1500, "s2": 700},
        "s2": {"s4": 300},
        "s3": {"s3": 80},
        "s4": {"s1": 600},
    }
    smoothed = update(
        None, measure(parse_snapshot(json.dumps(snapshot_doc(NOW, traffic))), inventory), 90
    )
    candidate = replan(inventory, smoothed, plan_margin=0.0)
    document = candidate.document(NOW, timedelta(hours=1))
    report = json.loads(candidate.report(document))  # the per-host loads, in columns
    assert report["names"] == list(inventory.names)
    for plan in (candidate.shares, shares(document, inventory.index)):  # arrays, and the file
        judged = evaluate(
            plan,
            candidate.own_pps,
            candidate.forwarding_pps,
            inventory.capacity_pps,
            inventory.alpha,
            inventory.beta,
        )
        assert judged.distinct_pps == pytest.approx(document["summary"]["collected_pps"], rel=1e-9)
        assert judged.load_pps == pytest.approx(report["load_pps"], rel=1e-9)
    assert candidate.shares.same_as(shares(document, inventory.index))
    assert candidate.shares.mirror_src.size  # the example does mirror


def test_two_phases_only_when_a_server_sees_rises_and_falls():
    index = {"a": 0, "b": 1, "c": 2}

    def plan(local, mirrors):
        hosts = {
            name: {
                "role": "sender",
                "sflow_sampling": n,
                "mirrors": [{"to": to, "rate": rate} for to, rate in mirrors.get(name, [])],
            }
            for name, n in zip("abc", local)
        }
        return shares({"version": 1, "plan_id": "x", "hosts": hosts}, index)

    old = plan([2, 2, 1], {"a": [("c", 0.3)]})
    assert not needs_two_phases(old, plan([4, 2, 1], {"a": [("c", 0.2)]}))  # all fall
    assert not needs_two_phases(old, plan([2, 1, 1], {"a": [("c", 0.5)]}))  # all rise
    assert needs_two_phases(old, plan([2, 2, 1], {"b": [("c", 0.3)]}))  # c: a falls, b rises
    assert needs_two_phases(old, plan([2, 2, 2], {"a": [("c", 0.4)]}))  # c: own falls, in rises
    assert not needs_two_phases(old, plan([1, 4, 1], {"a": [("c", 0.3)]}))  # a and b apart


def _needs_two_phases_by_pairs(old, new):
    """``needs_two_phases`` as it was before its arrays (a dict of pairs, one pair at a time)."""
    rises, falls = new.local_rate > old.local_rate, new.local_rate < old.local_rate
    before = dict(
        zip(zip(old.mirror_src.tolist(), old.mirror_dst.tolist()), old.mirror_rate.tolist())
    )
    after = dict(
        zip(zip(new.mirror_src.tolist(), new.mirror_dst.tolist()), new.mirror_rate.tolist())
    )
    for pair in before.keys() | after.keys():
        was, now = before.get(pair, 0.0), after.get(pair, 0.0)
        if now != was:
            (rises if now > was else falls)[list(pair)] = True
    return bool(np.any(rises & falls))


def _random_shares(draw, n):
    pairs = draw(
        st.lists(
            st.tuples(
                st.integers(0, n - 1), st.integers(0, n - 1), st.sampled_from([0.0, 0.1, 0.25, 0.5])
            ),
            max_size=12,
        )
    )
    local = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n))
    src, dst, rate = (
        np.asarray([p[k] for p in pairs], dtype=dtype)
        for k, dtype in ((0, np.int64), (1, np.int64), (2, float))
    )
    return PlanShares(1, "x", np.asarray(local), src, dst, rate)


@given(st.data())
def test_two_phases_from_arrays_match_the_pairwise_rule(data):
    """Pairs in one plan only, a pair listed twice (its last rate counts), equal rates, no
    pairs at all: the array version decides as the dict of pairs did."""
    n = data.draw(st.integers(1, 5))
    old, new = _random_shares(data.draw, n), _random_shares(data.draw, n)
    assert needs_two_phases(old, new) == _needs_two_phases_by_pairs(old, new)
    # pairs listed in order, each once (as plans list them: taken without a sort)
    listed_old, listed_new = _in_pair_order(old), _in_pair_order(new)
    assert (
        needs_two_phases(listed_old, listed_new)
        == _needs_two_phases_by_pairs(listed_old, listed_new)
        == _needs_two_phases_by_pairs(old, new)
    )


def _in_pair_order(shares):
    """The same shares with each pair once (its last rate) and the pairs in order."""
    pairs = dict(
        zip(
            zip(shares.mirror_src.tolist(), shares.mirror_dst.tolist()), shares.mirror_rate.tolist()
        )
    )
    ordered = sorted(pairs.items())
    src, dst, rate = (
        np.asarray([item[0][0] for item in ordered], dtype=np.int64),
        np.asarray([item[0][1] for item in ordered], dtype=np.int64),
        np.asarray([item[1] for item in ordered], dtype=float),
    )
    return PlanShares(1, "x", shares.local_rate, src, dst, rate)


def test_cli_run_once_with_a_file_collector(tmp_path, keys, capsys):
    inventory = tmp_path / "dc.json"
    inventory.write_text(json.dumps(inventory_doc([3000, 3000, 3000])))
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(snapshot_doc(datetime.now(timezone.utc), BUSY_S1)))
    argv = [
        "controller",
        "run",
        "--inventory",
        str(inventory),
        "--collector",
        str(snapshot),
        "--publish",
        str(tmp_path / "pub"),
        "--key",
        str(keys[0]),
        "--state-dir",
        str(tmp_path / "state"),
        "--insecure-unsigned-snapshots",
        "--cycles",
        "1",
        "--tau",
        "1s",
    ]
    assert main(argv) == 0
    assert (tmp_path / "pub" / "plan.json.sig").exists()
    capsys.readouterr()
    assert main(["controller", "status", "--state-dir", str(tmp_path / "state")]) == 0
    assert json.loads(capsys.readouterr().out)["result"] == "published"
    bad = argv[:-4] + ["--margin", "0.3", "--plan-margin", "0.2"]
    assert main(bad) == 2
    assert "--plan-margin" in capsys.readouterr().err
    assert main(argv[:-4] + ["--change", "-0.5"]) == 2
    assert "--change" in capsys.readouterr().err
    unsigned = [a for a in argv if a not in ("--key", str(keys[0]))]
    assert main(unsigned) == 2  # neither --key nor --insecure-unsigned
    assert "one of --key or --insecure-unsigned is required" in capsys.readouterr().err


def test_measurement_plan_only_after_no_snapshot_knew_a_server_for_the_bound(tmp_path, keys):
    rig = Rig(tmp_path, key=keys[0], tau_s=60.0)
    for waited in (0, 30):  # no snapshot yet: wait for the agents' safe-state samples
        status = rig.cycle()
        assert status.result == "stale" and not (rig.publish_dir / "plan.json").exists()
        assert status.reasons[0].startswith(f"no plan in force: waiting {waited} s")
        assert "measurement plan after 60 s" in status.reasons[0]
    first = rig.cycle()  # 60 s (measure_after_s) without a snapshot: the fallback
    assert first.result == "published" and first.reasons[0].startswith("bootstrap")
    assert "for 60 s" in first.reasons[0]
    assert (
        main(
            ["agent", "validate", str(rig.publish_dir / "plan.json"), "--public-key", str(keys[1])]
        )
        == 0
    )
    _, (plan,) = rig.plans()
    assert {h.sflow_sampling for h in plan.hosts.values()} == {4096}
    assert not any(h.mirrors for h in plan.hosts.values())
    assert rig.cycle().result == "stale"  # still nothing: the measurement plan stays
    warming = rig.cycle(BUSY_S1)
    assert warming.result == "kept" and warming.reasons[0].startswith("warming up")
    real = rig.cycle(BUSY_S1)
    assert real.result == "published" and real.reasons == ("no current plan",)
    assert not real.two_phase and real.plan_version > first.plan_version
    _, (plan,) = rig.plans()
    assert plan.hosts["s1"].mirrors


def test_every_server_keeps_a_sampling_floor_and_empty_snapshots_are_no_data(tmp_path):
    rig = Rig(tmp_path)
    rig.snapshot.write_text(json.dumps(snapshot_doc(rig.clock, {}, servers=[], plan=None)))
    status = rig.controller.cycle()  # the collector knows no server: wait, publish nothing
    assert status.result == "stale" and "know no server" in status.problems[0]
    rig.clock += timedelta(seconds=30)
    status = rig.cycle({"s1": {"s1": 500}})  # s2 and s3 send nothing
    assert status.result == "published" and status.reasons == ("no current plan",)
    _, (plan,) = rig.plans()
    assert plan.hosts["s2"].sflow_sampling == 4096 and plan.hosts["s3"].sflow_sampling == 4096
    assert plan.hosts["s1"].sflow_sampling == 1
    published = json.loads((rig.publish_dir / "plan.json").read_text())
    assert rig.controller.current_shares.same_as(shares(published, rig.inventory.index))


def test_cli_serve_unsigned_warns_and_publishes(tmp_path, capsys):
    inventory = tmp_path / "dc.json"
    inventory.write_text(json.dumps(inventory_doc([3000, 3000, 3000])))
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(json.dumps(snapshot_doc(datetime.now(timezone.utc), BUSY_S1)))
    with socket.socket() as probe:  # a free port for the plan server
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert (
        main(
            [
                "controller",
                "run",
                "--inventory",
                str(inventory),
                "--collector",
                str(snapshot),
                "--serve",
                f"127.0.0.1:{port}",
                "--insecure-unsigned",
                "--state-dir",
                str(tmp_path / "state"),
                "--insecure-unsigned-snapshots",
                "--cycles",
                "1",
                "--tau",
                "1s",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "UNSIGNED" in err and "publishing to http://127.0.0.1:" in err
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["result"] == "published"


def test_a_plan_above_the_agents_default_limit_is_reported(tmp_path, monkeypatch, caplog):
    """Published anyway (agents may have raised max_plan_mib), but a problem in the status."""
    from cosample.plan import source

    rig = Rig(tmp_path)
    assert not [p for p in rig.cycle(BUSY_S1).problems if "max_plan_mib" in p]
    monkeypatch.setattr(source, "MAX_BYTES", 100)
    rig = Rig(tmp_path / "again")
    status = rig.cycle(BUSY_S1)
    assert status.result == "published"
    [problem] = [p for p in status.problems if "max_plan_mib" in p]
    assert f"version(s) [{status.plan_version}]" in problem and "limit of 100 bytes" in problem
    assert problem in caplog.text


@given(offset=st.floats(0, 86400), lead=st.floats(0.001, 600))
def test_not_before_is_the_lead_after_publication_rounded_up(offset, lead):
    """Plans write whole seconds: rounding down would let agents apply a plan up to 1 s before
    the lead the collector's polling needs."""
    now = NOW + timedelta(seconds=offset)
    moment = release(now, lead)
    assert moment.microsecond == 0
    assert now + timedelta(seconds=lead) <= moment < now + timedelta(seconds=lead + 1)


def test_quiet_waits_the_window_only_without_a_lead_or_after_sparse_samples():
    lead = Settings(("c",), interval_s=5.0, settle_s=6.0, lead_s=3.0)
    none = Settings(("c",), interval_s=5.0, settle_s=6.0, lead_s=0.0)
    assert quiet_s(lead, False, 15.0, False) == 3.0 + 6.0  # until the agents run it
    assert quiet_s(lead, True, 15.0, False) == 3.0 + 2 * 6.0  # two phases
    assert quiet_s(lead, False, 15.0, True) == 3.0 + 6.0 + 5.0 + 15.0  # sparse samples in it
    assert quiet_s(none, False, 15.0, False) == 6.0 + 5.0 + 15.0  # the collector may be late


def test_a_publication_rounds_its_plan_once(tmp_path, monkeypatch):
    """One publishing cycle: the candidate is rounded to 1-in-N (``realise``) once, for its
    shares, its plan file and its report alike; the baseline once (the plan's summary)."""
    from collections import Counter

    from cosample.planner import baseline
    from cosample.planner import realise as realise_module

    rounded: Counter = Counter()
    original = realise_module.realise

    def counting(solution):
        rounded[(id(solution), solution.solver)] += 1
        return original(solution)

    monkeypatch.setattr(realise_module, "realise", counting)
    solved: list = []
    noncollab = baseline.noncollab_applied_pps  # the baseline the summary states
    monkeypatch.setattr(
        baseline,
        "noncollab_applied_pps",
        lambda problem: solved.append(problem) or noncollab(problem),
    )
    rig = Rig(tmp_path, tau_s=0.0)
    assert rig.cycle(BUSY_S1).result == "published"
    assert rounded and max(rounded.values()) == 1, rounded
    assert [solver for _, solver in rounded].count("exact") == 1
    assert len(solved) == 1


def test_a_restarted_controller_keeps_the_plan_in_force_as_bytes_and_lowers_them(
    tmp_path, monkeypatch
):
    """After a restart the plan in force is read back from the state: kept as its host table's
    bytes (as a plan the controller published itself), the same bytes as published, so its
    next two-phase publication is lowered from the bytes (the compiled path)."""
    import orjson

    from cosample.plan import transition
    from cosample.planner.planbytes import HostTable

    lowered = []
    lower = transition._transition.lower
    monkeypatch.setattr(
        transition._transition, "lower", lambda *args: lowered.append(lower(*args)) or lowered[-1]
    )
    rig = Rig(tmp_path)
    rig.cycle(BUSY_S1)
    published = orjson.loads((rig.publish_dir / "plan.json").read_bytes())["hosts"]
    rig.controller = rig.start()
    hosts = rig.controller.current["hosts"]
    assert isinstance(hosts, HostTable)
    assert hosts.json == orjson.dumps(published, option=orjson.OPT_SORT_KEYS)
    statuses = [rig.cycle(BUSY_S3) for _ in range(4)]  # s3's jump believed, then published
    assert [s.two_phase for s in statuses if s.result == "published"] == [True]
    assert lowered and lowered[-1] is not None
    _, (phase1, _) = rig.plans()
    assert phase1.hosts["s1"].mirrors == ()  # the old mirror s1 -> s3 is gone in phase 1


def test_a_restarted_serving_controller_serves_the_same_slices_of_a_plan_set(tmp_path):
    """A two-phase publication, then a restart on its state: the publication read back once
    (its phases kept as their tables' bytes) serves every host the same slice as before."""
    from cosample.controller.publish import HttpTarget

    rig = Rig(tmp_path)
    targets = []

    def serving():
        targets.append(HttpTarget("127.0.0.1", 0, dict, bytes))
        return Controller(
            rig.inventory, rig.settings, targets[-1], tmp_path / "state", clock=lambda: rig.clock
        )

    rig.controller = serving()
    try:
        rig.cycle(BUSY_S1)
        statuses = [rig.cycle(BUSY_S3) for _ in range(2)]
        assert statuses[-1].two_phase
        before = targets[-1]._current.slices
        serving()  # the restart
        after = targets[-1]._current.slices
        assert after.head == before.head and len(after) == len(before) == 3
        for name in ("s1", "s2", "s3"):
            assert after.document(name) == before.document(name)
    finally:
        for target in targets:
            target.close()
