"""What a TopK-Patch run gives, as plain data: no torch, picklable.

:class:`TopKResult` is one breast's answer (boxes per view, importance grid, readouts);
:class:`TopKRunSummary` is the whole run without its model: the result, the breast image it
was computed on, the two views' files and the VOI they were shown with, the model's name, K
and geometry. :func:`medvl_engine.mammography.topk` computes a
:class:`~medvl_engine.mammography.BreastTopK` (which holds the live model);
``BreastTopK.summary()`` turns it into a TopKRunSummary, which every writer of a run accepts
(the DICOM SR, presentation states and parametric maps) and which crosses a process boundary
(the napari plugin's model process sends it back to napari, which imports no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from medvl_engine.io.mammo import BreastImage, Mammogram

__all__ = ["TopKResult", "TopKRunReadouts", "TopKRunSummary", "TopKViewSource"]


@dataclass
class TopKResult:
    """Top-K patches of one breast image, in each source view's own pixels.

    boxes: ``{"CC": [M, 4], "MLO": [M', 4]}`` ``(x0, y0, x1, y1)`` source px of that view;
    ranks / scores: matching ``{"CC": [M], ...}`` (rank 1 = first sampled; score = the
    Plackett-Luce first-draw probability ``w_n / sum w``); breast_boxes ``[K, 4]`` in breast-image
    px, in rank order; importance ``[G, G]`` float32 = ``w / sum w`` on the candidate grid;
    cell_bounds ``[G + 1]`` float64: edges of the importance cells in breast-image px, the same
    on both axes (cell (r, c) covers x in ``[b[c], b[c + 1])``, y in ``[b[r], b[r + 1])``; the
    outer cells are wider, see :meth:`PatchGeometry.cell_bounds`); zero_shot:
    ``{task: {class: probability}}`` from the paper's prompts; embedding ``[C]``; k: the
    patches selected; image_size: the side S of the breast image the model scored;
    evaluated_k: the K the model was evaluated with (None when not known).
    """

    boxes: dict[str, np.ndarray]
    ranks: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    breast_boxes: np.ndarray
    breast_scores: np.ndarray
    importance: np.ndarray
    cell_bounds: np.ndarray
    zero_shot: dict[str, dict[str, float]]
    embedding: np.ndarray
    k: int | None = None
    image_size: int | None = None
    evaluated_k: int | None = None


@dataclass(frozen=True)
class TopKViewSource:
    """One source view of a run as its outputs name it: the file, the view's laterality and
    position, and the VOI it was read with (``voi``, one of ``voi_choices``; the reader's
    ``voi_index`` is its place there), which a presentation state keeps."""

    path: Path
    laterality: str | None = None
    view: str | None = None
    voi: str = "full range"
    voi_choices: tuple[str, ...] = ()

    @classmethod
    def of(cls, mammogram: Mammogram) -> TopKViewSource:
        return cls(
            Path(mammogram.path),
            mammogram.laterality,
            mammogram.view,
            mammogram.voi,
            tuple(mammogram.voi_choices),
        )

    @property
    def voi_index(self) -> int:
        """The ``voi_index`` that :func:`medvl_engine.io.mammo.open_mammogram` reads this view
        with again (0 when the file states no VOI)."""
        return self.voi_choices.index(self.voi) if self.voi in self.voi_choices else 0


class TopKRunReadouts:
    """The readouts of a run that holds a :class:`TopKResult` as ``result`` and its K beside
    the evaluated K: shared by :class:`TopKRunSummary` and
    :class:`~medvl_engine.mammography.BreastTopK` (which holds the live model)."""

    result: TopKResult
    k: int
    evaluated_k: int

    @property
    def boxes(self) -> dict[str, np.ndarray]:
        """``{"CC": [M, 4], "MLO": [M', 4]}`` (x0, y0, x1, y1) source px of each view."""
        return self.result.boxes

    @property
    def scores(self) -> dict[str, np.ndarray]:
        """``{"CC": [M], "MLO": [M']}`` Plackett-Luce first-draw probabilities w_n / sum w."""
        return self.result.scores

    @property
    def zero_shot(self) -> dict[str, dict[str, float]]:
        """``{task: {class: probability}}`` from the paper's prompts."""
        return self.result.zero_shot

    @property
    def k_is_evaluated(self) -> bool:
        """True when K is the K the model was evaluated with (its reported metrics hold)."""
        return self.k == self.evaluated_k


@dataclass(frozen=True, eq=False)  # numpy fields: compared by identity
class TopKRunSummary(TopKRunReadouts):
    """A TopK-Patch run without its model: what its outputs and viewers need, picklable.

    result: the :class:`TopKResult`; breast: the BreastImage (``image`` float32 ``[S, S]``, CC
    rows over MLO rows, and each view's placement) the model saw; cc / mlo: the two views'
    files and VOI (:class:`TopKViewSource`); model_name: the model as the user named it
    (registry name or folder; writers name only its display name); demo_notice: the notice of
    a demo model, else ""; k: the patches selected; evaluated_k: the K the model was
    evaluated with; image_size: the model's side S; grid: its candidate grid G (G x G
    candidates).
    """

    result: TopKResult
    breast: BreastImage
    cc: TopKViewSource
    mlo: TopKViewSource
    model_name: str | None
    demo_notice: str
    k: int
    evaluated_k: int
    image_size: int
    grid: int

    @property
    def laterality(self) -> str | None:
        """The breast's laterality ("L", "R"), None when unknown."""
        return self.breast.laterality

    @property
    def candidates(self) -> int:
        """The G^2 candidate patches K is chosen among."""
        return self.grid * self.grid

    def sources(self) -> dict[str, Path]:
        """``{"CC": file, "MLO": file}`` of the two views."""
        return {"CC": self.cc.path, "MLO": self.mlo.path}
