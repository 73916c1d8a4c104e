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

from medvl_engine._reason import error_reason
from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io._levels import as_dask_level

__all__ = ["SLIDE_SUFFIXES", "Slide", "open_slide", "sniff_kind"]

SLIDE_SUFFIXES = (
    ".svs", ".ndpi", ".tif", ".tiff", ".ome.tif", ".ome.tiff", ".dcm",
    ".png", ".jpg", ".jpeg",
)  # fmt: skip

WHITE = 255

_TIFF_MAGICS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_MAGIC = b"\xff\xd8\xff"
_TIFF_SUFFIXES = (".svs", ".ndpi", ".tif", ".tiff", ".scn", ".bif", ".qptiff")


class Slide:
    """An open slide: lazy pyramid levels plus metadata (no patient data in ``properties``).

    Use as a context manager or call :meth:`close` to release the file.
    """

    def __init__(
        self,
        path: Path,
        sources: Sequence[Any],
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
        self._closers = list(closers)

    @property
    def dimensions(self) -> tuple[int, int]:
        """(width, height) of level 0 in pixels."""
        return self.level_dimensions[0]

    @property
    def level_count(self) -> int:
        return len(self.levels)

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
        """The whole slide, [h, w, 3] uint8, longest side ``max_px`` (never upscaled)."""
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
        pixels = self._sources[level].read(0, h, 0, w)
        if (w, h) == (target_w, target_h):
            return np.ascontiguousarray(pixels)
        image = Image.fromarray(np.ascontiguousarray(pixels))
        return np.asarray(image.resize((target_w, target_h), Image.Resampling.LANCZOS))

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
    """'tiff', 'dicom', 'png', 'jpeg' or 'folder' from the file's first bytes, else 'unknown'."""
    if path.is_dir():
        return "folder"
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


def open_slide(path: str | os.PathLike) -> Slide:
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
        from medvl_engine.io._dicom_wsi import open_dicom_slide

        return open_dicom_slide(path)
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
    from medvl_engine.io._plain import PlainPyramid
    from medvl_engine.io._tiff import open_tiff_slide

    parts = open_tiff_slide(path)
    sources, tiles = parts.sources, parts.tile_sizes
    if not parts.tiled and len(sources) == 1:
        base = sources[0]
        height, width, _ = base.shape
        pyramid = PlainPyramid(path, width, height, lambda: base.read(0, height, 0, width))
        sources = pyramid.sources
        tiles = [source.tile_hw for source in sources]
    return Slide(
        path,
        sources,
        tiles,
        vendor=parts.vendor,
        mpp=parts.mpp,
        objective_power=parts.objective_power,
        properties=parts.properties,
        private_properties=parts.private_properties,
        associated_images=parts.associated,
        closers=parts.closers,
    )


def _open_plain(path: Path) -> Slide:
    from medvl_engine.io._plain import PlainPyramid, pil_image_size, pil_loader

    width, height = pil_image_size(path)
    pyramid = PlainPyramid(path, width, height, pil_loader(path))
    return Slide(
        path,
        pyramid.sources,
        [source.tile_hw for source in pyramid.sources],
        vendor="plain-image",
        properties={"medvl.format": path.suffix.lower().lstrip(".") or "image"},
    )
