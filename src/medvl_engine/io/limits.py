"""How many pixels a reader may decode at once, checked against sizes a file declares.

A header costs a few bytes to forge, so every size it declares is checked before memory is
set aside for it: a whole image decoded in one piece (PNG, JPEG, strip TIFF, mammograms),
one tile or strip of a tiled level, one region asked for, and the size of a slide itself.
Each limit is a module constant that an environment variable overrides (a whole number of
pixels); the defaults suit a machine with 16-24 GB of memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import ResourceLimitError

__all__ = [
    "pil_bytes_per_pixel",
    "MAX_DECODE_PIXELS",
    "MAX_SLIDE_PIXELS",
    "MAX_TILE_PIXELS",
    "check_decode_size",
    "check_slide_size",
    "check_tile_size",
    "format_pixels",
    "max_decode_pixels",
    "max_slide_pixels",
    "max_tile_pixels",
    "MAX_ARRAY_BYTES",
    "check_array_bytes",
    "format_bytes",
    "max_array_bytes",
    "DECODE_BYTES_PER_PIXEL",
    "check_decode_bytes",
    "max_decode_bytes",
]

MAX_DECODE_PIXELS = 2**28
"""Pixels decoded in one piece: a whole plain image or one region (16k x 16k; 800 MB as RGB)."""

MAX_TILE_PIXELS = 2**26
"""Pixels of one tile or strip of a level (8k x 8k; 200 MB as RGB)."""

MAX_SLIDE_PIXELS = 2**36
"""Level-0 pixels of a slide (262k x 262k; a 75 x 25 mm glass slide at 0.25 um/px is 9% of it)."""

_ENV_DECODE = "MEDVL_MAX_DECODE_PIXELS"
_ENV_TILE = "MEDVL_MAX_TILE_PIXELS"
_ENV_SLIDE = "MEDVL_MAX_SLIDE_PIXELS"


def max_decode_pixels() -> int:
    """Pixels one whole-image decode or one region may hold (env MEDVL_MAX_DECODE_PIXELS)."""
    return positive_int_setting(_ENV_DECODE, MAX_DECODE_PIXELS)


def max_tile_pixels() -> int:
    """Pixels one tile or strip may hold once decoded (env MEDVL_MAX_TILE_PIXELS)."""
    return positive_int_setting(_ENV_TILE, MAX_TILE_PIXELS)


def max_slide_pixels() -> int:
    """Level-0 pixels a slide may declare (env MEDVL_MAX_SLIDE_PIXELS)."""
    return positive_int_setting(_ENV_SLIDE, MAX_SLIDE_PIXELS)


def format_pixels(count: int) -> str:
    """A pixel count in words a user reads at a glance: '268 million px', '1.0 trillion px'."""
    for size, word in ((10**12, "trillion"), (10**9, "billion"), (10**6, "million")):
        if count >= size:
            value = count / size
            return f"{value:.3g} {word} px" if value < 100 else f"{value:.0f} {word} px"
    return f"{count:,} px"


_CONVERT = "convert it to a tiled pyramidal TIFF, or raise the limit if this machine has the memory"


def check_decode_size(
    path: str | os.PathLike[str], width: int, height: int, what: str, advice: str = _CONVERT
) -> None:
    """Refuse to decode ``what`` (e.g. "the image") of width x height px in one piece above
    the limit, with a ResourceLimitError naming both sizes, the setting and ``advice``."""
    limit = max_decode_pixels()
    pixels = int(width) * int(height)
    if pixels > limit:
        name = Path(path).name
        raise ResourceLimitError(
            f"{name}: {what} is {int(width):,} x {int(height):,} px ({format_pixels(pixels)}), "
            f"more than the {format_pixels(limit)} decoded in one piece ({_ENV_DECODE}); "
            f"{advice}.",
            path,
        )


def check_tile_size(
    path: str | os.PathLike[str], tile_width: int, tile_height: int, samples: int, level: int
) -> None:
    """Refuse a level whose tiles (or strips) decode to more than the tile limit each."""
    limit = max_tile_pixels()
    pixels = int(tile_width) * int(tile_height)
    if pixels > limit:
        name = Path(path).name
        megabytes = pixels * max(int(samples), 1) / 2**20
        raise ResourceLimitError(
            f"{name}: level {level} is stored in tiles of {int(tile_width):,} x "
            f"{int(tile_height):,} px ({megabytes:,.0f} MB each once decoded), more than the "
            f"{format_pixels(limit)} a tile may hold ({_ENV_TILE}); re-export the slide with "
            "tiles of 256 to 1024 px.",
            path,
        )


def check_slide_size(path: str | os.PathLike[str], width: int, height: int) -> None:
    """Refuse a slide whose level 0 declares more pixels than any glass slide holds."""
    limit = max_slide_pixels()
    pixels = int(width) * int(height)
    if pixels > limit:
        name = Path(path).name
        raise ResourceLimitError(
            f"{name}: declares {int(width):,} x {int(height):,} px ({format_pixels(pixels)}), "
            f"more than the {format_pixels(limit)} a slide may have ({_ENV_SLIDE}); the header "
            "is damaged or forged, re-export the slide.",
            path,
        )


# ---- arrays read from non-image files (feature .h5/.pt/.npz, zarr stores) ----

MAX_ARRAY_BYTES = 2**31
"""Bytes one array read from a file may take in memory once decoded (2 GiB: 200,000 patches x
2,560 float32 features, the largest slide of the largest common encoder). Checked against the
shape a file declares, before anything is read, so compression bombs and lazily declared
datasets are refused."""

_ENV_ARRAY = "MEDVL_MAX_ARRAY_BYTES"


def max_array_bytes() -> int:
    """Bytes one array read from a file may take (env MEDVL_MAX_ARRAY_BYTES)."""
    return positive_int_setting(_ENV_ARRAY, MAX_ARRAY_BYTES)


def format_bytes(count: int) -> str:
    """A byte count in words: '2.1 GB', '512 MB', '900 bytes'."""
    for size, word in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB")):
        if count >= size:
            return f"{count / size:.3g} {word}"
    return f"{count:,} bytes"


def check_array_bytes(
    path: str | os.PathLike[str], what: str, shape: tuple[int, ...], itemsize: int
) -> None:
    """Refuse ``what`` (e.g. "its 'features' dataset") of ``shape`` x ``itemsize`` bytes when
    it would take more than the array limit in memory, naming the shape and the setting."""
    count = 1
    for side in shape:
        count *= max(int(side), 0)
    needed = count * max(int(itemsize), 1)
    limit = max_array_bytes()
    if needed > limit:
        name = Path(path).name
        dims = " x ".join(f"{int(side):,}" for side in shape)
        raise ResourceLimitError(
            f"{name}: {what} declares {dims} values ({format_bytes(needed)} in memory), more "
            f"than the {format_bytes(limit)} one array may take ({_ENV_ARRAY}); the file is "
            "damaged or forged, or raise the limit if this machine has the memory.",
            path,
        )


# ---- whole images decoded in one piece, counted in bytes (PNG, JPEG, strip TIFF, DICOM) ----

DECODE_BYTES_PER_PIXEL = 3
"""Bytes each pixel of the decode limit stands for: MAX_DECODE_PIXELS is "800 MB as RGB", so
a decode may take max_decode_pixels() * 3 bytes in all, however its pixels are stored."""


def max_decode_bytes() -> int:
    """Bytes one whole-image decode may take in memory, from MEDVL_MAX_DECODE_PIXELS at
    DECODE_BYTES_PER_PIXEL bytes each (805 MB by default)."""
    return max_decode_pixels() * DECODE_BYTES_PER_PIXEL


def check_decode_bytes(
    path: str | os.PathLike[str],
    width: int,
    height: int,
    bytes_per_pixel: float,
    what: str,
    advice: str = _CONVERT,
) -> None:
    """Refuse to decode ``what`` of width x height px when it would take more memory than
    :func:`max_decode_bytes`, counting ``bytes_per_pixel`` (every buffer the decode holds at
    once: the decoder's own, the converted copy, derived levels) before anything is set aside.

    Also refuses what :func:`check_decode_size` refuses, so a caller needs only this one.
    """
    check_decode_size(path, width, height, what, advice)
    pixels = max(int(width), 0) * max(int(height), 0)
    needed = int(pixels * float(bytes_per_pixel))
    limit = max_decode_bytes()
    if needed > limit:
        name = Path(path).name
        raise ResourceLimitError(
            f"{name}: {what} is {int(width):,} x {int(height):,} px, which takes "
            f"{format_bytes(needed)} to decode and convert ({float(bytes_per_pixel):g} bytes "
            f"per pixel), more than the {format_bytes(limit)} one decode may use "
            f"({_ENV_DECODE} = {format_pixels(max_decode_pixels())} at "
            f"{DECODE_BYTES_PER_PIXEL} bytes each); {advice}.",
            path,
        )


_ONE_BYTE_MODES = ("1", "L", "P")


def pil_bytes_per_pixel(image: Any) -> int:
    """Bytes per pixel the decoder holds for an opened, not yet loaded, PIL image: the larger
    of Pillow's own buffer (1 byte for L/P, 2 for 16-bit grey, else 4) and what the file
    declares (channels x bytes per sample: 16-bit RGBA is 8)."""
    mode = str(image.mode)
    own = 1 if mode in _ONE_BYTE_MODES else 2 if mode.startswith("I;16") else 4
    rawmode = ""
    tiles = getattr(image, "tile", None) or []
    if tiles:
        args = tiles[0][3] if len(tiles[0]) > 3 else None
        rawmode = str(args[0] if isinstance(args, tuple) and args else args or "")
    sample_bytes = 2 if ";16" in rawmode or mode.startswith("I;16") else 1
    declared = len(image.getbands()) * sample_bytes
    return max(own, declared)
