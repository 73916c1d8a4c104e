"""Patch features of one slide as they are computed: the patches in view first, then the rest.

No Qt here. ``PartialFeatures`` holds a FeatureStore over the slide's whole patch grid whose
rows fill in as features arrive (``known`` [N] marks them): patches in the viewer's view are
encoded directly (nearest the view's centre first), the others come from the engine's
resumable extraction into the cache store, read back as its rows are written. A heatmap of
the known rows lands on the complete map's grid, so the overlay fills in where it will end.
A cancelled job leaves its PartialFeatures in the FeatureCache: the next run starts from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PartialFeatures", "patches_in_view"]


def patches_in_view(
    coords: np.ndarray,
    patch_size_level0: int,
    view_level0: tuple[float, float, float, float] | None,
    limit: int,
) -> np.ndarray:
    """Indices of the patches overlapping ``view_level0`` (x0, y0, x1, y1) level-0 px, nearest
    its centre first, at most ``limit``. ``coords`` [N, 2] are (x, y) level-0 top-left corners.
    No view: the patches nearest the slide's tissue centre."""
    coords = np.asarray(coords, dtype=np.float64).reshape(-1, 2)
    if len(coords) == 0 or limit <= 0:
        return np.zeros(0, dtype=np.int64)
    centres = coords + patch_size_level0 / 2.0
    if view_level0 is None:
        inside = np.ones(len(coords), dtype=bool)
        centre = centres.mean(axis=0)
    else:
        x0, y0, x1, y1 = (float(v) for v in view_level0)
        inside = (
            (coords[:, 0] < x1)
            & (coords[:, 0] + patch_size_level0 > x0)
            & (coords[:, 1] < y1)
            & (coords[:, 1] + patch_size_level0 > y0)
        )
        centre = np.array([(x0 + x1) / 2.0, (y0 + y1) / 2.0])
    candidates = np.flatnonzero(inside)
    distance = np.linalg.norm(centres[candidates] - centre, axis=1)
    return candidates[np.argsort(distance, kind="stable")][:limit].astype(np.int64)


@dataclass
class PartialFeatures:
    """One slide's features on its patch grid, filled in as they are computed.

    ``store`` is a FeatureStore over all N patches of ``grid`` (rows not yet computed are
    zeros); ``known`` bool [N] marks the computed rows; ``store_path`` is the engine's cache
    store for (slide, encoder, grid), of which rows [0, ``stored``) have been read back.
    """

    store: Any
    known: np.ndarray
    grid: Any
    store_path: Path
    stored: int = 0

    @classmethod
    def start(cls, slide: Any, encoder: Any, grid: Any, store_path: Path) -> PartialFeatures:
        """An empty set of rows for ``grid``, plus whatever the cache store already holds."""
        from medvl_engine.features import FeatureStore, slide_identity

        count, dim = len(grid.coords), int(encoder.embed_dim)
        slide_name, fingerprint = slide_identity(slide)
        store = FeatureStore(
            features=np.zeros((count, dim), dtype=np.float32),
            coords=grid.coords,
            patch_size_level0=int(grid.patch_size_level0),
            patch_size=int(grid.patch_size),
            target_mpp=grid.target_mpp,
            encoder=str(encoder.name),
            slide=slide_name,
            mpp=None if slide.mpp is None else (float(slide.mpp[0]), float(slide.mpp[1])),
            slide_dimensions=tuple(int(v) for v in slide.dimensions),
            stride=int(getattr(grid, "stride_level0", 0)) or None,
            slide_fingerprint=fingerprint,
        )
        partial = cls(
            store=store, known=np.zeros(count, dtype=bool), grid=grid, store_path=Path(store_path)
        )
        partial.read_stored()
        return partial

    @property
    def total(self) -> int:
        return int(self.known.size)

    @property
    def done(self) -> int:
        return int(self.known.sum())

    @property
    def complete(self) -> bool:
        return bool(self.known.all())

    def read_stored(self) -> int:
        """Copy in the rows the cache store has written since the last call; returns how many.

        The engine writes rows [0, n_done) before it raises ``n_done``, so rows below it are
        complete. A store of other features (another grid size or width) is not read; the
        extraction replaces it.
        """
        import zarr

        if not self.store_path.is_dir():
            return 0
        from medvl_engine.guarded_files import check_zarr_tree

        try:
            # regular files inside the store only: a chunk linked to a named pipe never blocks
            check_zarr_tree(self.store_path)
            group = zarr.open_group(str(self.store_path), mode="r")
            attrs = dict(group.attrs)
            features = group["features"]
        except Exception:  # the store is being created or rewritten: read it on the next call
            return 0
        width = self.store.features.shape[1]
        if attrs.get("n_total") != self.total or features.shape[1:] != (width,):
            return 0
        done = min(int(attrs.get("n_done", 0)), self.total)
        if done <= self.stored:
            return 0
        rows = np.asarray(features[self.stored : done], dtype=np.float32)
        start = self.stored
        self.store.features[start:done] = rows
        self.known[start:done] = True
        self.stored = done
        return done - start

    def encode(self, slide: Any, encoder: Any, indices: np.ndarray) -> None:
        """Encode the patches ``indices`` [B] directly (same pixels and preprocessing as the
        engine's extraction: ``read_patches`` at the grid's level, resized to its patch size)."""
        from medvl_engine.features.extract import _resize, read_patches

        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return
        read_size = int(getattr(self.grid, "read_size", self.grid.patch_size))
        patches = read_patches(slide, self.grid.coords[indices], self.grid.level, read_size)
        patches = _resize(patches, int(self.grid.patch_size))
        rows = encoder.encode_patches(patches, normalize=True).float().numpy()
        self.store.features[indices] = rows
        self.known[indices] = True
