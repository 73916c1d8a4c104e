"""The report of a synthetic breast in TopKSigLIP's parsed form, and the sentences it is made of.

Density sentence, findings (kind, quadrant and depth of each lesion), impression, the BI-RADS
sentence of the paper ("BIRADS 4: S – Suspicious.") and the cancer-outcome sentence.
"""

from __future__ import annotations

import numpy as np

from medvl_engine.synthetic._mammo_render import Lesion

__all__ = [
    "BIRADS_SENTENCES",
    "CANCER_SENTENCES",
    "DENSITY_SENTENCES",
    "FINDING_SENTENCES",
    "NEGATIVE_FINDINGS",
    "SIDES",
    "birads_sentence",
    "make_mammo_report",
]

BIRADS_SENTENCES: dict[int, str] = {
    1: "N – Negative.",
    2: "B – Benign.",
    3: "P – Probably benign.",
    4: "S – Suspicious.",
    5: "M – Highly suggestive of malignancy.",
}
DENSITY_SENTENCES: dict[str, str] = {
    "A": "The breast is almost entirely fatty.",
    "B": "The breast is scattered with fibroglandular densities.",
    "C": "The breast is heterogeneously dense.",
    "D": "The breast is extremely dense.",
}
CANCER_SENTENCES: dict[bool, str] = {
    False: "No evidence of cancer from neither screening nor biopsy.",
    True: "Biopsy confirms the presence of cancer.",
}
NEGATIVE_FINDINGS = "No suspicious masses, calcifications or other abnormalities are seen."
FINDING_SENTENCES: dict[str, str] = {
    "mass": "there is a mass seen in the breast.",
    "calcification": "there are calcifications seen in the breast.",
    "architectural distortion": "there is an architectural distortion seen in the breast.",
    "asymmetry": "there is an asymmetry seen in the breast.",
}
SIDES = {"L": "left", "R": "right"}
"""Laterality code -> the word the report uses."""


def birads_sentence(birads: int) -> str:
    """The report's BI-RADS line, e.g. "BIRADS 4: S – Suspicious." (TopKSigLIP Sec. 5.2)."""
    return f"BIRADS {birads}: {BIRADS_SENTENCES[birads]}"


def _quadrant(lesion: Lesion, laterality: str) -> str:
    upper = lesion.offset_mlo < 0
    outer = lesion.offset_cc < 0 if laterality == "L" else lesion.offset_cc > 0
    return f"{'upper' if upper else 'lower'} {'outer' if outer else 'inner'} quadrant"


def _depth_word(depth: float) -> str:
    return "anterior" if depth > 0.62 else ("middle" if depth > 0.38 else "posterior")


def make_mammo_report(
    lesions: list[Lesion],
    laterality: str,
    density: str,
    birads: int,
    cancer: bool,
    rng: np.random.Generator,
) -> str:
    """Breast-level report in the parsed form: density, findings, impression, BI-RADS, cancer."""
    side = SIDES[laterality]
    if lesions:
        findings = []
        for lesion in lesions:
            base = FINDING_SENTENCES[lesion.kind]
            where = f"in the {side} breast, {_quadrant(lesion, laterality)}, "
            where += f"{_depth_word(lesion.depth)} depth."
            if lesion.kind == "mass":
                shape = (
                    "irregular spiculated"
                    if lesion.spiculated
                    else str(rng.choice(["oval circumscribed", "round circumscribed", "lobulated"]))
                )
                base = f"there is an {shape} mass seen in the breast."
                if shape.startswith("round"):
                    base = base.replace("an round", "a round")
                if shape.startswith("lobulated"):
                    base = base.replace("an lobulated", "a lobulated")
            if lesion.kind == "calcification":
                base = str(
                    rng.choice(
                        [
                            FINDING_SENTENCES["calcification"],
                            "there are grouped calcifications seen in the breast.",
                            "there are fine pleomorphic calcifications seen in the breast.",
                        ]
                    )
                )
            sentence = base[:1].upper() + base[1:].replace("in the breast.", where)
            findings.append(sentence)
        findings_text = " ".join(findings)
    else:
        findings_text = NEGATIVE_FINDINGS
    impression = {
        1: f"No mammographic evidence of malignancy in the {side} breast.",
        2: f"Benign findings in the {side} breast.",
        3: f"Probably benign finding in the {side} breast; short-interval follow-up is advised.",
        4: f"Suspicious abnormality in the {side} breast; biopsy should be considered.",
        5: f"Highly suggestive of malignancy in the {side} breast; biopsy is recommended.",
    }[birads]
    return "\n".join(
        [
            f"Density: {DENSITY_SENTENCES[density]}",
            f"Findings: {findings_text}",
            f"Impression: {impression}",
            birads_sentence(birads),
            CANCER_SENTENCES[cancer],
        ]
    )
