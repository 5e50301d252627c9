"""The root of every error cosample raises on purpose.

Each component has its own subclass (``PlannerError``, ``CostModelError``, ``AgentError``);
the CLI catches this base, prints the message and exits non-zero (``exit_status``).
"""

import sys
from collections.abc import Callable


class CosampleError(Exception):
    """An expected failure with a message fit for the user: what, where, and what to do."""


def exit_status(program: str, command: Callable[[], int | None]) -> int:
    """Run ``command`` as a program's main: its status (None: 0); an expected failure prints
    one line on stderr and gives 2, Ctrl-C gives 130."""
    try:
        return int(command() or 0)
    except CosampleError as exc:
        print(f"{program}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{program}: interrupted", file=sys.stderr)
        return 130
