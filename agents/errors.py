"""Errors the agents raise on purpose: one base, a subclass per kind of trouble."""

from __future__ import annotations

from cosample.errors import CosampleError


class AgentError(CosampleError):
    """An agent failure whose message says what was wrong, where, and what to do."""


class PlanError(AgentError):
    """A plan (or plan set) that must not be applied; the message names the field."""


class ConfigError(AgentError):
    """A bad agent configuration; the message names the key and the bad value."""


class SignatureError(PlanError):
    """A plan whose ed25519 signature is missing or does not verify."""


class HostError(AgentError):
    """OVSDB, OpenFlow, tc or ip on the host failed or is unreachable."""
