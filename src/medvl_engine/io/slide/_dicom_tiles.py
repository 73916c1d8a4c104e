"""One DICOM whole-slide instance (a pyramid level or an associated image), tile by tile.

The header is checked before any pixel is read, and refused in words where it would give
wrong pixels: tile or slide sizes of 0, tiles laid out with no Total Pixel Matrix, fewer
tiles than the matrix needs, palette colour or inverted grayscale, a Samples per Pixel value
that contradicts the colour model. Each decoded tile is checked against the header (size,
samples per pixel, bit depth) before it is placed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.common.reason import error_reason
from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io._dicom_values import printable, stated, whole_number
from medvl_engine.io.slide._dicom_frames import (
    CODEC_NAMES,
    DAMAGED,
    MISMATCHED,
    codec_for,
    frame_ranges,
)
from medvl_engine.io.slide.pixel_sources import (
    PositionalFile,
    for_each_in_parallel,
    to_rgb,
    wrap_decode_errors,
)

if TYPE_CHECKING:
    from pydicom import Dataset

__all__ = ["FrameSource", "whole_image"]

_PHOTOMETRIC_SAMPLES = {
    "MONOCHROME2": 1,
    "RGB": 3,
    "YBR_FULL": 3,
    "YBR_FULL_422": 3,
    "YBR_PARTIAL_420": 3,
    "YBR_ICT": 3,
    "YBR_RCT": 3,
}


def _positive(path: Path, dataset: Any, keyword: str, meaning: str) -> int:
    """A header count that must be a whole number >= 1, else a sentence naming it."""
    value = dataset.get(keyword)
    number = whole_number(value)
    if value is None or value == "":
        raise CorruptFileError(
            f"{path.name}: its header does not give {meaning} ({keyword}); {DAMAGED}", path
        )
    if number is None or number < 1:
        raise CorruptFileError(
            f"{path.name}: its header gives {meaning} ({keyword}) as {stated(value)}, which "
            f"is not a positive whole number; {DAMAGED}",
            path,
        )
    return number


def _matrix_size(
    path: Path, dataset: Any, tile_hw: tuple[int, int], frames: int
) -> tuple[int, int]:
    """(height, width) of the instance's total pixel matrix, checked against its tiles."""
    columns, rows = dataset.get("TotalPixelMatrixColumns"), dataset.get("TotalPixelMatrixRows")
    if columns is None and rows is None:
        if frames > 1:
            raise UnsupportedFormatError(
                f"{path.name}: holds {frames} tiles but no Total Pixel Matrix size, so where "
                "each tile goes is unknown; re-export it as a DICOM WSI that states its "
                "Total Pixel Matrix Rows and Columns.",
                path,
            )
        return tile_hw
    height = _positive(path, dataset, "TotalPixelMatrixRows", "the slide height in pixels")
    width = _positive(path, dataset, "TotalPixelMatrixColumns", "the slide width in pixels")
    return height, width


def _check_colour(path: Path, dataset: Any, samples: int, compressed: bool) -> None:
    """Refuse colour models whose pixels would be shown wrong, in words."""
    photometric = str(dataset.get("PhotometricInterpretation", "") or "").strip().upper()
    if photometric == "PALETTE COLOR":
        if "RedPaletteColorLookupTableData" not in dataset:
            raise CorruptFileError(
                f"{path.name}: says its pixels are palette colours (PALETTE COLOR) but holds no "
                "palette (Red, Green, Blue Palette Color Lookup Table Data), so its colours are "
                "unknown; re-export the slide as RGB.",
                path,
            )
        raise UnsupportedFormatError(
            f"{path.name}: stores its colours as palette indices (PALETTE COLOR), which is not "
            "read for slides; re-export the slide as RGB.",
            path,
        )
    if photometric == "MONOCHROME1":
        raise UnsupportedFormatError(
            f"{path.name}: stores inverted grayscale (MONOCHROME1), which is not read for "
            "slides; re-export the slide as RGB or MONOCHROME2.",
            path,
        )
    if samples not in (1, 3):
        raise UnsupportedFormatError(
            f"{path.name}: has {samples} samples per pixel; slides are read with 1 (grayscale) "
            "or 3 (colour), re-export it as RGB.",
            path,
        )
    expected = _PHOTOMETRIC_SAMPLES.get(photometric)
    if expected is not None and expected != samples:
        raise CorruptFileError(
            f"{path.name}: its header says {photometric} pixels with {samples} sample"
            f"{'s' if samples > 1 else ''} per pixel (Samples per Pixel), which do not go "
            f"together; {MISMATCHED}",
            path,
        )
    if not compressed and photometric.startswith("YBR"):
        raise UnsupportedFormatError(
            f"{path.name}: holds uncompressed {photometric} tiles, which are not read here; "
            "re-export the slide as RGB.",
            path,
        )


