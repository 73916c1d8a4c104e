"""Codes of the TopK-Patch readouts in DICOM SR: standard codes where they exist, else 99MEDVL.

Zero-shot tasks (``{task: {class: probability}}``) become one coded question each:

- ``density`` A-D: SCT 129715009 "Breast composition" answered from CID 6000 (Overall Breast
  Composition: SCT 129716005 ... 129719003);
- ``birads`` 0-5: DCM 111005 "Assessment Category" answered by the SNOMED mammography
  assessment findings (SCT 397138000 ... 397145000);
- ``cancer``: SCT 254837009 "Malignant neoplasm of breast"; its positive probability is
  DCM 111047 "Probability of cancer" (CID 6048);
- findings ``mass``, ``calcification``, ``architectural distortion``, ``asymmetry``: their
  CID 6014 / SNOMED mammography finding codes;
- answers ``positive`` / ``negative``: SCT 10828004 "Positive" / SCT 260385009 "Negative".

A task or class the table does not know gets a private 99MEDVL code built from its name, so
a model with other prompts still writes a valid report. Every class probability is a
numeric measurement named "Probability of <class>" (99MEDVL, except DCM 111047).
"""

from __future__ import annotations

import hashlib
from typing import Any

from medvl_engine.export.dicom.common import private_code

__all__ = [
    "RANK_CONCEPT",
    "SCORE_CONCEPT",
    "class_code",
    "probability_concept",
    "task_concept",
]

RANK_CONCEPT = ("TOPK-RANK", "TopK-Patch rank")
"""(value, meaning) of the rank measurement (1 = first patch sampled)."""
SCORE_CONCEPT = ("TOPK-SCORE", "TopK-Patch selection probability")
"""(value, meaning) of the score measurement: w_n / sum w, the first-draw probability."""

_TASKS: dict[str, tuple[str, str, str, str]] = {
    # task: (value, scheme, meaning, short code for private probability names)
    "density": ("129715009", "SCT", "Breast composition", "DENS"),
    "birads": ("111005", "DCM", "Assessment Category", "BIRADS"),
    "cancer": ("254837009", "SCT", "Malignant neoplasm of breast", "CANCER"),
    "mass": ("129788004", "SCT", "Mammographic breast mass finding", "MASS"),
    "calcification": ("129748009", "SCT", "Radiographic calcification finding", "CALC"),
    "architectural distortion": (
        "129792006",
        "SCT",
        "Architectural distortion of breast",
        "ARCHDIST",
    ),
    "asymmetry": ("129790003", "SCT", "Asymmetric breast tissue finding", "ASYM"),
}

_CLASSES: dict[tuple[str, str], tuple[str, str, str]] = {
    ("density", "A"): ("129716005", "SCT", "Almost entirely fat"),
    ("density", "B"): ("129717001", "SCT", "Scattered fibroglandular densities"),
    ("density", "C"): ("129718006", "SCT", "Heterogeneously dense"),
    ("density", "D"): ("129719003", "SCT", "Extremely dense"),
    ("birads", "0"): ("397138000", "SCT", "Mammography assessment (Category 0)"),
    ("birads", "1"): ("397140005", "SCT", "Mammography assessment (Category 1)"),
    ("birads", "2"): ("397141009", "SCT", "Mammography assessment (Category 2)"),
    ("birads", "3"): ("397143007", "SCT", "Mammography assessment (Category 3)"),
    ("birads", "4"): ("397144001", "SCT", "Mammography assessment (Category 4)"),
    ("birads", "5"): ("397145000", "SCT", "Mammography assessment (Category 5)"),
}
_ANSWERS = {
    "positive": ("10828004", "SCT", "Positive"),
    "negative": ("260385009", "SCT", "Negative"),
}
_PROBABILITY_OF_CANCER = ("111047", "DCM", "Probability of cancer")


def _coded(value: str, scheme: str, meaning: str) -> Any:
    from highdicom.sr import CodedConcept

    return CodedConcept(value=value, scheme_designator=scheme, meaning=meaning)


def _short(text: str) -> str:
    """An uppercase token of at most 8 chars naming ``text`` (its letters, or a hash)."""
    letters = "".join(ch for ch in text.upper() if ch.isalnum())
    if 0 < len(letters) <= 8:
        return letters
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8].upper()


def task_concept(task: str) -> Any:
    """The coded question of zero-shot ``task``."""
    known = _TASKS.get(task.lower())
    if known:
        return _coded(*known[:3])
    return private_code(f"ZS-{_short(task)}", f"Zero-shot readout: {task}")


def class_code(task: str, name: str) -> Any:
    """The coded answer ``name`` of zero-shot ``task``."""
    known = _CLASSES.get((task.lower(), str(name).upper())) or _ANSWERS.get(str(name).lower())
    if known:
        return _coded(*known)
    return private_code(f"{_short(task)}-{_short(str(name))}", f"{task}: {name}")


def _task_short(task: str) -> str:
    known = _TASKS.get(task.lower())
    return known[3] if known else _short(task)


def probability_concept(task: str, name: str) -> Any:
    """The measurement name of the probability of class ``name`` of ``task``."""
    if task.lower() == "cancer" and str(name).lower() == "positive":
        return _coded(*_PROBABILITY_OF_CANCER)
    meaning = class_code(task, name).meaning
    if str(name).lower() in _ANSWERS:
        meaning = f"{task} {str(name).lower()}"
    return private_code(
        f"P-{_task_short(task)}-{_short(str(name))}"[:16], f"Probability of {meaning}"
    )
