"""What crosses the pipe from the model process: plain data, no torch, no Qt.

napari's process holds no torch, so it cannot hold the engine's ``SlideClassification``
(torch tensors) nor a feature store's features [N, D] (tens to hundreds of MB). The child
sends, per map, the engine's own :class:`medvl_engine.heatmap.Heatmap` (numpy only: the score
grid [rows, cols] and scores [N] float32, a few hundred kB for a large slide; its module
imports torch only inside the functions that score), a :class:`StoreSummary` (what the layers
and exports read of the store: coords [N, 2] (x, y) level-0 px, patch size, mpp, dimensions,
path) and, for a classification, the :class:`ClassScores`. The handlers that make them:
:mod:`._worker_heatmap`, :mod:`._worker_classify`, :mod:`._worker_segment` (a SegmentResult
whose store is a :class:`StoreSummary`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.heatmap import Heatmap

__all__ = [
    "ClassScores",
    "Classified",
    "FinalMap",
    "PartialMap",
    "StoreSummary",
]


@dataclass
class StoreSummary:
    """What napari's process reads of a feature store (the features stay in the child):
    ``coords`` int64 [N, 2] (x, y) level-0 px top-left, patch size, the slide's mpp (x, y)
    and level-0 (width, height), the store's path, width D and encoder."""

    coords: np.ndarray
    patch_size_level0: int
    embed_dim: int
    encoder: str = ""
    slide: str = ""
    mpp: tuple[float, float] | None = None
    slide_dimensions: tuple[int, int] | None = None
    path: Path | None = None
    stride: int | None = None
    imported_from: str | None = None

    @classmethod
    def of(cls, store: Any) -> StoreSummary:
        return cls(
            coords=np.asarray(store.coords),
            patch_size_level0=int(store.patch_size_level0),
            embed_dim=int(store.embed_dim),
            encoder=store.encoder,
            slide=store.slide,
            mpp=store.mpp,
            slide_dimensions=store.slide_dimensions,
            path=store.path,
            stride=store.stride,
            imported_from=store.imported_from,
        )

    @property
    def n_patches(self) -> int:
        return int(self.coords.shape[0])


@dataclass
class PartialMap:
    """A partial map of the ``done`` of ``total`` patches whose features are known."""

    heatmap: Heatmap
    store: StoreSummary
    done: int
    total: int


@dataclass
class FinalMap:
    """The complete map, its top patches (boxes int64 [n, 4] (x0, y0, x1, y1) level-0 px,
    scores [n]) or None, the store, and whether its features were computed by this run."""

    heatmap: Heatmap
    store: StoreSummary
    top_patches: tuple[np.ndarray, np.ndarray] | None
    store_path: Path | None
    extracted: bool


@dataclass
class ClassScores:
    """The engine SlideClassification's fields: class ``names`` as given, their scores [K],
    attention [K, N] (softmax over the N patches, LIMIT Eq. 1) and tau_attn."""

    names: list[str]
    scores: np.ndarray
    attention: np.ndarray
    tau_attn: float

    @classmethod
    def of(cls, classification: Any) -> ClassScores:
        return cls(
            list(classification.names),
            np.asarray(classification.scores),
            np.asarray(classification.attention),
            float(classification.tau_attn),
        )

    @property
    def ranked(self) -> list[tuple[str, float]]:
        """(class, score) best first (ties keep the given order)."""
        order = np.argsort(-self.scores, kind="stable")
        return [(self.names[i], float(self.scores[i])) for i in order]

    @property
    def predicted(self) -> str:
        """LIMIT Eq. 5: the class of highest score."""
        return self.ranked[0][0]


@dataclass
class Classified:
    """A classification, each class's attention map, and the features' store."""

    classification: ClassScores
    heatmaps: dict[str, Heatmap]
    store: StoreSummary
