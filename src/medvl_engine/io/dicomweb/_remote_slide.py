"""A whole-slide series on a DICOMweb server as a lazy Slide: headers first, pixels on demand.

Opening reads the series' WADO-RS metadata (every instance's header, no pixels) and retrieves
only the coarsest pyramid level (its VOLUME instance, the smallest). Each finer level is a
pixel source that retrieves its instance into the cache the first time a window of it is read,
then reads it with the local DICOM WSI reader, so every check of a local file applies and a
later open reads from disk. A viewer asks for the coarsest level first and for finer ones only
as it zooms, so a slide shows after one small download. When every level is already cached the
series is simply opened from the cache.

Frames: level ``i`` is (H_i, W_i, 3) uint8 in level-i px (rows, columns); ``mpp`` is (x, y)
micrometres per level-0 px, from the level-0 header's Pixel Spacing (row, column) in mm.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.io.dicomweb._client import DEFAULT_TIMEOUT_SECONDS, client_for, server_errors
from medvl_engine.io.dicomweb._errors import InvalidReferenceError, NotOnServerError
from medvl_engine.io.dicomweb._query import InstanceEntry, search_series
from medvl_engine.io.dicomweb._reference import DicomWebReference, parse_reference
from medvl_engine.io.dicomweb._retrieve import cached_path, retrieve_instances

if TYPE_CHECKING:
    from medvl_engine.io.dicom_results import DicomImageSource
    from medvl_engine.io.slide import Slide

__all__ = [
    "RemoteLevel",
    "fetch_slide",
    "open_remote_slide",
    "open_remote_slide_and_source",
    "slide_levels",
    "slide_series",
]


@dataclasses.dataclass(frozen=True)
class RemoteLevel:
    """One pyramid level of a remote slide: its instance and sizes from the header."""

    entry: InstanceEntry
    header: Any
    """The instance's header as a pydicom Dataset (no pixels)."""
    width: int
    height: int
    tile: tuple[int, int]
    """(rows, columns) of one frame."""


def _reference(url: str | DicomWebReference) -> DicomWebReference:
    return parse_reference(url) if isinstance(url, str) else url


def slide_series(url: str | DicomWebReference, timeout: float) -> DicomWebReference:
    """The series of the slide at ``url``: a series, or a study holding exactly one SM series."""
    reference = _reference(url)
    if reference.level == "study":
        slides = [s for s in search_series(reference, timeout) if s.modality == "SM"]
        if len(slides) != 1:
            raise InvalidReferenceError(
                f"study {reference.study} on {reference.server} holds {len(slides)} slide (SM) "
                "series; give one as .../series/UID."
            )
        return reference.at(slides[0].study, slides[0].uid)
    if reference.level != "series":
        raise InvalidReferenceError(
            f"{reference.text()} does not name a slide; give .../studies/UID/series/UID."
        )
    return reference


