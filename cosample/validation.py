"""One way to validate input: formats declared as pydantic v2 models, errors a person can act on.

Every input format (data-centre description, testbed topology, plan, agent configuration,
inventory, collector snapshot) is declared once as a model deriving from ``Strict``, and read
through ``validate``. A pydantic ``ValidationError`` becomes the component's own error type
carrying one line: where the input came from, the field path in the form the docs use
(``servers[3].capacity_pps``), what is wrong, and the bad value. Why pydantic: see
docs/dependencies.md.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import reprlib
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, TypeVar, overload

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from cosample.errors import CosampleError
from cosample.times import format_time_ms, parse_time

T = TypeVar("T")
E = TypeVar("E", bound=CosampleError)

_MODEL_NAME = re.compile(r" or instance of \w+")
_value = reprlib.Repr()
_value.maxstring, _value.maxother, _value.maxlist, _value.maxdict = 60, 60, 4, 4


def short_repr(value: Any) -> str:
    """A value as error messages show it: ``repr``, long strings and containers cut short."""
    return _value.repr(value)


INTERFACE_NAME_RULE = "1 to 15 bytes, no '/', ':' or white space, not '.' or '..'"


def _not_dots(name: str) -> str:
    if name in (".", ".."):
        raise ValueError("dots")
    return name


def _interface_name(value: Any, checked: Callable[[Any], str]) -> str:
    """The constraints run first (in pydantic's core); any failure becomes one plain sentence."""
    try:
        name = checked(value)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "string_type":
            raise  # not a string at all: pydantic says so
        raise PydanticCustomError(
            "interface_name", f"not an interface name ({INTERFACE_NAME_RULE})"
        ) from None
    if not name.isascii() and len(name.encode()) > 15:
        raise PydanticCustomError(
            "interface_name", f"not an interface name ({INTERFACE_NAME_RULE})"
        )
    return name


#: A Linux network interface name as the kernel accepts it (``dev_valid_name``): 1 to 15 bytes
#: (IFNAMSIZ - 1), not ``.`` or ``..``, no ``/``, ``:`` or white space. Bridges, VM ports and
#: devices the agents or the testbed create are all named by this one rule.
InterfaceName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=15, pattern=r"^[^/:\s]+$"),
    AfterValidator(_not_dots),
    WrapValidator(_interface_name),
]


#: dotted quads 1.x.x.x-223.x.x.x without leading zeros: checked without ``ipaddress`` (a million
#: servers have one each); everything else goes through ``ipaddress``
_PLAIN_IPV4 = re.compile(  # [0-9], not \d: \d is any Unicode digit, which ipaddress refuses
    r"(?:22[0-3]|2[01][0-9]|1[0-9][0-9]|[1-9][0-9]?)"
    r"(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"
)


def plain_tunnel_address(text: str) -> bool:
    """True for a dotted quad that is surely a usable tunnel endpoint (not loopback or
    link-local), decided without ``ipaddress``; False means: ask ``TunnelAddress``."""
    return bool(_PLAIN_IPV4.fullmatch(text)) and not text.startswith(("127.", "169.254."))


def _tunnel_address(text: str) -> str:
    """A tunnel endpoint: a unicast address a VXLAN device or OVS tunnel port can use."""
    if plain_tunnel_address(text):
        return text
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError("expected an IP address") from None
    if (
        address.is_multicast
        or address.is_unspecified
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address == ipaddress.IPv4Address("255.255.255.255")
    ):
        raise ValueError(
            "expected a unicast address that routes between hosts (not multicast, "
            "loopback, link-local, reserved or unspecified)"
        )
    return str(address)


#: A server's tunnel endpoint (description, inventory, plan): one rule, so nothing the planner
#: accepts is refused later by an agent.
TunnelAddress = Annotated[str, AfterValidator(_tunnel_address)]
#: A host's name in a plan (its key under ``hosts``; a DNS name's length at most).
HostName = Annotated[str, StringConstraints(min_length=1, max_length=253)]

SERVER_NAME_RULE = (
    "1 to 253 ASCII letters, digits, '.', '_' or '-', beginning with a letter, a digit or '_'"
)
#: A server's name where it enters (a description, an inventory): what every consumer of it
#: accepts as it is: a plan's host (``HostName``, 253 at most), an agent's ``host``, a slice's
#: file and URL path (``hosts/NAME``: no '/', never '.' or '..'), a Prometheus label, a
#: terminal (no control or bidirectional characters), a command line (no leading '-').
SERVER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")


