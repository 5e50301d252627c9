"""``controller.memory.keep_memory``: what ``controller run`` sets for its process, checked in a
process of its own (the knobs are process-wide)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

PROBE = """
import json
try:
    from numpy._core import multiarray
except ImportError:
    from numpy.core import multiarray
from cosample.controller.memory import keep_memory
before = multiarray._get_madvise_hugepage()
done = keep_memory()
import numpy as np
total = float(np.ones(3_000_000).sum())  # large blocks still allocate and free
print(json.dumps({"done": done, "before": before, "after": multiarray._get_madvise_hugepage(),
                  "total": total}))
"""


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="glibc's mallopt: Linux with glibc only",
)
def test_keep_memory_turns_off_huge_page_advice_and_keeps_freed_memory():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["done"] == ["numpy huge-page advice off", "glibc keeps freed memory"]
    assert result["after"] is False
    assert result["total"] == 3_000_000.0
