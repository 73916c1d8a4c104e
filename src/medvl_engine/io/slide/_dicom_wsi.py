"""DICOM VL Whole Slide Microscopy (modality SM) as a lazy pyramid.

Each VOLUME instance of a series is one pyramid level; THUMBNAIL, LABEL and
OVERVIEW instances become associated images. Only headers are parsed on open;
frame (tile) byte ranges are located in the file and each frame is read with
``os.pread`` and decoded with imagecodecs when a chunk needs it
(:mod:`medvl_engine.io.slide._dicom_tiles`). TILED_FULL and TILED_SPARSE
organisations are read (first focal plane and optical path).

Opening one file also reads up to 256 other ``*.dcm`` files beside it to find
the rest of its series. Only the file the user opened can fail the open: a
neighbour that is not a regular file (a FIFO, a device) is never opened, and
one that cannot be read for any reason is skipped and counted in the
``medvl.skipped_files`` property.

Headers that would give wrong pixels are refused with a sentence instead of
being guessed around (see :mod:`medvl_engine.io.slide._dicom_tiles`). A Pixel
Spacing that is not two positive numbers leaves the slide without an mpp
(operations that need one refuse it) and says so in the
``medvl.pixel_spacing_warning`` property.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io._dicom_values import (
    as_list,
    finite_number,
    is_regular_file,
    printable,
    read_problem,
    stated,
    whole_number,
)
from medvl_engine.io.slide._dicom_frames import DAMAGED
from medvl_engine.io.slide._dicom_tiles import FrameSource, whole_image
from medvl_engine.io.slide._parts import SlideParts
from medvl_engine.io.slide.pixel_sources import LazyImages

__all__ = ["open_dicom_slide"]

_PRIVATE_KEYWORDS = (
    "PatientName",
    "PatientID",
    "PatientBirthDate",
    "AccessionNumber",
    "StudyID",
    "ContainerIdentifier",
    "ReferringPhysicianName",
    "InstitutionName",
)
_PUBLIC_KEYWORDS = (
    "Manufacturer",
    "ManufacturerModelName",
    "SoftwareVersions",
    "SeriesDescription",
    "SpecimenDescriptionSequence",
)
_ASSOCIATED_NAMES = {"THUMBNAIL": "thumbnail", "LABEL": "label", "OVERVIEW": "macro"}
_MAX_SIBLINGS = 256


def _read_header(path: Path) -> tuple[Any, int]:
    """(dataset without pixels, file offset just after the header).

    Every top-level element except sequences is converted here, so that damaged values
    raise now (where the caller decides whether the file may fail the open). Sequences stay
    unparsed until used: a neighbour's per-frame positions (thousands of items) cost time
    only when it belongs to the series being opened, and their damage surfaces where it is
    handled (building a level, or the guarded spacing and objective reads).
    """
    import pydicom

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid values are reported by the checks below
        with open(path, "rb") as handle:
            dataset = pydicom.dcmread(handle, stop_before_pixels=True)
            offset = handle.tell()
        for tag in list(dataset.keys()):
            if getattr(dataset.get_item(tag), "VR", None) != "SQ":
                dataset[tag]  # converts the raw element
    return dataset, offset


def _declared_width(dataset: Any) -> int:
    """The width the header states, for ordering levels only (0 when it is unreadable)."""
    width = whole_number(dataset.get("TotalPixelMatrixColumns"))
    if width is None:
        width = whole_number(dataset.get("Columns"))
    return width or 0


def _is_dicom(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(132)
    except OSError:
        return False
    return len(head) == 132 and head[128:132] == b"DICM"


def _series_files(path: Path) -> tuple[list[Path], int]:
    """(files to read, the opened one first; count of ``*.dcm`` FIFOs, devices and sockets).

    Such special files are never opened: reading a FIFO waits for a writer forever.
    """
    if path.is_dir():
        entries = sorted(path.iterdir())
        regular = [p for p in entries if is_regular_file(p)]
        named = [p for p in entries if p.suffix.lower() == ".dcm"]
        return [p for p in regular if _is_dicom(p)], _count_special(named, regular)
    siblings = sorted(p for p in path.parent.glob("*.dcm") if p != path)[:_MAX_SIBLINGS]
    regular = [p for p in siblings if is_regular_file(p)]
    return [path, *regular], _count_special(siblings, regular)


def _count_special(candidates: list[Path], regular: list[Path]) -> int:
    kept = set(regular)
    return sum(1 for p in candidates if p not in kept and not p.is_dir())


def _image_flavour(dataset: Any) -> str:
    image_type = [str(v).upper() for v in as_list(dataset.get("ImageType"))]
    return image_type[2] if len(image_type) > 2 else "VOLUME"


def _modality(dataset: Any) -> str:
    return (printable(dataset.get("Modality")) or "").upper()


def _slide_mpp(dataset: Any) -> tuple[tuple[float, float] | None, str | None]:
    """((x, y) µm per pixel or None, a warning when the stated spacing is impossible)."""
    try:
        shared = dataset.get("SharedFunctionalGroupsSequence")
        if not shared or not shared[0].get("PixelMeasuresSequence"):
            return None, None
        spacing = shared[0].PixelMeasuresSequence[0].get("PixelSpacing")
    except Exception:  # a damaged sequence: pydicom raises many types
        return None, (
            "the Pixel Spacing could not be read (its header sequence is damaged), so the "
            "slide's pixel size is unknown"
        )
    if spacing is None or spacing == "":
        return None, None
    values = [finite_number(v) for v in as_list(spacing)]
    positive = [v for v in values if v is not None and v > 0]
    if len(values) != 2 or len(positive) != 2:
        return None, (
            f"Pixel Spacing {stated(spacing)} mm is not two positive numbers, so the slide's "
            "pixel size is unknown"
        )
    row_mm, col_mm = positive
    return (col_mm * 1000.0, row_mm * 1000.0), None


def _objective_power(dataset: Any) -> float | None:
    """The objective lens power, None when absent, not positive or unreadable."""
    try:
        for item in dataset.get("OpticalPathSequence") or []:
            power = finite_number(item.get("ObjectiveLensPower"))
            if power is not None and power > 0:
                return power
    except Exception:  # a damaged sequence: the power is unknown, the pixels are not affected
        return None
    return None


def _headers(path: Path) -> tuple[list[tuple[Path, Any, int]], int]:
    """(readable headers, the opened file's first; count of skipped neighbours)."""
    files, skipped = _series_files(path)
    headers: list[tuple[Path, Any, int]] = []
    for index, candidate in enumerate(files):
        try:
            dataset, offset = _read_header(candidate)
        except Exception as error:  # pydicom raises many types for damaged files
            if index == 0 and not path.is_dir():
                raise CorruptFileError(
                    f"{path.name}: {read_problem(error)}; re-copy or re-export it.", path
                ) from error
            skipped += 1
            continue
        headers.append((candidate, dataset, offset))
    return headers, skipped


def _volume_sources(
    path: Path, volumes: list[tuple[Path, Any, int]]
) -> tuple[list[FrameSource], int]:
    """One source per pyramid level, largest first; damaged neighbours are skipped (counted)."""
    volumes = sorted(volumes, key=lambda h: -_declared_width(h[1]))
    sources: list[FrameSource] = []
    skipped = 0
    widths: set[int] = set()
    for candidate, dataset, offset in volumes:
        if _declared_width(dataset) in widths and candidate != path:
            continue  # another focal plane or optical path of a level already kept
        try:
            source = FrameSource(candidate, dataset, offset, len(sources))
        except Exception:
            if candidate == path:
                for kept in sources:
                    kept.close()
                raise
            skipped += 1
            continue
        if source.shape[1] in widths:
            source.close()
            continue
        widths.add(source.shape[1])
        sources.append(source)
    return sources, skipped


def _associated_sources(
    path: Path, headers: list[tuple[Path, Any, int]]
) -> tuple[dict[str, FrameSource], int]:
    associated: dict[str, FrameSource] = {}
    skipped = 0
    for candidate, dataset, offset in headers:
        name = _ASSOCIATED_NAMES.get(_image_flavour(dataset))
        if not name or name in associated:
            continue
        try:
            associated[name] = FrameSource(candidate, dataset, offset, 0)
        except Exception:
            if candidate == path:
                for kept in associated.values():
                    kept.close()
                raise
            skipped += 1
        else:
            associated[name].label = f"the {name} image"
    return associated, skipped


def open_dicom_slide(path: Path) -> SlideParts:
    """Open a DICOM SM file (with the other instances of its series beside it) or a folder.

    Returns the levels and metadata; :func:`medvl_engine.io.slide.open_slide` builds the Slide.
    """
    try:
        return _open(path)
    except MedVLError:
        raise
    except Exception as error:  # pydicom converts values lazily: damage can surface anywhere
        raise CorruptFileError(
            f"{path.name}: {read_problem(error)}; re-copy or re-export it.", path
        ) from error


def _open(path: Path) -> SlideParts:
    import pydicom

    headers, skipped = _headers(path)
    if not headers:
        extra = f" ({skipped} could not be read)" if skipped else ""
        raise UnsupportedFormatError(
            f"{path.name}: holds no DICOM files{extra}; give a DICOM WSI file or its folder.",
            path,
        )
    if not path.is_dir():
        modality = _modality(headers[0][1])
        if modality != "SM":
            raise UnsupportedFormatError(
                f"{path.name}: is a DICOM {modality or 'non-slide'} image, not a whole-slide "
                "image (SM); open it as a mammogram (medvl info --kind mammogram).",
                path,
            )
        series = headers[0][1].get("SeriesInstanceUID")
        headers = [h for h in headers if h[1].get("SeriesInstanceUID") == series]
    headers = [h for h in headers if _modality(h[1]) == "SM"]
    volumes = [h for h in headers if _image_flavour(h[1]) == "VOLUME"]
    if not volumes:
        raise UnsupportedFormatError(
            f"{path.name}: no DICOM whole-slide (SM) VOLUME image found; give a DICOM WSI.", path
        )
    if path.is_dir():
        largest = max(volumes, key=lambda h: _declared_width(h[1]))
        series = largest[1].get("SeriesInstanceUID")
        headers = [h for h in headers if h[1].get("SeriesInstanceUID") == series]
        volumes = [h for h in volumes if h[1].get("SeriesInstanceUID") == series]

    sources, skipped_volumes = _volume_sources(path, volumes)
    if not sources:
        raise CorruptFileError(
            f"{path.name}: none of the {len(volumes)} whole-slide image files of its series "
            f"could be read; {DAMAGED}",
            path,
        )
    try:
        associated, skipped_associated = _associated_sources(path, headers)
    except Exception:
        for source in sources:
            source.close()
        raise
    skipped += skipped_volumes + skipped_associated

    base = next(d for p, d, _ in volumes if p == sources[0].path)
    mpp, spacing_warning = _slide_mpp(base)
    properties: dict[str, Any] = {
        "dicom.TransferSyntaxUID": str(base.file_meta.get("TransferSyntaxUID", "")),
        "dicom.SeriesInstanceUID": str(base.get("SeriesInstanceUID", "")),
        "dicom.DimensionOrganizationType": str(base.get("DimensionOrganizationType", "")),
    }
    if skipped:
        properties["medvl.skipped_files"] = skipped
    if spacing_warning:
        properties["medvl.pixel_spacing_warning"] = spacing_warning
    for keyword in _PUBLIC_KEYWORDS:
        value = base.get(keyword)
        if value not in (None, "") and not isinstance(value, pydicom.Sequence):
            properties[f"dicom.{keyword}"] = str(value)
    private = {
        f"dicom.{keyword}": str(base.get(keyword))
        for keyword in _PRIVATE_KEYWORDS
        if base.get(keyword) not in (None, "")
    }
    parts = SlideParts()
    parts.sources = list(sources)
    parts.tile_sizes = [source.tile_hw for source in sources]
    parts.vendor = "dicom"
    parts.mpp = mpp
    parts.objective_power = _objective_power(base)
    parts.properties = properties
    parts.private_properties = private
    parts.associated = LazyImages(
        path, {name: whole_image(source) for name, source in associated.items()}
    )
    parts.closers = [source.close for source in [*sources, *associated.values()]]
    return parts
