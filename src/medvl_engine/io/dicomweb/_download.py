"""One WADO-RS answer streamed to disk, and the DICOM file inside it copied out.

A whole-slide level can be gigabytes: the answer goes to a temporary file beside the cache
entry in chunks, the one part it holds is located there (multipart/related, PS3.18 8.6.1.2,
or a bare application/dicom body), its header is checked to be the instance asked for, and its
bytes are copied to the cache entry with an atomic write. Memory stays at one chunk.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import IO

__all__ = ["CHUNK_BYTES", "copy_range", "dicom_part", "downloaded"]

CHUNK_BYTES = 1 << 20


@contextlib.contextmanager
def downloaded(
    url: str, headers: dict[str, str], timeout: float, folder: Path
) -> Iterator[tuple[IO[bytes], str]]:
    """Stream the answer to GET ``url`` into a temporary file in ``folder``; yield the open
    file and the answer's Content-Type. The file is removed on the way out. Raises requests'
    errors (HTTPError for a 4xx/5xx status; call inside ``server_errors``)."""
    import requests

    with requests.get(url, headers=headers, timeout=timeout, stream=True) as response:
        response.raise_for_status()
        with tempfile.TemporaryFile(dir=folder) as handle:
            for chunk in response.iter_content(CHUNK_BYTES):
                handle.write(chunk)
            handle.flush()
            handle.seek(0)
            yield handle, response.headers.get("Content-Type", "")


def dicom_part(handle: IO[bytes], content_type: str) -> tuple[int, int]:
    """``(start, end)`` byte offsets of the single part of a downloaded answer.

    The file is scanned a chunk at a time (no mapping of the whole answer). Raises ValueError
    when the answer is not DICOM, names no boundary, or holds other than exactly one part.
    """
    size = os.fstat(handle.fileno()).st_size
    header = Message()
    header["content-type"] = content_type
    if header.get_content_type() == "application/dicom":
        return 0, size
    if header.get_content_maintype() != "multipart":
        raise ValueError(f"the answer is {header.get_content_type()}, not DICOM")
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not boundary or size == 0:
        raise ValueError("the multipart answer names no boundary or is empty")
    delimiter = b"--" + boundary.encode()
    first = _find(handle, delimiter, 0)
    header_end = _find(handle, b"\r\n\r\n", first) if first >= 0 else -1
    if header_end < 0:
        raise ValueError("the multipart answer holds no part")
    start = header_end + 4
    end = _find(handle, b"\r\n" + delimiter, start)
    if end < 0:
        raise ValueError("the multipart answer is not closed")
    handle.seek(end + 2 + len(delimiter))
    if handle.read(2) != b"--":
        raise ValueError("the multipart answer holds more than one part")
    return start, end


def _find(handle: IO[bytes], needle: bytes, start: int) -> int:
    """The offset of the first ``needle`` at or after ``start`` in ``handle``, or -1."""
    handle.seek(start)
    carried = b""
    offset = start  # file offset of carried[0]
    while chunk := handle.read(CHUNK_BYTES):
        window = carried + chunk
        found = window.find(needle)
        if found >= 0:
            return offset + found
        keep = min(len(needle) - 1, len(window))
        offset += len(window) - keep
        carried = window[len(window) - keep :] if keep else b""
    return -1


def copy_range(handle: IO[bytes], start: int, end: int, path: Path) -> None:
    """Write bytes ``start:end`` of ``handle`` to ``path``, one chunk at a time."""
    handle.seek(start)
    left = end - start
    with path.open("wb") as out:
        while left > 0:
            chunk = handle.read(min(CHUNK_BYTES, left))
            if not chunk:
                raise OSError("the downloaded answer ended early")
            out.write(chunk)
            left -= len(chunk)
