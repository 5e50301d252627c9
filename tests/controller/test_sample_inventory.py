"""The controller publishes ``sample`` hosts (issue 24, item 4): an inventory server with
``alpha_sample`` (and an ``observation_domain`` or an IPv4 ``tunnel_ip``) reaches the planner as a
description's does, and an inventory without it publishes the bytes it published before."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from controller_helpers import inventory_doc, snapshot_doc

from cosample.cli import main
from cosample.controller.errors import InventoryError
from cosample.controller.evaluate import needs_two_phases
from cosample.controller.inventory import inventory_from_dict
from cosample.controller.loop import Controller
from cosample.controller.publish import DirectoryTarget
from cosample.controller.settings import Settings
from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE
from cosample.plan.document import parse_document

#: A fixed clock: the plan's bytes carry its dates (nothing here compares them with today's).
CLOCK = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
BUSY_S1 = {"s1": {"s1": 1500, "s2": 900}, "s2": {"s2": 200}, "s3": {"s3": 100}}


def publish(tmp_path, document: dict, clock: datetime = CLOCK) -> bytes:
    """One controller cycle on ``document`` and BUSY_S1: the published plan's bytes."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(snapshot_doc(clock, BUSY_S1, servers=["s1", "s2", "s3"])))
    controller = Controller(
        inventory_from_dict(document),
        Settings((str(snapshot),), interval_s=30, tau_s=30, settle_s=60),
        DirectoryTarget(tmp_path / "pub"),
        tmp_path / "state",
        clock=lambda: clock,
    )
    assert controller.cycle().result == "published"
    return (tmp_path / "pub" / "plan.json").read_bytes()


def sample_inventory(**s1) -> dict:
    document = inventory_doc([3000, 3000, 3000])
    document["servers"][0].update(alpha_sample=0.1, **s1)
    document["ipfix"] = {"collector": "192.0.2.100:4739", "cache_active_timeout_s": 2}
    return document


def test_an_inventory_server_with_alpha_sample_is_published_sampling_by_sample(tmp_path):
    # published now: ``agent validate`` (below) refuses an expired plan
    data = publish(tmp_path, sample_inventory(), datetime.now(timezone.utc).replace(microsecond=0))
    (plan,) = parse_document(data)  # as the agents and the collector read it
    s1 = plan.hosts["s1"]
    assert s1.local_mechanism == "sample" and s1.sflow_sampling is None
    assert s1.observation_domain == (192 << 24 | 2 << 8 | 1)  # its tunnel_ip 192.0.2.1
    assert s1.local_rate == pytest.approx(s1.sample_probability / SAMPLE_PROBABILITY_SCALE)
    assert {plan.hosts[name].local_mechanism for name in ("s2", "s3")} == {"sflow"}
    published = json.loads(data)
    assert published["ipfix"] == {"collector": "192.0.2.100:4739", "cache_active_timeout_s": 2}
    assert main(["agent", "validate", str(tmp_path / "pub" / "plan.json"), "--host", "s1"]) == 0


def test_an_explicit_observation_domain_wins_over_the_tunnel_address(tmp_path):
    (plan,) = parse_document(publish(tmp_path, sample_inventory(observation_domain=77)))
    assert plan.hosts["s1"].local_mechanism == "sample"
    assert plan.hosts["s1"].observation_domain == 77


def test_without_alpha_sample_the_published_bytes_are_those_before(tmp_path):
    """Recorded with the controller before it read ``alpha_sample`` (a4a67b7): the inventory
    without it publishes these bytes (the solve time set to 0, the one field that varies); with
    an ``ipfix`` section that no server can use, the same plan carries the section, as the
    planner writes a description's."""
    document = inventory_doc([3000, 3000, 3000])
    plain = json.loads(publish(tmp_path / "plain", document))
    assert digest(plain) == PLAIN_PLAN
    document["ipfix"] = {"collector": "192.0.2.100:4739"}
    with_ipfix = json.loads(publish(tmp_path / "ipfix", document))
    assert with_ipfix.pop("ipfix") == {"collector": "192.0.2.100:4739"}
    assert with_ipfix.pop("plan_id") != plain.pop("plan_id")  # a hash of the content
    assert steady(with_ipfix) == steady(plain)


def steady(plan: dict) -> dict:
    """``plan`` with its solve time set to 0."""
    return {**plan, "solver": {**plan["solver"], "seconds": 0}}


def digest(plan: dict) -> str:
    return hashlib.sha256(json.dumps(steady(plan), sort_keys=True).encode()).hexdigest()