def _server_name(name: str) -> str:
    if SERVER_NAME.fullmatch(name) is None:
        raise PydanticCustomError("server_name", f"not a server name ({SERVER_NAME_RULE})")
    return name


ServerName = Annotated[str, AfterValidator(_server_name)]


def _ip_address(text: str) -> str:
    return str(ipaddress.ip_address(text))


#: Any IP address, normalised (``"0030::1:1:1"`` -> ``"30::1:1:1"``): sFlow agent addresses
#: (plan, collector inventory) and VM addresses are compared as text after this.
IpAddress = Annotated[str, AfterValidator(_ip_address)]


def _utc(value: Any) -> Any:
    """``2026-11-23T10:00:00Z`` -> an aware datetime; anything else is left to the type check."""
    return parse_time(value) if isinstance(value, str) else value


def as_utc(moment: datetime) -> datetime:
    """An aware ``moment`` in UTC; ``ValueError`` for a time without a time zone."""
    if moment.tzinfo is None:
        raise ValueError("expected a time with a time zone")
    return moment.astimezone(timezone.utc)


#: A moment in a snapshot (the collector's, the application monitor's): read from the ``Z`` form
#: (``cosample.times``) as an aware datetime, written back to the millisecond. The plan keeps
#: its times as the text it was signed with (``cosample.plan.document.UtcTime``).
UtcTime = Annotated[
    datetime,
    BeforeValidator(_utc),
    AfterValidator(as_utc),
    PlainSerializer(format_time_ms, return_type=str),
]


class Strict(BaseModel):
    """Base of every input model: unknown keys are errors, nothing is coerced, results immutable.

    Strict mode still accepts an integer where a float is declared (JSON has one number type) but
    never a string for a number or a number for a boolean.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def field_path(location: Sequence[int | str]) -> str:
    """``("servers", 3, "capacity_pps")`` -> ``servers[3].capacity_pps``."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(top level)"


def describe(error: ValidationError, where: str = "", data: Any = None) -> str:
    """One line for the first problem (and how many more there are), prefixed by ``where``.

    With ``data`` (the input), a path through a list entry that has a ``name`` also shows that
    name, e.g. ``servers[3].capacity_pps ('web4')``: in a long list the name is what people know.
    """
    return _describe(error.errors(include_url=False), where, data)


def _describe(problems: list[Any], where: str, data: Any) -> str:
    first = problems[0]
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    message = _MODEL_NAME.sub(
        "", message
    )  # "a valid dictionary or instance of Server": ours, not theirs
    location = first["loc"]
    name = entry_name(location, data) if data is not None else None
    line = _line(where, location, name, f"{message[:1].lower()}{message[1:]}")
    if first["type"] not in ("missing",):
        line += f" (got {_value.repr(first.get('input'))})"
    if len(problems) > 1:
        line += f" [and {len(problems) - 1} more problem(s)]"
    return line


def entry_name(location: Sequence[int | str], data: Any) -> str | None:
    """The ``name`` of the innermost list entry on ``location`` in ``data``, if it has one."""
    name = None
    for part in location:
        try:
            data = data[part]
        except (LookupError, TypeError):
            break
        if (
            isinstance(part, int)
            and isinstance(data, Mapping)
            and isinstance(data.get("name"), str)
        ):
            name = data["name"]
    return name


def _line(where: str, location: Sequence[int | str], name: str | None, what: str) -> str:
    """``where: path ('name'): what``; a problem with the whole input names only ``where``."""
    located = field_path(location) + (f" ({_value.repr(name)})" if name else "") if location else ""
    return (
        ": ".join(part for part in (where, located, what) if part)
        if where or located
        else f"{field_path(())}: {what}"
    )


@overload
def problem(
    location: Sequence[int | str],
    what: str,
    value: Any = None,
    *,
    where: str = "",
    name: str | None = None,
) -> CosampleError: ...
@overload
def problem(
    location: Sequence[int | str],
    what: str,
    value: Any = None,
    *,
    where: str = "",
    name: str | None = None,
    error: type[E],
) -> E: ...
def problem(
    location: Sequence[int | str],
    what: str,
    value: Any = None,
    *,
    where: str = "",
    name: str | None = None,
    error: type[CosampleError] = CosampleError,
) -> CosampleError:
    """The error for a problem no single field's model can see (a duplicate, an unknown reference).

    Same one-line form as ``describe``: ``where: field.path ('name'): what (got value)``, with
    ``name`` the list entry's name if it has one; raise it.
    """
    line = _line(where, location, name, what)
    if value is not None:
        line += f" (got {_value.repr(value)})"
    return error(line)


