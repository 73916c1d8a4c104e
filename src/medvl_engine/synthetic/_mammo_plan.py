"""What a synthetic breast holds: consistent findings, cancer, density and BI-RADS, where its
lesions sit (clear of the pectoral muscle and of each other) and its benign bright structures."""

from __future__ import annotations

import numpy as np

from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._mammo_render import (
    FINDING_TYPES,
    LESION_REACH,
    BenignStructure,
    BreastGeometry,
    Lesion,
    lesion_centre,
    outline,
)
from medvl_engine.synthetic._mammo_report import BIRADS_SENTENCES, DENSITY_SENTENCES

__all__ = ["plan_case", "place_lesions", "plan_structures"]


def plan_case(
    rng: np.random.Generator,
    findings: list[str] | None,
    cancer: bool | None,
    density: str | None,
    birads: int | None,
) -> tuple[list[str], bool, str, int, list[bool]]:
    """Consistent (findings, cancer, density, birads, spiculated flags per finding)."""
    density = density or str(rng.choice(list("ABCD"), p=[0.1, 0.4, 0.4, 0.1]))
    if density not in DENSITY_SENTENCES:
        raise SyntheticDataError(f"density must be one of A, B, C, D, got {density!r}")
    if cancer is None:
        malignant_kinds = ("mass", "calcification", "architectural distortion")
        if findings is None:
            cancer = bool(rng.uniform() < 0.3)
        else:
            cancer = any(f in malignant_kinds for f in findings) and bool(rng.uniform() < 0.3)
    if findings is None:
        if cancer:
            main = str(rng.choice(["mass", "calcification", "architectural distortion"]))
            findings = [main]
            if rng.uniform() < 0.35:
                findings.append(str(rng.choice([f for f in FINDING_TYPES if f != main])))
        elif rng.uniform() < 0.5:
            findings = []
        else:
            findings = [str(rng.choice(["mass", "calcification", "asymmetry"]))]
    unknown = [f for f in findings if f not in FINDING_TYPES]
    if unknown:
        raise SyntheticDataError(
            f"unknown finding(s) {unknown}; use some of {', '.join(FINDING_TYPES)}"
        )
    if cancer and not findings:
        raise SyntheticDataError("a cancer case needs at least one finding")
    spiculated = [f == "mass" and cancer and rng.uniform() < 0.85 for f in findings]
    if birads is None:
        if not findings:
            birads = 1
        elif cancer:
            birads = 5 if any(spiculated) or rng.uniform() < 0.3 else 4
        else:
            birads = int(rng.choice([2, 3, 4], p=[0.5, 0.35, 0.15]))
    if birads not in BIRADS_SENTENCES:
        raise SyntheticDataError(f"BI-RADS must be 1 to 5, got {birads}")
    if (birads == 1) != (not findings) or (cancer and birads < 4):
        raise SyntheticDataError(
            f"BI-RADS {birads} contradicts findings {findings} / cancer {cancer}: BI-RADS 1 means "
            "no findings and a cancer needs BI-RADS 4 or 5"
        )
    return list(findings), bool(cancer), density, int(birads), spiculated


def _overlap(a: Lesion, b: Lesion, geo: BreastGeometry, shape: tuple[int, int]) -> bool:
    """True when two findings' centres are closer, in either view, than half the sum of how
    far their drawings reach (one would sit on the other's spicules or box)."""
    apart = 0.5 * (LESION_REACH[a.kind] * a.size + LESION_REACH[b.kind] * b.size) * shape[0]
    for view in ("CC", "MLO"):
        (ra, ca), (rb, cb) = lesion_centre(a, view, geo, shape), lesion_centre(b, view, geo, shape)
        if np.hypot(ra - rb, ca - cb) < apart:
            return True
    return False


def place_lesions(
    rng: np.random.Generator,
    kinds: list[str],
    spiculated: list[bool],
    geo: BreastGeometry,
    shape: tuple[int, int],
    malignant: bool = False,
) -> list[Lesion]:
    """Lesions away from the skin line, outside the MLO pectoral muscle and apart from each
    other in both views."""
    size_range = {
        "mass": (0.03, 0.05),
        "calcification": (0.025, 0.04),
        "architectural distortion": (0.045, 0.065),
        "asymmetry": (0.05, 0.08),
    }
    _, _, pectoral, *_ = outline("MLO", geo, shape)
    lesions: list[Lesion] = []
    for index, (kind, spicules) in enumerate(zip(kinds, spiculated, strict=True)):
        for _ in range(50):
            lesion = Lesion(
                kind=kind,
                depth=float(rng.uniform(0.3, 0.65)),
                offset_cc=float(rng.uniform(-0.55, 0.55)),
                offset_mlo=float(rng.uniform(-0.55, 0.55)),
                size=float(rng.uniform(*size_range[kind])),
                spiculated=spicules,
                seed=int(rng.integers(2**31 - 1)),
                # the first finding of a cancer is the malignant one
                malignant=bool(malignant and index == 0),
                contrast=float(rng.uniform(0.7, 1.2)),
            )
            row, col = lesion_centre(lesion, "MLO", geo, shape)
            reach = 3.0 * lesion.size * shape[0]
            r0, c0 = int(max(row - reach, 0)), int(max(col - reach, 0))
            clear_of_muscle = not pectoral[
                r0 : int(row + reach) + 1, c0 : int(col + reach) + 1
            ].any()
            if clear_of_muscle and not any(
                _overlap(lesion, other, geo, shape) for other in lesions
            ):
                lesions.append(lesion)
                break
        else:
            raise SyntheticDataError(
                f"could not place a {kind} outside the pectoral muscle and apart from the other "
                f"findings in a {shape} view; "
                "use a larger size or another seed"
            )
    return lesions


def plan_structures(rng: np.random.Generator) -> list[BenignStructure]:
    """Normal bright structures of one breast, drawn whatever its findings: calcified vessels,
    coarse benign calcifications, a skin marker, dense fibroglandular islands, an axillary node.
    """
    structures: list[BenignStructure] = []

    def add(kind: str, size: tuple[float, float], depth: tuple[float, float]) -> None:
        structures.append(
            BenignStructure(
                kind=kind,
                depth=float(rng.uniform(*depth)),
                offset_cc=float(rng.uniform(-0.6, 0.6)),
                offset_mlo=float(rng.uniform(-0.6, 0.6)),
                size=float(rng.uniform(*size)),
                seed=int(rng.integers(2**31 - 1)),
            )
        )

    if rng.uniform() < 0.3:
        add("vascular calcification", (0.01, 0.01), (0.15, 0.4))
    if rng.uniform() < 0.35:
        add("coarse calcification", (0.006, 0.012), (0.25, 0.75))
    if rng.uniform() < 0.25:
        add("skin marker", (0.006, 0.009), (0.9, 0.9))
    for _ in range(int(rng.integers(0, 3))):
        add("dense island", (0.025, 0.05), (0.25, 0.7))
    if rng.uniform() < 0.5:
        add("lymph node", (0.015, 0.025), (0.1, 0.1))
    return structures
