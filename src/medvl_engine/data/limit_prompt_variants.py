"""Prompt templates and class synonyms for the LIMIT template/synonym robustness report.

The LIMIT paper (Sec. 4.5, Fig. 3, Table A4) substitutes the cancer class with five terms
of the same meaning (cancer, tumor, malignant neoplasm, carcinoma, malignancy) inside three
sentence templates and reports zero-shot accuracy for every (template, term) pair. The
five terms are the paper's; the body of Table A4 with its three templates is not in the
published text, so the templates below are this project's: three sentences of different
structure, each naming the tissue and the class.

Templates are ``str.format`` patterns with ``{tissue}`` (the organ or its tissue name) and
``{class}`` (the class name, with the synonym substituted).
"""

from __future__ import annotations

__all__ = ["CANCER_SYNONYMS", "ROBUSTNESS_TEMPLATES"]

CANCER_SYNONYMS: tuple[str, ...] = (
    "cancer",
    "tumor",
    "malignant neoplasm",
    "carcinoma",
    "malignancy",
)

ROBUSTNESS_TEMPLATES: tuple[str, ...] = (
    "an H&E image of {tissue} {class}.",
    "a histopathology slide of {tissue} tissue showing {class}.",
    "{class} found in the {tissue}.",
)
