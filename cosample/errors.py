"""The root of every error cosample raises on purpose.

Each component has its own subclass (``PlannerError``, ``CostModelError``, ``AgentError``);
the CLI catches this base, prints the message and exits non-zero.
"""


class CosampleError(Exception):
    """An expected failure with a message fit for the user: what, where, and what to do."""
