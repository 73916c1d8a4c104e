"""Open a DICOM result object (SR, GSPS, PM, SEG, ANN) as plain data on its source image.

:func:`read_dicom_result` tells the object by its SOP Class, finds its source image (given,
or among the ``*.dcm`` files beside it: the image it references or, for slide coordinates,
a whole-slide image of its Frame of Reference) and returns its shapes and images in the
source's level-0 px (see :mod:`medvl_engine.io.dicom_results.result`). Only headers of the
neighbours are read; nothing here draws or needs Qt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io._dicom_values import printable, read_problem
from medvl_engine.io.dicom_results.result import RESULT_KINDS, DicomResult
from medvl_engine.io.dicom_results.source import DicomImageSource, dicom_image_source, read_header

__all__ = ["SOP_CLASS_KINDS", "is_dicom_result", "read_dicom_result", "result_kind"]

SOP_CLASS_KINDS = {
    "1.2.840.10008.5.1.4.1.1.88.11": "SR",  # Basic Text SR
    "1.2.840.10008.5.1.4.1.1.88.22": "SR",  # Enhanced SR
    "1.2.840.10008.5.1.4.1.1.88.33": "SR",  # Comprehensive SR
    "1.2.840.10008.5.1.4.1.1.88.34": "SR",  # Comprehensive 3D SR
    "1.2.840.10008.5.1.4.1.1.88.35": "SR",  # Extensible SR
    "1.2.840.10008.5.1.4.1.1.11.1": "GSPS",  # Grayscale Softcopy Presentation State
    "1.2.840.10008.5.1.4.1.1.11.2": "GSPS",  # Color Softcopy Presentation State
    "1.2.840.10008.5.1.4.1.1.11.3": "GSPS",  # Pseudo-Color Softcopy Presentation State
    "1.2.840.10008.5.1.4.1.1.30": "PM",  # Parametric Map
    "1.2.840.10008.5.1.4.1.1.66.4": "SEG",  # Segmentation
    "1.2.840.10008.5.1.4.1.1.91.1": "ANN",  # Microscopy Bulk Simple Annotations
}
_MAX_SIBLINGS = 256


def result_kind(dataset: Any) -> str | None:
    """ "SR", "GSPS", "PM", "SEG" or "ANN" for a result object's header, else None."""
    return SOP_CLASS_KINDS.get(str(dataset.get("SOPClassUID", "")))


def read_dicom_result(
    path: str | Path, source: DicomImageSource | str | Path | None = None
) -> DicomResult:
    """Read the result object at ``path``, placed on ``source`` (its image, a path to it, or
    None to look beside the object). One sentence (MedVLError) when it cannot be read."""
    path = Path(path)
    header = read_header(path)
    kind = result_kind(header)
    if kind is None:
        raise UnsupportedFormatError(
            f"{path.name}: is a DICOM {printable(header.get('Modality')) or 'object'} that holds "
            "no result (not an SR, GSPS, parametric map, segmentation or bulk annotation).",
            path,
        )
    from medvl_engine.io.dicom_results._placement import Placement

    if kind in ("PM", "SEG"):
        _check_grid_size(path, header, kind)
    dataset = _full(path)
    referenced = _referenced_uids(dataset)
    if source is not None and not isinstance(source, DicomImageSource):
        source = dicom_image_source(source)
    if source is None:
        source = _find_source(path, referenced, str(dataset.get("FrameOfReferenceUID", "")))
    placement = Placement(source)
    try:
        shapes, images, algorithms = _read_kind(kind, dataset, placement)
    except MedVLError:
        raise
    except Exception as error:  # highdicom and pydicom raise many types for odd objects
        raise CorruptFileError(
            f"{path.name}: its {RESULT_KINDS[kind]} could not be read because "
            f"{read_problem(error)}; check it with dciodvfy or export it again.",
            path,
        ) from error
    placed_on = placement.level0_uid if source is not None and placement.units == "px" else ""
    return DicomResult(
        path=path,
        kind=kind,
        sop_class=str(dataset.SOPClassUID.name) if hasattr(dataset.SOPClassUID, "name") else "",
        sop_instance_uid=str(dataset.get("SOPInstanceUID", "")),
        series_instance_uid=str(dataset.get("SeriesInstanceUID", "")),
        study_instance_uid=str(dataset.get("StudyInstanceUID", "")),
        frame_of_reference_uid=str(dataset.get("FrameOfReferenceUID", "")),
        source_uids=referenced,
        description=printable(dataset.get("ContentDescription"), 200)
        or printable(dataset.get("SeriesDescription"), 200),
        algorithm=[a for a in dict.fromkeys(algorithms) if a],
        units=placement.units,
        placed_on=placed_on,
        shapes=shapes,
        images=images,
        notes=list(dict.fromkeys(placement.notes)),
    )


