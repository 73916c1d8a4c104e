"""Plain mammograms (PNG, JPEG, TIFF) decoded to display values in bounded memory.

The size a header declares is checked, in bytes, before anything is decoded: the decoder's
own buffer, the numpy copy and the float32 display image are all counted (see
:func:`medvl_engine.io.limits.check_decode_bytes`). Integer images are converted through a
lookup table of their levels, and colour images a band of rows at a time, so no float64 copy
of the whole image is ever made; the values are those of the straightforward float64
formulas (8-bit: v / 255; wider: (v - min) / (max - min); colour: Rec. 601 luminance).

A TIFF stored min-is-white (Photometric 0) is inverted so that it shows as stored; a TIFF
whose Photometric is not grey, RGB or YCbCr, or whose JPEG strips or tiles stop before their
end marker (cut short), is refused in words rather than shown wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import ResourceLimitError, UnsupportedFormatError
from medvl_engine.io._tiff_pixels import check_tile_ends
from medvl_engine.io.limits import check_decode_bytes
from medvl_engine.io.mammo import _voi

__all__ = ["decode_plain_mammogram", "display_values", "plain_mammogram_cost"]

_TIFF_MAGICS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_LUMA = np.array([0.299, 0.587, 0.114])
_BAND_ROWS = 512
_DISPLAY_BYTES = 4  # float32
_CHECKED_CHUNKS = 65_536
_TIFF_GREY_OR_COLOUR = {0: "min-is-white", 1: "min-is-black", 2: "RGB", 6: "YCbCr"}
_TIFF_PHOTOMETRIC_NAMES = {
    3: "palette colour",
    4: "transparency mask",
    5: "CMYK (separated)",
    8: "CIELab",
    9: "ICCLab",
    10: "ITULab",
    32803: "colour filter array (raw sensor)",
    32844: "LogL (high dynamic range)",
    32845: "LogLuv (high dynamic range)",
    34892: "linear raw",
}


def plain_mammogram_cost(decoder_bytes: int, channels: int, sample_bytes: int) -> int:
    """Bytes per pixel decoding a plain mammogram holds at its peak: the decoder's buffer,
    the numpy copy, the conversion (float64 luminance for colour, level offsets for wide
    integers) and the float32 display image."""
    array = max(channels, 1) * max(sample_bytes, 1)
    if channels >= 3:
        conversion = 8
    elif sample_bytes > 1:
        conversion = 4
    else:
        conversion = 0
    return decoder_bytes + array + conversion + _DISPLAY_BYTES


def _luminance(pixels: np.ndarray) -> np.ndarray:
    """[H, W, 3|4] -> [H, W] float64 Rec. 601 luminance, a band of rows at a time."""
    out = np.empty(pixels.shape[:2], np.float64)
    for start in range(0, pixels.shape[0], _BAND_ROWS):
        band = pixels[start : start + _BAND_ROWS, :, :3]
        out[start : start + _BAND_ROWS] = band.astype(np.float64) @ _LUMA
    return out


def _by_table(pixels: np.ndarray, table_of: Any) -> np.ndarray:
    """``table_of(levels)`` applied to every pixel through a table of the integer levels
    between the image's extremes (float32)."""
    low, high = int(pixels.min()), int(pixels.max())
    levels = np.arange(low, high + 1, dtype=np.float64)
    table = np.clip(table_of(levels, low, high), 0.0, 1.0).astype(np.float32)
    if low == 0:
        offsets = pixels
    elif np.issubdtype(pixels.dtype, np.unsignedinteger):
        offsets = pixels - pixels.dtype.type(low)  # every value >= low: no wrap-around
    else:
        offsets = pixels.astype(np.int64) - low
    return np.asarray(table[offsets])


def _full_range(levels: np.ndarray, low: int, high: int) -> np.ndarray:
    return _voi.full_range_window(levels) if high > low else np.zeros_like(levels)


