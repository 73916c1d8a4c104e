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

:func:`write_regions_annotations` writes the regions of a tissue map
(:mod:`medvl_engine.segmentation.regions`) the same way: one annotation group per class
that has a region, in the order of the classes ("uncertain" regions are left out, as the
Segmentation leaves those cells out), each region a POLYGON of its outline (level-0 px,
the closing point not repeated) with its area in um^2 as a measurement. The annotation IOD
has no polygon holes: a region's holes are not drawn (what fills them is another class's
region) and its area subtracts them. Each group has the class's property codes and
display colour (:mod:`medvl_engine.export.dicom.tissue_codes`) and names the model with the
classes, templates and thresholds as the algorithm's parameters.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import ExportError
from medvl_engine.export.dicom.common import require_highdicom, write_dataset
from medvl_engine.export.dicom.wsi_source import require_dicom_slide, result_maker

if TYPE_CHECKING:
    from medvl_engine.io.dicom_results.geometry import SlideGeometry
    from medvl_engine.io.dicom_results.source import DicomImageSource
    from medvl_engine.segmentation import SegmentResult

__all__ = [
    "ANNOTATION_COORDINATES",
    "RANK_CODE",
    "SCORE_CODE",
    "write_regions_annotations",
    "write_top_patches_annotations",
]

ANNOTATION_COORDINATES = ("2D", "3D")
SCORE_CODE = ("PATCH_SCORE", "99MEDVL", "Prompt score")
"""(code value, coding scheme, meaning) of the score measurement (a private scheme)."""
RANK_CODE = ("PATCH_RANK", "99MEDVL", "Rank")
_SERIES_NUMBER = 901
_REGIONS_SERIES_NUMBER = 904


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
    _check_coordinates(path, coordinates)
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
    return _write_annotations(
        path,
        source,
        coordinates,
        [group],
        maker.instance(
            label="TOP_PATCHES", what=f"top patches: {prompt}", series_number=_SERIES_NUMBER
        ),
    )


def write_regions_annotations(
    path: str | Path,
    result: SegmentResult,
    slide: Any,
    *,
    model: str | Path | None = None,
    coordinates: str = "2D",
) -> Path:
    """Write the class regions of ``result`` (polygons (x, y) level-0 px) of the DICOM WSI
    ``slide`` (an open Slide or its path) to ``path`` as Microscopy Bulk Simple Annotations,
    one group per class (module docstring); ``model`` defaults to the result's. Written
    atomically; a non-DICOM slide, or a result without a class region, is refused with one
    sentence."""
    path = Path(path)
    _check_coordinates(path, coordinates)
    names = list(result.class_map.names)
    regions = [r for r in result.regions if 1 <= r.label <= len(names)]
    if not regions:
        raise ExportError(
            f"Cannot write {path.name}: no class has a region to annotate (the map is empty "
            "or uncertain); lower the minimum region area or confidence.",
            path,
        )
    source = require_dicom_slide(slide, path)
    require_highdicom()
    import highdicom as hd
    from pydicom.sr.codedict import codes

    from medvl_engine.export.dicom.tissue_codes import class_codes, display_color
    from medvl_engine.export.dicom.wsi_seg import algorithm_with_parameters, class_map_parameters
    from medvl_engine.export.regions import class_colors

    geometry = source.geometry
    assert geometry is not None  # require_dicom_slide refuses a source without one
    maker = result_maker(model if model is not None else result.model)
    algorithm = algorithm_with_parameters(maker, class_map_parameters(result, maker))
    colours = class_colors(len(names))
    groups: list[Any] = []
    for label, name in enumerate(names, start=1):
        mine = [r for r in regions if r.label == label]
        if not mine:
            continue
        polygons = [_polygon(r.rings[0], coordinates, geometry) for r in mine]
        areas = np.array([_area_um2(r, geometry) for r in mine], np.float64)
        class_code = class_codes(name)
        what = f"{len(mine)} {name} regions (model {maker.model}); holes not drawn"
        groups.append(
            hd.ann.AnnotationGroup(
                number=len(groups) + 1,
                uid=hd.UID(),
                label=name[:64],
                annotated_property_category=class_code.category,
                annotated_property_type=class_code.type,
                graphic_type="POLYGON",
                graphic_data=polygons,
                algorithm_type="AUTOMATIC",
                algorithm_identification=algorithm,
                measurements=[
                    hd.ann.Measurements(
                        name=codes.SCT.Area, values=areas, unit=codes.UCUM.SquareMicrometer
                    )
                ],
                description=f"{what}; {maker.notice}" if maker.notice else what,
                display_color=display_color(colours[label - 1]),
            )
        )
    return _write_annotations(
        path,
        source,
        coordinates,
        groups,
        maker.instance(
            label="TISSUE_REGIONS",
            what=f"tissue regions: {', '.join(names)}",
            series_number=_REGIONS_SERIES_NUMBER,
        ),
    )


def _check_coordinates(path: Path, coordinates: str) -> None:
    if coordinates not in ANNOTATION_COORDINATES:
        raise ExportError(
            f"Cannot write {path.name}: coordinates '{coordinates}' are unknown; use "
            f"{' or '.join(ANNOTATION_COORDINATES)}.",
            path,
        )


def _write_annotations(
    path: Path,
    source: DicomImageSource,
    coordinates: str,
    groups: list[Any],
    instance: dict[str, Any],
) -> Path:
    """Write the annotation ``groups`` on ``source`` as one Microscopy Bulk Simple
    Annotations instance named by ``instance`` (:meth:`.wsi_source.ResultMaker.instance`)."""
    import highdicom as hd

    dataset = hd.ann.MicroscopyBulkSimpleAnnotations(
        source_images=[source.dataset],
        annotation_coordinate_type=coordinates,
        annotation_groups=groups,
        **instance,
    )
    return write_dataset(dataset, path, sources=[source.path])


def _polygon(ring: np.ndarray, coordinates: str, geometry: SlideGeometry) -> np.ndarray:
    """A closed ring [M, 2] (x, y) level-0 px as POLYGON data: the closing point dropped;
    float32 level-0 px ("2D") or slide mm ("3D")."""
    points = np.asarray(ring, np.float64)
    if len(points) > 1 and np.array_equal(points[0], points[-1]):
        points = points[:-1]
    if coordinates == "2D":
        return points.astype(np.float32)
    return np.asarray(geometry.to_slide(points), np.float64)


def _area_um2(region: Any, geometry: SlideGeometry) -> float:
    """The region's area in um^2: its own, else from the source's pixel spacing (mm)."""
    if region.area_um2 is not None:
        return float(region.area_um2)
    return float(region.area_px2 * geometry.spacing[0] * geometry.spacing[1] * 1e6)
