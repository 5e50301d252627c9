"""The plan's host fields are declared once (``cosample/plan/hostfields.py``): the reader's model
has exactly those fields, the planner's, the slice builder's and the transition's lists are the
declaration's, and the compiled transition's header is the generator's output, as checked in."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from cosample.plan import hostfields, slicebuild, transition
from cosample.plan.document import HostPlan
from cosample.planner import description, planfile

ROOT = Path(__file__).resolve().parents[2]


def test_the_model_has_the_declared_fields():
    """A field added to ``HostPlan`` and not declared (or declared and not in the model) fails:
    the name of a host is its key under ``hosts``, not a declared field."""
    assert set(HostPlan.model_fields) - {"name"} == set(hostfields.HOST_FIELDS)
    parts = set().union(*hostfields.HOST_FIELDS.values())
    assert parts == {"agent", "handed", "peer", "sample", "local", "list"}


def test_the_lists_are_the_declarations():
    assert planfile.AGENT_FIELDS == hostfields.AGENT_FIELDS
    assert planfile.SAMPLE_FIELDS == hostfields.SAMPLE_FIELDS
    assert description.AGENT_FIELDS == hostfields.HANDED_FIELDS
    assert slicebuild.PEER_FIELDS == hostfields.PEER_FIELDS
    assert transition._SAMPLE_KEYS == hostfields.SAMPLE_FIELDS
    # the lists as the code has always read them (their order matters to the compiled paths)
    assert hostfields.PEER_FIELDS == (
        "role",
        "local_rate",
        "sflow_sampling",
        "tunnel_ip",
        "local_mechanism",
        "sample_probability",
        "observation_domain",
    )
    assert hostfields.LOCAL_FIELDS[:2] == ("local_rate", "sflow_sampling")
    assert hostfields.LOCAL_FIELDS[2:] == hostfields.SAMPLE_FIELDS


def test_the_checked_in_header_is_the_generators_output(tmp_path):
    """``python -m cosample.plan.hostfields`` writes the header; the one checked in (and compiled
    into ``_transition``) is what it writes now."""
    written = tmp_path / "_hostfields.h"
    done = subprocess.run(
        [sys.executable, "-m", "cosample.plan.hostfields", "--output", str(written)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert written.read_text() == hostfields.c_header()
    assert hostfields.HEADER.read_text() == hostfields.c_header(), (
        "cosample/plan/_hostfields.h is stale: run python -m cosample.plan.hostfields"
    )


def test_the_header_declares_the_local_fields_in_order():
    header = hostfields.c_header()
    (names,) = re.findall(r"FIELD\[F_COUNT\] = \{(.*?)\};", header)
    assert re.findall(r'"(\w+)"', names) == list(hostfields.LOCAL_FIELDS)
    (lengths,) = re.findall(r"FIELD_LEN\[F_COUNT\] = \{(.*?)\};", header)
    assert [int(n) for n in lengths.split(",")] == [len(f) for f in hostfields.LOCAL_FIELDS]


def test_the_compiled_transition_includes_the_header_and_copies_no_field_table():
    source = (ROOT / "cosample" / "plan" / "_transition.c").read_text()
    assert '#include "_hostfields.h"' in source
    assert "FIELD[F_COUNT] =" not in source and "FIELD_LEN[F_COUNT] =" not in source


def c_strings(path: str, array: str) -> list[str]:
    """The strings of the C array ``array`` in ``path``; ``\"name\":[`` read as ``name``."""
    source = (ROOT / path).read_text()
    (body,) = re.findall(r"\b%s\[[^\]]*\] = \{(.*?)\};" % re.escape(array), source, re.S)
    return [re.sub(r'^\\"|\\":\[$', "", text) for text in re.findall(r'"((?:[^"\\]|\\.)*)"', body)]


def test_the_compiled_paths_name_the_declared_lists_in_key_order():
    """The tables the compiled builders keep by hand (their key-order logic is C) name exactly
    the declared lists, and phase 1 inserts exactly the lists and the sampling rate and 1-in-N."""
    lists = sorted(hostfields.LIST_FIELDS)
    assert c_strings("cosample/plan/_hosttable.h", "LIST_NAME") == ["", *lists]
    assert c_strings("cosample/plan/_slices.c", "OPEN") == ["", *lists]
    inserted = sorted([*hostfields.LIST_FIELDS, *hostfields.LOCAL_FIELDS[:2]])
    assert c_strings("cosample/plan/_transition.c", "INSERTED") == inserted
