"""The mammogram record and what a file name says about it (laterality, view).

Kept apart from :mod:`medvl_engine.io.mammo` so that the DICOM decoder and the breast-image
builder can name :class:`Mammogram` without importing the reader that imports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MAMMOGRAM_SUFFIXES", "VIEW_NAMES", "Mammogram", "blank_warning", "parse_file_name"]

MAMMOGRAM_SUFFIXES = (".dcm", ".dicom", ".png", ".tif", ".tiff")

VIEW_NAMES = {  # ViewPosition / file-name token -> view
    "CC": "CC",
    "MLO": "MLO",
    "ML": "ML",
    "LM": "LM",
    "LMO": "LMO",
    "XCCL": "XCCL",
    "XCCM": "XCCM",
    "FB": "FB",
    "SIO": "SIO",
    "AT": "AT",
    "SPOT": "SPOT",
    "MAG": "MAG",
}
_LATERALITY_WORDS = {"L": "L", "LEFT": "L", "R": "R", "RIGHT": "R"}


@dataclass
class Mammogram:
    """One mammographic view, ready for display.

    ``pixels`` float32 [H, W] in [0, 1] (rows, columns of the source image),
    dark = less attenuation after MONOCHROME1 inversion; ``pixel_spacing`` is
    (row_mm, col_mm), None when unknown (``properties["medvl.pixel_spacing_warning"]``
    says why when the file states an impossible one). ``pixel_problem`` is a
    sentence saying why ``pixels`` is not a usable image (a placeholder read with
    ``placeholder_ok``); None for every image ``open_mammogram`` returns by default.
    """

    path: Path
    pixels: np.ndarray
    laterality: str | None = None
    view: str | None = None
    pixel_spacing: tuple[float, float] | None = None
    modality: str | None = None
    photometric: str | None = None
    presentation_intent: str | None = None
    voi: str = "full range"
    voi_choices: list[str] = field(default_factory=list)
    properties: dict[str, Any] = field(default_factory=dict)
    private_properties: dict[str, Any] = field(default_factory=dict)
    pixel_problem: str | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.pixels.shape[0]), int(self.pixels.shape[1]))


def parse_file_name(name: str) -> tuple[str | None, str | None]:
    """(laterality, view) from a file name such as ``1_L_CC.png`` or ``case7-RMLO.dcm``."""
    stem = Path(name).name.split(".")[0]
    laterality = view = None
    for token in re.split(r"[_\-\s.]+", stem.upper()):
        if token in _LATERALITY_WORDS and laterality is None:
            laterality = _LATERALITY_WORDS[token]
        elif token in VIEW_NAMES and view is None:
            view = VIEW_NAMES[token]
        else:
            joined = re.fullmatch(r"(L|R|LEFT|RIGHT)(CC|MLO|ML|LM|XCCL|XCCM)", token)
            if joined:
                laterality = laterality or _LATERALITY_WORDS[joined.group(1)]
                view = view or joined.group(2)
    return laterality, view


def blank_warning(stored: np.ndarray) -> str | None:
    """A sentence when every stored pixel holds the same value: the file is read as it is,
    but the view shows one grey, which a reader should be told."""
    if stored.size < 2:
        return None
    low, high = float(stored.min()), float(stored.max())
    if high > low:
        return None
    return (
        f"every pixel stores the same value ({low:g}), so the image shows one grey; check "
        "that this is the view meant"
    )