#: How a document is parsed, by file extension; anything else uses the caller's default.
FORMATS = {".json": "JSON", ".yaml": "YAML", ".yml": "YAML", ".toml": "TOML"}


def read_document(
    path: str | os.PathLike[str],
    what: str,
    *,
    default: str = "JSON",
    error: type[CosampleError] = CosampleError,
) -> Any:
    """The parsed JSON, YAML or TOML (by extension, else ``default``) of an input file, unvalidated.

    ``what`` names the document in the error (``cannot read data-centre description``).
    """
    path = Path(path)
    kind = FORMATS.get(path.suffix.lower(), default)
    try:
        data = path.read_bytes()
        if kind == "JSON":  # orjson (strict JSON, and faster); else the library's
            try:  # reading decides (NaN, huge integers) and words the complaint
                return orjson.loads(data)
            except orjson.JSONDecodeError:
                pass
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise error(f"{path}: cannot read {what}: {reason}") from None
    parse: Callable[[str], Any]
    failure: type[Exception]
    if kind == "YAML":
        import yaml  # a format's parser loads with a document in it: JSON is the common input

        parse, failure = yaml.safe_load, yaml.YAMLError
    elif kind == "TOML":
        import tomllib  # as PyYAML above

        parse, failure = tomllib.loads, tomllib.TOMLDecodeError
    else:
        parse, failure = json.loads, json.JSONDecodeError
    try:
        return parse(text)
    except failure as exc:
        raise error(f"{path}: not valid {kind}: {_one_line(exc)}") from None
    except RecursionError:
        raise error(f"{path}: not valid {kind}: nested too deeply") from None
    except ValueError as exc:  # a number the parser will not convert (over 4,300 digits)
        raise error(f"{path}: not valid {kind}: {parse_refusal(exc)}") from None


def parse_refusal(exc: Exception) -> str:
    """Why a JSON, YAML or TOML parser refused a text, in a few words: Python's own refusals
    (an integer over ``sys.get_int_max_str_digits()`` digits, nesting deeper than the stack)
    come as ``ValueError`` and ``RecursionError``, not as the parser's error type."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if "integer string conversion" in str(exc):
        return f"a number with more than {sys.get_int_max_str_digits()} digits"
    return _one_line(exc)


def _one_line(exc: Exception) -> str:
    """A parser's complaint on one line (PyYAML spreads it over several, position last)."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is not None and problem:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


@lru_cache(maxsize=None)
def _adapter(kind: Any) -> TypeAdapter:
    return TypeAdapter(kind)


@overload
def validate(
    kind: type[T], data: Any, *, where: str = "", error: type[CosampleError] = CosampleError
) -> T: ...
@overload  # a type that is no class (``list[int]``, ``Annotated[...]``): its value
def validate(
    kind: Any, data: Any, *, where: str = "", error: type[CosampleError] = CosampleError
) -> Any: ...
def validate(
    kind: Any, data: Any, *, where: str = "", error: type[CosampleError] = CosampleError
) -> Any:
    """``data`` (parsed JSON/YAML/TOML) as an instance of ``kind``, or ``error`` with one line."""
    try:
        return _adapter(kind).validate_python(data)
    except ValidationError as exc:
        raise error(describe(exc, where, data)) from None


@overload
def validate_at(
    kind: type[T],
    data: Any,
    location: Sequence[int | str],
    *,
    where: str = "",
    root: Any = None,
    error: type[CosampleError] = CosampleError,
) -> T: ...
@overload  # a type that is no class: its value
def validate_at(
    kind: Any,
    data: Any,
    location: Sequence[int | str],
    *,
    where: str = "",
    root: Any = None,
    error: type[CosampleError] = CosampleError,
) -> Any: ...
def validate_at(
    kind: Any,
    data: Any,
    location: Sequence[int | str],
    *,
    where: str = "",
    root: Any = None,
    error: type[CosampleError] = CosampleError,
) -> Any:
    """``validate`` for one part of a larger input, found at ``location`` in ``root`` (the
    whole input): an error names the whole path, ``servers[3].capacity_pps ('web4')``. Bulk
    readers check a column at once and hand the entries they cannot accept to the model here."""
    try:
        return _adapter(kind).validate_python(data, strict=True)  # as inside a ``Strict`` model
    except ValidationError as exc:
        problems = [
            {**problem, "loc": (*location, *problem["loc"])}
            for problem in exc.errors(include_url=False)
        ]
        raise error(_describe(problems, where, root)) from None
