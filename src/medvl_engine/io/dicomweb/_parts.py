"""DICOM files as they are on the wire: multipart/related bodies (PS3.18 8.6.1.2) built from
the bytes of whole Part 10 files (STOW-RS), and the Accept header that asks for them (WADO-RS;
the answer is read by :mod:`._download`).

Files go up and come down as bytes rather than as parsed datasets, so that a file sent is the
file written, and a file retrieved is the server's copy byte for byte (re-encoding a dataset
can change its bytes: padding, value lengths, element order).
"""

from __future__ import annotations

import io
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = [
    "CHUNK_BYTES",
    "DICOM_MULTIPART_ACCEPT",
    "MultipartBody",
    "join_parts",
    "multipart_type",
]

CHUNK_BYTES = 1 << 20
"""Bytes read from a file at a time while it is sent."""

DICOM_MULTIPART_ACCEPT = 'multipart/related; type="application/dicom"; transfer-syntax=*'
"""The Accept header of a WADO-RS retrieve: the instance in the syntax it is stored in."""


def multipart_type(boundary: str) -> str:
    """The Content-Type of a STOW-RS request body with ``boundary``."""
    return f'multipart/related; type="application/dicom"; boundary={boundary}'


class MultipartBody(io.RawIOBase):
    """``files`` as one multipart/related application/dicom body, read as a file of known
    length: the HTTP client sends it with a Content-Length, a block at a time (memory: one
    block, whatever the files' size; some servers take chunked uploads several times slower).
    """

    def __init__(self, files: Sequence[Path], boundary: str) -> None:
        super().__init__()
        delimiter = f"--{boundary}\r\nContent-Type: application/dicom\r\n\r\n".encode()
        self._pieces: list[bytes | Path] = []
        for path in files:
            self._pieces += [delimiter, path, b"\r\n"]
        self._pieces.append(f"--{boundary}--\r\n".encode())
        self._length = sum(
            piece.stat().st_size if isinstance(piece, Path) else len(piece)
            for piece in self._pieces
        )
        self._index = 0
        self._open: IO[bytes] | None = None
        self._pending = b""
        self._position = 0

    def __len__(self) -> int:
        return self._length

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        """Bytes read so far (the HTTP client takes ``len - tell`` as the Content-Length)."""
        return self._position

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of the body (all that is left when ``size`` < 0)."""
        wanted = self._length if size is None or size < 0 else size
        out = bytearray()
        while len(out) < wanted:
            if self._pending:
                take = self._pending[: wanted - len(out)]
                self._pending = self._pending[len(take) :]
                out += take
            elif self._open is not None:
                chunk = self._open.read(min(CHUNK_BYTES, wanted - len(out)))
                if chunk:
                    out += chunk
                else:
                    self._open.close()
                    self._open = None
            elif self._index < len(self._pieces):
                piece = self._pieces[self._index]
                self._index += 1
                if isinstance(piece, Path):
                    self._open = piece.open("rb")
                else:
                    self._pending = piece
            else:
                break
        self._position += len(out)
        return bytes(out)

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None
        super().close()


def join_parts(files: Sequence[Path]) -> tuple[MultipartBody, str]:
    """``(body, content_type)``: ``files`` as one multipart/related body (see
    :class:`MultipartBody`), under a boundary of 128 random bits (a file that holds it by
    chance cannot be told from the next part; the server then lists an instance missing)."""
    boundary = f"medvl-{secrets.token_hex(16)}"
    return MultipartBody(files, boundary), multipart_type(boundary)
