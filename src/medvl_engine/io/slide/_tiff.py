"""TIFF-family slides (Aperio SVS, Hamamatsu NDPI, generic tiled TIFF, OME-TIFF) via tiffslide.

tiffslide supplies the metadata (levels, mpp, vendor, objective power,
associated images). Pixels of tiled, chunky pages are decoded straight from
the file: a chunk's tiles are read with ``os.pread`` and decoded by tifffile's
own segment decoder in a thread pool. Other layouts (strips, planar samples,
multi-page levels) are read through tiffslide's zarr store. What the pixels mean is checked
by :mod:`medvl_engine.io._tiff_pixels` (colour model, tiles and JPEG tables cut short); an mpp
no light microscope records is treated as unknown, with ``medvl.mpp_warning`` saying why.
"""

from __future__ import annotations

import functools
import math
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, UnsupportedFormatError
from medvl_engine.io._codestream import JPEG2000_COMPRESSIONS, jpeg2000_stated_size
from medvl_engine.io._tiff_ifds import check_ifd_chain
from medvl_engine.io._tiff_pixels import (
    PixelMap,
    check_jpeg_tables,
    check_tile_ends,
    photometric_map,
    tile_cut_short,
    tile_problem,
)
from medvl_engine.io.limits import check_decode_bytes, check_tile_size
from medvl_engine.io.slide._parts import SlideParts
from medvl_engine.io.slide.pixel_sources import (
    LazyImages,
    PositionalFile,
    for_each_in_parallel,
    to_rgb,
    wrap_decode_errors,
)

__all__ = ["open_tiff_slide"]

MAX_MICROSCOPE_MPP = 50.0
"""A level-0 resolution coarser than this (um/px) is a screen/print default (e.g. 72 dpi)."""

MIN_MICROSCOPE_MPP = 0.01
"""A level-0 resolution finer than this (um/px) is no light microscope's (its optics resolve
about 0.2 um; 100x oil scanners record about 0.1 um/px): the header is damaged."""

OPEN_CHECKED_CHUNKS = 4096
"""Chunks of a level read through tifffile's store whose end markers are checked at open."""

_SPARSE_TILE_VENDORS = ("philips_tiff",)
"""Formats whose writers leave empty tiles out (length 0): those tiles are background."""

_PHI_KEY_WORDS = ("patient", "birth", "accession", "user", "filename", "barcode")
_WHITE = 255


