"""Tissue masks and patch grids at a target resolution; every coordinate is level-0 px.

``tissue_mask`` thresholds the saturation of a thumbnail with Otsu's method (brightness on
dark-field fluorescence scans), drops pen ink (wide strokes of blue, green or black), closes
small gaps, fills holes and removes specks.
``patch_grid`` lays a lattice of square patches of ``patch_size`` px at ``target_mpp`` over the
slide and keeps those whose tissue fraction reaches ``min_tissue``; each patch is read from the
finest pyramid level that does not need upsampling and resized to ``patch_size``.
Budgets come first: patch sides must be whole numbers from :data:`MIN_PATCH_SIZE` to
:data:`MAX_PATCH_SIZE` px, target_mpp at most :data:`MAX_UPSAMPLING` times finer than the slide,
and the lattice is counted against :func:`max_patches` (env MEDVL_MAX_PATCHES) before a single
coordinate is allocated; :func:`check_grid_budget` applies the same checks to any grid handed
to feature extraction.

Works with any object offering the ``medvl_engine.io.slide.Slide`` interface: ``dimensions``,
``mpp``, ``level_downsamples``, ``get_best_level_for_downsample``, ``read_region`` and
``thumbnail``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from scipy import ndimage

from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import ConfigError, ResourceLimitError

__all__ = [
    "MAX_PATCHES",
    "MAX_PATCH_SIZE",
    "MAX_UPSAMPLING",
    "MIN_PATCH_SIZE",
    "PatchBudgetError",
    "PatchGrid",
    "PatchGridError",
    "SlideLike",
    "check_grid_budget",
    "max_patches",
    "pen_mask",
    "patch_grid",
    "tissue_mask",
]

_FALLBACK_MPP = 0.5

MAX_PATCHES = 2_000_000
"""Patches one grid may hold (env MEDVL_MAX_PATCHES): a whole 75 x 25 mm glass slide at
0.5 um/px in 224 px patches is about 150,000, so ten such slides' worth. Counted before any
coordinate is made, so a patch size of 1 px or a target_mpp of 1e-6 is refused at once instead
of queuing billions of patches."""

MIN_PATCH_SIZE = 8
"""Smallest patch side, in px handed to the encoder: below it a patch shows no tissue."""

MAX_PATCH_SIZE = 8192
"""Largest patch side, in px handed to the encoder or read from the slide (200 MB as RGB)."""

MAX_UPSAMPLING = 16.0
"""How much finer than the slide target_mpp may be: each patch is upsampled that many times."""

_ENV_MAX_PATCHES = "MEDVL_MAX_PATCHES"
_MAX_PATCH_LEVEL0 = 2**20  # level-0 px: four times the widest slide MAX_SLIDE_PIXELS allows


class PatchGridError(ConfigError, ValueError):
    """A patch size, stride, resolution or tissue threshold that cannot make a grid."""


class PatchBudgetError(PatchGridError, ResourceLimitError):
    """A grid with more patches, or patches larger, than the work budget allows."""


def max_patches() -> int:
    """Patches one grid may hold: ``$MEDVL_MAX_PATCHES`` if a positive number, else
    :data:`MAX_PATCHES`."""
    return positive_int_setting(_ENV_MAX_PATCHES, MAX_PATCHES)


def _whole(value: Any, name: str) -> int:
    """``value`` as an int when it is a whole number (1.0 is, 1.5, True and "2" are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise PatchGridError(f"{name} must be a whole number of px, got {value!r}")
    if isinstance(value, (float, np.floating)) and not (
        math.isfinite(value) and float(value).is_integer()
    ):
        raise PatchGridError(f"{name} must be a whole number of px, got {value!r}")
    return int(value)


def _slide_label(slide: Any) -> str:
    path = getattr(slide, "path", None)
    return f"slide {Path(path).name}" if path else "the slide"


def _check_side(value: int, name: str, advice: str) -> None:
    if value < MIN_PATCH_SIZE:
        raise PatchGridError(
            f"{name} {value} px is below the smallest patch of {MIN_PATCH_SIZE} px, where no "
            f"tissue is visible; {advice}"
        )
    if value > MAX_PATCH_SIZE:
        raise PatchBudgetError(
            f"{name} {value:,} px is above the largest patch of {MAX_PATCH_SIZE:,} px "
            f"({3 * value * value / 2**20:,.0f} MB of pixels each); {advice}"
        )


def check_grid_budget(grid: Any, batch_size: int, slide: Any = None) -> None:
    """Refuse a patch grid (:class:`PatchGrid` or any object with its attributes) whose
    patches are not sane whole numbers of px, whose patch count is above :func:`max_patches`,
    or whose batch of ``batch_size`` patches read at once would hold more pixels than the
    decode limit (MEDVL_MAX_DECODE_PIXELS): before any patch is read or queued.
    """
    from medvl_engine.io.limits import format_pixels, max_decode_pixels

    advice = (
        f"set {MIN_PATCH_SIZE} to {MAX_PATCH_SIZE:,} px (--patch-size, or patch_size in the "
        "model folder's config)"
    )
    patch_size = _whole(getattr(grid, "patch_size", None), "patch_size")
    _check_side(patch_size, "patch_size", advice)
    size0 = _whole(getattr(grid, "patch_size_level0", None), "patch_size_level0")
    if not 1 <= size0 <= _MAX_PATCH_LEVEL0:
        raise PatchBudgetError(
            f"patch_size_level0 must be between 1 and {_MAX_PATCH_LEVEL0:,} px (wider than any "
            f"slide), got {size0:,}; rebuild the patch grid"
        )
    read_size = _whole(getattr(grid, "read_size", patch_size), "read_size")
    if read_size < 1:
        raise PatchGridError(f"read_size must be a positive number of px, got {read_size}")
    if read_size > MAX_PATCH_SIZE:
        _check_side(read_size, "each patch read from the slide is", "use a smaller target_mpp")
    batch = _whole(batch_size, "batch_size")
    if batch < 1:
        raise PatchGridError(f"batch_size must be a positive number of patches, got {batch}")
    coords = np.asarray(getattr(grid, "coords", np.zeros((0, 2))))
    count = int(coords.shape[0]) if coords.ndim else 0
    limit = max_patches()
    if count > limit:
        raise PatchBudgetError(
            f"the patch grid of {_slide_label(slide)} holds {count:,} patches, more than the "
            f"{limit:,} one grid may hold ({_ENV_MAX_PATCHES}); use a larger patch size or "
            "target_mpp, or raise the limit"
        )
    pixels = batch * max(read_size, patch_size) ** 2
    if pixels > max_decode_pixels():
        raise PatchBudgetError(
            f"a batch of {batch} patches of {max(read_size, patch_size):,} px holds "
            f"{format_pixels(pixels)}, more than the {format_pixels(max_decode_pixels())} "
            "read at once (MEDVL_MAX_DECODE_PIXELS); lower the batch size"
        )


class SlideLike(Protocol):
    """The part of ``medvl_engine.io.slide.Slide`` that tiling and feature extraction need."""

    mpp: tuple[float, float] | None
    level_downsamples: list[float]
    level_dimensions: list[tuple[int, int]]  # (width, height) of every pyramid level

    @property
    def dimensions(self) -> tuple[int, int]: ...

    def get_best_level_for_downsample(self, downsample: float) -> int: ...

    def read_region(
        self, location: tuple[int, int], level: int, size: tuple[int, int]
    ) -> np.ndarray: ...

    def thumbnail(self, max_px: int = 512) -> np.ndarray: ...


def pen_mask(rgb: np.ndarray) -> np.ndarray:
    """Pixels of blue, green or black marker ink, bool [h, w] for uint8 [h, w, 3].

    Hematoxylin never exceeds red by more than ~75 grey levels in blue, nor reaches 1.8x red
    while 60 levels above it; H&E is never green-dominant; near-black pixels are dense nuclei or
    ink, which :func:`tissue_mask` tells apart by stroke width and area.
    """
    red, green, blue = (rgb[..., i].astype(np.int16) for i in range(3))
    blue_ink = ((blue - red > 90) | ((blue - red > 60) & (blue > 1.8 * red))) & (blue - green > 30)
    green_ink = (green - red > 30) & (green - blue > 10)
    black_ink = _channel_max(rgb) < 60
    return blue_ink | green_ink | black_ink


def _channel_max(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(np.maximum(np.maximum(rgb[..., 0], rgb[..., 1]), rgb[..., 2]))


def _channel_min(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(np.minimum(np.minimum(rgb[..., 0], rgb[..., 1]), rgb[..., 2]))


def _is_dark_field(brightness: np.ndarray) -> bool:
    """True when the image border (the glass) is dark: a fluorescence scan, not brightfield."""
    border = np.concatenate([brightness[0], brightness[-1], brightness[:, 0], brightness[:, -1]])
    return float(np.median(border)) < 60.0


def _otsu(values: np.ndarray, bins: int = 256) -> float:
    """Otsu's threshold of values in [0, 1] (maximises between-class variance)."""
    hist, edges = np.histogram(values, bins=bins, range=(0.0, 1.0))
    hist = hist.astype(np.float64)
    centres = (edges[:-1] + edges[1:]) / 2.0
    weight0 = np.cumsum(hist)
    weight1 = weight0[-1] - weight0
    mean0 = np.cumsum(hist * centres) / np.maximum(weight0, 1e-12)
    total = (hist * centres).sum()
    mean1 = (total - np.cumsum(hist * centres)) / np.maximum(weight1, 1e-12)
    between = weight0 * weight1 * (mean0 - mean1) ** 2
    return float(centres[int(np.argmax(between))])


def _closing(mask: np.ndarray, radius: float) -> np.ndarray:
    """Morphological closing by a disk of ``radius`` px, on a coarser grid when the disk is big."""
    if radius < 1.0:
        return mask
    step = max(1, int(radius // 6))
    rows, cols = mask.shape
    if step > 1:
        padded = np.pad(mask, ((0, -rows % step), (0, -cols % step)))
        blocks = padded.reshape(padded.shape[0] // step, step, padded.shape[1] // step, step)
        coarse = blocks.mean(axis=(1, 3)) >= 0.5
    else:
        coarse = mask
    reach = radius / step
    pad = int(math.ceil(reach)) + 1
    grown = ndimage.distance_transform_edt(~np.pad(coarse, pad)) <= reach
    closed = (ndimage.distance_transform_edt(grown) > reach)[pad:-pad, pad:-pad]
    if step > 1:
        # bilinear upsampling then a 0.5 cut keeps the outline smooth instead of blocky
        smooth = ndimage.zoom(
            closed.astype(np.float32), step, order=1, mode="nearest", grid_mode=True
        )
        closed = smooth[:rows, :cols] > 0.5
    return closed


def _slide_mpp(slide: SlideLike) -> float | None:
    mpp = getattr(slide, "mpp", None)
    if mpp is None:
        return None
    values = [float(v) for v in (mpp if isinstance(mpp, (tuple, list)) else (mpp, mpp))]
    if not all(math.isfinite(v) and v > 0 for v in values):
        return None
    return float(np.mean(values))


def tissue_mask(
    slide: SlideLike,
    *,
    max_px: int = 1024,
    min_saturation: float = 0.05,
    close_um: float = 50.0,
    min_object_um2: float = 2.0e4,
    max_hole_um2: float = 1.0e6,
    exclude_pen: bool = True,
    min_pen_width_um: float = 25.0,
    min_pen_um2: float = 5.0e3,
) -> tuple[np.ndarray, float]:
    """Tissue mask of a slide: (mask bool [h, w], downsample from mask px to level-0 px).

    Otsu on HSV saturation of a thumbnail (longest side ``max_px``), threshold at least
    ``min_saturation`` (a blank slide gives an empty mask), with hysteresis down to half the
    threshold for regions touching tissue; pen ink (strokes at least ``min_pen_width_um`` wide
    and ``min_pen_um2`` in area) removed when ``exclude_pen``;
    closing by a disk of ``close_um``, holes up to ``max_hole_um2`` filled, objects under
    ``min_object_um2`` (or a twentieth of the image, if less) dropped. Without an mpp the um
    sizes are taken at 0.5 um/px.
    On a dark-field (fluorescence) scan, recognised by a dark image border, brightness takes the
    place of saturation and pen detection is off.
    Mask pixel (r, c) covers level-0 x in [c * downsample, (c + 1) * downsample), likewise y.
    """
    rgb = np.asarray(slide.thumbnail(max_px))[..., :3]
    width0, _ = slide.dimensions
    downsample = width0 / rgb.shape[1]
    um_per_px = (_slide_mpp(slide) or _FALLBACK_MPP) * downsample

    top, bottom = _channel_max(rgb), _channel_min(rgb)
    if _is_dark_field(top):
        # fluorescence: tissue is what shines; there is no stain saturation and no pen ink
        signal = top.astype(np.float32) / 255.0
        exclude_pen = False
    else:
        signal = (top - bottom).astype(np.float32) / np.maximum(top, 1).astype(np.float32)
    saturation = ndimage.gaussian_filter(signal, 1.0)
    ink = pen_mask(rgb) if exclude_pen else np.zeros(rgb.shape[:2], bool)
    if ink.any():
        # marker strokes are wide; dark nuclei and their small clusters are not
        ink = ndimage.binary_closing(ink, iterations=2)
        ink = ndimage.binary_opening(
            ink, iterations=max(1, int(round(min_pen_width_um / 2.0 / um_per_px)))
        )
        labels, count = ndimage.label(ink)
        if count:
            sizes = ndimage.sum(ink, labels, np.arange(1, count + 1)) * um_per_px**2
            ink = np.concatenate([[False], sizes >= min_pen_um2])[labels]
        ink = ndimage.binary_dilation(ink, iterations=3)
    usable = saturation[~ink]
    threshold = max(_otsu(usable) if usable.size else 1.0, min_saturation)
    # hysteresis: faint structure (fat membranes) counts when it touches clearly stained tissue
    weak = (saturation > max(threshold / 2.0, min_saturation)) & ~ink
    labels, count = ndimage.label(weak)
    touches_strong = np.zeros(count + 1, bool)
    touches_strong[labels[(saturation > threshold) & weak]] = True
    touches_strong[0] = False
    mask = touches_strong[labels]

    mask |= _closing(mask, close_um / um_per_px)
    holes = ndimage.binary_fill_holes(mask) & ~mask
    if holes.any():
        labels, count = ndimage.label(holes)
        sizes = ndimage.sum(holes, labels, np.arange(1, count + 1)) * um_per_px**2
        mask |= np.concatenate([[False], sizes <= max_hole_um2])[labels]
    labels, count = ndimage.label(mask)
    if count:
        sizes = ndimage.sum(mask, labels, np.arange(1, count + 1)) * um_per_px**2
        # on a small image (a crop) an object a twentieth of the field of view still counts
        smallest = min(min_object_um2, 0.05 * mask.size * um_per_px**2)
        mask = np.concatenate([[False], sizes >= smallest])[labels]
    return mask & ~ink, float(downsample)


@dataclass
class PatchGrid:
    """Square patches on a lattice over a slide.

    ``coords`` int64 [N, 2] are (x, y) level-0 px of each patch's top-left corner, row-major.
    A patch covers ``patch_size_level0`` level-0 px per side and is returned as ``patch_size`` px
    at ``target_mpp``; it is read as ``read_size`` px at pyramid ``level`` and resized.
    ``tissue_fraction`` float32 [N] is the share of mask pixels inside each patch.
    When the slide has no mpp, ``mpp_missing`` is True, ``target_mpp`` is None and patch sizes
    are level-0 px.
    """

    coords: np.ndarray
    patch_size: int
    patch_size_level0: int
    level: int
    read_size: int
    target_mpp: float | None
    tissue_fraction: np.ndarray
    stride_level0: int
    slide_mpp: float | None
    mpp_missing: bool
    mask: np.ndarray = field(repr=False)
    mask_downsample: float = 1.0

    def __len__(self) -> int:
        return int(self.coords.shape[0])

    def read_patch(self, slide: SlideLike, index: int) -> np.ndarray:
        """Patch ``index`` at the grid's resolution, uint8 [patch_size, patch_size, 3]."""
        x, y = (int(v) for v in self.coords[index])
        region = np.asarray(
            slide.read_region((x, y), self.level, (self.read_size, self.read_size))
        )[..., :3]
        if self.read_size == self.patch_size:
            return np.ascontiguousarray(region)
        from PIL import Image

        resample = (
            Image.Resampling.BOX if self.read_size > self.patch_size else Image.Resampling.BICUBIC
        )
        image = Image.fromarray(np.ascontiguousarray(region))
        return np.asarray(image.resize((self.patch_size, self.patch_size), resample))

    def read_patches(
        self, slide: SlideLike, indices: int | Sequence[int] | np.ndarray
    ) -> np.ndarray:
        """Patches ``indices`` (B grid rows, or one), uint8 [B, patch_size, patch_size, 3]."""
        indices = list(np.atleast_1d(np.asarray(indices, dtype=np.int64)))
        out = np.empty((len(indices), self.patch_size, self.patch_size, 3), np.uint8)
        for slot, index in enumerate(indices):
            out[slot] = self.read_patch(slide, int(index))
        return out

    def attrs(self) -> dict[str, Any]:
        """Plain-type description for feature-store attributes."""
        return {
            "patch_size": self.patch_size,
            "patch_size_level0": self.patch_size_level0,
            "target_mpp": self.target_mpp,
            "level": self.level,
            "read_size": self.read_size,
            "stride_level0": self.stride_level0,
            "slide_mpp": self.slide_mpp,
            "mpp_missing": self.mpp_missing,
        }


def _box_sums(mask: np.ndarray) -> np.ndarray:
    """Summed-area table with a zero first row and column, int64 [h + 1, w + 1]."""
    table = np.zeros((mask.shape[0] + 1, mask.shape[1] + 1), np.int64)
    table[1:, 1:] = mask.astype(np.int64).cumsum(0).cumsum(1)
    return table


def patch_grid(
    slide: SlideLike,
    patch_size: int = 448,
    target_mpp: float = 0.5,
    min_tissue: float = 0.25,
    *,
    stride: int | None = None,
    mask: tuple[np.ndarray, float] | None = None,
    **mask_options: Any,
) -> PatchGrid:
    """Patches of ``patch_size`` px at ``target_mpp`` um/px holding at least ``min_tissue`` tissue.

    ``stride`` (px at target mpp, default ``patch_size``) spaces the lattice, which starts at the
    level-0 origin; patches may reach past the right/bottom edge (read as white, counted as no
    tissue). ``mask`` reuses a (mask, downsample) from :func:`tissue_mask`; otherwise one is
    computed with ``mask_options``.
    """
    patch_size = _whole(patch_size, "patch_size")
    if patch_size < 1:
        raise PatchGridError(f"patch_size must be a positive number of px, got {patch_size}")
    _check_side(
        patch_size,
        "patch_size",
        f"set {MIN_PATCH_SIZE} to {MAX_PATCH_SIZE:,} px (--patch-size, or patch_size in the "
        "model folder's config)",
    )
    if not 0.0 <= min_tissue <= 1.0:
        raise PatchGridError(f"min_tissue must lie in [0, 1], got {min_tissue}")
    stride = patch_size if stride is None else _whole(stride, "stride")
    if stride < 1:
        raise PatchGridError(f"stride must be a positive number of px, got {stride}")
    slide_mpp = _slide_mpp(slide)
    if slide_mpp is None:
        scale, grid_mpp = 1.0, None
    else:
        if (
            target_mpp is None
            or isinstance(target_mpp, bool)
            or not math.isfinite(float(target_mpp))
            or target_mpp <= 0
        ):
            raise PatchGridError(f"target_mpp must be a positive um/px value, got {target_mpp}")
        scale, grid_mpp = float(target_mpp) / slide_mpp, float(target_mpp)
        if scale * MAX_UPSAMPLING < 1.0:
            raise PatchGridError(
                f"target_mpp {target_mpp:g} um/px is {1.0 / scale:,.3g} times finer than "
                f"{_slide_label(slide)} ({slide_mpp:g} um/px); patches would be blown up from "
                f"{patch_size * scale:.3g} px of the slide; use a target_mpp of at least "
                f"{slide_mpp / MAX_UPSAMPLING:g} um/px (the encoder's own mpp, e.g. 0.5)"
            )
    width0, height0 = slide.dimensions
    size0 = max(int(round(patch_size * scale)), 1)
    stride0 = max(int(round(stride * scale)), 1)
    count = -(-int(width0) // stride0) * -(-int(height0) // stride0)
    if count > max_patches():
        raise PatchBudgetError(
            f"a grid of {patch_size} px patches every {stride} px"
            + ("" if grid_mpp is None else f" at {grid_mpp:g} um/px")
            + f" would lay {count:,} patches over {_slide_label(slide)} "
            f"({int(width0):,} x {int(height0):,} px), more than the {max_patches():,} one grid "
            f"may hold ({_ENV_MAX_PATCHES}); use a larger patch size, stride or target_mpp, or "
            "raise the limit"
        )
    level = int(slide.get_best_level_for_downsample(max(scale, 1.0)))
    read_size = max(int(round(size0 / float(slide.level_downsamples[level]))), 1)
    if read_size > MAX_PATCH_SIZE:
        _check_side(
            read_size,
            f"at {grid_mpp:g} um/px each patch read from the slide is",
            "use a smaller patch size or target_mpp",
        )

    tissue, mask_ds = mask if mask is not None else tissue_mask(slide, **mask_options)
    xs = np.arange(0, width0, stride0, dtype=np.int64)
    ys = np.arange(0, height0, stride0, dtype=np.int64)
    grid_x, grid_y = np.meshgrid(xs, ys)
    coords = np.stack([grid_x.ravel(), grid_y.ravel()], axis=1)

    table = _box_sums(tissue)
    rows, cols = tissue.shape
    c0 = np.clip(np.round(coords[:, 0] / mask_ds).astype(np.int64), 0, cols)
    r0 = np.clip(np.round(coords[:, 1] / mask_ds).astype(np.int64), 0, rows)
    c1 = np.clip(np.round((coords[:, 0] + size0) / mask_ds).astype(np.int64), 0, cols)
    r1 = np.clip(np.round((coords[:, 1] + size0) / mask_ds).astype(np.int64), 0, rows)
    # a patch smaller than a mask pixel takes the value of the mask pixel under its centre
    centre_c = np.clip(((coords[:, 0] + size0 / 2) // mask_ds).astype(np.int64), 0, cols)
    centre_r = np.clip(((coords[:, 1] + size0 / 2) // mask_ds).astype(np.int64), 0, rows)
    tiny_c, tiny_r = c1 <= c0, r1 <= r0
    c0 = np.where(tiny_c, centre_c, c0)
    r0 = np.where(tiny_r, centre_r, r0)
    c1 = np.where(tiny_c, np.minimum(c0 + 1, cols), c1)
    r1 = np.where(tiny_r, np.minimum(r0 + 1, rows), r1)
    inside = table[r1, c1] - table[r0, c1] - table[r1, c0] + table[r0, c0]
    area = np.maximum((size0 / mask_ds) ** 2, (r1 - r0) * (c1 - c0)).astype(np.float64)
    fraction = np.clip(inside / np.maximum(area, 1e-9), 0.0, 1.0).astype(np.float32)
    keep = fraction >= min_tissue
    return PatchGrid(
        coords=coords[keep].astype(np.int64),
        patch_size=int(patch_size),
        patch_size_level0=size0,
        level=level,
        read_size=read_size,
        target_mpp=grid_mpp,
        tissue_fraction=fraction[keep],
        stride_level0=stride0,
        slide_mpp=slide_mpp,
        mpp_missing=slide_mpp is None,
        mask=tissue,
        mask_downsample=float(mask_ds),
    )
