"""Mammograms for display and for TopKSigLIP: ``open_mammogram`` and ``breast_image``.

Readers: DICOM (``_dicom_mammo`` with the grayscale pipeline of ``_dicom_grey`` and ``_voi``) and
plain PNG/JPEG/TIFF (``_plain_grey``); the record is :class:`Mammogram` (``_mammogram``); a CC/MLO
pair is checked by ``_pairing`` and built into the TopKSigLIP breast image by ``_breast``.
"""

from medvl_engine.io.mammo._open import (
    MAMMOGRAM_SUFFIXES,
    VIEW_NAMES,
    BreastImage,
    Mammogram,
    PairMismatchError,
    breast_image,
    check_pair,
    chest_wall_side,
    open_mammogram,
    parse_file_name,
    view_family,
)

__all__ = [
    "MAMMOGRAM_SUFFIXES",
    "VIEW_NAMES",
    "BreastImage",
    "Mammogram",
    "PairMismatchError",
    "breast_image",
    "check_pair",
    "chest_wall_side",
    "open_mammogram",
    "parse_file_name",
    "view_family",
]
