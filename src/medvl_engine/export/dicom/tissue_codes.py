"""Codes and display colours of tissue classes in DICOM segmentations and annotations.

A class name (e.g. "breast tumor", "lymph node adipose tissue") gets a SNOMED CT property
category and type when one of its words names a tissue that DICOM's code tables (pydicom's
code dictionary, built from PS3.16) hold: neoplasm, carcinoma, metastatic neoplasm,
necrosis, inflammation, lymphoid tissue, adipose tissue, blood vessel, connective tissue,
nerve. The first matching entry of :data:`_SCT_CLASSES` wins (so "metastatic carcinoma" is a
metastatic neoplasm). Any other class ("stroma", "epithelium", a user's own word) gets the
category "Tissue" and a type of medvl's private scheme 99MEDVL whose meaning is the class
name and whose value is derived from it (:func:`private_class_code`).

Colours: class k is drawn in :func:`medvl_engine.export.regions.class_colors`'s k-th sRGB
colour, stated as a DICOM Recommended Display CIELab Value.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from medvl_engine.export.dicom.common import PRIVATE_SCHEME

__all__ = ["ClassCodes", "class_codes", "display_color", "private_class_code"]

# (words, category keyword, type keyword) of pydicom's ``codes.SCT``; the first whose word
# appears in the class name (whole words, case-insensitive) is the class's code.
_SCT_CLASSES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("metastasis", "metastases", "metastatic"), "MorphologicallyAbnormalStructure",
     "NeoplasmMetastatic"),
    (("carcinoma",), "MorphologicallyAbnormalStructure", "Carcinoma"),
    (("tumor", "tumour", "neoplasm", "cancer", "malignant epithelium"),
     "MorphologicallyAbnormalStructure", "Neoplasm"),
    (("necrosis", "necrotic"), "MorphologicallyAbnormalStructure", "Necrosis"),
    (("inflammation", "inflammatory"), "MorphologicallyAbnormalStructure", "Inflammation"),
    (("lymphocytes", "lymphoid"), "Tissue", "LymphoidTissue"),
    (("adipose", "fat", "adipocytes"), "Tissue", "AdiposeTissue"),
    (("vascular", "vessel", "vessels", "vasculature"), "AnatomicalStructure", "BloodVessel"),
    (("connective tissue",), "Tissue", "ConnectiveTissue"),
    (("nerve", "nerves"), "AnatomicalStructure", "Nerve"),
)  # fmt: skip


@dataclass(frozen=True)
class ClassCodes:
    """A class's SNOMED CT (or private) property ``category`` and ``type`` (highdicom
    CodedConcepts) and whether the type is a standard code."""

    category: Any
    type: Any
    standard: bool


def private_class_code(name: str) -> Any:
    """A 99MEDVL code for class ``name``: value ``C`` + 12 hex digits of the SHA-1 of the
    lower-cased name (the same name always gets the same code), meaning the name."""
    from highdicom.sr import CodedConcept

    digest = hashlib.sha1(name.strip().lower().encode("utf-8")).hexdigest()[:12].upper()
    return CodedConcept(value=f"C{digest}", scheme_designator=PRIVATE_SCHEME, meaning=name[:64])


def class_codes(name: str) -> ClassCodes:
    """The property category and type of class ``name`` (module docstring)."""
    from highdicom.sr import CodedConcept
    from pydicom.sr.codedict import codes

    text = name.lower()
    for words, category_name, type_name in _SCT_CLASSES:
        if any(re.search(rf"\b{re.escape(word)}\b", text) for word in words):
            found = [getattr(codes.SCT, category_name), getattr(codes.SCT, type_name)]
            concepts = [CodedConcept(c.value, c.scheme_designator, c.meaning) for c in found]
            return ClassCodes(concepts[0], concepts[1], True)
    tissue = codes.SCT.Tissue
    category = CodedConcept(tissue.value, tissue.scheme_designator, tissue.meaning)
    return ClassCodes(category, private_class_code(name), False)


def display_color(rgb: tuple[int, int, int]) -> Any:
    """highdicom's CIELabColor of an sRGB colour (0..255 per channel)."""
    from highdicom.color import CIELabColor

    return CIELabColor.from_rgb(*(int(v) for v in rgb))
