"""Fixtures of the io tests: writers of hostile TIFF files from raw bytes (forged sizes, tile
bombs, looping IFD chains).

Each file is small on disk while its header declares something expensive; the pixel data
is one compressed chunk that every tile or strip entry points at.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

DEFLATE = 8
NO_COMPRESSION = 1
_SHORT, _LONG = 3, 4


def _zero_deflate(nbytes: int) -> bytes:
    """``nbytes`` zero bytes, deflated without ever holding them all in memory."""
    packer = zlib.compressobj(9)
    piece = bytes(min(nbytes, 1 << 24))
    parts, left = [], nbytes
    while left > 0:
        parts.append(packer.compress(piece[: min(left, len(piece))]))
        left -= len(piece)
    parts.append(packer.flush())
    return b"".join(parts)


def _write_raw_tiff(
    path: Path,
    width: int,
    height: int,
    *,
    samples: int = 3,
    tile: tuple[int, int] | None = None,
    rows_per_strip: int | None = None,
    chunk: bytes = b"",
    compression: int = DEFLATE,
    chunk_count: int | None = None,
    zero_chunks: slice | None = None,
    extra_tags: list[tuple[int, int, int]] = (),
) -> Path:
    """A classic little-endian 8-bit TIFF with one IFD whose every tile/strip entry points at
    ``chunk`` (tiles of ``tile`` = (width, height) px, else strips of ``rows_per_strip`` rows).

    ``chunk_count`` overrides the number of entries (to make the table disagree with the
    size); entries in ``zero_chunks`` get offset 0 and byte count 0. ``extra_tags`` are
    (tag, SHORT/LONG type, value) entries added to the directory.
    """
    if tile is not None:
        across = -(-width // tile[0])
        down = -(-height // tile[1])
        count = across * down
    else:
        rows = rows_per_strip or height
        count = -(-height // rows)
    count = count if chunk_count is None else chunk_count
    data_at = 8
    offsets = np.full(count, data_at, np.uint32)
    counts = np.full(count, len(chunk), np.uint32)
    if zero_chunks is not None:
        offsets[zero_chunks] = 0
        counts[zero_chunks] = 0
    blobs = bytearray(b"II*\x00" + b"\x00" * 4 + chunk)
    if len(blobs) % 2:
        blobs += b"\x00"

    def place(data: bytes) -> int:
        at = len(blobs)
        blobs.extend(data)
        if len(blobs) % 2:
            blobs.extend(b"\x00")
        return at

    entries: list[tuple[int, int, int, int | bytes]] = [
        (256, _LONG, 1, width),
        (257, _LONG, 1, height),
        (259, _SHORT, 1, compression),
        (262, _SHORT, 1, 2 if samples >= 3 else 1),
        (277, _SHORT, 1, samples),
        (284, _SHORT, 1, 1),
    ]
    if samples == 1:
        entries.append((258, _SHORT, 1, 8))
    else:
        entries.append((258, _SHORT, samples, place(struct.pack(f"<{samples}H", *[8] * samples))))
    offsets_at = place(offsets.tobytes()) if count > 1 else None
    counts_at = place(counts.tobytes()) if count > 1 else None
    first_offset = int(offsets[0]) if count else 0
    first_count = int(counts[0]) if count else 0
    offset_value = offsets_at if count > 1 else first_offset
    count_value = counts_at if count > 1 else first_count
    if tile is not None:
        entries += [
            (322, _LONG, 1, tile[0]),
            (323, _LONG, 1, tile[1]),
            (324, _LONG, count, offset_value),
            (325, _LONG, count, count_value),
        ]
    else:
        entries += [
            (273, _LONG, count, offset_value),
            (278, _LONG, 1, rows_per_strip or height),
            (279, _LONG, count, count_value),
        ]
    entries += [(tag, kind, 1, value) for tag, kind, value in extra_tags]
    entries.sort()
    ifd_at = len(blobs)
    ifd = bytearray(struct.pack("<H", len(entries)))
    for tag, kind, n, value in entries:
        if kind == _SHORT and n == 1:
            ifd += struct.pack("<HHIHH", tag, kind, n, value, 0)
        else:
            ifd += struct.pack("<HHII", tag, kind, n, value)
    ifd += struct.pack("<I", 0)
    blobs.extend(ifd)
    blobs[4:8] = struct.pack("<I", ifd_at)
    path.write_bytes(bytes(blobs))
    return path


def _ifd_offsets(path: Path) -> list[tuple[int, int]]:
    """(IFD offset, position of its next-IFD field) along the main chain of a classic TIFF."""
    data = path.read_bytes()
    order = "<" if data[:2] == b"II" else ">"
    (offset,) = struct.unpack(order + "I", data[4:8])
    chain = []
    while offset:
        (entries,) = struct.unpack(order + "H", data[offset : offset + 2])
        next_at = offset + 2 + 12 * entries
        chain.append((offset, next_at))
        (offset,) = struct.unpack(order + "I", data[next_at : next_at + 4])
    return chain


def _loop_ifd_chain(path: Path) -> Path:
    """Make the last IFD of a classic TIFF point back to the first one."""
    chain = _ifd_offsets(path)
    data = bytearray(path.read_bytes())
    order = "<" if data[:2] == b"II" else ">"
    last_next = chain[-1][1]
    data[last_next : last_next + 4] = struct.pack(order + "I", chain[0][0])
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="session")
def zero_deflate():
    """``zero_deflate(nbytes)`` -> that many zero bytes, deflated."""
    return _zero_deflate


@pytest.fixture(scope="session")
def write_raw_tiff():
    """``write_raw_tiff(path, width, height, ...)`` writes a one-IFD TIFF of repeated chunks."""
    return _write_raw_tiff


@pytest.fixture(scope="session")
def ifd_offsets():
    """``ifd_offsets(path)`` -> (IFD offset, next-IFD field position) along the main chain."""
    return _ifd_offsets


@pytest.fixture(scope="session")
def loop_ifd_chain():
    """``loop_ifd_chain(path)`` makes the last IFD point back to the first."""
    return _loop_ifd_chain
