"""Synthetic screening mammogram cases (CC + MLO of one breast) as DICOM, with ground truth.

:func:`make_mammogram_case` plans the breast (``_mammo_plan``), renders both views
(``_mammo_render``), writes them (``_mammo_files``) and the report (``_mammo_report``). Right
breasts are mirrored so the chest wall is on the right.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._mammo_files import to_stored, write_view_dicom, write_view_png
from medvl_engine.synthetic._mammo_plan import place_lesions, plan_case, plan_structures
from medvl_engine.synthetic._mammo_render import BreastGeometry, render_view
from medvl_engine.synthetic._mammo_report import SIDES, make_mammo_report

__all__ = ["MAMMO_GENERATOR_VERSION", "SyntheticMammoCase", "make_mammogram_case"]

MAMMO_GENERATOR_VERSION = 4
"""Raised whenever the generator's output changes, so a cohort written before is not reused."""


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
    if laterality not in SIDES:
        raise SyntheticDataError(f"laterality must be 'L' or 'R', got {laterality!r}")
    photometric = photometric or ("MONOCHROME1" if rng.uniform() < 0.5 else "MONOCHROME2")
    if photometric not in ("MONOCHROME1", "MONOCHROME2"):
        raise SyntheticDataError(
            f"photometric must be MONOCHROME1 or MONOCHROME2, got {photometric!r}"
        )
    slope = float(rng.choice([1.0, 0.5]))
    exam_id = exam_id or f"mg{seed}"
    kinds, cancer, density, birads, spiculated = plan_case(rng, findings, cancer, density, birads)
    geo = BreastGeometry.random(rng)
    lesions = place_lesions(rng, kinds, spiculated, geo, (rows, cols), malignant=cancer)
    structures = plan_structures(rng)
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
        pixels = to_stored(attenuation, rng)
        if laterality == "R":
            pixels, breast = pixels[:, ::-1].copy(), breast[:, ::-1].copy()
            view_boxes = [[cols - x1, y0, cols - x0, y1] for x0, y0, x1, y1 in view_boxes]
        write_view_dicom(
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
            write_view_png(pngs[view], pixels, breast)
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
