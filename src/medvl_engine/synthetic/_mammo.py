"""Synthetic screening mammogram cases (CC + MLO of one breast) as DICOM, with ground truth.

Each view is written as Digital Mammography X-Ray Image Storage - For Presentation: 16-bit
unsigned stored values in a 12-bit range, MONOCHROME1 or MONOCHROME2 (by seed), a Modality LUT
(RescaleSlope / RescaleIntercept) and a VOI window, ImageLaterality, ViewPosition, PixelSpacing,
and an obviously synthetic patient. Right breasts are mirrored so the chest wall is on the right.
The report follows the TopKSigLIP parsed form: density sentence, findings, impression, the
BI-RADS sentence of the paper ("BIRADS 4: S – Suspicious.") and the cancer-outcome sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import FileMetaDataset
from pydicom.uid import UID, ExplicitVRLittleEndian, generate_uid

from medvl_engine.common.atomic import atomic_write
from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._mammo_render import (
    FINDING_TYPES,
    LESION_REACH,
    BenignStructure,
    BreastGeometry,
    Lesion,
    _outline,
    lesion_centre,
    render_view,
)

__all__ = [
    "BIRADS_SENTENCES",
    "CANCER_SENTENCES",
    "DENSITY_SENTENCES",
    "FINDING_SENTENCES",
    "NEGATIVE_FINDINGS",
    "MAMMO_GENERATOR_VERSION",
    "MAMMO_SOP_CLASS",
    "SyntheticMammoCase",
    "birads_sentence",
    "make_mammo_report",
    "make_mammogram_case",
]

MAMMO_SOP_CLASS = UID("1.2.840.10008.5.1.4.1.1.1.2")
MAMMO_GENERATOR_VERSION = 4
"""Raised whenever the generator's output changes, so a cohort written before is not reused."""
WINDOW_HEADROOM = 0.35
"""Attenuation units the display window reaches above the densest tissue (99.5th percentile).

Without it the densest fibroglandular tissue sits at the top of the window, and a mass or
calcification on it is clipped to the same white and cannot be seen.
"""
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
_SIDE = {"L": "left", "R": "right"}


def birads_sentence(birads: int) -> str:
    """The report's BI-RADS line, e.g. "BIRADS 4: S – Suspicious." (TopKSigLIP Sec. 5.2)."""
    return f"BIRADS {birads}: {BIRADS_SENTENCES[birads]}"


@dataclass
class SyntheticMammoCase:
    """One breast (two views) with ground truth; boxes are (x0, y0, x1, y1) source px per view."""

    exam_id: str
    laterality: str
    cc_path: Path
    mlo_path: Path
    boxes: dict[str, list[list[int]]]
    box_findings: dict[str, list[str]]
    findings: list[str]
    density: str
    birads: int
    cancer: bool
    report: str
    photometric: str
    pixel_spacing: tuple[float, float]
    seed: int
    png_paths: dict[str, Path] = field(default_factory=dict)
    breast_masks: dict[str, np.ndarray] = field(default_factory=dict, repr=False)


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
    side = _SIDE[laterality]
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