def display_values(pixels: np.ndarray) -> tuple[np.ndarray, str, str]:
    """Decoded plain-image values -> (display float32 [H, W] in [0, 1], photometric, VOI name).

    Colour [H, W, 3|4] becomes its luminance; 8-bit values are divided by 255, colour within
    0..255 too, anything else is spread over its own range. ``pixels`` may come back as a
    3-D array of another shape for the caller to refuse.
    """
    photometric = "MONOCHROME2"
    if pixels.ndim == 3 and pixels.shape[-1] in (3, 4):
        values = _luminance(pixels)
        photometric = "RGB"
        if values.size and values.max() <= 255:
            np.divide(values, 255.0, out=values)
            voi_name = "8-bit"
        else:
            values, voi_name = _voi.full_range_window(values), "full range"
        return np.clip(values, 0.0, 1.0, out=values).astype(np.float32), photometric, voi_name
    if pixels.ndim != 2 or min(pixels.shape) < 2:
        return pixels, photometric, ""
    integer = np.issubdtype(pixels.dtype, np.integer)
    if integer and pixels.dtype.itemsize == 1 and pixels.dtype.kind == "u":
        return _by_table(pixels, lambda levels, low, high: levels / 255.0), photometric, "8-bit"
    if integer and pixels.dtype.itemsize == 1:
        display = np.clip(pixels.astype(np.float64) / 255.0, 0.0, 1.0)
        return display.astype(np.float32), photometric, "8-bit"
    if integer and int(pixels.max()) - int(pixels.min()) <= 2**16:
        return _by_table(pixels, _full_range), photometric, "full range"
    display = np.clip(_voi.full_range_window(pixels), 0.0, 1.0)
    return display.astype(np.float32), photometric, "full range"


def _decode_tiff(path: Path) -> np.ndarray:
    import tifffile

    with tifffile.TiffFile(path) as tiff:
        page: Any = tiff.pages[0]  # the first page is never a frame
        photometric = int(page.photometric)
        if photometric not in _TIFF_GREY_OR_COLOUR:
            words = _TIFF_PHOTOMETRIC_NAMES.get(photometric, f"code {photometric}")
            raise UnsupportedFormatError(
                f"{path.name}: stores its pixels as {words} (TIFF Photometric "
                f"{photometric}), which would not show as a grey mammogram; export the view "
                "as a grayscale (min-is-black) TIFF or PNG.",
                path,
            )
        samples = int(page.samplesperpixel)
        sample_bytes = np.dtype(page.dtype).itemsize if page.dtype is not None else 1
        cost = plain_mammogram_cost(0, samples, sample_bytes)
        check_decode_bytes(path, page.imagewidth, page.imagelength, cost, "the image")
        handle = tiff.filehandle

        def read(offset: int, count: int) -> bytes:
            handle.seek(offset)
            return bytes(handle.read(count))

        check_tile_ends(path, read, page, 0, _CHECKED_CHUNKS)  # JPEG chunks cut short
        pixels = np.asarray(page.asarray())
    if photometric == 0 and np.issubdtype(pixels.dtype, np.integer):
        bits = int(page.bitspersample) if int(page.bitspersample) > 0 else 8
        top = min((1 << bits) - 1, int(np.iinfo(pixels.dtype).max))
        pixels = pixels.dtype.type(top) - np.minimum(pixels, pixels.dtype.type(top))
    elif photometric == 0:
        pixels = float(pixels.max()) - pixels
    return pixels


def _decode_pil(path: Path) -> np.ndarray:
    from PIL import Image

    from medvl_engine.io.limits import pil_bytes_per_pixel

    try:
        opened = Image.open(path)
    except Image.DecompressionBombError as error:  # Pillow's own limit, from the header
        raise ResourceLimitError(
            f"{path.name}: a plain image this large cannot be decoded in one piece ({error}); "
            "convert it to a tiled pyramidal TIFF.",
            path,
        ) from error
    with opened as image:
        channels = len(image.getbands()) if image.mode != "P" else 3
        sample_bytes = 2 if str(image.mode).startswith("I;16") else 1
        if image.mode in ("I", "F"):
            sample_bytes = 4
        cost = plain_mammogram_cost(pil_bytes_per_pixel(image), channels, sample_bytes)
        check_decode_bytes(path, image.width, image.height, cost, "the image")
        image.load()
        decoded: Image.Image = image.convert("RGB") if image.mode == "P" else image
        pixels = np.asarray(decoded)
        decoded.close()
    return pixels


def decode_plain_mammogram(path: Path, head: bytes) -> np.ndarray:
    """The decoded values of a PNG, JPEG or TIFF mammogram (its first page), refused before
    decoding when they would take more memory than one decode may use."""
    if head[:4] in _TIFF_MAGICS:
        return _decode_tiff(path)
    return _decode_pil(path)
