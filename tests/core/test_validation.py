"""The shared validation layer: one line naming where, the field path, what and the bad value."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field

from cosample.errors import CosampleError
from cosample.validation import (
    InterfaceName,
    Strict,
    TunnelAddress,
    entry_name,
    field_path,
    plain_tunnel_address,
    problem,
    read_document,
    validate,
)


class Server(Strict):
    name: str
    capacity_pps: float = Field(gt=0)
    enabled: bool = True


class Description(Strict):
    servers: list[Server]


class Custom(CosampleError):
    pass


def test_field_path_reads_like_the_docs():
    assert field_path(("servers", 3, "capacity_pps")) == "servers[3].capacity_pps"
    assert field_path(()) == "(top level)"


def test_valid_input_becomes_an_immutable_model_and_ints_are_floats():
    description = validate(Description, {"servers": [{"name": "s1", "capacity_pps": 5}]})
    assert description.servers[0].capacity_pps == 5.0
    with pytest.raises(Exception):
        description.servers[0].name = "s2"


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"servers": [{"name": "s1", "capacity_pps": -1}]},
            "dc.json: servers[0].capacity_pps ('s1'): input should be greater than 0 (got -1)",
        ),
        (
            {"servers": [{"name": "s1", "capacity_pps": "9"}]},
            "dc.json: servers[0].capacity_pps ('s1'): input should be a valid number (got '9')",
        ),
        (
            {"servers": [{"name": "s1", "capacity_pps": 1, "enabled": 1}]},
            "dc.json: servers[0].enabled ('s1'): input should be a valid boolean (got 1)",
        ),
        (
            {"servers": [{"name": "s1", "capacity_pps": 1, "cap": 2}]},
            "dc.json: servers[0].cap ('s1'): extra inputs are not permitted (got 2)",
        ),
        (
            {"servers": [{"name": 7, "capacity_pps": 1}]},
            "dc.json: servers[0].name: input should be a valid string (got 7)",
        ),
        ({"servers": [{"capacity_pps": 1}]}, "dc.json: servers[0].name: field required"),
    ],
)
def test_errors_name_file_path_problem_and_value(data, expected):
    with pytest.raises(Custom) as caught:
        validate(Description, data, where="dc.json", error=Custom)
    assert str(caught.value) == expected


def test_problem_has_the_same_form():
    error = problem(
        ("servers", 1, "name"),
        "duplicate server name, also servers[0]",
        "s1",
        where="dc.json",
        name="s1",
        error=Custom,
    )
    assert isinstance(error, Custom)
    assert (
        str(error)
        == "dc.json: servers[1].name ('s1'): duplicate server name, also servers[0] (got 's1')"
    )
    assert str(problem(("traffic_pps", "s7"), "unknown server")) == "traffic_pps.s7: unknown server"


def test_entry_name_is_the_innermost_named_list_entry():
    data = {"servers": [{"name": "a", "ports": [{"name": "p1"}, {"mtu": 1}]}]}
    assert entry_name(("servers", 0, "ports", 0, "mtu"), data) == "p1"
    assert entry_name(("servers", 0, "ports", 1, "mtu"), data) == "a"
    assert entry_name(("servers", 3), data) is None and entry_name(("x",), None) is None


def test_a_problem_with_the_whole_input_names_only_where():
    with pytest.raises(Custom) as caught:
        validate(Description, [1], where="dc.json", error=Custom)
    assert str(caught.value) == "dc.json: input should be a valid dictionary (got [1])"
    with pytest.raises(CosampleError) as caught:
        validate(Description, None)
    assert str(caught.value) == "(top level): input should be a valid dictionary (got None)"
    with pytest.raises(CosampleError) as caught:
        validate(Description, {"servers": [7]})
    assert str(caught.value) == "servers[0]: input should be a valid dictionary (got 7)"


def test_several_problems_are_counted_on_one_line():
    with pytest.raises(CosampleError, match=r"servers\[0\]\.name: .* \[and 1 more problem"):
        validate(Description, {"servers": [{"capacity_pps": -1}]})


@pytest.mark.parametrize("name", ["eth0", "br-int", "a" * 15, "veth.10", "cosm-deadbeef", "é" * 7])
def test_interface_names_the_kernel_accepts(name):
    assert validate(InterfaceName, name) == name


@pytest.mark.parametrize(
    "name", ["", "a" * 16, ".", "..", "a/b", "eth0:1", "a b", "a\tb", 'eth0" x', "é" * 8]
)
def test_interface_names_the_kernel_refuses(name):
    with pytest.raises(CosampleError) as caught:
        validate(InterfaceName, name, where="bridge")
    assert str(caught.value) == (
        "bridge: not an interface name (1 to 15 bytes, no '/', ':' or white space, "
        f"not '.' or '..') (got {name!r})"
    )


@pytest.mark.parametrize(
    "name, text",
    [
        ("d.json", '{"a": [1, 2]}'),
        ("d.yaml", "a: [1, 2]\n"),
        ("d.yml", "a:\n  - 1\n  - 2\n"),
        ("d.toml", "a = [1, 2]\n"),
        ("d", '{"a": [1, 2]}'),
    ],
)
def test_read_document_by_extension(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    assert read_document(tmp_path / name, "thing") == {"a": [1, 2]}


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("d.json", "{", "not valid JSON: Expecting property name enclosed in double quotes"),
        (
            "d.yaml",
            "a: [1",
            "not valid YAML: expected ',' or ']', but got '<stream end>' (line 1, column 6)",
        ),
        (
            "d.yml",
            "a: b: c",
            "not valid YAML: mapping values are not allowed here (line 1, column 5)",
        ),
        ("d.toml", "a = ", "not valid TOML: Invalid value"),
        ("d.conf", '{"a": 1}', "not valid TOML"),
    ],
)
def test_read_document_says_which_file_and_format_is_broken(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(Custom) as caught:
        read_document(
            tmp_path / name,
            "thing",
            default="TOML" if name.endswith(".conf") else "JSON",
            error=Custom,
        )
    assert str(caught.value).startswith(f"{tmp_path / name}: {message}")
    assert "\n" not in str(caught.value)


def test_read_document_of_a_missing_or_binary_file(tmp_path):
    with pytest.raises(
        CosampleError, match=r"nope.json: cannot read thing: No such file or directory$"
    ):
        read_document(tmp_path / "nope.json", "thing")
    (tmp_path / "b.json").write_bytes(b"\xff\xfe")
    with pytest.raises(CosampleError, match=r"b.json: cannot read thing: not UTF-8 text$"):
        read_document(tmp_path / "b.json", "thing")


def _routable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (
        address.is_multicast
        or address.is_unspecified
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
    )


@given(st.ip_addresses(v=4) | st.ip_addresses(v=6))
def test_tunnel_addresses_fast_path_agrees_with_ipaddress(address):
    """The dotted-quad shortcut accepts exactly what the full check accepts."""
    if _routable(address) and str(address) != "255.255.255.255":
        assert validate(TunnelAddress, str(address)) == str(address)
    else:
        with pytest.raises(CosampleError, match="expected a unicast address"):
            validate(TunnelAddress, str(address), where="tunnel_ip")


@pytest.mark.parametrize(
    "text",
    [
        "10.0.0.256",
        "010.0.0.1",
        "10.0.0",
        "host",
        "1.2.3.4 ",
        "1\u0661.2.3.4",  # an Arabic-Indic digit (a regular expression's \\d matches it)
        "10.0.\u0968.1",  # a Devanagari one
    ],
)
def test_tunnel_addresses_that_are_not_addresses(text):
    with pytest.raises(CosampleError, match="expected an IP address"):
        validate(TunnelAddress, text, where="tunnel_ip")
    assert not plain_tunnel_address(text)
