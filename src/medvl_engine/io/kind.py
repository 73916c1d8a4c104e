"""Which kind of image a file holds: a whole-slide image or a mammogram.

DICOM files are told apart by their Modality (SM is a slide; radiography modalities are
mammograms); other files by colour: grayscale images are mammograms, colour images slides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["MAMMOGRAM_MODALITIES", "detect_kind"]

MAMMOGRAM_MODALITIES = ("MG", "DX", "CR", "RG", "OT", "XC")
"""DICOM modalities read as mammograms: digital and computed radiography, radiographic film
scans (RG, as tagged by some digitised film mammograms) and secondary captures."""


def detect_kind(path: Path) -> Literal["slide", "mammogram"]:
    """'slide' or 'mammogram' for ``path``: DICOM by Modality, other images by colour."""
    from medvl_engine.errors import CorruptFileError, UnsupportedFormatError
    from medvl_engine.io.slide import sniff_kind

    if not path.exists():
        return "slide"  # open_slide reports the missing file
    kind = sniff_kind(path)
    if kind == "folder":
        return "slide"
    if kind == "dicom":
        import pydicom

        try:
            header = pydicom.dcmread(path, stop_before_pixels=True)
        except Exception as error:
            from medvl_engine.io._dicom_values import read_problem

            raise CorruptFileError(
                f"{path.name}: the DICOM header could not be read because {read_problem(error)}; "
                "re-copy or re-export it.",
                path,
            ) from error
        modality = str(header.get("Modality", "")).strip().upper()
        if modality == "SM":
            return "slide"
        if modality in MAMMOGRAM_MODALITIES:
            return "mammogram"
        raise UnsupportedFormatError(
            f"{path.name}: DICOM modality {modality or 'unknown'} is neither a slide (SM) nor "
            "a mammogram (MG, DX, CR, RG); give --kind to force one.",
            path,
        )
    if kind == "tiff":
        return "mammogram" if _tiff_is_grayscale(path) else "slide"
    if kind in ("png", "jpeg"):
        from PIL import Image

        try:
            with Image.open(path) as image:
                return "mammogram" if image.mode in ("1", "L", "I", "I;16", "F") else "slide"
        except Exception:
            return "slide"  # open_slide gives the sentence
    return "slide"


def _tiff_is_grayscale(path: Path) -> bool:
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            page = tif.pages.first
            return int(page.samplesperpixel) == 1 and int(page.photometric) in (0, 1)
    except Exception:
        return False  # open_slide gives the sentence
