"""A segmentation of a DICOM whole-slide image (:class:`SegmentResult`) as DICOM objects.

``kind`` (:data:`DICOM_KINDS`) chooses what a ``.dcm`` output holds: ``"seg"`` the class map
as a BINARY Segmentation with one segment per class
(:func:`medvl_engine.export.dicom.wsi_seg.write_class_map_segmentation`), ``"ann"`` the
class regions as Microscopy Bulk Simple Annotations, one group per class
(:func:`medvl_engine.export.dicom.wsi_ann.write_regions_annotations`), ``"both"`` the
Segmentation at the path given and the annotations beside it at :func:`annotations_path`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine.errors import ConfigError

if TYPE_CHECKING:
    from medvl_engine.segmentation import SegmentResult

__all__ = ["DICOM_KINDS", "DICOM_SUFFIXES", "annotations_path", "export_segmentation_dicom"]

DICOM_SUFFIXES = (".dcm",)
DICOM_KINDS = ("seg", "ann", "both")
"""seg: a Segmentation of the class map; ann: bulk annotations of the regions; both."""


def annotations_path(path: str | Path) -> Path:
    """``<stem>_ann.dcm`` beside the Segmentation ``path``: the regions' annotations when
    both are written."""
    path = Path(path)
    return path.with_name(f"{path.stem}_ann{path.suffix}")


def export_segmentation_dicom(
    path: str | Path,
    result: SegmentResult,
    slide: Any,
    *,
    kind: str = "seg",
    model: str | Path | None = None,
) -> list[Path]:
    """Write ``result`` of the DICOM whole-slide image ``slide`` (an open Slide or its path)
    as ``kind`` says (module docstring); returns the paths written. A slide that is not a
    DICOM WSI is refused with one sentence (ExportError)."""
    if kind not in DICOM_KINDS:
        raise ConfigError(f"DICOM kind {kind!r} is unknown; use one of {', '.join(DICOM_KINDS)}.")
    from medvl_engine.export.dicom.wsi_ann import write_regions_annotations
    from medvl_engine.export.dicom.wsi_seg import write_class_map_segmentation

    path = Path(path)
    if kind == "ann":
        return [write_regions_annotations(path, result, slide, model=model)]
    written = [write_class_map_segmentation(path, result, slide, model=model)]
    if kind == "both":
        written.append(
            write_regions_annotations(annotations_path(path), result, slide, model=model)
        )
    return written
