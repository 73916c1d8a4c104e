"""Breast-level labels of TopKSigLIP: parsed-report sentences and tabular attribute vectors.

The parsed report (paper App. 5.2) holds the breast's mammographic findings (or the default
negative sentence), a density sentence, the BI-RADS sentence read from the structured table
("N – Negative." ... "M – Highly suggestive of malignancy.") and the cancer-outcome sentence.
The tabular vector of Sec. 3.3.1 concatenates BI-RADS one-hot (5), density one-hot (4), cancer
one-hot (2) and finding multi-hot (4): 15 entries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "BIRADS_SENTENCES",
    "CANCER_SENTENCES",
    "DENSITY_LABELS",
    "DENSITY_SENTENCES",
    "FINDING_SENTENCES",
    "FINDING_TYPES",
    "NEGATIVE_FINDINGS",
    "NUM_ATTRIBUTES",
    "normalise_findings",
    "parsed_report",
    "tabular_attributes",
]

FINDING_TYPES = ("mass", "calcification", "architectural distortion", "asymmetry")
DENSITY_LABELS = ("A", "B", "C", "D")
NEGATIVE_FINDINGS = "No suspicious masses, calcifications or other abnormalities are seen."
FINDING_SENTENCES = {
    "mass": "there is a mass seen in the breast.",
    "calcification": "there are calcifications seen in the breast.",
    "architectural distortion": "there is an architectural distortion seen in the breast.",
    "asymmetry": "there is an asymmetry seen in the breast.",
}
DENSITY_SENTENCES = {
    "A": "The breast is almost entirely fatty.",
    "B": "The breast is scattered with fibroglandular densities.",
    "C": "The breast is heterogeneously dense.",
    "D": "The breast is extremely dense.",
}
BIRADS_SENTENCES = {
    1: "N \u2013 Negative.",
    2: "B \u2013 Benign.",
    3: "P \u2013 Probably benign.",
    4: "S \u2013 Suspicious.",
    5: "M \u2013 Highly suggestive of malignancy.",
}
CANCER_SENTENCES = {
    False: "No evidence of cancer from neither screening nor biopsy.",
    True: "Biopsy confirms the presence of cancer.",
}
NUM_ATTRIBUTES = 5 + 4 + 2 + 4

_FINDING_ALIASES = {
    "mass": "mass",
    "masses": "mass",
    "calc": "calcification",
    "calcification": "calcification",
    "calcifications": "calcification",
    "ad": "architectural distortion",
    "architectural distortion": "architectural distortion",
    "distortion": "architectural distortion",
    "as": "asymmetry",
    "asymmetry": "asymmetry",
    "focal asymmetry": "asymmetry",
}


def normalise_findings(findings: Sequence[str]) -> list[str]:
    """Map finding names and abbreviations (MASS, CALC, AD, AS, plurals) to :data:`FINDING_TYPES`.

    Raises ValueError naming the first unknown finding.
    """
    out: list[str] = []
    for name in findings:
        key = _FINDING_ALIASES.get(str(name).strip().lower())
        if key is None:
            raise ValueError(f"unknown finding {name!r}; use one of {list(FINDING_TYPES)}")
        if key not in out:
            out.append(key)
    return sorted(out, key=FINDING_TYPES.index)


def parsed_report(findings: Sequence[str], density: str, birads: int, cancer: bool) -> str:
    """The report of one breast in the paper's parsed form (findings, density, BI-RADS, cancer)."""
    kinds = normalise_findings(findings)
    parts = [FINDING_SENTENCES[kind] for kind in kinds] or [NEGATIVE_FINDINGS]
    parts.append(DENSITY_SENTENCES[density])
    parts.append(f"BIRADS {int(birads)}: {BIRADS_SENTENCES[int(birads)]}")
    parts.append(CANCER_SENTENCES[bool(cancer)])
    return " ".join(parts)


def tabular_attributes(
    birads: int, density: str, cancer: bool, findings: Sequence[str]
) -> np.ndarray:
    """``[15]`` float32: BI-RADS 1-5 one-hot, density A-D one-hot, cancer (no, yes), findings."""
    vector = np.zeros(NUM_ATTRIBUTES, dtype=np.float32)
    vector[int(birads) - 1] = 1.0
    vector[5 + DENSITY_LABELS.index(density)] = 1.0
    vector[9 + int(bool(cancer))] = 1.0
    for kind in normalise_findings(findings):
        vector[11 + FINDING_TYPES.index(kind)] = 1.0
    return vector