class _TiledPageSource:
    """Pixels of one tiled, chunky TIFF page, decoded tile by tile (rows, cols in level px)."""

    def __init__(
        self,
        path: Path,
        reader: PositionalFile,
        page: Any,
        level: int,
        sparse_is_background: bool = False,
        pixel_map: PixelMap | None = None,
    ) -> None:
        self.path = path
        self.level = level
        self.pixel_map = pixel_map
        self.reader = reader
        height, width = int(page.imagelength), int(page.imagewidth)
        self.shape = (height, width, 3)
        self.dtype = np.dtype(np.uint8)
        self.tile_hw = (int(page.tilelength), int(page.tilewidth))
        self.samples = int(page.samplesperpixel)
        self.tiles_across = math.ceil(width / self.tile_hw[1])
        self.offsets = page.dataoffsets  # tifffile's own sequences: no copy on open
        self.counts = page.databytecounts
        self.sparse_is_background = sparse_is_background
        self.jpeg2000 = int(page.compression) in JPEG2000_COMPRESSIONS
        self.compression = int(page.compression)
        self.tile_bytes = self.tile_hw[0] * self.tile_hw[1] * self.samples
        keyframe = page.keyframe
        # NDPI "tiles" are restart intervals of one JPEG stream: no end marker of their own
        self.check_ends = getattr(keyframe, "jpegheader", None) is None
        self.decode = keyframe.decode
        self.decode_args: dict[str, Any] = {"_fullsize": True}
        if page.jpegtables is not None:
            self.decode_args["jpegtables"] = page.jpegtables
        if getattr(keyframe, "jpegheader", None) is not None:
            self.decode_args["jpegheader"] = keyframe.jpegheader
        self.read = wrap_decode_errors(path, level)(self._read)

    def _tile(self, row: int, col: int) -> np.ndarray | None:
        index = row * self.tiles_across + col
        offset, count = int(self.offsets[index]), int(self.counts[index])
        if count == 0 or offset == 0:
            if self.sparse_is_background:
                return None
            raise ValueError(
                f"the tile at column {col}, row {row} has no data recorded (offset or length 0)"
            )
        data = self.reader.read(offset, count)
        if len(data) != count:
            raise ValueError("tile data ends before its recorded length")
        why = tile_cut_short(data, self.compression, self.tile_bytes) if self.check_ends else None
        if why is not None:
            raise tile_problem(self.path, self.level, "tile", col, row, why)
        if self.jpeg2000:
            self._check_stated_size(data, row, col)
        segment = self.decode(data, index, **self.decode_args)[0]
        if segment is None:
            return None
        th, tw = self.tile_hw
        return np.asarray(segment.reshape(th, tw, -1))

    def _check_stated_size(self, data: bytes, row: int, col: int) -> None:
        stated = jpeg2000_stated_size(data)
        th, tw = self.tile_hw
        if stated is not None and (stated[0] > tw or stated[1] > th):
            raise CorruptFileError(
                f"{self.path.name}: the JPEG 2000 tile at column {col}, row {row} states an image "
                f"of {stated[0]:,} x {stated[1]:,} px inside a {tw} x {th} px tile, so it is not "
                "decoded; the file is damaged or crafted, re-copy or re-export it.",
                self.path,
            )

    def _read(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        out = np.empty((y1 - y0, x1 - x0, 3), dtype=np.uint8)
        if y1 <= y0 or x1 <= x0:
            return out
        th, tw = self.tile_hw
        cells = [
            (row, col)
            for row in range(y0 // th, (y1 - 1) // th + 1)
            for col in range(x0 // tw, (x1 - 1) // tw + 1)
        ]

        def place(cell: tuple[int, int]) -> None:
            row, col = cell
            tile = self._tile(row, col)
            ty0, tx0 = row * th, col * tw
            sy0, sy1 = max(y0, ty0), min(y1, ty0 + th)
            sx0, sx1 = max(x0, tx0), min(x1, tx0 + tw)
            target = out[sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0]
            if tile is None:  # a tile the scanner skipped (where the format allows it)
                target[...] = _WHITE
                return
            part = tile[sy0 - ty0 : sy1 - ty0, sx0 - tx0 : sx1 - tx0]
            target[...] = to_rgb(part if self.pixel_map is None else self.pixel_map(part))

        for_each_in_parallel(place, cells)
        return out


class _ZarrLevelSource:
    """Pixels of one level read through tiffslide's zarr array (axes YXS, YX or CYX)."""

    def __init__(
        self, path: Path, array: Any, axes: str, level: int, pixel_map: PixelMap | None = None
    ) -> None:
        self.array = array
        self.pixel_map = pixel_map
        self.axes = axes
        if axes == "CYX":
            height, width = int(array.shape[1]), int(array.shape[2])
            self.tile_hw = tuple(int(c) for c in array.chunks[1:3])
        else:
            height, width = int(array.shape[0]), int(array.shape[1])
            self.tile_hw = tuple(int(c) for c in array.chunks[0:2])
        self.shape = (height, width, 3)
        self.dtype = np.dtype(np.uint8)
        self.read = wrap_decode_errors(path, level)(self._read)

    def _read(self, y0: int, y1: int, x0: int, x1: int) -> np.ndarray:
        if self.axes == "CYX":
            window = np.moveaxis(np.asarray(self.array[:, y0:y1, x0:x1]), 0, -1)
        else:
            window = np.asarray(self.array[y0:y1, x0:x1])
        if self.pixel_map is not None:
            window = self.pixel_map(window)
        return to_rgb(np.ascontiguousarray(window))


def _is_private(key: str, value: Any) -> bool:
    """True for fields that may identify a patient or operator (key or free text naming them)."""
    text = f"{key} {value if isinstance(value, str) else ''}".lower()
    return any(word in text for word in _PHI_KEY_WORDS)


def _float_or_none(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


_UM_PER_UNIT = {"µm": 1.0, "um": 1.0, "nm": 1e-3, "mm": 1e3, "cm": 1e4, "m": 1e6, "Å": 1e-4}


def _ome_mpp(ome_xml: str | None, image_index: int) -> tuple[float, float] | None:
    """(x_um, y_um) from OME-XML Pixels PhysicalSizeX/Y (unit attribute, default um)."""
    import xml.etree.ElementTree as ElementTree

    if not ome_xml:
        return None
    try:
        root = ElementTree.fromstring(ome_xml)
    except ElementTree.ParseError:
        return None
    images = [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Image"]
    if not images:
        return None
    image = images[min(image_index, len(images) - 1)]
    pixels = next((el for el in image if el.tag.rsplit("}", 1)[-1] == "Pixels"), None)
    if pixels is None:
        return None
    sizes = []
    for axis in ("X", "Y"):
        value = _float_or_none(pixels.get(f"PhysicalSize{axis}"))
        factor = _UM_PER_UNIT.get(pixels.get(f"PhysicalSize{axis}Unit", "µm"))
        if value is None or factor is None:
            return None
        sizes.append(value * factor)
    if max(sizes) > MAX_MICROSCOPE_MPP:
        return None
    return sizes[0], sizes[1]


def _check_page_decodable(path: Path, page: Any) -> None:
    from tifffile import TIFF

    if page.compression not in TIFF.DECOMPRESSORS:
        raise UnsupportedFormatError(
            f"{path.name}: uses TIFF compression {int(page.compression)}, which no installed "
            "codec decodes; convert the slide to JPEG, JPEG 2000 or deflate tiles.",
            path,
        )
    if np.dtype(page.dtype) != np.uint8:
        raise UnsupportedFormatError(
            f"{path.name}: holds {np.dtype(page.dtype)} samples, but slides must be 8-bit "
            "brightfield RGB; convert it to 8-bit RGB.",
            path,
        )


def _chunk_hw(page: Any) -> tuple[int, int]:
    """(rows, columns) of one tile, or of one strip, of a page as declared."""
    if page.is_tiled:
        return int(page.tilelength), int(page.tilewidth)
    return min(int(page.rowsperstrip), int(page.imagelength)), int(page.imagewidth)


def _check_chunk_table(
    path: Path, page: Any, keyframe: Any, level: int, file_size: int, sparse_ok: bool
) -> None:
    """Refuse a tile/strip table that disagrees with the declared size, records no data for
    some tiles (offset or length 0, unless the format allows sparse tiles) or points past
    the end of the file; each would otherwise show as blank pixels passed off as real."""
    unit = "tiles" if keyframe.is_tiled else "strips"
    expected = math.prod(int(n) for n in keyframe.chunked)
    offsets = np.asarray(page.dataoffsets, dtype=np.int64)
    counts = np.asarray(page.databytecounts, dtype=np.int64)
    width, height = int(keyframe.imagewidth), int(keyframe.imagelength)
    if offsets.size != expected or counts.size != expected:
        raise CorruptFileError(
            f"{path.name}: level {level} declares {width:,} x {height:,} px, which needs "
            f"{expected:,} {unit}, but its table lists {offsets.size:,}; the header is damaged "
            "or forged, re-copy or re-export the file.",
            path,
        )
    empty = (counts == 0) | (offsets == 0)
    if empty.any() and not sparse_ok:
        raise CorruptFileError(
            f"{path.name}: {int(empty.sum()):,} of the {expected:,} {unit} of level {level} have "
            "no data recorded (offset or length 0), so parts of the image would show as "
            "blank; the file is damaged or was not fully written, re-copy or re-export it.",
            path,
        )
    beyond = ~empty & (offsets + counts > file_size)
    if beyond.any():
        raise CorruptFileError(
            f"{path.name}: {int(beyond.sum()):,} {unit} of level {level} lie past the end of the "
            "file; it is truncated, re-copy or re-export it.",
            path,
        )


def open_tiff_slide(path: Path) -> SlideParts:
    """Open a TIFF-family slide; metadata only, pixels stay on disk."""
    import tifffile
    import tiffslide

    check_ifd_chain(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            slide = tiffslide.TiffSlide(path)
            properties = dict(slide.properties)
    except (NotImplementedError, tifffile.TiffFileError) as error:
        raise _open_error(path, error) from error
    except (ValueError, KeyError, IndexError, OSError, AssertionError, TypeError) as error:
        raise CorruptFileError(
            f"{path.name}: {_structure_problem(error)}; the file is damaged, truncated or not a "
            "slide, re-copy or re-export it.",
            path,
        ) from error

    parts = SlideParts()
    parts.closers.append(slide.close)
    try:
        _fill_parts(path, slide, properties, parts, tifffile)
    except Exception:
        for close in parts.closers:
            close()
        raise
    return parts


def _structure_problem(error: Exception) -> str:
    """What a parser failure means for the user, in words (the raw text stays in __cause__)."""
    if isinstance(error, IndexError):
        return "its TIFF header points to no readable image (the first image lies past the end)"
    if isinstance(error, OSError):
        return (
            "its TIFF structure could not be read from disk (the file ends early or is unreadable)"
        )
    return "its TIFF structure is inconsistent (tags missing or out of their allowed range)"


def _open_error(path: Path, error: Exception) -> Exception:
    text = str(error)
    if "ndim" in text or "axes" in text:
        return UnsupportedFormatError(
            f"{path.name}: holds a multi-dimensional image (z-stack, time series or separate "
            "channels), not an RGB slide; export an RGB pyramid to view it.",
            path,
        )
    if isinstance(error, NotImplementedError) or "not supported" in text:
        return UnsupportedFormatError(
            f"{path.name}: this TIFF layout is not supported ({text}); only RGB or "
            "grayscale 8-bit pyramids are read, export the slide as RGB.",
            path,
        )
    return CorruptFileError(
        f"{path.name}: not a readable TIFF ({text}); the file is damaged or not a slide, "
        "re-copy or re-export it.",
        path,
    )


def _fill_parts(
    path: Path,
    slide: Any,
    properties: Mapping[str, Any],
    parts: SlideParts,
    tifffile: types.ModuleType,
) -> None:
    series_index = int(properties.get("tiffslide.series-index", 0))
    series = slide.ts_tifffile.series[series_index]
    axes = str(properties.get("tiffslide.series-axes", series.axes))
    if axes not in ("YXS", "YX", "CYX"):
        raise UnsupportedFormatError(
            f"{path.name}: image axes {axes!r} (channels, z-stack or time series) are not an "
            "RGB slide; export an RGB pyramid to view it.",
            path,
        )
    if axes == "CYX" and int(series.shape[0]) not in (3, 4):
        raise UnsupportedFormatError(
            f"{path.name}: {int(series.shape[0])} separate channels are not an RGB slide; "
            "export an RGB pyramid to view it.",
            path,
        )
    if axes == "YXS" and int(series.shape[-1]) not in (1, 3, 4):
        raise UnsupportedFormatError(
            f"{path.name}: {int(series.shape[-1])} samples per pixel are not an RGB slide; "
            "export an RGB pyramid to view it.",
            path,
        )

    reader = PositionalFile(path)
    parts.closers.append(reader.close)
    vendor = properties.get("tiffslide.vendor")
    sparse_is_background = vendor in _SPARSE_TILE_VENDORS
    single_plain_image = len(series.levels) == 1 and not series.levels[0].keyframe.is_tiled
    file_size = reader.size()
    group = None
    for level_index, level in enumerate(series.levels):
        keyframe = level.keyframe
        _check_page_decodable(path, keyframe)
        pixel_map = photometric_map(path, keyframe, level_index)
        check_jpeg_tables(path, keyframe, level_index)
        pages = list(level.pages)
        for page in pages:
            _check_chunk_table(path, page, keyframe, level_index, file_size, sparse_is_background)
        if single_plain_image:
            # the decoded samples, their RGB copy, the coarser levels and halving bands
            cost = int(keyframe.samplesperpixel) + 3 + 2
            check_decode_bytes(path, keyframe.imagewidth, keyframe.imagelength, cost, "the image")
        else:
            chunk_h, chunk_w = _chunk_hw(keyframe)
            check_tile_size(path, chunk_w, chunk_h, keyframe.samplesperpixel, level_index)
        direct = (
            len(pages) == 1
            and keyframe.is_tiled
            and int(keyframe.planarconfig) == 1
            and int(keyframe.imagedepth) == 1
            and axes in ("YXS", "YX")
        )
        if direct:
            source: Any = _TiledPageSource(
                path, reader, pages[0], level_index, sparse_is_background, pixel_map
            )
        else:
            if getattr(keyframe, "jpegheader", None) is None:
                for page in pages:
                    check_tile_ends(path, reader.read, page, level_index, OPEN_CHECKED_CHUNKS)
            if group is None:
                group = slide.zarr_group
            source = _ZarrLevelSource(path, group[str(level_index)], axes, level_index, pixel_map)
            parts.tiled = parts.tiled and bool(keyframe.is_tiled)
        parts.sources.append(source)
        parts.tile_sizes.append(tuple(source.tile_hw))

    page0 = series.levels[0].keyframe
    parts.tiled = parts.tiled and bool(page0.is_tiled)
    fallback_vendor = "ome-tiff" if slide.ts_tifffile.is_ome else "generic-tiff"
    parts.vendor = str(vendor) if vendor else fallback_vendor
    mpp_x = _float_or_none(properties.get("tiffslide.mpp-x"))
    mpp_y = _float_or_none(properties.get("tiffslide.mpp-y")) or mpp_x
    if mpp_x is not None and mpp_y is not None and max(mpp_x, mpp_y) <= MAX_MICROSCOPE_MPP:
        parts.mpp = (mpp_x, mpp_y)
    if parts.mpp is None and slide.ts_tifffile.is_ome:
        parts.mpp = _ome_mpp(slide.ts_tifffile.ome_metadata, series_index)
    if parts.mpp is not None and min(parts.mpp) < MIN_MICROSCOPE_MPP:
        parts.properties["medvl.mpp_warning"] = (
            f"the stated pixel size {parts.mpp[0]:g} x {parts.mpp[1]:g} um is finer than any "
            f"light microscope records (below {MIN_MICROSCOPE_MPP:g} um/px), so it is treated "
            "as unknown: sizes are in pixels and no distance in um can be measured"
        )
        parts.mpp = None
    parts.objective_power = _float_or_none(properties.get("tiffslide.objective-power"))

    ignored_mpp = parts.mpp is None
    for key, value in properties.items():
        if key.startswith("tiffslide.level[") or value is None:
            continue
        if ignored_mpp and key in ("tiffslide.mpp-x", "tiffslide.mpp-y"):
            key = key.replace("tiffslide.", "medvl.ignored-")  # a 72-dpi style default
        target = parts.private_properties if _is_private(key, value) else parts.properties
        target[key] = value if isinstance(value, (int, float, str, bool)) else str(value)

    try:
        names = list(slide.associated_images.keys())
    except Exception:
        names = []
    parts.associated = LazyImages(
        path, {name: functools.partial(slide.associated_images.__getitem__, name) for name in names}
    )
