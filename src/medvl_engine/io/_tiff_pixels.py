"""Checks that the pixels of a TIFF level mean what an RGB slide shows: colour model and data.

* **Photometric** (what the stored samples are): min-is-black grey, RGB and YCbCr (decoded to
  RGB by the JPEG codecs) are shown as stored; min-is-white grey is inverted and palette
  colour is looked up in its colour map, so both show as the scanner saw them. Every other
  model (CIELab, CMYK, LogL/LogLuv, colour filter arrays, masks) is refused in words: shown as
  RGB its colours would be wrong without any sign of it.
* **Compressed tiles cut short:** a JPEG or JPEG 2000 tile always ends in its end marker
  (FFD9; byte stuffing keeps it out of the coded data), so a tile whose recorded length stops
  before it was truncated; libjpeg would decode it to grey without a word. An uncompressed
  tile must hold all its bytes.
* **JPEG tables** (tag 347) are a complete table-only JPEG stream, from SOI to EOI; cut short,
  the tiles decode with missing or wrong Huffman / quantisation tables.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, UnsupportedFormatError
from medvl_engine.io._codestream import JPEG2000_COMPRESSIONS

__all__ = [
    "JPEG_COMPRESSIONS",
    "check_jpeg_tables",
    "check_tile_ends",
    "photometric_map",
    "tile_cut_short",
    "tile_problem",
]

JPEG_COMPRESSIONS = frozenset({6, 7, 34892})
"""TIFF Compression values whose tiles are JPEG streams (old-style, JPEG, lossy JPEG DNG)."""

_MARKED_END = JPEG_COMPRESSIONS | JPEG2000_COMPRESSIONS
_END_MARKER = b"\xff\xd9"
_NO_COMPRESSION = 1
_YCBCR_CODECS = JPEG_COMPRESSIONS | JPEG2000_COMPRESSIONS
_REFUSED_MODELS = {
    4: "a transparency mask",
    5: "CMYK (separated) colour",
    8: "CIELab colour",
    9: "ICCLab colour",
    10: "ITULab colour",
    32803: "a colour filter array (raw sensor data)",
    32844: "LogL (high dynamic range) luminance",
    32845: "LogLuv (high dynamic range) colour",
    34892: "linear raw sensor data",
}
_DAMAGED = "the file is damaged or truncated, re-copy or re-export it."

PixelMap = Callable[[np.ndarray], np.ndarray]


def _invert(pixels: np.ndarray) -> np.ndarray:
    return np.asarray(np.uint8(255) - pixels)


def _palette(colormap: Any) -> PixelMap:
    """A lookup of 8-bit palette indices in the page's colour map (16-bit entries scaled)."""
    table = np.asarray(colormap, dtype=np.float64)
    if table.max(initial=0) > 255:
        table = table / 257.0
    rgb = np.clip(np.round(table), 0, 255).astype(np.uint8).T  # [entries, 3]
    if rgb.shape[0] < 256:
        rgb = np.concatenate([rgb, np.zeros((256 - rgb.shape[0], 3), np.uint8)])

    def look_up(pixels: np.ndarray) -> np.ndarray:
        indices = pixels[..., 0] if pixels.ndim == 3 else pixels
        return np.asarray(rgb[indices])

    return look_up


def photometric_map(path: Path, page: Any, level: int) -> PixelMap | None:
    """What turns the decoded samples of ``page`` into the colours they stand for: None when
    they are shown as stored, a function for min-is-white and palette pages; raises
    UnsupportedFormatError for colour models that cannot be shown right."""
    photometric = int(page.photometric)
    samples = int(page.samplesperpixel)
    if photometric in (1, 2):
        return None
    if photometric == 6 and int(page.compression) in _YCBCR_CODECS:
        return None  # the JPEG / JPEG 2000 codec converts YCbCr to RGB
    if photometric == 0 and samples == 1:
        return _invert
    if photometric == 3 and samples == 1 and getattr(page, "colormap", None) is not None:
        return _palette(page.colormap)
    if photometric == 3:
        words = "palette colour without a colour map"
    elif photometric == 6:
        words = "YCbCr colour outside a JPEG codestream"
    else:
        words = _REFUSED_MODELS.get(photometric, f"an unknown colour model (code {photometric})")
    raise UnsupportedFormatError(
        f"{path.name}: level {level} stores its pixels as {words} (TIFF Photometric "
        f"{photometric}), which the engine does not convert to RGB, so its colours would be "
        "wrong; export the slide as RGB.",
        path,
    )


def tile_cut_short(data: bytes, compression: int, expected_bytes: int) -> str | None:
    """Why one tile's stored bytes are cut short, or None when nothing says so.

    ``expected_bytes`` is the size of the tile uncompressed (only checked without
    compression). Zero bytes after a JPEG end marker (padding some writers add) are allowed.
    """
    if compression in _MARKED_END:
        if not data.rstrip(b"\x00").endswith(_END_MARKER):
            codec = "JPEG 2000" if compression in JPEG2000_COMPRESSIONS else "JPEG"
            return f"its {codec} data stops before its end marker"
    elif compression == _NO_COMPRESSION and len(data) < expected_bytes:
        return f"it holds {len(data):,} of its {expected_bytes:,} bytes"
    return None


def tile_problem(path: Path, level: int, unit: str, column: int, row: int, why: str) -> Exception:
    """The sentence for one damaged tile (or strip) of a level."""
    where = f"column {column}, row {row}" if unit == "tile" else f"number {row}"
    return CorruptFileError(
        f"{path.name}: the {unit} at {where} of level {level} is cut short ({why}); {_DAMAGED}",
        path,
    )


def check_tile_ends(
    path: Path, read: Callable[[int, int], bytes], page: Any, level: int, limit: int
) -> None:
    """At open, for a level read through tifffile's store (strips, multi-page levels): check
    the last bytes of each compressed chunk, when it has at most ``limit`` chunks."""
    compression = int(page.compression)
    if compression not in _MARKED_END:
        return
    offsets, counts = page.dataoffsets, page.databytecounts
    if len(offsets) > limit:
        return
    unit = "tile" if page.is_tiled else "strip"
    across = max(int(page.chunked[-2]) if page.is_tiled else 1, 1)
    for index, (offset, count) in enumerate(zip(offsets, counts, strict=False)):
        offset, count = int(offset), int(count)
        if not count or not offset:
            continue  # no data recorded: the chunk table check speaks of it
        tail = read(offset + max(count - 64, 0), min(count, 64))
        if not tail.rstrip(b"\x00").endswith(_END_MARKER):
            why = tile_cut_short(tail, compression, 0) or "its data stops early"
            raise tile_problem(path, level, unit, index % across, index // across, why)


def check_jpeg_tables(path: Path, page: Any, level: int) -> None:
    """Refuse JPEG tables (tag 347) that are not a whole table-only stream (SOI .. EOI)."""
    tables = getattr(page, "jpegtables", None)
    if tables is None or int(page.compression) not in JPEG_COMPRESSIONS:
        return
    data = bytes(tables)
    if not (data.startswith(b"\xff\xd8") and data.rstrip(b"\x00").endswith(_END_MARKER)):
        raise CorruptFileError(
            f"{path.name}: the JPEG tables of level {level} (TIFF tag JPEGTables, "
            f"{len(data):,} bytes) are cut short or damaged, so its tiles would decode with "
            f"wrong colours; {_DAMAGED}",
            path,
        )
