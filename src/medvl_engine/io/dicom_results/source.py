"""The DICOM image a result refers to: its level-0 header, identity and geometry.

A whole-slide image is a series of instances, one per pyramid level; results are placed on
its level 0 (the largest VOLUME instance). :func:`dicom_image_source` reads headers only
(never pixels): the file given and up to 256 other ``*.dcm`` regular files beside it (or the
files of a folder), keeping the instances of the same series. Other DICOM images (a
mammogram) are their own level 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvl_engine.errors import CorruptFileError, UnsupportedFormatError
from medvl_engine.io._dicom_values import is_regular_file, read_problem, whole_number
from medvl_engine.io.dicom_results.geometry import SlideGeometry

__all__ = ["DicomImageSource", "dicom_image_source", "read_header"]

_MAX_SIBLINGS = 256


@dataclass
class DicomImageSource:
    """An image results are placed on.

    ``path``: the level-0 file; ``dataset``: its header (no pixels); ``size`` (columns, rows)
    of its total pixel matrix; ``geometry``: its place in the slide coordinate system (None
    for images without one, such as mammograms); ``sop_instance_uids``: every instance of the
    series found (all pyramid levels), level 0 first.
    """

    path: Path
    dataset: Any
    size: tuple[int, int]
    geometry: SlideGeometry | None
    sop_instance_uids: list[str] = field(default_factory=list)
    level_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    """(columns, rows) of every instance of the series found, by SOP Instance UID."""

    @property
    def series_instance_uid(self) -> str:
        return str(self.dataset.get("SeriesInstanceUID", ""))

    @property
    def study_instance_uid(self) -> str:
        return str(self.dataset.get("StudyInstanceUID", ""))

    @property
    def frame_of_reference_uid(self) -> str:
        return str(self.dataset.get("FrameOfReferenceUID", ""))

    @property
    def is_slide(self) -> bool:
        return str(self.dataset.get("Modality", "")).upper() == "SM"


def read_header(path: Path) -> Any:
    """The header of one DICOM file (no pixel data); one sentence when it cannot be read."""
    import pydicom

    if not is_regular_file(path):
        raise UnsupportedFormatError(
            f"{path.name}: is not a regular file; give a DICOM file.", path
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pydicom.dcmread(path, stop_before_pixels=True)
    except Exception as error:  # pydicom raises many types for damaged files
        raise CorruptFileError(
            f"{path.name}: the DICOM header could not be read because {read_problem(error)}; "
            "re-copy or re-export it.",
            path,
        ) from error


def _quiet_header(path: Path) -> Any | None:
    try:
        return read_header(path)
    except (UnsupportedFormatError, CorruptFileError):
        return None


def _is_volume(dataset: Any) -> bool:
    image_type = [str(v).upper() for v in (dataset.get("ImageType") or [])]
    return str(dataset.get("Modality", "")).upper() == "SM" and (
        len(image_type) < 3 or image_type[2] == "VOLUME"
    )


def _width(dataset: Any) -> int:
    return (
        whole_number(dataset.get("TotalPixelMatrixColumns"))
        or whole_number(dataset.get("Columns"))
        or 0
    )


def dicom_image_source(path: str | Path) -> DicomImageSource:
    """The level-0 image of the DICOM file or folder ``path`` (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        candidates = sorted(p for p in path.iterdir() if p.suffix.lower() in (".dcm", ".dicom"))
        headers = [(p, h) for p in candidates[:_MAX_SIBLINGS] if (h := _quiet_header(p))]
        volumes = [(p, h) for p, h in headers if _is_volume(h)]
        if not volumes:
            raise UnsupportedFormatError(
                f"{path.name}: holds no DICOM whole-slide (SM) VOLUME image; give a DICOM WSI.",
                path,
            )
        series = max(volumes, key=lambda item: _width(item[1]))[1].get("SeriesInstanceUID")
        return _source(volumes, series)
    header = read_header(path)
    if not _is_volume(header):
        return _source([(path, header)], header.get("SeriesInstanceUID"))
    siblings = sorted(p for p in path.parent.glob("*.dcm") if p != path)[:_MAX_SIBLINGS]
    headers = [(path, header)] + [(p, h) for p in siblings if (h := _quiet_header(p))]
    series = header.get("SeriesInstanceUID")
    return _source([(p, h) for p, h in headers if _is_volume(h)], series)


def _source(headers: list[tuple[Path, Any]], series: Any) -> DicomImageSource:
    same = [(p, h) for p, h in headers if h.get("SeriesInstanceUID") == series]
    same.sort(key=lambda item: -_width(item[1]))
    level0_path, level0 = same[0]
    return DicomImageSource(
        path=level0_path,
        dataset=level0,
        size=_size(level0),
        geometry=SlideGeometry.from_dataset(level0),
        sop_instance_uids=[str(h.get("SOPInstanceUID", "")) for _, h in same],
        level_sizes={str(h.get("SOPInstanceUID", "")): _size(h) for _, h in same},
    )


def _size(dataset: Any) -> tuple[int, int]:
    columns = whole_number(dataset.get("TotalPixelMatrixColumns")) or whole_number(
        dataset.get("Columns")
    )
    rows = whole_number(dataset.get("TotalPixelMatrixRows")) or whole_number(dataset.get("Rows"))
    return (columns or 0, rows or 0)
