"""Errors of the plan's home: one base for a plan that must not be used, and what fetching it,
verifying it and reading keys can go wrong with. Agents, collector and controller catch these
without importing each other."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from cosample.errors import CosampleError


class PlanError(CosampleError):
    """A plan (or plan set) that must not be applied; the message names the field."""


class SignatureError(PlanError):
    """A plan whose ed25519 signature is missing or does not verify."""


class PlanFetchError(CosampleError):
    """A plan or its signature could not be fetched; the message names the location."""


class PlanMissingError(PlanFetchError):
    """The location answered "not found" (a slice the publisher does not serve, for example)."""


class SigningKeyError(CosampleError):
    """A signing or verification key that cannot be read, is not ed25519, or would be overwritten."""


def fail_at(loc: tuple, message: str, value: Any) -> None:
    """Raise a pydantic error located at ``loc`` (relative to the model being validated)."""
    error = PydanticCustomError("plan", message)
    raise ValidationError.from_exception_data(
        "plan", [InitErrorDetails(type=error, loc=loc, input=value)]
    )
