"""Mammograms for display and for TopKSigLIP: ``open_mammogram`` and ``breast_image``.

DICOM (any transfer syntax pydicom's installed plugins decode) goes through
the standard grayscale pipeline in order: Modality LUT (rescale or LUT
sequence) -> VOI LUT (window centre/width with LINEAR / LINEAR_EXACT /
SIGMOID, or a VOI LUT sequence item; ``voi_index`` picks one when several are
present) -> MONOCHROME1 inversion (also applied for Presentation LUT Shape
INVERSE; never twice). Multi-frame images give their first frame. PNG and
TIFF (8 or 16 bit) are read as already-processed display images. Pixels are
float32 [H, W] in [0, 1], rows and columns of the source image.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import (
    CorruptFileError,
    MedVLError,
    UnsupportedFormatError,
)
from medvl_engine.io._tiff_ifds import check_ifd_chain
from medvl_engine.io.mammo._breast import BreastImage, breast_image, chest_wall_side
from medvl_engine.io.mammo._mammogram import (
    MAMMOGRAM_SUFFIXES,
    VIEW_NAMES,
    Mammogram,
    blank_warning,
    parse_file_name,
)
from medvl_engine.io.mammo._pairing import PairMismatchError, check_pair, view_family
from medvl_engine.io.safe_open import require_regular_file

__all__ = [
    "BreastImage",
    "Mammogram",
    "PairMismatchError",
    "breast_image",
    "check_pair",
    "chest_wall_side",
    "view_family",
    "open_mammogram",
    "parse_file_name",
    "MAMMOGRAM_SUFFIXES",
    "VIEW_NAMES",
]


def open_mammogram(
    path: str | os.PathLike[str], voi_index: int = 0, *, placeholder_ok: bool = False
) -> Mammogram:
    """Read a mammogram (DICOM, PNG or TIFF) as display pixels in [0, 1] plus its metadata.

    ``voi_index`` selects the VOI transform when a DICOM holds several (window
    centre/width pairs first, then VOI LUT Sequence items). A DICOM whose pixel
    data is a placeholder (fewer than 2 rows or columns) is refused with an
    UnsupportedFormatError, unless ``placeholder_ok``: then its header facts
    (laterality, view, manufacturer, VOI) come back and ``pixel_problem`` says
    why the pixels are not an image (for ``medvl info``).
    """
    path = Path(path)
    require_regular_file(path)  # a FIFO or device would block or never end
    try:
        with open(path, "rb") as handle:
            head = handle.read(132)
    except OSError as error:
        raise MedVLError(
            f"{path.name}: cannot be read ({error.strerror}); check its permissions.", path
        ) from error
    if len(head) >= 132 and head[128:132] == b"DICM" or path.suffix.lower() in (".dcm", ".dicom"):
        try:
            from medvl_engine.io.mammo._dicom_mammo import open_dicom_mammogram

            return open_dicom_mammogram(path, voi_index, placeholder_ok)
        except MedVLError:
            raise
        except Exception as error:  # a failure no check foresaw: its text would mean nothing
            raise CorruptFileError(
                f"{path.name}: the DICOM file could not be read; it is damaged or truncated, "
                "re-copy or re-export it.",
                path,
            ) from error
    if head.startswith(b"\x89PNG") or head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00"):
        return _open_plain(path, head)
    if head.startswith(b"\xff\xd8\xff"):
        return _open_plain(path, head)
    raise UnsupportedFormatError(
        f"{path.name}: not a mammogram format the engine reads; use DICOM, PNG or TIFF.", path
    )


def _open_plain(path: Path, head: bytes) -> Mammogram:
    """PNG/TIFF/JPEG: 8-bit values / 255; 16-bit values spread over their own range."""
    from medvl_engine.io.mammo._plain_grey import decode_plain_mammogram, display_values

    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00"):
        check_ifd_chain(path)
    try:
        pixels = decode_plain_mammogram(path, head)
    except MedVLError:
        raise
    except Exception as error:
        raise CorruptFileError(
            f"{path.name}: the image could not be decoded ({error}); the file is damaged or "
            "truncated, re-copy or re-export it.",
            path,
        ) from error
    display, photometric, voi_name = display_values(pixels)
    if display.ndim != 2 or min(display.shape) < 2:
        raise UnsupportedFormatError(
            f"{path.name}: {_shape_in_words(display.shape)}, not a single 2-D view; "
            "give a single mammographic view.",
            path,
        )
    laterality, view = parse_file_name(path.name)
    properties: dict[str, Any] = {"format": path.suffix.lower().lstrip(".")}
    blank = blank_warning(np.asarray(pixels))
    if blank:
        properties["medvl.blank_warning"] = blank
    return Mammogram(
        path=path,
        pixels=display,
        laterality=laterality,
        view=view,
        modality=None,
        photometric=photometric,
        voi=voi_name,
        properties=properties,
    )


def _shape_in_words(shape: tuple[int, ...]) -> str:
    if 0 in shape or len(shape) < 2:
        return "holds no image pixels"
    if len(shape) == 2:
        return f"holds a {shape[1]} x {shape[0]} px image, too small to be a view"
    return f"holds {len(shape)}-dimensional data of {' x '.join(str(n) for n in shape)} values"