def _read_kind(kind: str, dataset: Any, placement: Any) -> tuple[list[Any], list[Any], list[str]]:
    from medvl_engine.io.dicom_results import _raster, _vector

    if kind == "PM":
        images, algorithms = _raster.read_pm(dataset, placement)
        return [], images, algorithms
    if kind == "SEG":
        images, algorithms = _raster.read_seg(dataset, placement)
        return [], images, algorithms
    reader = {"ANN": _vector.read_ann, "SR": _vector.read_sr, "GSPS": _vector.read_gsps}[kind]
    shapes, algorithms = reader(dataset, placement)
    return shapes, [], algorithms


def _check_grid_size(path: Path, header: Any, kind: str) -> None:
    """Refuse (one sentence) a map or segmentation too large to decode in one piece."""
    from medvl_engine.io._dicom_values import whole_number
    from medvl_engine.io.limits import check_decode_size

    columns = whole_number(header.get("TotalPixelMatrixColumns")) or whole_number(
        header.get("Columns")
    )
    rows = whole_number(header.get("TotalPixelMatrixRows")) or whole_number(header.get("Rows"))
    check_decode_size(
        path,
        columns or 0,
        rows or 0,
        f"its {RESULT_KINDS[kind]}",
        advice="open a smaller map, or raise the limit if this machine has the memory",
    )


def _full(path: Path) -> Any:
    import warnings

    import pydicom

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pydicom.dcmread(path)
    except Exception as error:  # pydicom raises many types for damaged files
        raise CorruptFileError(
            f"{path.name}: could not be read because {read_problem(error)}; re-copy or "
            "export it again.",
            path,
        ) from error


def _referenced_uids(dataset: Any) -> list[str]:
    """SOP Instance UIDs of the images the object references, in the order stated."""
    found: list[str] = []
    for series in dataset.get("ReferencedSeriesSequence") or []:
        for item in series.get("ReferencedInstanceSequence") or []:
            found.append(str(item.get("ReferencedSOPInstanceUID", "")))
    for item in dataset.get("ReferencedImageSequence") or []:
        found.append(str(item.get("ReferencedSOPInstanceUID", "")))
    for series in dataset.get("CurrentRequestedProcedureEvidenceSequence") or []:
        for ref in series.get("ReferencedSeriesSequence") or []:
            for item in ref.get("ReferencedSOPSequence") or []:
                found.append(str(item.get("ReferencedSOPInstanceUID", "")))
    for annotation in dataset.get("GraphicAnnotationSequence") or []:
        for item in annotation.get("ReferencedImageSequence") or []:
            found.append(str(item.get("ReferencedSOPInstanceUID", "")))
    return [uid for uid in dict.fromkeys(found) if uid]


def _find_source(
    path: Path, referenced: list[str], frame_of_reference: str
) -> DicomImageSource | None:
    """The referenced image (or a slide of the same frame of reference) beside ``path``."""
    wanted = set(referenced)
    siblings = sorted(p for p in path.parent.glob("*.dcm") if p != path)[:_MAX_SIBLINGS]
    fallback = None
    for sibling in siblings:
        try:
            header = read_header(sibling)
        except MedVLError:
            continue
        if result_kind(header) is not None:
            continue
        uid = str(header.get("SOPInstanceUID", ""))
        same_frame = (
            frame_of_reference and str(header.get("FrameOfReferenceUID", "")) == frame_of_reference
        )
        if uid in wanted or (same_frame and str(header.get("Modality", "")).upper() == "SM"):
            try:
                found = dicom_image_source(sibling)
            except MedVLError:
                continue
            if uid in wanted:
                return found
            fallback = fallback or found
    return fallback


def is_dicom_result(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a readable DICOM file whose SOP Class is a result object."""
    try:
        return result_kind(read_header(Path(path))) is not None
    except MedVLError:
        return False
