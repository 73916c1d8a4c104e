"""Slide-level pathology reports with varied wording, organ phrasing and identifying noise lines.

A report names every tissue class present with one of its synonyms, may state that an absent
class is not seen (negations always read "No <term> ..." or "Negative for <term>."), and carries
lines a report filter must later drop: accession numbers, physician names, dates, phone numbers
and gross-handling remarks that say nothing about histology. All names and numbers are invented.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._tissue import TISSUE_CLASSES, class_id

__all__ = [
    "ORGANS",
    "CLASS_SYNONYMS",
    "DIAGNOSES",
    "NEGATION_PREFIXES",
    "make_diagnosis_report",
    "make_report",
]

ORGANS: tuple[str, ...] = ("breast", "lung", "colon", "kidney")

CLASS_SYNONYMS: dict[str, tuple[str, ...]] = {
    "tumor": (
        "tumor",
        "carcinoma",
        "malignant epithelium",
        "neoplastic cells",
        "invasive carcinoma",
        "tumour cells",
    ),
    "stroma": (
        "stroma",
        "fibrous stroma",
        "desmoplastic stroma",
        "collagenous stroma",
        "fibrosis",
        "connective tissue",
    ),
    "lymphocytes": (
        "lymphocytes",
        "lymphoid infiltrate",
        "tumor-infiltrating lymphocytes (TILs)",
        "lymphocytic infiltrate",
        "TILs",
        "chronic inflammatory cells",
    ),
    "adipose": ("adipose tissue", "fat", "mature adipocytes", "fatty tissue", "adipocytes"),
    "necrosis": ("necrosis", "necrotic debris", "coagulative necrosis", "geographic necrosis"),
}

NEGATION_PREFIXES: tuple[str, ...] = ("No ", "Negative for ")

_ORGAN_TUMOR: dict[str, tuple[str, ...]] = {
    "breast": ("invasive ductal carcinoma", "invasive carcinoma of no special type"),
    "lung": ("adenocarcinoma", "non-small cell carcinoma"),
    "colon": ("adenocarcinoma", "colorectal adenocarcinoma"),
    "kidney": ("clear cell renal cell carcinoma", "renal cell carcinoma"),
}
_ORGAN_SPECIMEN: dict[str, tuple[str, ...]] = {
    "breast": ("Left breast, lumpectomy", "Right breast, core needle biopsy", "Breast, excision"),
    "lung": ("Right upper lobe, wedge resection", "Left lower lobe, lobectomy"),
    "colon": ("Sigmoid colon, segmental resection", "Right colon, hemicolectomy"),
    "kidney": ("Left kidney, radical nephrectomy", "Right kidney, partial nephrectomy"),
}
_ORGAN_FAT: dict[str, str] = {
    "breast": "breast fat",
    "lung": "pleural fat",
    "colon": "pericolic fat",
    "kidney": "perinephric fat",
}

_PRESENT_TEMPLATES: tuple[str, ...] = (
    "Sections show {term}.",
    "{Term} is present.",
    "There is {term}.",
    "The specimen contains {term}.",
    "Areas of {term} are identified.",
    "{Term} is seen in the sections examined.",
)
_TUMOR_TEMPLATES: tuple[str, ...] = (
    "Sections show {tumor} forming solid nests.",
    "{Tumor} is identified, composed of crowded atypical cells.",
    "Diagnosis: {tumor}.",
)
_NEGATIVE_TEMPLATES: tuple[str, ...] = ("No {term} is identified.", "Negative for {term}.")
_DOCTORS = ("Smith", "Jones", "Patel", "Nguyen", "Garcia", "Okafor", "Larsen", "Kim")


def _choice(rng: np.random.Generator, options: tuple[str, ...] | list[str]) -> str:
    return options[int(rng.integers(len(options)))]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _noise_lines(rng: np.random.Generator) -> list[str]:
    doctor = _choice(rng, _DOCTORS)
    lines = [
        f"Accession: S{int(rng.integers(20, 27))}-{int(rng.integers(10000, 99999))}",
        f"Electronically signed by Dr. {doctor}, MD",
        f"Date received: 2026-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}",
        f"Phone: 555-{int(rng.integers(100, 999))}-{int(rng.integers(1000, 9999))}",
        "Specimen received in formalin, labelled with the name of the patient.",
        f"Dr. {doctor} was notified of the result by phone.",
    ]
    keep = rng.permutation(len(lines))[: int(rng.integers(2, len(lines) + 1))]
    return [lines[i] for i in sorted(keep)]


def make_report(
    classes_present: Iterable[str | int],
    rng: np.random.Generator,
    organ: str = "breast",
) -> str:
    """A slide-level report naming each present class (synonyms vary) for one organ.

    ``classes_present`` holds class names or ids from ``TISSUE_CLASSES`` ("background" is ignored).
    The result is multi-line text: identifying lines, specimen, diagnosis and microscopic sentences.
    """
    organ = organ.lower()
    if organ not in ORGANS:
        raise SyntheticDataError(f"unknown organ {organ!r}; use one of {', '.join(ORGANS)}")
    present = {TISSUE_CLASSES[class_id(c)] for c in classes_present} - {"background"}
    sentences: list[str] = []
    for name in rng.permutation(sorted(present)):
        if name == "tumor" and rng.uniform() < 0.6:
            term = _choice(rng, _ORGAN_TUMOR[organ] + CLASS_SYNONYMS["tumor"][:3])
            template = _choice(rng, _TUMOR_TEMPLATES)
            sentences.append(template.format(tumor=term, Tumor=_capital(term)))
            continue
        options = CLASS_SYNONYMS[name]
        if name == "adipose":
            options = options + (_ORGAN_FAT[organ],)
        if name == "lymphocytes" and "tumor" not in present:
            options = tuple(o for o in options if "TIL" not in o)
        term = _choice(rng, options)
        template = _choice(rng, _PRESENT_TEMPLATES)
        sentences.append(template.format(term=term, Term=_capital(term)))
    for name in ("tumor", "necrosis", "lymphocytes"):
        if name not in present and rng.uniform() < 0.5:
            term = _choice(rng, CLASS_SYNONYMS[name][:3])
            sentences.append(_choice(rng, _NEGATIVE_TEMPLATES).format(term=term))
    if "tumor" not in present and rng.uniform() < 0.5:
        sentences.append("Negative for malignancy.")

    lines = _noise_lines(rng)
    header = ["SPECIMEN: " + _choice(rng, _ORGAN_SPECIMEN[organ])]
    heading = _choice(rng, ("DIAGNOSIS:", "FINAL DIAGNOSIS:", "MICROSCOPIC DESCRIPTION:"))
    split = int(rng.integers(0, len(lines) + 1))
    return "\n".join(lines[:split] + header + [heading, " ".join(sentences)] + lines[split:])


# Slide-level diagnoses per organ: diagnosis -> the tissue class that shows it. Each organ has one
# neoplastic, one inflammatory and one necrotising diagnosis; stroma and fat are background.
DIAGNOSES: dict[str, dict[str, str]] = {
    "breast": {
        "invasive ductal carcinoma": "tumor",
        "mastitis": "lymphocytes",
        "fat necrosis": "necrosis",
    },
    "lung": {
        "adenocarcinoma": "tumor",
        "organizing pneumonia": "lymphocytes",
        "infarct": "necrosis",
    },
    "colon": {
        "adenocarcinoma": "tumor",
        "colitis": "lymphocytes",
        "ischemic necrosis": "necrosis",
    },
    "kidney": {
        "renal cell carcinoma": "tumor",
        "pyelonephritis": "lymphocytes",
        "infarction": "necrosis",
    },
}
_DIAGNOSIS_TEMPLATES: tuple[str, ...] = (
    "{Diagnosis}.",
    "Consistent with {diagnosis}.",
    "Findings are diagnostic of {diagnosis}.",
)


def make_diagnosis_report(
    diagnosis: str,
    classes_present: Iterable[str | int],
    rng: np.random.Generator,
    organ: str,
    describe: bool = True,
) -> str:
    """A report whose diagnosis line names ``diagnosis`` (one of ``DIAGNOSES[organ]``).

    With ``describe`` a microscopic line follows that names each present tissue class in
    varied wording (as :func:`make_report`), so the report ties the diagnosis to what the
    slide shows; without it the report states the diagnosis only, as many real sign-outs do.
    Identifying noise lines are added as in :func:`make_report`.
    """
    organ = organ.lower()
    if organ not in DIAGNOSES or diagnosis not in DIAGNOSES[organ]:
        raise SyntheticDataError(
            f"{diagnosis!r} is not a diagnosis of organ {organ!r}; use one of "
            f"{', '.join(DIAGNOSES.get(organ, {}))}"
        )
    template = _choice(rng, _DIAGNOSIS_TEMPLATES)
    lines = [
        "SPECIMEN: " + _choice(rng, _ORGAN_SPECIMEN[organ]),
        _choice(rng, ("DIAGNOSIS:", "FINAL DIAGNOSIS:")),
        template.format(diagnosis=diagnosis, Diagnosis=_capital(diagnosis)),
    ]
    if describe:
        present = {TISSUE_CLASSES[class_id(c)] for c in classes_present} - {"background"}
        sentences = []
        for name in rng.permutation(sorted(present)):
            options = CLASS_SYNONYMS[name]
            if name == "adipose":
                options = options + (_ORGAN_FAT[organ],)
            if name == "lymphocytes":
                options = tuple(o for o in options if "TIL" not in o)
            term = _choice(rng, options)
            sentences.append(
                _choice(rng, _PRESENT_TEMPLATES).format(term=term, Term=_capital(term))
            )
        lines += ["MICROSCOPIC DESCRIPTION:", " ".join(sentences)]
    noise = _noise_lines(rng)
    split = int(rng.integers(0, len(noise) + 1))
    return "\n".join(noise[:split] + lines + noise[split:])
