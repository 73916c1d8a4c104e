"""DICOM VL Whole Slide Microscopy (modality SM) as a lazy pyramid.

Each VOLUME instance of a series is one pyramid level; THUMBNAIL, LABEL and
OVERVIEW instances become associated images. Only headers are parsed on open;
frame (tile) byte ranges are located in the file and each frame is read with
``os.pread`` and decoded with imagecodecs when a chunk needs it. TILED_FULL
and TILED_SPARSE organisations are read (first focal plane and optical path).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import CorruptFileError, UnsupportedFormatError
from medvl_engine.io._levels import (
    LazyImages,
    PositionalFile,
    for_each_in_parallel,
    to_rgb,
    wrap_decode_errors,
)

if TYPE_CHECKING:
    from medvl_engine.io.slide import Slide

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
_ITEM_TAG = b"\xfe\xff\x00\xe0"
_SEQUENCE_END_TAG = b"\xfe\xff\xdd\xe0"
_MAX_SIBLINGS = 256


def _codec(transfer_syntax: str) -> Callable[..., Any] | None:
    """The imagecodecs decoder for an encapsulated transfer syntax, or None if uncompressed.

    Raises LookupError for a transfer syntax that is not read here.
    """
    import imagecodecs

    if transfer_syntax in ("1.2.840.10008.1.2", "1.2.840.10008.1.2.1"):
        return None
    table: dict[str, Callable[..., Any]] = {
        "1.2.840.10008.1.2.4.50": imagecodecs.jpeg8_decode,
        "1.2.840.10008.1.2.4.51": imagecodecs.jpeg8_decode,
        "1.2.840.10008.1.2.4.57": imagecodecs.ljpeg_decode,
        "1.2.840.10008.1.2.4.70": imagecodecs.ljpeg_decode,
        "1.2.840.10008.1.2.4.80": imagecodecs.jpegls_decode,
        "1.2.840.10008.1.2.4.81": imagecodecs.jpegls_decode,
        "1.2.840.10008.1.2.4.90": imagecodecs.jpeg2k_decode,
        "1.2.840.10008.1.2.4.91": imagecodecs.jpeg2k_decode,
        "1.2.840.10008.1.2.4.201": imagecodecs.jpeg2k_decode,
        "1.2.840.10008.1.2.4.202": imagecodecs.jpeg2k_decode,
        "1.2.840.10008.1.2.4.203": imagecodecs.jpeg2k_decode,
    }
    return table[transfer_syntax]


def _read_header(path: Path) -> tuple[Any, int]:
    """(dataset without pixels, file offset of the Pixel Data element)."""
    import pydicom

    with open(path, "rb") as handle:
        dataset = pydicom.dcmread(handle, stop_before_pixels=True)
        return dataset, handle.tell()


def _frame_ranges(path: Path, dataset: Any, offset: int) -> list[tuple[int, int]]:
    """(file offset, byte count) of every frame's encoded data, in frame order."""
    frames = int(dataset.get("NumberOfFrames", 1) or 1)
    with open(path, "rb") as handle:
        handle.seek(offset)
        tag = handle.read(4)
        if tag != b"\xe0\x7f\x10\x00":
            raise ValueError("Pixel Data element not found after the header")
        vr = handle.read(2)
        if vr in (b"OB", b"OW"):
            handle.read(2)
            (length,) = struct.unpack("<I", handle.read(4))
        else:
            (length,) = struct.unpack("<I", vr + handle.read(2))
        start = handle.tell()
        if length != 0xFFFFFFFF:
            frame_bytes = (
                int(dataset.Rows)
                * int(dataset.Columns)
                * int(dataset.SamplesPerPixel)
                * int(dataset.BitsAllocated)
                // 8
            )
            if frame_bytes * frames > length:
                raise ValueError("Pixel Data is shorter than its frames")
            return [(start + i * frame_bytes, frame_bytes) for i in range(frames)]
        fragments: list[tuple[int, int]] = []
        offsets_table: list[int] = []
        first = True
        while True:
            item = handle.read(8)
            if len(item) < 8:
                raise ValueError("Pixel Data ends before its sequence delimiter")
            if item[:4] == _SEQUENCE_END_TAG:
                break
            if item[:4] != _ITEM_TAG:
                raise ValueError("unexpected element inside encapsulated Pixel Data")
            (size,) = struct.unpack("<I", item[4:])
            if first:
                table = handle.read(size)
                offsets_table = list(struct.unpack(f"<{size // 4}I", table)) if size else []
                first = False
                fragments_start = handle.tell()
                continue
            fragments.append((handle.tell(), size))
            handle.seek(size, os.SEEK_CUR)
    if len(fragments) == frames:
        return fragments
    if len(offsets_table) == frames:
        grouped = []
        bounds = [fragments_start + o for o in offsets_table] + [math.inf]
        for index in range(frames):
            parts = [f for f in fragments if bounds[index] <= f[0] - 8 < bounds[index + 1]]
            if not parts:
                raise ValueError(f"frame {index} has no fragments")
            grouped.append((parts[0][0], parts[-1][0] + parts[-1][1] - parts[0][0]))
        return grouped
    raise ValueError(f"{len(fragments)} fragments cannot be assigned to {frames} frames")