def _number(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def series_headers(reference: DicomWebReference, timeout: float) -> list[Any]:
    """Every instance header of ``reference``'s series (WADO-RS metadata) as pydicom Datasets,
    bulk data left out."""
    from pydicom import Dataset

    assert reference.study is not None and reference.series is not None
    client = client_for(reference, timeout)
    with server_errors(reference, f"reading the metadata of series {reference.series}", timeout):
        answers = client.retrieve_series_metadata(reference.study, reference.series)
    return [Dataset.from_json(item, bulk_data_uri_handler=lambda *_: None) for item in answers]


def slide_levels(reference: DicomWebReference, timeout: float) -> list[RemoteLevel]:
    """The VOLUME instances of a slide series, one per pyramid level, largest first.

    Instances of one size after the first (other focal planes or optical paths) are left out,
    as the local reader reads the first. Raises NotOnServerError when the series holds none.
    """
    levels: dict[tuple[int, int], RemoteLevel] = {}
    headers = sorted(series_headers(reference, timeout), key=lambda h: (
        _number(h.get("InstanceNumber")), str(h.get("SOPInstanceUID", ""))
    ))  # fmt: skip
    for header in headers:
        image_type = [str(v).upper() for v in (header.get("ImageType") or [])]
        if str(header.get("Modality", "")).upper() != "SM":
            continue
        if len(image_type) >= 3 and image_type[2] != "VOLUME":
            continue
        tile = (_number(header.get("Rows")), _number(header.get("Columns")))
        width = _number(header.get("TotalPixelMatrixColumns")) or tile[1]
        height = _number(header.get("TotalPixelMatrixRows")) or tile[0]
        entry = InstanceEntry.from_json(header.to_json_dict(), reference.study, reference.series)
        if entry is None or width < 1 or height < 1 or (width, height) in levels:
            continue
        levels[(width, height)] = RemoteLevel(entry, header, width, height, tile)
    if not levels:
        raise NotOnServerError(
            f"series {reference.series} on {reference.server} holds no whole-slide (SM) VOLUME "
            "image; give the series of a slide."
        )
    return sorted(levels.values(), key=lambda level: -level.width)


class _LazyLevel:
    """A level's pixels; its instance is retrieved and opened on the first read."""

    def __init__(
        self, reference: DicomWebReference, level: RemoteLevel, timeout: float, opened: list[Any]
    ) -> None:
        self.shape = (level.height, level.width, 3)
        self.dtype = np.dtype(np.uint8)
        self._reference = reference
        self._level = level
        self._timeout = timeout
        self._opened = opened  # local slides to close with the remote one
        self._pixels: Any = None
        self._lock = threading.Lock()

    def _array(self) -> Any:
        with self._lock:
            if self._pixels is None:
                path = retrieve_instances(self._reference, [self._level.entry], self._timeout)[0]
                self._pixels = _local_level(path, self._level, self._opened)
            return self._pixels

    def read(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        """Pixels [y0:y1, x0:x1] of this level, (rows, columns, 3) uint8."""
        window = self._array()[y0:y1, x0:x1]
        return np.asarray(window.compute(scheduler="synchronous"))


def _local_level(path: Path, level: RemoteLevel, opened: list[Any]) -> Any:
    """The dask array of ``level`` in the local slide opened from its cached file ``path``."""
    from medvl_engine.errors import CorruptFileError
    from medvl_engine.io.slide import open_slide

    slide = open_slide(path)
    opened.append(slide)
    for array, size in zip(slide.levels, slide.level_dimensions, strict=True):
        if size == (level.width, level.height):
            return array
    raise CorruptFileError(
        f"{path.name}: the retrieved instance is not the {level.width} x {level.height} px "
        "level its header announced; clear the cache folder and open it again.",
        path,
    )


def _mpp(header: Any) -> tuple[float, float] | None:
    """(x, y) micrometres per px of the level-0 header (Pixel Spacing is row, column in mm)."""
    try:
        spacing = header.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0].PixelSpacing
        row_mm, col_mm = (float(v) for v in spacing)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    return (col_mm * 1000.0, row_mm * 1000.0) if row_mm > 0 and col_mm > 0 else None


def open_remote_slide(
    url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> Slide:
    """The DICOM whole-slide image (modality SM) at ``url`` (a series, or a study holding one
    SM series) as a lazy Slide: only the headers and the coarsest level are retrieved now, each
    finer level when its pixels are first read. Raises DicomWebError subclasses (one sentence)
    for server faults and a series without a slide."""
    reference = slide_series(url, timeout)
    return _open_levels(reference, slide_levels(reference, timeout), timeout)


def open_remote_slide_and_source(
    url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> tuple[Slide, DicomImageSource]:
    """:func:`open_remote_slide` and the slide's level-0 image for placing results on it
    (``DicomImageSource``, from the headers), with one metadata request."""
    reference = slide_series(url, timeout)
    levels = slide_levels(reference, timeout)
    return _open_levels(reference, levels, timeout), _image_source(reference, levels)


def fetch_slide(url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Path:
    """The cached level-0 file of the slide at ``url``, every pyramid level retrieved (for a
    command that reads the whole slide and writes DICOM results on it: the local reader then
    sees the full series beside that file)."""
    reference = slide_series(url, timeout)
    levels = slide_levels(reference, timeout)
    return retrieve_instances(reference, [level.entry for level in levels], timeout)[0]


def _open_levels(reference: DicomWebReference, levels: list[RemoteLevel], timeout: float) -> Slide:
    from medvl_engine.io.slide import Slide, open_slide

    paths = [cached_path(reference, level.entry) for level in levels]
    if all(path.is_file() and path.stat().st_size > 0 for path in paths):
        return open_slide(paths[0])
    coarse = retrieve_instances(reference, [levels[-1].entry], timeout)[0]
    opened: list[Any] = []
    sources = [_LazyLevel(reference, level, timeout, opened) for level in levels]
    local = open_slide(coarse)  # reads and checks the coarsest level's header and frames
    opened.append(local)
    sources[-1]._pixels = local.levels[local.level_dimensions.index(
        (levels[-1].width, levels[-1].height)
    )]  # fmt: skip
    return Slide(
        coarse,
        sources,
        [level.tile for level in levels],
        vendor="dicom",
        mpp=_mpp(levels[0].header),
        objective_power=local.objective_power,
        properties={**local.properties, "medvl.dicomweb": reference.text()},
        private_properties=local.private_properties,
        closers=[lambda: _close_all(opened)],
    )


def _close_all(slides: list[Any]) -> None:
    for slide in slides:
        slide.close()


def _image_source(reference: DicomWebReference, levels: list[RemoteLevel]) -> DicomImageSource:
    """The level-0 image of a slide from its headers (level 0 is its largest VOLUME instance);
    its ``path`` is where level 0 is kept in the cache, once retrieved."""
    from medvl_engine.io.dicom_results import DicomImageSource
    from medvl_engine.io.dicom_results.geometry import SlideGeometry

    return DicomImageSource(
        path=cached_path(reference, levels[0].entry),
        dataset=levels[0].header,
        size=(levels[0].width, levels[0].height),
        geometry=SlideGeometry.from_dataset(levels[0].header),
        sop_instance_uids=[level.entry.uid for level in levels],
        level_sizes={level.entry.uid: (level.width, level.height) for level in levels},
    )
