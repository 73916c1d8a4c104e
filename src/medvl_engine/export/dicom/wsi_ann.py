"""The top patches of a prompt heatmap as DICOM Microscopy Bulk Simple Annotations.

One annotation group holds every box as a POLYGON (its four corners, clockwise from the
top-left, not repeating the first), best first, with two measurements per annotation: the
patch score (the heatmap's mode, e.g. cosine similarity, unit "no units") and its rank
(1 = best). Coordinates are ``2D`` level-0 px of the source's total pixel matrix (the
default: the corner of the matrix at (0, 0), QuPath's convention, placed like the parametric
map when the result is opened without its slide; the validator ``dciodvfy`` of 2022 reports a
"Common Z Coordinate Value" error on them although that attribute is absent, as 2D requires)
or ``3D`` slide coordinates in mm of the source's Frame of Reference; see
:mod:`medvl_engine.io.dicom_results.geometry`. The group names the model as its algorithm
(generation type AUTOMATIC) and the prompt; a demo
model's notice is in the group and content descriptions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import ExportError
from medvl_engine.export.dicom.common import require_highdicom, write_dataset
from medvl_engine.export.dicom.wsi_source import require_dicom_slide, result_maker

__all__ = [
    "ANNOTATION_COORDINATES",
    "RANK_CODE",
    "SCORE_CODE",
    "write_top_patches_annotations",
]

ANNOTATION_COORDINATES = ("2D", "3D")
SCORE_CODE = ("PATCH_SCORE", "99MEDVL", "Prompt score")
"""(code value, coding scheme, meaning) of the score measurement (a private scheme)."""
RANK_CODE = ("PATCH_RANK", "99MEDVL", "Rank")
_SERIES_NUMBER = 901


def write_top_patches_annotations(
    path: str | Path,
    boxes: np.ndarray,
    scores: np.ndarray,
    slide: Any,
    *,
    prompt: str = "",
    mode: str = "cosine",
    model: str | Path | None = None,
    coordinates: str = "2D",
) -> Path:
    """Write ``boxes`` int [N, 4] (x0, y0, x1, y1) level-0 px with their ``scores`` [N] (as
    :func:`medvl_engine.heatmap.top_patches` returns them, best first) of the DICOM WSI
    ``slide`` (an open Slide or its path) to ``path`` (see the module docstring). Written
    atomically; a non-DICOM slide is refused with one sentence."""
    path = Path(path)
    if coordinates not in ANNOTATION_COORDINATES:
        raise ExportError(
            f"Cannot write {path.name}: coordinates '{coordinates}' are unknown; use "
            f"{' or '.join(ANNOTATION_COORDINATES)}.",
            path,
        )
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(scores, np.float64).reshape(-1)
    if len(boxes) == 0 or len(boxes) != len(scores) or not np.all(np.isfinite(scores)):
        raise ExportError(
            f"Cannot write {path.name}: bulk annotations need at least one box with one finite "
            f"score each (got {len(boxes)} boxes and {len(scores)} scores).",
            path,
        )
    source = require_dicom_slide(slide, path)
    require_highdicom()
    import highdicom as hd
    from pydicom.sr.codedict import codes

    geometry = source.geometry
    assert geometry is not None  # require_dicom_slide refuses a source without one
    maker = result_maker(model)
    polygons = []
    for x0, y0, x1, y1 in boxes:
        corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
        if coordinates == "2D":
            polygons.append(corners.astype(np.float32))  # exact: level-0 px < 2^24
        else:
            polygons.append(geometry.to_slide(corners))
    ranks = np.arange(1, len(boxes) + 1, dtype=np.float64)
    what = f"{len(boxes)} best patches for '{prompt}' ({mode}, model {maker.model})"
    group = hd.ann.AnnotationGroup(
        number=1,
        uid=hd.UID(),
        label=f"top patches: {prompt}"[:64],
        annotated_property_category=codes.SCT.Tissue,
        annotated_property_type=codes.SCT.Tissue,
        graphic_type="POLYGON",
        graphic_data=polygons,
        algorithm_type="AUTOMATIC",
        algorithm_identification=maker.algorithm(),
        measurements=[
            hd.ann.Measurements(
                name=hd.sr.CodedConcept(*SCORE_CODE), values=scores, unit=codes.UCUM.NoUnits
            ),
            hd.ann.Measurements(
                name=hd.sr.CodedConcept(*RANK_CODE), values=ranks, unit=codes.UCUM.NoUnits
            ),
        ],
        description=f"{what}; {maker.notice}" if maker.notice else what,
    )
    dataset = hd.ann.MicroscopyBulkSimpleAnnotations(
        source_images=[source.dataset],
        annotation_coordinate_type=coordinates,
        annotation_groups=[group],
        series_instance_uid=hd.UID(),
        series_number=_SERIES_NUMBER,
        sop_instance_uid=hd.UID(),
        instance_number=1,
        **maker.equipment(),
        content_label="TOP_PATCHES",
        content_description=maker.description(f"top patches: {prompt}"),
        series_description=maker.description(f"medvl top patches: {prompt}"),
    )
    return write_dataset(dataset, path, sources=[source.path])
