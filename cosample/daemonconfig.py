"""Configuration files for the daemons whose settings are their flags (``collector run``,
``controller run``): a TOML table whose keys are the long options, flags on top.

A key is the option without its dashes, ``-`` written ``_`` (``metrics_port = 9478`` is
``--metrics-port 9478``); a repeatable option takes a list (``collector = ["http://..."]``), a
switch a boolean, a duration a string (``"30s"``) or a number of seconds. The option's own
parsing checks the value, so a file and the command line accept exactly the same values; a key
that is no option, or a value of the wrong kind, is one error naming the file and the key.

Options given on the command line win over the file; for options that exclude each other
(``--serve`` or ``--publish``) one given on the command line replaces the file's choice. The
options a daemon cannot run without are declared ``required`` on the parser as usual;
``configurable`` moves that check after the file is read, so either place may give them.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cosample.errors import CosampleError

LOG_LEVELS = ("debug", "info", "warning", "error")
#: What the daemons log by default (docs/operations.md, "Logs").
DEFAULT_LOG_LEVEL = "info"
_UNSET = object()
_NOT_SETTINGS = {"help", "version", "config", "func", "options_parser"}


class ConfigFileError(CosampleError):
    """A configuration file that cannot be read, or a key or value in it that is wrong."""


def configurable(parser: argparse.ArgumentParser, example: str) -> None:
    """Add ``--config`` and ``--log-level`` to a daemon's parser, and defer its required options
    and groups to ``apply_config`` (a file may give them)."""
    parser.add_argument(
        "--config",
        metavar="FILE.toml",
        help=f"read options from this TOML file, each key an option's name without its dashes "
        f"('-' as '_', e.g. {example}); options given here win",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=DEFAULT_LOG_LEVEL,
        help=f"least severe log lines written to standard error (default {DEFAULT_LOG_LEVEL}; "
        "warning: only the changes of state an operator must act on)",
    )
    required = [action for action in parser._actions if action.required]
    groups = [group for group in parser._mutually_exclusive_groups if group.required]
    for action in required:
        action.required = False
        action.help = f"{action.help or ''} (required: here or in the --config file)".lstrip()
    for group in groups:
        group.required = False
        for action in group._group_actions:
            action.help = f"{action.help or ''} (one of these is required)".lstrip()
    parser.set_defaults(
        options_parser=parser, required_options=tuple(required), required_groups=tuple(groups)
    )


def setup_logging(level: str, fmt: str = "%(asctime)s %(levelname)s %(name)s %(message)s") -> None:
    """The daemon's log on standard error, from ``level`` up (one of ``LOG_LEVELS``)."""
    logging.basicConfig(level=getattr(logging, level.upper()), format=fmt, force=True)


def apply_config(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the ``--config`` file's values where the command line gave none; then the
    required options checked. ``args.argv`` is the command line (``cosample.cli.main``)."""
    parser: argparse.ArgumentParser = args.options_parser
    if args.config:
        given = given_options(parser, getattr(args, "argv", ()))
        values = read_config(args.config, parser)
        replaced = {
            action.dest
            for group in parser._mutually_exclusive_groups
            if any(action.dest in given for action in group._group_actions)
            for action in group._group_actions
        }
        for dest, value in values.items():
            if dest not in given and dest not in replaced:
                setattr(args, dest, value)
    _check_required(args, parser)
    return args


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The destinations of the options ``argv`` gives (abbreviated, ``--opt=value``, repeated:
    parsed by ``parser`` itself, into a namespace where everything starts unset)."""
    start = {}
    for action in parser._actions:
        if action.dest in _NOT_SETTINGS or action.dest == argparse.SUPPRESS:
            continue
        start[action.dest] = None if isinstance(action, argparse._AppendAction) else _UNSET
    namespace = argparse.Namespace(**start)
    parser.parse_known_args(list(argv), namespace=namespace)
    return {
        dest
        for dest, initial in start.items()
        if getattr(namespace, dest) is not initial and getattr(namespace, dest) is not _UNSET
    }


def read_config(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The file's settings as the parser's destinations and values; ``ConfigFileError`` naming
    the file and the key for anything that is not one of the parser's options, or a bad value."""
    # cosample.validation loads pydantic, which `cosample --help` (it imports this) never needs
    from cosample.validation import read_document

    data = read_document(path, "configuration", default="TOML", error=ConfigFileError)
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: expected a table of keys, got {type(data).__name__}")
    actions = {
        action.dest: action
        for action in parser._actions
        if action.dest not in _NOT_SETTINGS and action.option_strings
    }
    values = {}
    for key, value in data.items():
        action = actions.get(key)
        if action is None:
            raise ConfigFileError(
                f"{path}: {_shown(key)}: not a setting of `{parser.prog}` (a key is one of its "
                f"options without the dashes, '-' as '_': {', '.join(sorted(actions))})"
            )
        values[key] = _value(action, value, f"{path}: {key}")
    return values


def _value(action: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(action, argparse._StoreConstAction) and action.const is True:
        if not isinstance(value, bool):
            raise ConfigFileError(f"{where}: expected true or false, got {_shown(value)}")
        return value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        if not items:
            raise ConfigFileError(f"{where}: expected at least one value, got []")
        return [_one(action, item, where) for item in items]
    if action.nargs not in (None, "?"):
        raise ConfigFileError(f"{where}: cannot be set in a file")  # none of the daemons' today
    return _one(action, value, where)


def _one(action: argparse.Action, value: Any, where: str) -> Any:
    """One value through the option's own type, as if it had been typed on the command line."""
    kind: Any = action.type  # a type, a parsing function or (argparse allows it) a name
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is None or kind is str or kind is Path:
        if not isinstance(value, str):
            raise ConfigFileError(f"{where}: expected a string, got {_shown(value)}")
        converted: Any = value if kind is None else kind(value)
    elif kind is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigFileError(f"{where}: expected an integer, got {_shown(value)}")
        converted = value
    elif kind is float:
        if not number:
            raise ConfigFileError(f"{where}: expected a number, got {_shown(value)}")
        converted = float(value)
    else:  # a parsing function (durations): a string as typed, or a plain number
        if not (number or isinstance(value, str)):
            raise ConfigFileError(f"{where}: expected a string or a number, got {_shown(value)}")
        try:
            converted = kind(str(value))
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ConfigFileError(f"{where}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigFileError(
            f"{where}: expected one of {', '.join(map(str, action.choices))}, got {_shown(value)}"
        )
    return converted


def _check_required(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    for action in getattr(args, "required_options", ()):
        if getattr(args, action.dest, None) is None:
            raise ConfigFileError(
                f"{parser.prog}: {action.option_strings[-1]} is required (on the command line, "
                f"or {action.dest} in the --config file)"
            )
    for group in getattr(args, "required_groups", ()):
        chosen = [
            a for a in group._group_actions if getattr(args, a.dest, None) not in (None, False)
        ]
        if not chosen:
            names = " or ".join(a.option_strings[-1] for a in group._group_actions)
            raise ConfigFileError(
                f"{parser.prog}: one of {names} is required (on the command line, or in the "
                f"--config file as {' or '.join(a.dest for a in group._group_actions)})"
            )
        if len(chosen) > 1:
            names = " and ".join(a.option_strings[-1] for a in chosen)
            raise ConfigFileError(f"{parser.prog}: {names} exclude each other; give one")


def _shown(value: Any) -> str:
    from cosample.validation import short_repr  # pydantic deferred, as in read_config

    return short_repr(value)
