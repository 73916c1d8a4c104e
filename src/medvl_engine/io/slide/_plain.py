"""Plain (non-pyramidal) images as slides: one decode on first use, a lazily built pyramid.

PNG, JPEG and strip TIFF cannot be read by window, so level 0 is decoded in
full the first time any pixel is asked for; each coarser level (factor 2 per
step, area averaging) is computed from the one above on first use. Before anything is decoded,
the bytes all of this holds at once (Pillow's buffer at the file's own sample size, the RGB
copy, the coarser levels) are checked against the decode budget of
:mod:`medvl_engine.io.limits`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, ResourceLimitError, UnsupportedFormatError
from medvl_engine.io.limits import check_decode_bytes, pil_bytes_per_pixel
from medvl_engine.io.slide.pixel_sources import to_rgb, wrap_decode_errors

__all__ = [
    "PlainPyramid",
    "pil_image_size",
    "pil_loader",
    "slide_decode_cost",
]

SMALLEST_LEVEL_PX = 512
"""Pyramid levels are added while the coarsest level is larger than this (px)."""


_GREY_WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")
_TO_RGB_BAND_ROWS = 1024


def slide_decode_cost(image: Any) -> int:
    """Bytes per pixel :func:`pil_loader` holds at its peak for ``image`` (an opened PIL
    image): the decoder's buffer, the RGB copy (3), the coarser pyramid levels (1, a third of
    the RGB level) and the bands of rows that conversions and halving work in (1)."""
    return pil_bytes_per_pixel(image) + 3 + 1 + 1


def pil_image_size(path: Path) -> tuple[int, int]:
    """(width, height) of an image PIL reads, from its header only; ResourceLimitError when
    decoding it as a slide would take more memory than a decode may use (see
    ``medvl_engine.io.limits``: the bytes every buffer of the decode holds are counted)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            width, height = int(image.width), int(image.height)
            cost = slide_decode_cost(image)
    except Image.DecompressionBombError as error:
        raise ResourceLimitError(
            f"{path.name}: a plain image this large cannot be decoded in one piece ({error}); "
            "convert it to a tiled pyramidal TIFF.",
            path,
        ) from error
    except UnidentifiedImageError as error:
        raise UnsupportedFormatError(
            f"{path.name}: not an image format the engine reads; use SVS, NDPI, TIFF, "
            "OME-TIFF, DICOM, PNG or JPEG.",
            path,
        ) from error
    except (OSError, ValueError, SyntaxError) as error:
        raise CorruptFileError(
            f"{path.name}: the image header could not be read ({error}); the file is "
            "damaged, re-copy or re-export it.",
            path,
        ) from error
    check_decode_bytes(path, width, height, cost, "the image")
    return width, height


def pil_loader(path: Path) -> Callable[[], np.ndarray]:
    """A function decoding the whole image as [H, W, 3] uint8 (16-bit and palette converted).

    Pillow decodes into its own buffer; the RGB copy is then filled a band of rows at a
    time (crop, convert, composite), so the peak stays within what
    :func:`slide_decode_cost` counted. 16-bit and 32-bit grey is scaled by its maximum.
    """

    def load() -> np.ndarray:
        from PIL import Image

        with Image.open(path) as image:
            image.load()
            width, height = image.size
            out = np.empty((height, width, 3), np.uint8)
            scale = None
            if image.mode in _GREY_WIDE_MODES:
                extrema: Any = image.getextrema()  # (low, high) of a one-band image
                top = float(np.float32(extrema[1])) or 1.0
                scale = 255.0 / top
            for start in range(0, height, _TO_RGB_BAND_ROWS):
                stop = min(start + _TO_RGB_BAND_ROWS, height)
                band: Image.Image = image.crop((0, start, width, stop))
                if scale is not None:
                    values = np.asarray(band, dtype=np.float32)
                    out[start:stop] = to_rgb(np.round(values * scale).astype(np.uint8))
                    continue
                if band.mode not in ("RGB", "RGBA", "L"):
                    band = band.convert("RGBA" if "A" in band.mode else "RGB")
                out[start:stop] = to_rgb(np.asarray(band))
        return out

    return load


_HALVE_BAND_ROWS = 256


def _halve(pixels: np.ndarray) -> np.ndarray:
    """Area-average 2x2 blocks; [H, W, 3] -> [H // 2, W // 2, 3] (odd edge row/col dropped).

    Works in bands of rows so its 16-bit sums never hold more than a band at a time.
    """
    height, width = pixels.shape[0] // 2, pixels.shape[1] // 2
    out = np.empty((height, width, 3), np.uint8)
    for start in range(0, height, _HALVE_BAND_ROWS):
        stop = min(start + _HALVE_BAND_ROWS, height)
        band = pixels[2 * start : 2 * stop, : 2 * width].reshape(stop - start, 2, width, 2, 3)
        out[start:stop] = (band.astype(np.uint16).sum(axis=(1, 3)) + 2) // 4
    return out


def level_shapes(width: int, height: int) -> list[tuple[int, int]]:
    """(H, W) of each pyramid level of a plain image, finest first."""
    shapes = [(height, width)]
    while max(shapes[-1]) > SMALLEST_LEVEL_PX and min(shapes[-1]) >= 4:
        h, w = shapes[-1]
        shapes.append((h // 2, w // 2))
    return shapes


class PlainPyramid:
    """Level sources of a plain image; pixels computed once, on first use."""

    def __init__(self, path: Path, width: int, height: int, load: Callable[[], np.ndarray]):
        self.path = path
        self.shapes = level_shapes(width, height)
        self._load = load
        self._levels: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.sources = [_PlainLevel(self, index) for index in range(len(self.shapes))]

    def level(self, index: int) -> np.ndarray:
        with self._lock:
            if not self._levels:
                pixels = self._load()
                if pixels.shape[:2] != self.shapes[0]:
                    raise ValueError(
                        f"decoded size {pixels.shape[1]}x{pixels.shape[0]} differs from header"
                    )
                self._levels.append(np.ascontiguousarray(pixels))
            while len(self._levels) <= index:
                self._levels.append(_halve(self._levels[-1]))
            return self._levels[index]


class _PlainLevel:
    def __init__(self, pyramid: PlainPyramid, index: int) -> None:
        height, width = pyramid.shapes[index]
        self.shape = (height, width, 3)
        self.dtype = np.dtype(np.uint8)
        self.tile_hw = (min(height, 1024) or 1, min(width, 1024) or 1)
        self._pyramid = pyramid
        self._index = index
        self.read = wrap_decode_errors(pyramid.path, index)(self._read)

    def _read(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        return self._pyramid.level(self._index)[y0:y1, x0:x1]
