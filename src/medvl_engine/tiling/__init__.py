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

from medvl_engine.tiling._budget import (
    MAX_PATCH_SIZE,
    MAX_PATCHES,
    MAX_UPSAMPLING,
    MIN_PATCH_SIZE,
    PatchBudgetError,
    PatchGridError,
    check_grid_budget,
    max_patches,
)
from medvl_engine.tiling._grid import PatchGrid, patch_grid
from medvl_engine.tiling._mask import pen_mask, tissue_mask
from medvl_engine.tiling._slide_like import SlideLike

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
