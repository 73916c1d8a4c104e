"""Where the N = G x G candidate patches of TopK-Patch lie on a square breast image.

:class:`PatchGeometry` gives the patch size, stride and offset of the candidate grid (the
TopKSigLIP paper's 1536 px image, 16 x 16 grid, 50% overlap); :func:`rasterize_boxes` marks the
grid cells an ROI box touches. Coordinates are (x, y) in breast-image pixels with the origin at
the top-left; candidate n sits at grid row ``n // G`` and column ``n % G`` (row-major, the order
of a flattened [G, G] map).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PatchGeometry", "rasterize_boxes"]


@dataclass(frozen=True)
class PatchGeometry:
    """Candidate patches of a square image on a G x G grid.

    For an image of side ``S``, a grid of ``G`` patches per axis and an overlap ratio ``o``:

    * patch side ``P = round(S / (G (1 - o) + o))`` (G patches overlapping by ``o P`` span S),
    * integer stride ``s = floor((S - P) / (G - 1))`` (an integer stride lets Eq. 4 run as one
      dilated convolution, see :func:`extract_patches`),
    * the grid is centred: ``offset = (S - (P + (G - 1) s)) // 2``,
    * candidate (row a, column b) covers x in ``[offset + b s, offset + b s + P)`` and y in
      ``[offset + a s, offset + a s + P)``.

    The paper's setting (S=1536, G=16, o=0.5) gives P=181, s=90, offset=2 (overlap 50.3%).
    """

    image_size: int
    grid: int
    patch_size: int
    stride: int
    offset: int

    @classmethod
    def from_image(
        cls, image_size: int = 1536, grid: int = 16, overlap: float = 0.5
    ) -> PatchGeometry:
        """Geometry for a ``image_size`` square image (see the class docstring for the formula)."""
        if grid < 2 or not 0.0 <= overlap < 1.0:
            raise ValueError(f"need grid >= 2 and overlap in [0, 1), got {grid}, {overlap}")
        patch = int(round(image_size / (grid * (1.0 - overlap) + overlap)))
        stride = (image_size - patch) // (grid - 1)
        if stride < 1:
            raise ValueError(f"a {grid}x{grid} grid does not fit a {image_size}px image")
        span = patch + (grid - 1) * stride
        return cls(image_size, grid, patch, stride, (image_size - span) // 2)

    @property
    def num_candidates(self) -> int:
        return self.grid * self.grid

    @property
    def span(self) -> int:
        """Side in px of the region the candidates cover, ``P + (G - 1) s``."""
        return self.patch_size + (self.grid - 1) * self.stride

    def origins(self) -> np.ndarray:
        """Top-left corners ``[N, 2]`` int64, (x, y) image px, row-major over the grid."""
        starts = self.offset + self.stride * np.arange(self.grid, dtype=np.int64)
        ys, xs = np.meshgrid(starts, starts, indexing="ij")
        return np.stack([xs.ravel(), ys.ravel()], axis=1)

    def boxes(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Boxes ``[M, 4]`` float64 ``(x0, y0, x1, y1)`` image px of candidates (all when None)."""
        origins = self.origins().astype(np.float64)
        if indices is not None:
            origins = origins[np.asarray(indices, dtype=np.int64)]
        return np.concatenate([origins, origins + self.patch_size], axis=1)

    def cell_bounds(self) -> np.ndarray:
        """Edges ``[G + 1]`` of the cells that tile the image, one per candidate along an axis.

        Cell b spans the stride-wide band around the centre of candidate b (the outer cells
        reach the image border), so every image pixel belongs to exactly one candidate cell.
        """
        centres = self.offset + self.stride * np.arange(self.grid) + self.patch_size / 2.0
        inner = (centres[:-1] + centres[1:]) / 2.0
        return np.concatenate([[0.0], inner, [float(self.image_size)]])


def rasterize_boxes(
    boxes: np.ndarray | Sequence[Sequence[float]], geometry: PatchGeometry
) -> np.ndarray:
    """ROI mask on the candidate grid: ``[G, G]`` float32, 1 where a cell meets any box.

    boxes: ``[M, 4]`` ``(x0, y0, x1, y1)`` image px (M may be 0). A cell is the region of the
    image closest to one candidate's centre (:meth:`PatchGeometry.cell_bounds`), so a box
    smaller than a cell still marks the cell it lies in.
    """
    mask = np.zeros((geometry.grid, geometry.grid), dtype=np.float32)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    edges = geometry.cell_bounds()
    for x0, y0, x1, y1 in boxes:
        if x1 <= x0 or y1 <= y0:
            continue
        cols = (edges[1:] > x0) & (edges[:-1] < x1)
        rows = (edges[1:] > y0) & (edges[:-1] < y1)
        mask[np.ix_(rows, cols)] = 1.0
    return mask
