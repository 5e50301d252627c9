"""The root of every error cosample raises on purpose.

Each component has its own subclass (``PlannerError``, ``CostModelError``, ``AgentError``);
the CLI catches this base, prints the message and exits non-zero (``exit_status``).
"""

import sys
from collections.abc import Callable


class CosampleError(Exception):
    """An expected failure with a message fit for the user: what, where, and what to do."""


#: The install set (pyproject.toml's optional dependencies) that brings each third-party module
#: the lean agent install lacks.
EXTRA_OF_MODULE = {
    "numpy": "planner",
    "pulp": "planner",
    "highspy": "planner",
    "rich": "planner",
    "scipy": "planner",
    "ddsketch": "appmon",
    "hpack": "appmon",
    "pandas": "all",
    "matplotlib": "all",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """What to install when ``exc`` is a module of an install set this host does not have."""
    extra = EXTRA_OF_MODULE.get((exc.name or "").partition(".")[0])
    if extra is None:
        return None
    return (
        f"this command needs {exc.name}, which the lean (agent) install leaves out; "
        f"install it with: pip install 'cosample[{extra}]'"
    )


def exit_status(program: str, command: Callable[[], int | None]) -> int:
    """Run ``command`` as a program's main: its status (None: 0); an expected failure prints
    one line on stderr and gives 2, Ctrl-C gives 130."""
    try:
        return int(command() or 0)
    except CosampleError as exc:
        print(f"{program}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        print(f"{program}: error: {hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
