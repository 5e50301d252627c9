"""Run external programs: argument lists only, always with a timeout, errors that say what failed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from os import PathLike

from cosample.errors import CosampleError

DEFAULT_TIMEOUT_S = 10.0


class CommandError(CosampleError):
    """An external command failed, timed out or is not installed."""


def require(program: str, package: str) -> str:
    """Path of ``program``, or a CommandError naming the Debian package that provides it."""
    path = shutil.which(program)
    if path is None:
        raise CommandError(f"{program} not found; install the Debian package {package!r}")
    return path


def run(
    argv: Sequence[str | PathLike[str]],  # (each part as ``str`` gives it)
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (never through a shell), capture text output, fail loudly on error or timeout."""
    parts = [str(part) for part in argv]
    try:
        result = subprocess.run(
            parts,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=input_text,
            check=False,
        )
    except FileNotFoundError as exc:
        raise CommandError(f"{parts[0]}: not installed ({exc.strerror})") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"{' '.join(parts)}: no answer within {timeout:g} s") from exc
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise CommandError(
            f"{' '.join(parts)}: exit {result.returncode}: {detail[-1] if detail else 'no output'}"
        )
    return result