class FrameSource:
    """Pixels of one SM instance, tile by tile; rows, cols in the instance's total pixel matrix."""

    def __init__(self, path: Path, dataset: Dataset, pixel_offset: int, level: int) -> None:
        self.path = path
        self.label = f"level {level}"
        tile_h = _positive(path, dataset, "Rows", "the tile height in pixels")
        tile_w = _positive(path, dataset, "Columns", "the tile width in pixels")
        self.tile_hw = (tile_h, tile_w)
        frames = 1
        if dataset.get("NumberOfFrames") not in (None, ""):
            frames = _positive(path, dataset, "NumberOfFrames", "the number of tiles")
        height, width = _matrix_size(path, dataset, self.tile_hw, frames)
        self.shape = (height, width, 3)
        self.dtype = np.dtype(np.uint8)
        self.samples = _positive(path, dataset, "SamplesPerPixel", "the samples per pixel")
        self.planar = whole_number(dataset.get("PlanarConfiguration")) or 0
        bits = _positive(path, dataset, "BitsAllocated", "the bits per sample")
        if bits != 8:
            raise UnsupportedFormatError(
                f"{path.name}: {bits}-bit samples are not an 8-bit brightfield slide; convert "
                "it to 8-bit RGB.",
                path,
            )
        transfer_syntax = printable(dataset.file_meta.get("TransferSyntaxUID"))
        if not transfer_syntax:
            raise CorruptFileError(
                f"{path.name}: its header does not give a readable Transfer Syntax UID, so how "
                f"its tiles are encoded is unknown; {DAMAGED}",
                path,
            )
        try:
            self.codec = codec_for(transfer_syntax)
        except LookupError:
            raise UnsupportedFormatError(
                f"{path.name}: slide tiles use transfer syntax {transfer_syntax}, which is not "
                "read here; convert the slide to JPEG, JPEG 2000 or uncompressed tiles.",
                path,
            ) from None
        self.codec_name = CODEC_NAMES.get(transfer_syntax, "uncompressed")
        _check_colour(path, dataset, self.samples, self.codec is not None)
        self.ranges = frame_ranges(
            path, pixel_offset, self.codec is not None, (frames, tile_h, tile_w, self.samples)
        )
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
            return self._sparse_map(per_frame)
        if len(self.ranges) < across * down:
            raise CorruptFileError(
                f"{self.path.name}: holds {len(self.ranges)} tiles but its {self.shape[1]} x "
                f"{self.shape[0]} pixel slide in tiles of {tile_w} x {tile_h} needs "
                f"{across * down}; the file is truncated or its header is wrong, re-copy or "
                "re-export it.",
                self.path,
            )
        return {(i // across, i % across): i for i in range(across * down)}

    def _sparse_map(self, per_frame: Any) -> dict[tuple[int, int], int]:
        tile_h, tile_w = self.tile_hw
        if len(per_frame) != len(self.ranges):
            raise CorruptFileError(
                f"{self.path.name}: lists the positions of {len(per_frame)} tiles but holds "
                f"{len(self.ranges)}; {DAMAGED}",
                self.path,
            )
        mapping: dict[tuple[int, int], int] = {}
        for index, group in enumerate(per_frame):
            positions = group.get("PlanePositionSlideSequence") or []
            position = positions[0] if len(positions) else None
            row = (
                whole_number(position.get("RowPositionInTotalImagePixelMatrix"))
                if position
                else None
            )
            col = (
                whole_number(position.get("ColumnPositionInTotalImagePixelMatrix"))
                if position
                else None
            )
            if row is None or col is None:
                raise CorruptFileError(
                    f"{self.path.name}: the position of tile {index + 1} (Plane Position Slide "
                    f"Sequence) is missing or damaged; {DAMAGED}",
                    self.path,
                )
            mapping.setdefault(((row - 1) // tile_h, (col - 1) // tile_w), index)
        return mapping

    def _frame(self, index: int) -> np.ndarray:
        offset, count = self.ranges[index]
        data = self.file.read(offset, count)
        if len(data) != count:
            raise CorruptFileError(
                f"{self.path.name}: the file ends inside tile {index + 1} of {self.label}; "
                f"{DAMAGED}",
                self.path,
            )
        tile_h, tile_w = self.tile_hw
        if self.codec is None:
            pixels = np.frombuffer(data, np.uint8)
            if self.planar and self.samples > 1:
                return pixels.reshape(self.samples, tile_h, tile_w).transpose(1, 2, 0)
            return pixels.reshape(tile_h, tile_w, self.samples)
        if not data.rstrip(b"\x00").endswith(b"\xff\xd9"):
            # every JPEG-family stream ends in its end marker (FFD9); cut short, libjpeg
            # would fill the rest of the tile with grey without a word
            raise CorruptFileError(
                f"{self.path.name}: tile {index + 1} of {self.label} is cut short (its "
                f"{self.codec_name} data stops before its end marker); {DAMAGED}",
                self.path,
            )
        try:
            pixels = np.asarray(self.codec(data))
        except Exception as error:  # decoders raise their own types for damaged streams
            reason = error_reason(error)  # the decoder's own words, folded into one line
            raise CorruptFileError(
                f"{self.path.name}: tile {index + 1} of {self.label} could not be decoded as "
                f"{self.codec_name}{f' ({reason})' if reason else ''}; {DAMAGED}",
                self.path,
            ) from error
        return self._checked(index, pixels)

    def _checked(self, index: int, pixels: np.ndarray) -> np.ndarray:
        """A decoded tile, refused when it does not match what the header says."""
        tile_h, tile_w = self.tile_hw
        if pixels.ndim not in (2, 3) or pixels.shape[:2] != (tile_h, tile_w):
            size = " x ".join(str(n) for n in pixels.shape[1::-1])
            raise CorruptFileError(
                f"{self.path.name}: tile {index + 1} of {self.label} decodes to {size} pixels "
                f"where the header says {tile_w} x {tile_h}; {MISMATCHED}",
                self.path,
            )
        decoded = 1 if pixels.ndim == 2 else int(pixels.shape[-1])
        if decoded != self.samples:
            raise CorruptFileError(
                f"{self.path.name}: its header says {self.samples} sample"
                f"{'s' if self.samples > 1 else ''} per pixel (Samples per Pixel) but its tiles "
                f"decode to {decoded}; {MISMATCHED}",
                self.path,
            )
        if pixels.dtype != np.uint8:
            raise CorruptFileError(
                f"{self.path.name}: its tiles decode to {pixels.dtype.itemsize * 8}-bit samples "
                f"where the header says 8-bit; {MISMATCHED}",
                self.path,
            )
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

        try:
            for_each_in_parallel(place, cells)
        except MedVLError:
            raise
        except OSError as error:
            raise CorruptFileError(
                f"{self.path.name}: the pixel data of {self.label} could not be read from the "
                f"disk ({(error.strerror or 'a read error').lower()}); check the file and its "
                "disk, then try again.",
                self.path,
            ) from error
        return out

    def close(self) -> None:
        self.file.close()


def whole_image(source: FrameSource) -> Callable[[], np.ndarray]:
    height, width, _ = source.shape
    return lambda: source.read(0, height, 0, width)
