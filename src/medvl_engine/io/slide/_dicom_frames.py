"""Where each tile (frame) of a DICOM image lies in the file, and which codec decodes it.

Uncompressed Pixel Data must hold exactly the bytes its header describes (tiles x rows x
columns x samples, 8-bit, up to one byte of padding): a different length means the header
does not describe the pixels (for instance a wrong Samples per Pixel), which is refused
rather than shown as scrambled pixels. Encapsulated Pixel Data is walked fragment by fragment
and grouped into frames by the Basic Offset Table when a frame spans several fragments.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medvl_engine.errors import CorruptFileError

__all__ = ["CODEC_NAMES", "DAMAGED", "MISMATCHED", "codec_for", "frame_ranges"]

DAMAGED = "the file is damaged or truncated, re-copy or re-export it."
"""The end of a sentence about a damaged file: what to do."""
MISMATCHED = "the header does not describe the pixels, re-export the slide."
"""The end of a sentence about a header that contradicts the pixel data."""
_ITEM_TAG = b"\xfe\xff\x00\xe0"
_SEQUENCE_END_TAG = b"\xfe\xff\xdd\xe0"
_PIXEL_DATA_TAG = b"\xe0\x7f\x10\x00"

CODEC_NAMES = {
    "1.2.840.10008.1.2.4.50": "JPEG",
    "1.2.840.10008.1.2.4.51": "JPEG",
    "1.2.840.10008.1.2.4.57": "lossless JPEG",
    "1.2.840.10008.1.2.4.70": "lossless JPEG",
    "1.2.840.10008.1.2.4.80": "JPEG-LS",
    "1.2.840.10008.1.2.4.81": "JPEG-LS",
    "1.2.840.10008.1.2.4.90": "JPEG 2000",
    "1.2.840.10008.1.2.4.91": "JPEG 2000",
    "1.2.840.10008.1.2.4.201": "HTJ2K",
    "1.2.840.10008.1.2.4.202": "HTJ2K",
    "1.2.840.10008.1.2.4.203": "HTJ2K",
}


def codec_for(transfer_syntax: str) -> Callable[..., Any] | None:
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


def _native_ranges(
    path: Path, size: int, start: int, length: int, layout: tuple[int, int, int, int]
) -> list[tuple[int, int]]:
    """Frame byte ranges of uncompressed Pixel Data whose length the header must match.

    ``layout`` = (frames, tile rows, tile columns, samples per pixel); 8-bit samples.
    """
    frames, tile_h, tile_w, samples = layout
    frame_bytes = tile_h * tile_w * samples
    expected = frame_bytes * frames
    tiles = f"{frames} tile{'s' if frames > 1 else ''} of {tile_w} x {tile_h} pixels"
    for other in {1, 3} - {samples}:
        if length in (expected // samples * other, expected // samples * other + 1):
            raise CorruptFileError(
                f"{path.name}: its header says {samples} sample{'s' if samples > 1 else ''} per "
                f"pixel (Samples per Pixel) but the pixel data of its {tiles} holds {other}; "
                f"{MISMATCHED}",
                path,
            )
    if length < expected or start + expected > size:
        held = min(length, max(size - start, 0))
        raise CorruptFileError(
            f"{path.name}: holds {held} bytes of pixel data where its {tiles} need "
            f"{expected}; {DAMAGED}",
            path,
        )
    if length - expected >= frame_bytes:
        raise CorruptFileError(
            f"{path.name}: holds {length} bytes of pixel data, more than the {expected} its "
            f"{tiles} need; {MISMATCHED}",
            path,
        )
    return [(start + i * frame_bytes, frame_bytes) for i in range(frames)]


def _encapsulated_ranges(path: Path, handle: Any, frames: int) -> list[tuple[int, int]]:
    """Frame byte ranges of encapsulated Pixel Data (one or more fragments per frame)."""
    truncated = CorruptFileError(
        f"{path.name}: its compressed pixel data ends before its last tile; {DAMAGED}", path
    )
    item = handle.read(8)
    if len(item) < 8:
        raise truncated
    if item[:4] != _ITEM_TAG:
        raise CorruptFileError(
            f"{path.name}: its compressed pixel data does not start with an offset table; "
            f"{DAMAGED}",
            path,
        )
    (size,) = struct.unpack("<I", item[4:])
    table = handle.read(size)
    if len(table) < size:
        raise truncated
    offsets_table = list(struct.unpack(f"<{size // 4}I", table[: size - size % 4]))
    fragments_start = handle.tell()
    fragments: list[tuple[int, int]] = []
    while True:
        item = handle.read(8)
        if len(item) < 8:
            raise truncated
        if item[:4] == _SEQUENCE_END_TAG:
            break
        if item[:4] != _ITEM_TAG:
            raise CorruptFileError(
                f"{path.name}: its compressed pixel data holds an element that is not a "
                f"tile fragment; {DAMAGED}",
                path,
            )
        (size,) = struct.unpack("<I", item[4:])
        fragments.append((handle.tell(), size))
        handle.seek(size, os.SEEK_CUR)
    if len(fragments) == frames:
        return fragments
    if len(offsets_table) == frames and fragments:
        grouped = []
        bounds = [fragments_start + o for o in offsets_table] + [math.inf]
        for index in range(frames):
            parts = [f for f in fragments if bounds[index] <= f[0] - 8 < bounds[index + 1]]
            if not parts:
                break
            grouped.append((parts[0][0], parts[-1][0] + parts[-1][1] - parts[0][0]))
        else:
            return grouped
    raise CorruptFileError(
        f"{path.name}: its compressed pixel data holds {len(fragments)} fragments that cannot "
        f"be matched to its {frames} tiles; {DAMAGED}",
        path,
    )


def frame_ranges(
    path: Path, offset: int, compressed: bool, layout: tuple[int, int, int, int]
) -> list[tuple[int, int]]:
    """(file offset, byte count) of every frame's encoded data, in frame order."""
    size = os.stat(path).st_size
    with open(path, "rb") as handle:
        handle.seek(offset)
        tag = handle.read(4)
        if tag != _PIXEL_DATA_TAG:
            raise CorruptFileError(
                f"{path.name}: the file ends or is damaged before its pixel data; {DAMAGED}",
                path,
            )
        vr = handle.read(2)
        if vr in (b"OB", b"OW"):
            handle.read(2)
            raw = handle.read(4)
        else:
            raw = vr + handle.read(2)
        if len(raw) < 4:
            raise CorruptFileError(
                f"{path.name}: the file ends inside its pixel data header; {DAMAGED}", path
            )
        (length,) = struct.unpack("<I", raw)
        start = handle.tell()
        if length != 0xFFFFFFFF:
            if compressed:
                raise CorruptFileError(
                    f"{path.name}: its transfer syntax says compressed tiles but its pixel data "
                    f"is stored uncompressed; {MISMATCHED}",
                    path,
                )
            return _native_ranges(path, size, start, length, layout)
        return _encapsulated_ranges(path, handle, layout[0])
