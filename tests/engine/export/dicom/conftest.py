"""The DICOM WSI the slide exports are made from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.support.dicom_wsi import write_dicom_wsi


@pytest.fixture(scope="module")
def wsi(tmp_path_factory) -> list[Path]:
    """A two-level DICOM WSI of 400 x 300 px random pixels, 0.5 um/px, 64 px tiles: its
    files, level 0 first."""
    image = np.random.default_rng(1).integers(0, 255, (300, 400, 3), dtype=np.uint8)
    return write_dicom_wsi(tmp_path_factory.mktemp("wsi"), image, mpp=0.5, tile=64)