#: Since issue 44 the summary's solver method says which space an "all fit" plan was found in
#: ("all fit (receivers 1-in-1)"); nothing else in these bytes changed (checked by diffing the
#: documents before and after).
PLAIN_PLAN = "095571255e77bb267b0fb7cefb6cf874c843c0d13f763acc8e2fade09e73e057"


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d["servers"][1].update(alpha_sample=0.5, observation_domain=3221225985),
            "servers[1].observation_domain ('s2'): its observation domain 3221225985 is also 's1'",
        ),
        (lambda d: d["servers"][0].update(observation_domain=0), "servers[0].observation_domain"),
        (lambda d: d["servers"][0].update(alpha_sample=-1), "servers[0].alpha_sample"),
        (lambda d: d["ipfix"].update(cache_max_flows=0), "ipfix.cache_max_flows"),
        (lambda d: d["ipfix"].update(colector="x"), "ipfix.colector"),
    ],
)
def test_bad_sample_fields_name_the_field(change, message):
    document = copy.deepcopy(sample_inventory())
    change(document)
    with pytest.raises(InventoryError) as caught:
        inventory_from_dict(document, source="dc.yaml")
    assert str(caught.value).startswith("dc.yaml: ")
    assert message.lower() in str(caught.value).lower()


def test_a_server_that_cannot_use_sample_is_planned_with_sflow(tmp_path):
    """alpha_sample without an observation domain or an IPv4 tunnel: sFlow, as the planner does."""
    document = sample_inventory()
    document["servers"][0]["tunnel_ip"] = "2001:db8::1"
    (plan,) = parse_document(publish(tmp_path, document))
    assert plan.hosts["s1"].local_mechanism == "sflow"
    assert timedelta(0) < plan.expires - plan.created


def test_a_class_gives_alpha_sample_and_check_prints_it(tmp_path, capsys):
    """``alpha_sample`` resolves as the other coefficients do (server, class, calibration, top
    level); ``cosample controller check`` shows it with the domain the plans will carry."""
    document = inventory_doc([3000, 3000, 3000])
    document["classes"] = {"cached": {"alpha_sample": 0.1}}
    document["servers"][0]["class"] = "cached"
    (plan,) = parse_document(publish(tmp_path, document))
    assert plan.hosts["s1"].local_mechanism == "sample"
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(document))
    assert main(["controller", "check", "--inventory", str(path)]) == 0
    servers = json.loads(capsys.readouterr().out)["servers"]
    assert (servers[0]["alpha_sample"], servers[0]["observation_domain"]) == (0.1, 3221225985)
    assert "alpha_sample" not in servers[1]


def published_and_restarted(tmp_path, document: dict) -> tuple[Controller, Controller]:
    """A controller that published once on ``document`` and BUSY_S1, and one started after it
    on the same state directory."""
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(json.dumps(snapshot_doc(CLOCK, BUSY_S1, servers=["s1", "s2", "s3"])))
    inventory = inventory_from_dict(document)

    def controller() -> Controller:
        return Controller(
            inventory,
            Settings((str(snapshot),), interval_s=30, tau_s=30, settle_s=60),
            DirectoryTarget(tmp_path / "pub"),
            tmp_path / "state",
            clock=lambda: CLOCK,
        )

    running = controller()
    assert running.cycle().result == "published"
    return running, controller()


def test_a_restarted_controller_reads_a_sample_hosts_share_as_it_published_it(tmp_path):
    """After a restart the plan in force's shares come from its document: a ``sample`` host
    (no ``sflow_sampling``) keeps its ``sample_probability``'s share, not none, so the first
    cycle neither overcounts the gain of the next plan nor sees its share rise."""
    running, restarted = published_and_restarted(tmp_path, sample_inventory())
    assert running.current_shares.local_rate[running.inventory.index["s1"]] > 0
    assert restarted.current_shares.same_as(running.current_shares)


def test_a_restarted_controller_reads_back_the_very_mirror_shares_it_kept(tmp_path):
    """The plan file writes mirror rates to 12 significant digits; the shares a running
    controller keeps are those digits too, so the ones a restarted controller reads from the
    file are equal, not a rounding apart (which would look like a change and could ask for a
    two-phase publication where one phase is safe)."""
    running, restarted = published_and_restarted(tmp_path, inventory_doc([3000, 2000, 3000]))
    kept, read = running.current_shares, restarted.current_shares
    assert kept.mirror_rate.size == 1 and 0 < kept.mirror_rate[0] < 1  # s1 mirrors a share
    for field in ("local_rate", "mirror_src", "mirror_dst", "mirror_rate"):
        assert np.array_equal(getattr(read, field), getattr(kept, field)), field
    assert not needs_two_phases(read, kept) and not needs_two_phases(kept, read)
