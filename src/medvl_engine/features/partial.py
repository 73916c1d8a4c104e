"""Patch features of one slide as they are computed: the patches in view first, then the rest.

``PartialFeatures`` holds a FeatureStore over the slide's whole patch grid whose rows fill in
as features arrive (``known`` [N] marks them): patches in a viewer's view are encoded directly
(nearest the view's centre first), the others come from the resumable extraction into the
store at ``store_path``, run in a background thread and read back as its rows are written
(:func:`~medvl_engine.features.store_io.written_rows`). A map of the known rows lands on the
complete map's grid, so a viewer's overlay fills in where it will end. A caller that keeps a
PartialFeatures after a cancel continues from it. Used by :func:`medvl_engine.pathology.
prompt_heatmap`; pixels and preprocessing are the extraction's (:func:`.extract.grid_patches`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from medvl_engine.errors import CancelledError

if TYPE_CHECKING:
    from medvl_engine.encoders import PatchTextEncoder
    from medvl_engine.features.extract import PatchGridLike
    from medvl_engine.features.store import FeatureStore
    from medvl_engine.tiling import SlideLike

__all__ = ["PartialFeatures", "Region", "patches_in_view"]

Region = tuple[float, float, float, float]
"""(x0, y0, x1, y1) level-0 px of a part of the slide (e.g. what a viewer shows)."""

VISIBLE_FIRST_LIMIT = 96  # patches encoded directly before the extraction computes the rest
_FIRST_BATCH = 4  # the first map: a handful of patches at the centre of the view
_VISIBLE_BATCH = 32
_POLL_S = 0.1
MAX_UPDATE_INTERVAL_S = 4.0  # the wait between partial maps doubles up to this
_STORE_LOCKS: dict[str, threading.Lock] = {}
_STORE_LOCKS_GUARD = threading.Lock()


def patches_in_view(
    coords: np.ndarray,
    patch_size_level0: int,
    view_level0: Region | None,
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
    zeros); ``known`` bool [N] marks the computed rows; ``store_path`` is the extraction's
    store for (slide, encoder, grid), of which rows [0, ``stored``) have been read back.
    """

    store: Any
    known: np.ndarray
    grid: Any
    store_path: Path
    stored: int = 0

    @classmethod
    def for_slide(
        cls,
        slide: SlideLike,
        encoder: PatchTextEncoder,
        *,
        store_path: str | Path | None = None,
        folder: str | Path | None = None,
    ) -> PartialFeatures:
        """The tissue patch grid of ``slide`` at the encoder's patch size and mpp, with the
        rows the store already holds. The store is ``store_path``, else the cache's store for
        (slide content, encoder, grid) (:func:`.extract.store_path_for`), in ``folder`` when
        given (same file name, so ``medvl`` and the viewer share it)."""
        from medvl_engine.features.extract import store_path_for
        from medvl_engine.tiling import patch_grid

        grid = patch_grid(slide, patch_size=encoder.patch_size, target_mpp=encoder.target_mpp)
        if store_path is None:
            store_path = store_path_for(slide, encoder, grid)
            if folder is not None:
                store_path = Path(folder) / Path(store_path).name
        return cls.start(slide, encoder, grid, Path(store_path))

    @classmethod
    def start(
        cls, slide: SlideLike, encoder: PatchTextEncoder, grid: PatchGridLike, store_path: Path
    ) -> PartialFeatures:
        """An empty set of rows for ``grid``, plus whatever the store already holds."""
        from medvl_engine.features.identity import slide_identity
        from medvl_engine.features.store import FeatureStore

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
            slide_dimensions=(int(slide.dimensions[0]), int(slide.dimensions[1])),
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
        """Copy in the rows the store has written since the last call; returns how many.

        A store of other features (another grid size or width) is not read; the extraction
        replaces it.
        """
        from medvl_engine.features.store_io import written_rows

        width = self.store.features.shape[1]
        rows = written_rows(self.store_path, self.stored, self.total, width)
        if len(rows) == 0:
            return 0
        start, done = self.stored, self.stored + len(rows)
        self.store.features[start:done] = rows
        self.known[start:done] = True
        self.stored = done
        return done - start

    def encode(self, slide: SlideLike, encoder: PatchTextEncoder, indices: np.ndarray) -> None:
        """Encode the patches ``indices`` [B] directly (the extraction's pixels and
        preprocessing: :func:`~medvl_engine.features.extract.grid_patches`)."""
        from medvl_engine.features.extract import grid_patches

        indices = np.asarray(indices, dtype=np.int64)
        if indices.size == 0:
            return
        patches = grid_patches(slide, self.grid, self.grid.coords[indices])
        rows = encoder.encode_patches(patches, normalize=True).float().numpy()
        self.store.features[indices] = rows
        self.known[indices] = True

    def fill(
        self,
        slide: SlideLike,
        encoder: PatchTextEncoder,
        view: Region | Literal["tissue"] | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | Callable[[], bool] | None = None,
        interval_s: float = 0.5,
        max_interval_s: float = MAX_UPDATE_INTERVAL_S,
        batch_size: int = 64,
    ) -> Generator[None, None, FeatureStore]:
        """Compute the missing rows; yields whenever a partial map is due, returns the store.

        First the patches in ``view`` (a :data:`Region`; "tissue": around the tissue centre;
        None: skipped) not known yet, at most 96, nearest its centre first: 4, then 32 at a
        time, yielding after each batch. Then the extraction of the whole grid into
        ``store_path`` runs in a background thread (``batch_size`` patches a batch; one
        extraction per store at a time: a cancelled one may still be finishing its batch); its
        rows are read back as they are written and this yields while rows are missing, only
        when patches became known since the last yield (each yield is a new map to show) and
        no sooner than ``interval_s`` after the start of the extraction; the wait before each
        next map is twice the one before, at most ``max_interval_s`` (the first maps of a
        slide come quickly; later ones, which change less of what a viewer shows, each cost
        a redraw).
        ``progress(done, total)`` is called (in the caller's thread) after each visible batch
        and when rows arrive. ``cancel`` raises CancelledError at the next batch or poll; the
        rows computed so far stay here and in the store. Returns the complete store read
        back from ``store_path``.
        """
        from medvl_engine.features.extract import as_cancel_check, extract_features

        cancelled = as_cancel_check(cancel)

        def report() -> None:
            if progress is not None:
                progress(self.done, self.total)

        def check() -> None:
            if cancelled():
                raise CancelledError("The heatmap request was cancelled.")

        if view is not None:
            where = None if isinstance(view, str) else view
            size = int(self.grid.patch_size_level0)
            visible = patches_in_view(self.grid.coords, size, where, VISIBLE_FIRST_LIMIT)
            visible = visible[~self.known[visible]]
            batch = _FIRST_BATCH
            while visible.size:
                check()
                self.encode(slide, encoder, visible[:batch])
                visible, batch = visible[batch:], _VISIBLE_BATCH
                report()
                yield

        stop = threading.Event()
        outcome: dict[str, Any] = {}
        lock = _store_lock(self.store_path)

        def extract() -> None:
            try:
                with lock:
                    outcome["store"] = extract_features(
                        slide,
                        encoder,
                        self.grid,
                        self.store_path,
                        batch_size=batch_size,
                        cancel=lambda: stop.is_set() or cancelled(),
                        replace_mismatch=True,
                    )
            except BaseException as error:  # re-raised in the caller's thread
                outcome["error"] = error

        helper = threading.Thread(target=extract, name="medvl-features", daemon=True)
        helper.start()
        last_update, wait = time.perf_counter(), interval_s
        shown = self.done  # the patches of the last map: a map with no new patch is not due
        try:
            while helper.is_alive():
                helper.join(_POLL_S)
                check()
                due = time.perf_counter() - last_update >= wait
                if self.read_stored() or due:
                    report()
                if due and self.done > shown and not self.complete and helper.is_alive():
                    last_update, shown = time.perf_counter(), self.done
                    wait = max(min(wait * 2, max_interval_s), interval_s)
                    yield
        finally:  # stopped early: the extraction ends at its next batch
            if helper.is_alive():
                stop.set()
        if "error" in outcome:
            raise outcome["error"]
        if self.read_stored():
            report()
        store: FeatureStore = outcome["store"]
        return store


def _store_lock(path: Path) -> threading.Lock:
    """The lock of the store at ``path``: one extraction writes to a store at a time."""
    key = str(Path(path).absolute())
    with _STORE_LOCKS_GUARD:
        return _STORE_LOCKS.setdefault(key, threading.Lock())
