"""Patch grids: a lattice of square patches at a target resolution over a slide, kept where
the tissue mask covers enough of them (:func:`patch_grid`); every coordinate is level-0 px."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from medvl_engine.tiling._budget import (
    ENV_MAX_PATCHES,
    MAX_PATCH_SIZE,
    MAX_UPSAMPLING,
    MIN_PATCH_SIZE,
    PatchBudgetError,
    PatchGridError,
    check_side,
    max_patches,
    whole_px,
)
from medvl_engine.tiling._mask import tissue_mask
from medvl_engine.tiling._slide_like import SlideLike, mean_mpp, slide_label

__all__ = ["PatchGrid", "patch_grid"]


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
    patch_size = whole_px(patch_size, "patch_size")
    if patch_size < 1:
        raise PatchGridError(f"patch_size must be a positive number of px, got {patch_size}")
    check_side(
        patch_size,
        "patch_size",
        f"set {MIN_PATCH_SIZE} to {MAX_PATCH_SIZE:,} px (--patch-size, or patch_size in the "
        "model folder's config)",
    )
    if not 0.0 <= min_tissue <= 1.0:
        raise PatchGridError(f"min_tissue must lie in [0, 1], got {min_tissue}")
    stride = patch_size if stride is None else whole_px(stride, "stride")
    if stride < 1:
        raise PatchGridError(f"stride must be a positive number of px, got {stride}")
    slide_mpp = mean_mpp(slide)
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
                f"{slide_label(slide)} ({slide_mpp:g} um/px); patches would be blown up from "
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
            + f" would lay {count:,} patches over {slide_label(slide)} "
            f"({int(width0):,} x {int(height0):,} px), more than the {max_patches():,} one grid "
            f"may hold ({ENV_MAX_PATCHES}); use a larger patch size, stride or target_mpp, or "
            "raise the limit"
        )
    level = int(slide.get_best_level_for_downsample(max(scale, 1.0)))
    read_size = max(int(round(size0 / float(slide.level_downsamples[level]))), 1)
    if read_size > MAX_PATCH_SIZE:
        check_side(
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
