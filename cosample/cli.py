"""The ``cosample`` command: one entry point, one sub-command family per component.

Each component contributes a module with ``register(subparsers)`` that adds its sub-commands
and sets ``func`` (called with the parsed namespace, returns an exit code). Those modules keep
their imports light so that ``cosample --help`` stays fast; heavy imports live in the handlers.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from cosample import __version__
from cosample.errors import exit_status

#: Modules that add sub-commands, in the order they appear in ``--help``.
COMMAND_MODULES = (
    "cosample.planner.cli",
    "cosample.costmodel.cli",
    "cosample.agents.cli",
    "cosample.collector.cli",
    "cosample.appmon.cli",
    "cosample.controller.cli",
    "cosample.experiments.cli",
    "cosample.experiments.testbed.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser; separate from ``main`` so tests can inspect parsing."""
    parser = argparse.ArgumentParser(
        prog="cosample",
        description="Collaborative sFlow sampling: measure costs, plan, apply to OVS.",
    )
    parser.add_argument("--version", action="version", version=f"cosample {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a component not yet installed contributes no commands
        module.register(subparsers)
    return parser


#: The exit status when standard output was closed before the command finished writing
#: (``cosample plan | head``): as a program killed by SIGPIPE, in a shell's numbering.
CLOSED_PIPE_STATUS = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; expected failures print one line on stderr and exit 2; standard
    output closed early (a pipe to ``head``) ends it quietly."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # which options the command line gave (a --config file's yield to them)
    try:
        status = exit_status("cosample", lambda: args.func(args))
        sys.stdout.flush()  # inside the try: a pipe closed before the last write shows here
    except BrokenPipeError:
        # nothing more can be written; point standard output at /dev/null so the interpreter's
        # own flush at exit finds nowhere to fail (the recipe in Python's signal docs)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return CLOSED_PIPE_STATUS
    return status
