"""Errors the agents raise on purpose: one base, a subclass per kind of trouble (a plan's own
errors are ``cosample.plan.errors``)."""

from __future__ import annotations

from cosample.errors import CosampleError


class AgentError(CosampleError):
    """An agent failure whose message says what was wrong, where, and what to do."""


class ConfigError(AgentError):
    """A bad agent configuration; the message names the key and the bad value."""


class HostError(AgentError):
    """OVSDB, OpenFlow, tc or ip on the host failed or is unreachable."""
