"""Whole-slide images as lazy pyramids: ``open_slide(path) -> Slide``.

Formats: Aperio SVS (JPEG / JPEG 2000), Hamamatsu NDPI, generic tiled TIFF and
OME-TIFF (RGB) through tiffslide; DICOM VL Whole Slide Microscopy through
pydicom frames; plain PNG / JPEG / strip TIFF with a lazily computed pyramid.

Frames: ``levels[i]`` is a dask array [H_i, W_i, 3] uint8 in level-i pixels
(rows, columns); ``level_dimensions`` are (width, height); a *location* is
(x, y) in level-0 pixels; ``mpp`` is (x_um, y_um) per level-0 pixel.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np

from medvl_engine.common.reason import error_reason
from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io.limits import check_decode_size, check_slide_size
from medvl_engine.io.safe_open import describe_file_type, require_regular_file
from medvl_engine.io.slide._parts import SlideParts
from medvl_engine.io.slide.pixel_sources import PixelSource, as_dask_level, for_each_in_parallel

__all__ = ["SLIDE_SUFFIXES", "Slide", "open_slide", "sniff_kind"]

SLIDE_SUFFIXES = (
    ".svs", ".ndpi", ".tif", ".tiff", ".ome.tif", ".ome.tiff", ".dcm",
    ".png", ".jpg", ".jpeg",
)  # fmt: skip

WHITE = 255

THUMBNAIL_LEVEL_PIXELS = 2**26
"""Largest level a thumbnail decodes in one piece; a larger one is read tile by tile."""

THUMBNAIL_TILE_BUDGET = 2**28
"""Pixels a tile-by-tile thumbnail decodes at most; beyond it only a lattice of tiles is read."""

_TIFF_MAGICS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_TIFF_SUFFIXES = (".svs", ".ndpi", ".tif", ".tiff", ".scn", ".bif", ".qptiff")
_SINGLE_FILE_SUFFIXES = (*_TIFF_SUFFIXES, ".png", ".jpg", ".jpeg")


class Slide:
    """An open slide: lazy pyramid levels plus metadata (no patient data in ``properties``).

    Use as a context manager or call :meth:`close` to release the file.
    """

    def __init__(
        self,
        path: Path,
        sources: Sequence[PixelSource],
        tile_sizes: Sequence[tuple[int, int]],
        *,
        vendor: str,
        mpp: tuple[float, float] | None = None,
        objective_power: float | None = None,
        properties: Mapping[str, Any] | None = None,
        private_properties: Mapping[str, Any] | None = None,
        associated_images: Mapping[str, np.ndarray] | None = None,
        closers: Sequence[Callable[[], None]] = (),
    ) -> None:
        self.path = Path(path)
        self._sources = list(sources)
        self._tile_sizes = [(int(h), int(w)) for h, w in tile_sizes]
        self._closers = list(closers)
        height0, width0 = (int(v) for v in self._sources[0].shape[:2])
        try:
            check_slide_size(self.path, width0, height0)
        except MedVLError:
            self.close()
            raise
        token = _file_token(self.path)
        self.levels: list[da.Array] = [
            as_dask_level(source, tile, f"medvl-slide-{token}-level{index}")
            for index, (source, tile) in enumerate(zip(self._sources, tile_sizes, strict=True))
        ]
        self.level_dimensions: list[tuple[int, int]] = [
            (int(level.shape[1]), int(level.shape[0])) for level in self.levels
        ]
        width0, height0 = self.level_dimensions[0]
        self.level_downsamples: list[float] = [
            (width0 / max(w, 1) + height0 / max(h, 1)) / 2.0 for w, h in self.level_dimensions
        ]
        self.vendor = vendor
        self.mpp = mpp
        self.objective_power = objective_power
        self.properties: dict[str, Any] = dict(properties or {})
        self.private_properties: dict[str, Any] = dict(private_properties or {})
        """Fields that may identify a patient; shown only when a user asks (``--show-phi``)."""
        self.associated_images: Mapping[str, np.ndarray] = associated_images or {}

    @property
    def dimensions(self) -> tuple[int, int]:
        """(width, height) of level 0 in pixels."""
        return self.level_dimensions[0]

    @property
    def level_count(self) -> int:
        return len(self.levels)

    @property
    def tile_sizes(self) -> list[tuple[int, int]]:
        """(rows, cols) of each level's native tiles, finest level first."""
        return list(self._tile_sizes)

    def _axis_downsamples(self, level: int) -> tuple[float, float]:
        width0, height0 = self.level_dimensions[0]
        width, height = self.level_dimensions[level]
        return width0 / max(width, 1), height0 / max(height, 1)

    def read_region(
        self, location: tuple[int, int], level: int, size: tuple[int, int]
    ) -> np.ndarray:
        """Pixels of a window: [h, w, 3] uint8, white where it leaves the slide.

        ``location`` is the window's top-left (x, y) in level-0 px; ``size`` is
        (w, h) in px of ``level``. The level-``level`` top-left is
        floor(location / downsample), per axis, as in OpenSlide.
        """
        if not 0 <= level < len(self.levels):
            raise MedVLError(
                f"{self.path.name}: level {level} does not exist; the slide has levels "
                f"0..{len(self.levels) - 1}.",
                self.path,
            )
        width, height = (int(v) for v in size)
        if width < 0 or height < 0:
            raise MedVLError(
                f"{self.path.name}: region size {size} is negative; give (width, height) >= 0.",
                self.path,
            )
        check_decode_size(
            self.path,
            width,
            height,
            f"the region asked for at level {level}",
            "ask for a smaller region or a coarser level",
        )
        down_x, down_y = self._axis_downsamples(level)
        x0 = math.floor(location[0] / down_x)
        y0 = math.floor(location[1] / down_y)
        out = np.full((height, width, 3), WHITE, dtype=np.uint8)
        level_w, level_h = self.level_dimensions[level]
        sx0, sy0 = max(x0, 0), max(y0, 0)
        sx1, sy1 = min(x0 + width, level_w), min(y0 + height, level_h)
        if sx1 > sx0 and sy1 > sy0:
            window = self._sources[level].read(sy0, sy1, sx0, sx1)
            out[sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0] = window
        return out

    def get_best_level_for_downsample(self, downsample: float) -> int:
        """Index of the coarsest level whose downsample is <= ``downsample`` (OpenSlide rule)."""
        best = 0
        for index, level_downsample in enumerate(self.level_downsamples):
            if level_downsample <= downsample * (1 + 1e-6):
                best = index
        return best

    def thumbnail(self, max_px: int = 512) -> np.ndarray:
        """The whole slide, [h, w, 3] uint8, longest side ``max_px`` (never upscaled).

        Made from the coarsest level at least that large. A level of more than
        THUMBNAIL_LEVEL_PIXELS (a slide without a pyramid) is never decoded whole: its
        tiles are read one at a time and shrunk into place; when that would decode more
        than THUMBNAIL_TILE_BUDGET pixels, only a regular lattice of tiles is read, each
        standing in for its unread neighbours, so time and memory stay bounded on any slide.
        """
        from PIL import Image

        width0, height0 = self.dimensions
        scale = min(1.0, max_px / max(width0, height0, 1))
        target_w = max(1, round(width0 * scale))
        target_h = max(1, round(height0 * scale))
        level = len(self.levels) - 1
        while level > 0:
            w, h = self.level_dimensions[level]
            if w >= target_w and h >= target_h:
                break
            level -= 1
        w, h = self.level_dimensions[level]
        if w * h > THUMBNAIL_LEVEL_PIXELS:
            return self._tiled_thumbnail(level, target_w, target_h)
        pixels = self._sources[level].read(0, h, 0, w)
        if (w, h) == (target_w, target_h):
            return np.ascontiguousarray(pixels)
        image = Image.fromarray(np.ascontiguousarray(pixels))
        return np.asarray(image.resize((target_w, target_h), Image.Resampling.LANCZOS))

    def _tiled_thumbnail(self, level: int, target_w: int, target_h: int) -> np.ndarray:
        """[target_h, target_w, 3] from the tiles of ``level``, decoding at most
        THUMBNAIL_TILE_BUDGET px: every ``step``-th tile row and column, each tile resized
        over the area of the step x step block of tiles it stands for (step 1: every tile)."""
        from PIL import Image

        width, height = self.level_dimensions[level]
        tile_h = max(1, min(self._tile_sizes[level][0], height))
        tile_w = max(1, min(self._tile_sizes[level][1], width))
        rows, cols = math.ceil(height / tile_h), math.ceil(width / tile_w)
        budget_tiles = max(1, THUMBNAIL_TILE_BUDGET // (tile_h * tile_w))
        step = 1
        while math.ceil(rows / step) * math.ceil(cols / min(step, cols)) > budget_tiles:
            step += 1
        step_r, step_c = step, min(step, cols)
        scale_x, scale_y = target_w / width, target_h / height
        out = np.full((target_h, target_w, 3), WHITE, dtype=np.uint8)
        blocks = []
        for row in range(0, rows, step_r):
            y0, y1 = row * tile_h, min((row + step_r) * tile_h, height)
            ty0, ty1 = round(y0 * scale_y), round(y1 * scale_y)
            for col in range(0, cols, step_c):
                x0, x1 = col * tile_w, min((col + step_c) * tile_w, width)
                tx0, tx1 = round(x0 * scale_x), round(x1 * scale_x)
                if ty1 > ty0 and tx1 > tx0:
                    blocks.append((y0, x0, ty0, ty1, tx0, tx1))
        source = self._sources[level]

        def shrink(block: tuple[int, ...]) -> None:
            y0, x0, ty0, ty1, tx0, tx1 = block
            tile = source.read(y0, min(y0 + tile_h, height), x0, min(x0 + tile_w, width))
            image = Image.fromarray(np.ascontiguousarray(tile))
            out[ty0:ty1, tx0:tx1] = np.asarray(
                image.resize((tx1 - tx0, ty1 - ty0), Image.Resampling.BOX)
            )

        for_each_in_parallel(shrink, blocks)
        return out

    def close(self) -> None:
        """Release open files; the levels cannot be read afterwards."""
        closers, self._closers = self._closers, []
        for close in reversed(closers):
            try:
                close()
            except Exception:  # closing a handle that is already gone is harmless
                pass

    def __enter__(self) -> Slide:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        width, height = self.dimensions
        return (
            f"Slide({self.path.name!r}, {width}x{height}, levels={len(self.levels)}, "
            f"mpp={self.mpp}, vendor={self.vendor!r})"
        )


def _file_token(path: Path) -> str:
    try:
        stat = path.stat()
        key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:
        key = str(path)
    return hashlib.sha1(os.fsencode(key)).hexdigest()[:16]


def sniff_kind(path: Path) -> str:
    """'tiff', 'dicom', 'png', 'jpeg' or 'folder' from the file's first bytes, else 'unknown'.

    Only a regular file is opened: a pipe, device, socket or /proc entry raises
    UnsupportedFormatError (see :func:`require_regular_file`), as does a folder named like
    a single-file format (``x.svs/``).
    """
    if path.is_dir():
        if path.suffix.lower() in _SINGLE_FILE_SUFFIXES:
            raise UnsupportedFormatError(
                f"{path.name}: is {describe_file_type(path.stat().st_mode)} named like an "
                "image file; give the path of the image file itself.",
                path,
            )
        return "folder"
    require_regular_file(path)
    with open(path, "rb") as handle:
        head = handle.read(132)
    if head[:4] in _TIFF_MAGICS:
        return "tiff"
    if len(head) >= 132 and head[128:132] == b"DICM":
        return "dicom"
    if head.startswith(_PNG_MAGIC):
        return "png"
    if head.startswith(_JPEG_MAGIC):
        return "jpeg"
    if path.suffix.lower() == ".dcm":
        return "dicom"
    return "unknown"


def open_slide(path: str | os.PathLike[str]) -> Slide:
    """Open a whole-slide image lazily (only metadata is read).

    Raises UnsupportedFormatError for formats or layouts the engine does not
    read, CorruptFileError for damaged files; pixel decode errors surface as
    CorruptFileError when a region or chunk is read.
    """
    path = Path(path)
    if not path.exists():
        raise MedVLError(f"{path}: no such file or folder; check the path.", path)
    try:
        return _open_by_kind(path)
    except MedVLError:
        raise
    except Exception as error:  # a damaged header trips the parsers in many ways
        detail = error_reason(error)
        raise CorruptFileError(
            f"{path.name}: the file could not be read ({detail or type(error).__name__}); it is "
            "damaged or truncated, re-copy or re-export it.",
            path,
        ) from error


def _open_by_kind(path: Path) -> Slide:
    try:
        kind = sniff_kind(path)
    except OSError as error:
        raise MedVLError(
            f"{path.name}: cannot be read ({error.strerror}); check its permissions.", path
        ) from error
    if kind == "tiff":
        return _open_tiff(path)
    if kind in ("png", "jpeg"):
        return _open_plain(path)
    if kind in ("dicom", "folder"):
        from medvl_engine.io.slide._dicom_wsi import open_dicom_slide

        return _slide_from_parts(path, open_dicom_slide(path))
    if path.stat().st_size == 0:
        raise CorruptFileError(f"{path.name}: the file is empty; re-copy it.", path)
    if path.suffix.lower() in _TIFF_SUFFIXES:
        raise CorruptFileError(
            f"{path.name}: named like a TIFF slide but does not start with a TIFF header; the "
            "file is damaged or mis-named, re-copy or re-export it.",
            path,
        )
    raise UnsupportedFormatError(
        f"{path.name}: not a slide format the engine reads; use SVS, NDPI, TIFF, OME-TIFF, "
        "DICOM WSI, PNG or JPEG.",
        path,
    )


def _open_tiff(path: Path) -> Slide:
    from medvl_engine.io.slide._plain import PlainPyramid
    from medvl_engine.io.slide._tiff import open_tiff_slide

    parts = open_tiff_slide(path)
    if not parts.tiled and len(parts.sources) == 1:
        base = parts.sources[0]
        height, width, _ = base.shape
        pyramid = PlainPyramid(path, width, height, lambda: base.read(0, height, 0, width))
        parts.sources = pyramid.sources
        parts.tile_sizes = [source.tile_hw for source in pyramid.sources]
    return _slide_from_parts(path, parts)


def _slide_from_parts(path: Path, parts: SlideParts) -> Slide:
    return Slide(
        path,
        parts.sources,
        parts.tile_sizes,
        vendor=parts.vendor,
        mpp=parts.mpp,
        objective_power=parts.objective_power,
        properties=parts.properties,
        private_properties=parts.private_properties,
        associated_images=parts.associated,
        closers=parts.closers,
    )


def _open_plain(path: Path) -> Slide:
    from medvl_engine.io.slide._plain import PlainPyramid, pil_image_size, pil_loader

    width, height = pil_image_size(path)
    pyramid = PlainPyramid(path, width, height, pil_loader(path))
    return Slide(
        path,
        pyramid.sources,
        [source.tile_hw for source in pyramid.sources],
        vendor="plain-image",
        properties={"medvl.format": path.suffix.lower().lstrip(".") or "image"},
    )
