"""One engine call per mammography action: :func:`topk` on a breast (CC + MLO views).

``medvl topk``, the plugin's TopK dock and the demo all run TopK-Patch through :func:`topk`:
open the two views (:func:`open_views`), check that they are one breast, load the model
folder, check K (:func:`resolve_k`), stack the views into the breast image (CC over MLO,
:func:`medvl_engine.io.mammo.breast_image`), select the K patches and read the zero-shot
prompts (:func:`medvl_engine.models.topksiglip_inference.predict_topk`). The answer is a
:class:`BreastTopK`: the boxes in each view's source px, the importance grid, the readouts and
the breast image they were computed on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from medvl_engine.io.mammo import BreastImage, Mammogram
    from medvl_engine.models.topksiglip import TopKSigLIP
    from medvl_engine.models.topksiglip_inference import TopKResult

__all__ = ["PAPER_VIEW_SIZE", "BreastTopK", "open_views", "resolve_k", "topk"]

PAPER_VIEW_SIZE: tuple[int, int] = (1536, 768)
"""(w, h) px of each view's slot in the paper's breast image (1536 x 1536 in all): the default
of :func:`medvl_engine.io.mammo.breast_image`, used by the plugin's dock and the demo."""


@dataclass(frozen=True)
class BreastTopK:
    """TopK-Patch on one breast: what :func:`topk` computed and what it computed it on.

    result: the TopKResult (boxes ``{"CC": [M, 4], "MLO": [M', 4]}`` (x0, y0, x1, y1) source px
    of each view, ranks and scores ``{view: [M]}``, breast_boxes ``[K, 4]`` breast-image px,
    importance ``[G, G]`` = w / sum w on the candidate grid, zero_shot
    ``{task: {class: probability}}``, embedding ``[C]``); breast: the BreastImage (``image``
    float32 ``[2 h, w]``, CC rows over MLO rows) the model saw; cc / mlo: the two views;
    model: the TopKSigLIP that ran; k: the patches selected.
    """

    result: TopKResult
    breast: BreastImage
    cc: Mammogram
    mlo: Mammogram
    model: TopKSigLIP
    k: int

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


def open_views(
    cc: Mammogram | str | os.PathLike[str],
    mlo: Mammogram | str | os.PathLike[str],
    voi_index: int = 0,
) -> tuple[Mammogram, Mammogram]:
    """(CC, MLO) Mammograms: a path is opened with ``voi_index`` (the DICOM VOI window), a
    Mammogram is passed through. The pair is not checked here (see :func:`topk`)."""
    from medvl_engine.io.mammo import open_mammogram

    def opened(view: Mammogram | str | os.PathLike[str]) -> Mammogram:
        if isinstance(view, (str, os.PathLike)):
            return open_mammogram(view, voi_index=voi_index)
        return view

    return opened(cc), opened(mlo)


def resolve_k(model: TopKSigLIP, k: int | None, name: str | None = None) -> int:
    """The K to select: ``k``, or the K the model was trained with when None.

    Raises ConfigError unless 1 <= K <= G^2, the model's candidate patches (``name``, the model
    as the user gave it, is named in the sentence).
    """
    chosen = int(model.config.k) if k is None else int(k)
    candidates = int(model.geometry.num_candidates)
    if not 1 <= chosen <= candidates:
        which = f"TopK model {name}" if name else "this TopK model"
        why = f"it exceeds the {candidates} candidate patches; " if chosen > candidates else ""
        raise ConfigError(
            f"K = {chosen} is not possible with {which}: {why}choose 1 to {candidates}."
        )
    return chosen


def topk(
    cc: Mammogram | str | os.PathLike[str],
    mlo: Mammogram | str | os.PathLike[str],
    model: TopKSigLIP | str | os.PathLike[str],
    *,
    k: int | None = None,
    view_size: tuple[int, int] | None = None,
    voi_index: int = 0,
    device: str = "cpu",
    model_name: str | None = None,
    zero_shot: bool = True,
) -> BreastTopK:
    """TopK-Patch boxes and zero-shot readouts on the breast of views ``cc`` and ``mlo``.

    cc, mlo: Mammograms or files (DICOM, PNG, TIFF; opened with ``voi_index``). model: a
    loaded TopKSigLIP, or a model folder / registered name loaded on ``device`` (the pair is
    checked before it loads, so a wrong pair is refused at once). k: patches to select (None:
    the model's trained K; 1 <= K <= G^2, see :func:`resolve_k`). view_size: (w, h) px of each
    view's slot in the breast image ``[2 h, w]``; None: the model's own side S, i.e.
    (S, S // 2), so no resize happens; :data:`PAPER_VIEW_SIZE` gives the paper's 1536 x 1536
    image, which the model resizes to S x S (bilinear, antialiased). The model scores the
    G x G candidate grid (log w ``[G^2]``), keeps the hard top-K of log w (eval mode: no
    Gumbel noise, so the same inputs give the same boxes), maps each box back to the view
    holding its centre (source px, clipped to the view) and, with ``zero_shot``, reads the
    paper's prompts as softmax probabilities over each task's classes.
    """
    from medvl_engine.io.mammo import breast_image, check_pair
    from medvl_engine.models.topksiglip_inference import predict_topk

    cc_view, mlo_view = open_views(cc, mlo, voi_index=voi_index)
    if isinstance(model, (str, os.PathLike)):
        from medvl_engine.models.topksiglip_folder import load_topksiglip

        model_name = model_name or str(model)
        check_pair(cc_view, mlo_view)  # before the model loads: a wrong pair is refused at once
        model = load_topksiglip(model if isinstance(model, str) else Path(model), device=device)
    chosen = resolve_k(model, k, model_name)
    if view_size is None:
        side = int(model.config.image_size)
        view_size = (side, side // 2)
    breast = breast_image(cc_view, mlo_view, size=view_size)
    result = predict_topk(model, breast, k=chosen, zero_shot=zero_shot)
    return BreastTopK(result=result, breast=breast, cc=cc_view, mlo=mlo_view, model=model, k=chosen)
