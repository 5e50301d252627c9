"""The plan's ``kernel_mirror`` entries (docs/formats.md): what they need, what they refuse."""

from __future__ import annotations

import pytest

from cosample.plan.document import plan_from_dict
from cosample.plan.errors import PlanError

SERVICE = {"address": "10.0.0.12", "port": 8080}


def kernel(**extra):
    return {
        "service": SERVICE,
        "mechanism": "kernel_mirror",
        "to": "s4",
        "interface": "vm2",
        **extra,
    }


def with_entries(make_plan, *entries):
    doc = make_plan()
    doc["hosts"]["s1"]["appmon"] = list(entries)
    return doc


def test_a_kernel_mirror_reads_with_its_defaults(make_plan):
    (entry,) = plan_from_dict(with_entries(make_plan, kernel())).hosts["s1"].appmon
    assert (entry.mechanism, entry.interface, entry.to) == ("kernel_mirror", "vm2", "s4")
    assert entry.copied_segments == "psh" and entry.truncate_bytes is None


@pytest.mark.parametrize("segments", ["psh", "psh+ends", "all"])
def test_every_segment_choice_is_allowed(make_plan, segments):
    (entry,) = plan_from_dict(with_entries(make_plan, kernel(segments=segments))).hosts["s1"].appmon
    assert entry.copied_segments == segments


def test_a_share_of_connections_is_allowed(make_plan):
    (entry,) = plan_from_dict(with_entries(make_plan, kernel(share=0.25))).hosts["s1"].appmon
    assert entry.share == 0.25


@pytest.mark.parametrize(
    "change, where, words",
    [
        ({"truncate_bytes": 96}, "hosts.s1.appmon[0].truncate_bytes", "cannot truncate"),
        ({"interface": None}, "hosts.s1.appmon[0].interface", "needs the interface"),
        ({"to": None}, "hosts.s1.appmon[0].to", "needs an analysis host"),
        ({"segments": "fin"}, "hosts.s1.appmon[0].segments", ""),
    ],
)
def test_bad_kernel_mirrors_are_refused_naming_the_field(make_plan, change, where, words):
    with pytest.raises(PlanError) as info:
        plan_from_dict(with_entries(make_plan, kernel(**change)))
    assert where in str(info.value) and words in str(info.value)


def test_the_same_service_twice_to_one_host_is_refused(make_plan):
    with pytest.raises(PlanError, match=r"hosts\.s1\.appmon\[1\]: same service"):
        plan_from_dict(with_entries(make_plan, kernel(), kernel(interface="vm1")))


def test_a_kernel_and_a_selective_mirror_of_one_service_may_coexist(make_plan):
    selective = {"service": SERVICE, "mechanism": "selective_mirror", "to": "s4"}
    entries = plan_from_dict(with_entries(make_plan, kernel(), selective)).hosts["s1"].appmon
    assert [e.mechanism for e in entries] == ["kernel_mirror", "selective_mirror"]
