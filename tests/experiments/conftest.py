"""Helpers for the experiments' tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def assert_real_png(path: Path) -> None:
    """The file is a PNG with a drawn figure in it, not an empty canvas."""
    import matplotlib.image

    assert path.exists(), f"{path} was not written"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 200
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]).round(2), axis=0)
    assert len(colours) > 20, f"{path}: only {len(colours)} colours, looks empty"


@pytest.fixture
def real_png():
    return assert_real_png