class _FrameSource:
    """Pixels of one SM instance, tile by tile; rows, cols in the instance's total pixel matrix."""

    def __init__(self, path: Path, dataset: Any, pixel_offset: int, level: int) -> None:
        self.path = path
        self.tile_hw = (int(dataset.Rows), int(dataset.Columns))
        width = int(dataset.get("TotalPixelMatrixColumns") or dataset.Columns)
        height = int(dataset.get("TotalPixelMatrixRows") or dataset.Rows)
        self.shape = (height, width, 3)
        self.dtype = np.dtype(np.uint8)
        self.samples = int(dataset.SamplesPerPixel)
        self.planar = int(dataset.get("PlanarConfiguration", 0) or 0)
        if int(dataset.BitsAllocated) != 8:
            raise UnsupportedFormatError(
                f"{path.name}: {int(dataset.BitsAllocated)}-bit samples are not an 8-bit "
                "brightfield slide; convert it to 8-bit RGB.",
                path,
            )
        transfer_syntax = str(dataset.file_meta.TransferSyntaxUID)
        try:
            self.codec = _codec(transfer_syntax)
        except LookupError:
            raise UnsupportedFormatError(
                f"{path.name}: slide tiles use transfer syntax {transfer_syntax}, which is not "
                "read here; convert the slide to JPEG, JPEG 2000 or uncompressed tiles.",
                path,
            ) from None
        self.ranges = _frame_ranges(path, dataset, pixel_offset)
        self.frame_of = self._frame_map(dataset)
        self.file = PositionalFile(path)
        self.read = wrap_decode_errors(path, level)(self._read)

    def _frame_map(self, dataset: Any) -> dict[tuple[int, int], int]:
        tile_h, tile_w = self.tile_hw
        across = math.ceil(self.shape[1] / tile_w)
        down = math.ceil(self.shape[0] / tile_h)
        organisation = str(dataset.get("DimensionOrganizationType", "TILED_FULL")).upper()
        per_frame = dataset.get("PerFrameFunctionalGroupsSequence")
        if organisation == "TILED_SPARSE" and per_frame:
            mapping: dict[tuple[int, int], int] = {}
            for index, group in enumerate(per_frame):
                position = group.PlanePositionSlideSequence[0]
                row = (int(position.RowPositionInTotalImagePixelMatrix) - 1) // tile_h
                col = (int(position.ColumnPositionInTotalImagePixelMatrix) - 1) // tile_w
                mapping.setdefault((row, col), index)
            return mapping
        count = min(len(self.ranges), across * down)
        return {(i // across, i % across): i for i in range(count)}

    def _frame(self, index: int) -> np.ndarray:
        offset, count = self.ranges[index]
        data = self.file.read(offset, count)
        if len(data) != count:
            raise ValueError("frame data ends before its recorded length")
        tile_h, tile_w = self.tile_hw
        if self.codec is None:
            pixels = np.frombuffer(data, np.uint8)
            if self.planar and self.samples > 1:
                return pixels.reshape(self.samples, tile_h, tile_w).transpose(1, 2, 0)
            return pixels.reshape(tile_h, tile_w, self.samples)
        pixels = np.asarray(self.codec(data))
        if pixels.shape[:2] != (tile_h, tile_w):
            raise ValueError(f"frame {index} decodes to {pixels.shape[:2]}, not {self.tile_hw}")
        return pixels

    def _read(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        out = np.full((y1 - y0, x1 - x0, 3), 255, np.uint8)
        if y1 <= y0 or x1 <= x0:
            return out
        tile_h, tile_w = self.tile_hw
        cells = [
            (row, col)
            for row in range(y0 // tile_h, (y1 - 1) // tile_h + 1)
            for col in range(x0 // tile_w, (x1 - 1) // tile_w + 1)
            if (row, col) in self.frame_of
        ]

        def place(cell: tuple[int, int]) -> None:
            row, col = cell
            tile = to_rgb(self._frame(self.frame_of[(row, col)]))
            ty, tx = row * tile_h, col * tile_w
            sy0, sy1 = max(y0, ty), min(y1, ty + tile_h)
            sx0, sx1 = max(x0, tx), min(x1, tx + tile_w)
            out[sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0] = tile[
                sy0 - ty : sy1 - ty, sx0 - tx : sx1 - tx
            ]

        for_each_in_parallel(place, cells)
        return out

    def close(self) -> None:
        self.file.close()


def _whole_image(source: _FrameSource) -> Callable[[], np.ndarray]:
    height, width, _ = source.shape
    return lambda: source.read(0, height, 0, width)


def _is_dicom(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            head = handle.read(132)
    except OSError:
        return False
    return len(head) == 132 and head[128:132] == b"DICM"


def _series_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and _is_dicom(p))
    siblings = sorted(p for p in path.parent.glob("*.dcm") if p != path)[:_MAX_SIBLINGS]
    return [path, *siblings]


def _image_flavour(dataset: Any) -> str:
    image_type = [str(v).upper() for v in (dataset.get("ImageType") or [])]
    return image_type[2] if len(image_type) > 2 else "VOLUME"


def open_dicom_slide(path: Path) -> Slide:
    """Open a DICOM SM file (with the other instances of its series beside it) or a folder."""
    import pydicom
    from pydicom.errors import InvalidDicomError

    from medvl_engine.io.slide import Slide

    headers: list[tuple[Path, Any, int]] = []
    for index, candidate in enumerate(_series_files(path)):
        try:
            dataset, offset = _read_header(candidate)
        except (InvalidDicomError, OSError, ValueError, EOFError, struct.error) as error:
            if index == 0 and not path.is_dir():
                raise CorruptFileError(
                    f"{path.name}: the DICOM header could not be read ({error}); the file is "
                    "damaged or truncated, re-copy or re-export it.",
                    path,
                ) from error
            continue
        headers.append((candidate, dataset, offset))
    if not headers:
        raise UnsupportedFormatError(
            f"{path.name}: holds no DICOM files; give a DICOM WSI file or its folder.", path
        )
    if not path.is_dir():
        modality = str(headers[0][1].get("Modality", "")).upper()
        if modality != "SM":
            raise UnsupportedFormatError(
                f"{path.name}: is a DICOM {modality or 'non-slide'} image, not a whole-slide "
                "image (SM); open it as a mammogram (medvl info --kind mammogram).",
                path,
            )
        series = headers[0][1].get("SeriesInstanceUID")
        headers = [h for h in headers if h[1].get("SeriesInstanceUID") == series]
    headers = [h for h in headers if str(h[1].get("Modality", "")).upper() == "SM"]
    volumes = [h for h in headers if _image_flavour(h[1]) == "VOLUME"]
    if not volumes:
        raise UnsupportedFormatError(
            f"{path.name}: no DICOM whole-slide (SM) VOLUME image found; give a DICOM WSI.", path
        )
    if path.is_dir():
        largest = max(volumes, key=lambda h: int(h[1].get("TotalPixelMatrixColumns") or 0))
        series = largest[1].get("SeriesInstanceUID")
        headers = [h for h in headers if h[1].get("SeriesInstanceUID") == series]
        volumes = [h for h in volumes if h[1].get("SeriesInstanceUID") == series]

    volumes.sort(key=lambda h: -int(h[1].get("TotalPixelMatrixColumns") or h[1].Columns))
    sources: list[_FrameSource] = []
    associated: dict[str, _FrameSource] = {}
    seen_widths: set[int] = set()
    try:
        for candidate, dataset, offset in volumes:
            width = int(dataset.get("TotalPixelMatrixColumns") or dataset.Columns)
            if width in seen_widths:
                continue  # another focal plane or optical path of a level already kept
            seen_widths.add(width)
            sources.append(_FrameSource(candidate, dataset, offset, len(sources)))
        for candidate, dataset, offset in headers:
            name = _ASSOCIATED_NAMES.get(_image_flavour(dataset))
            if name and name not in associated:
                associated[name] = _FrameSource(candidate, dataset, offset, 0)
    except (ValueError, KeyError, AttributeError, struct.error, OSError) as error:
        for source in [*sources, *associated.values()]:
            source.close()
        raise CorruptFileError(
            f"{path.name}: the DICOM pixel data layout could not be read ({error}); the file "
            "is damaged or truncated, re-copy or re-export it.",
            path,
        ) from error

    base = volumes[0][1]
    mpp = None
    try:
        measures = base.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
        row_mm, col_mm = (float(v) for v in measures.PixelSpacing)
        if row_mm > 0 and col_mm > 0:
            mpp = (col_mm * 1000.0, row_mm * 1000.0)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        mpp = None
    objective = None
    for item in base.get("OpticalPathSequence") or []:
        if item.get("ObjectiveLensPower") not in (None, ""):
            objective = float(item.ObjectiveLensPower)
            break
    properties: dict[str, Any] = {
        "dicom.TransferSyntaxUID": str(base.file_meta.TransferSyntaxUID),
        "dicom.SeriesInstanceUID": str(base.get("SeriesInstanceUID", "")),
        "dicom.DimensionOrganizationType": str(base.get("DimensionOrganizationType", "")),
    }
    for keyword in _PUBLIC_KEYWORDS:
        value = base.get(keyword)
        if value not in (None, "") and not isinstance(value, pydicom.Sequence):
            properties[f"dicom.{keyword}"] = str(value)
    private = {
        f"dicom.{keyword}": str(base.get(keyword))
        for keyword in _PRIVATE_KEYWORDS
        if base.get(keyword) not in (None, "")
    }
    closers = [source.close for source in [*sources, *associated.values()]]
    return Slide(
        path,
        sources,
        [source.tile_hw for source in sources],
        vendor="dicom",
        mpp=mpp,
        objective_power=objective,
        properties=properties,
        private_properties=private,
        associated_images=LazyImages(
            path, {name: _whole_image(source) for name, source in associated.items()}
        ),
        closers=closers,
    )
