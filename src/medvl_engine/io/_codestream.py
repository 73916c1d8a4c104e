"""Image sizes stated inside compressed tiles, read before a decoder allocates for them.

A JPEG 2000 codestream states its own canvas in the SIZ marker segment; a decoder
allocates what it states, whatever the TIFF tile size says. A crafted tile can state
gigapixels inside a few hundred bytes, so its stated size is checked first.
"""

from __future__ import annotations

import struct

__all__ = ["JPEG2000_COMPRESSIONS", "jpeg2000_stated_size"]

JPEG2000_COMPRESSIONS = frozenset({33003, 33004, 33005, 34712})
"""TIFF Compression tag values whose tiles are JPEG 2000 codestreams (Aperio, standard)."""

_SOC_SIZ = b"\xff\x4f\xff\x51"
_JP2_SIGNATURE = b"\x00\x00\x00\x0cjP  \r\n\x87\n"
_SEARCH_BYTES = 4096


def jpeg2000_stated_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) in px that a JPEG 2000 tile states (SIZ: Xsiz - XOsiz, Ysiz - YOsiz).

    ``data`` is a raw codestream (SOC then SIZ) or a JP2 file whose ``jp2c`` box holds one;
    None when no SIZ marker is found near the start (the decoder then reports the damage).
    """
    start = 0 if data.startswith(_SOC_SIZ) else -1
    if start < 0 and data.startswith(_JP2_SIGNATURE):
        start = data.find(_SOC_SIZ, 0, _SEARCH_BYTES)
    if start < 0 or len(data) < start + 4 + 2 + 2 + 16:
        return None
    x_siz, y_siz, x_origin, y_origin = struct.unpack_from(">4I", data, start + 8)
    return max(x_siz - x_origin, 0), max(y_siz - y_origin, 0)