def _plan_case(
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


def _place_lesions(
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
    _, _, pectoral, *_ = _outline("MLO", geo, shape)
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


def _plan_structures(rng: np.random.Generator) -> list[BenignStructure]:
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


_RAW_PER_ATTENUATION = 2900.0


def _to_stored(attenuation: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Raw detector values, MONOCHROME2 sense (dense = high), uint16 in [0, 4095]."""
    raw = 60.0 + _RAW_PER_ATTENUATION * attenuation + rng.normal(0.0, 12.0, attenuation.shape)
    return np.clip(np.round(raw), 0, 4095).astype(np.uint16)


def _uid(*parts: object) -> UID:
    return generate_uid(entropy_srcs=["medvl-synthetic-mammogram", *map(str, parts)])


def _write_dicom(
    path: Path,
    pixels_mono2: np.ndarray,
    *,
    photometric: str,
    slope: float,
    view: str,
    laterality: str,
    spacing: tuple[float, float],
    exam_id: str,
    seed: int,
    breast: np.ndarray,
) -> None:
    """Write one view; ``pixels_mono2`` are stored values before any MONOCHROME1 inversion."""
    stored = 4095 - pixels_mono2 if photometric == "MONOCHROME1" else pixels_mono2
    tissue = pixels_mono2[breast].astype(np.float64) * slope
    low, high = np.percentile(tissue, [0.5, 99.5]) if tissue.size else (0.0, 4095.0 * slope)
    high += WINDOW_HEADROOM * _RAW_PER_ATTENUATION * slope
    if photometric == "MONOCHROME1":
        low, high = (4095 * slope - high, 4095 * slope - low)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = MAMMO_SOP_CLASS
    meta.MediaStorageSOPInstanceUID = _uid(exam_id, laterality, view, seed)
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = MAMMO_SOP_CLASS
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = _uid(exam_id, "study")
    ds.SeriesInstanceUID = _uid(exam_id, laterality, view, "series")
    ds.PatientName = f"SYNTHETIC^{exam_id.upper().replace('-', '')}"
    ds.PatientID = f"SYNTH-{exam_id}"
    ds.PatientBirthDate = ""
    ds.PatientSex = "F"
    ds.StudyDate = "20260101"
    ds.AccessionNumber = ""
    ds.StudyDescription = "Synthetic screening mammogram (not a real patient)"
    ds.Modality = "MG"
    ds.Manufacturer = "medvl synthetic"
    ds.PresentationIntentType = "FOR PRESENTATION"
    ds.BodyPartExamined = "BREAST"
    ds.ImageLaterality = laterality
    ds.Laterality = laterality
    ds.ViewPosition = view
    ds.ImageType = ["ORIGINAL", "PRIMARY"]
    ds.PixelSpacing = [f"{spacing[0]:.6g}", f"{spacing[1]:.6g}"]
    ds.ImagerPixelSpacing = ds.PixelSpacing
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = photometric
    ds.Rows, ds.Columns = (int(v) for v in stored.shape)
    ds.BitsAllocated = 16
    ds.BitsStored = 12
    ds.HighBit = 11
    ds.PixelRepresentation = 0
    ds.RescaleSlope = f"{slope:g}"
    ds.RescaleIntercept = "0"
    ds.RescaleType = "US"
    ds.WindowCenter = f"{(low + high) / 2:.1f}"
    ds.WindowWidth = f"{max(high - low, 1.0):.1f}"
    ds.VOILUTFunction = "LINEAR"
    ds.PixelData = np.ascontiguousarray(stored, dtype="<u2").tobytes()
    atomic_write(
        path, lambda temporary: ds.save_as(temporary, enforce_file_format=True), what="mammogram"
    )


def _write_png(path: Path, pixels_mono2: np.ndarray, breast: np.ndarray) -> None:
    from PIL import Image

    tissue = pixels_mono2[breast]
    low, high = np.percentile(tissue, [0.5, 99.5]) if tissue.size else (0, 4095)
    high += WINDOW_HEADROOM * _RAW_PER_ATTENUATION
    display = np.clip((pixels_mono2 - low) / max(high - low, 1.0), 0.0, 1.0)
    image = Image.fromarray(np.round(display * 65535).astype(np.uint16))
    atomic_write(path, lambda temporary: image.save(temporary, format="PNG"), what="mammogram")


def make_mammogram_case(
    out_dir: str | Path,
    *,
    seed: int,
    laterality: str | None = None,
    size: tuple[int, int] = (1024, 640),
    findings: list[str] | None = None,
    cancer: bool | None = None,
    density: str | None = None,
    birads: int | None = None,
    photometric: str | None = None,
    exam_id: str | None = None,
    write_png: bool = False,
) -> SyntheticMammoCase:
    """Write the CC and MLO views of one synthetic breast as DICOM and return the ground truth.

    ``size`` is (rows, cols) of each view. Unset arguments are drawn from ``seed`` consistently:
    no findings means BI-RADS 1; cancers carry a mass, calcifications or a distortion and BI-RADS
    4-5. Files: ``<exam_id>_<L|R>_CC.dcm`` and ``..._MLO.dcm`` (and 16-bit PNGs named like
    ``<exam_id>_L_CC.png`` when ``write_png``).
    """
    out = Path(out_dir)
    rows, cols = int(size[0]), int(size[1])
    if rows < 128 or cols < 96:
        raise SyntheticDataError(
            f"mammogram size must be at least 128 x 96 (rows, cols), got {size}"
        )
    rng = np.random.default_rng(seed)
    laterality = (laterality or str(rng.choice(["L", "R"]))).upper()
    if laterality not in _SIDE:
        raise SyntheticDataError(f"laterality must be 'L' or 'R', got {laterality!r}")
    photometric = photometric or ("MONOCHROME1" if rng.uniform() < 0.5 else "MONOCHROME2")
    if photometric not in ("MONOCHROME1", "MONOCHROME2"):
        raise SyntheticDataError(
            f"photometric must be MONOCHROME1 or MONOCHROME2, got {photometric!r}"
        )
    slope = float(rng.choice([1.0, 0.5]))
    exam_id = exam_id or f"mg{seed}"
    kinds, cancer, density, birads, spiculated = _plan_case(rng, findings, cancer, density, birads)
    geo = BreastGeometry.random(rng)
    lesions = _place_lesions(rng, kinds, spiculated, geo, (rows, cols), malignant=cancer)
    structures = _plan_structures(rng)
    spacing = (round(200.0 / rows, 6), round(200.0 / rows, 6))

    out.mkdir(parents=True, exist_ok=True)
    paths = {v: out / f"{exam_id}_{laterality}_{v}.dcm" for v in ("CC", "MLO")}
    boxes: dict[str, list[list[int]]] = {}
    masks: dict[str, np.ndarray] = {}
    pngs: dict[str, Path] = {}
    for view in ("CC", "MLO"):
        attenuation, breast, view_boxes = render_view(
            view, geo, density, lesions, (rows, cols), rng, structures
        )
        pixels = _to_stored(attenuation, rng)
        if laterality == "R":
            pixels, breast = pixels[:, ::-1].copy(), breast[:, ::-1].copy()
            view_boxes = [[cols - x1, y0, cols - x0, y1] for x0, y0, x1, y1 in view_boxes]
        _write_dicom(
            paths[view],
            pixels,
            photometric=photometric,
            slope=slope,
            view=view,
            laterality=laterality,
            spacing=spacing,
            exam_id=exam_id,
            seed=seed,
            breast=breast,
        )
        if write_png:
            pngs[view] = out / f"{exam_id}_{laterality}_{view}.png"
            _write_png(pngs[view], pixels, breast)
        boxes[view], masks[view] = view_boxes, breast
    report = make_mammo_report(lesions, laterality, density, birads, cancer, rng)
    return SyntheticMammoCase(
        exam_id=exam_id,
        laterality=laterality,
        cc_path=paths["CC"],
        mlo_path=paths["MLO"],
        boxes=boxes,
        box_findings={v: [lesion.kind for lesion in lesions] for v in ("CC", "MLO")},
        findings=list(dict.fromkeys(kinds)),
        density=density,
        birads=birads,
        cancer=cancer,
        report=report,
        photometric=photometric,
        pixel_spacing=spacing,
        seed=int(seed),
        png_paths=pngs,
        breast_masks=masks,
    )
