"""pytest run inside a test, for the tests of the suite's own plumbing (tests/core)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_pytest(
    args: Sequence[str], cwd: Path, env: Mapping[str, str] = (), drop: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    """``python -m pytest -q -p no:cacheprovider ARGS`` in ``cwd``, in this environment less
    ``drop`` and the suite's own ``PYTEST_*`` variables (an xdist worker's would follow it in),
    plus ``env``; output captured, two minutes at most."""
    environment = {
        k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST_")
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**environment, **dict(env)},
    )
