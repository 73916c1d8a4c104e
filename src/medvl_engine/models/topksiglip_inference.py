"""TopK-Patch on one breast image: the K boxes in each source view's pixels, the importance
map on the candidate grid and the paper's zero-shot readouts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.errors import ConfigError
from medvl_engine.models.topksiglip import TopKSigLIP

__all__ = ["BreastLike", "TopKResult", "predict_topk"]


class BreastLike(Protocol):
    """A breast image (CC on top, MLO below) that maps its pixels back to each source view."""

    image: np.ndarray

    def to_source(self, view: str, points_xy: np.ndarray) -> np.ndarray: ...


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
    ``{task: {class: probability}}`` from the paper's prompts; embedding ``[C]``.
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


def _view_of(box: np.ndarray, size: int) -> str:
    return "CC" if (box[1] + box[3]) / 2.0 < size / 2.0 else "MLO"


@torch.no_grad()
def predict_topk(
    model: TopKSigLIP, breast: BreastLike | np.ndarray, k: int = 15, zero_shot: bool = True
) -> TopKResult:
    """Run TopK-Patch on one breast image and map the K boxes back to their source views.

    breast: a BreastImage (``image`` float32 ``[S', S']`` in [0, 1], ``to_source``) or a bare
    ``[S', S']`` array (boxes then stay in breast px for both views). The image is resized to
    the model's side S when needed; boxes are scaled back. A box is assigned to the view (top
    half CC, bottom half MLO) holding its centre, clipped to that half, and its corners mapped;
    when ``breast`` knows its views' ``source_size`` the box is then clipped to that view's
    pixels, so no coordinate is negative or past the image.
    """
    image = np.asarray(getattr(breast, "image", breast), dtype=np.float32)
    if image.ndim != 2 or image.shape[0] != image.shape[1]:
        raise ValueError(f"breast image must be square [S, S], got {image.shape}")
    if not 1 <= k <= model.geometry.num_candidates:
        raise ConfigError(
            f"k={k} is outside 1..{model.geometry.num_candidates}, the model's candidate patches; "
            "choose a smaller k."
        )
    model.eval()
    device = model.log_logit_scale.device
    side = model.config.image_size
    tensor = torch.from_numpy(image).to(device)[None, None]
    if image.shape[0] != side:
        tensor = F.interpolate(
            tensor, size=(side, side), mode="bilinear", antialias=True, align_corners=False
        )
    out = model.encode_image(tensor.clamp(0.0, 1.0), k=k)
    if out.log_weights is None or out.indices is None:
        raise ValueError("predict_topk needs a TopK-Patch model (vision_mode='topk').")
    probs = torch.softmax(out.log_weights[0].float(), dim=-1).cpu().numpy()
    indices = out.indices[0].cpu().numpy()
    scale = image.shape[0] / side
    breast_boxes = model.geometry.boxes(indices) * scale
    half = image.shape[0] / 2.0
    source_size = getattr(breast, "source_size", None)
    per_view: dict[str, list[tuple[int, float, np.ndarray]]] = {"CC": [], "MLO": []}
    for rank, (box, index) in enumerate(zip(breast_boxes, indices, strict=True), start=1):
        view = _view_of(box, image.shape[0])
        lo, hi = (0.0, half) if view == "CC" else (half, float(image.shape[0]))
        clipped = np.array([box[0], max(box[1], lo), box[2], min(box[3], hi)])
        corners = np.array([[clipped[0], clipped[1]], [clipped[2], clipped[3]]])
        if hasattr(breast, "to_source"):
            corners = np.asarray(breast.to_source(view, corners), dtype=np.float64)
        mapped = np.array(
            [corners[:, 0].min(), corners[:, 1].min(), corners[:, 0].max(), corners[:, 1].max()]
        )
        if source_size is not None:  # a patch over the padding beside the breast
            width, height = source_size(view)
            mapped = np.clip(mapped, 0.0, [width, height, width, height])
        per_view[view].append((rank, float(probs[index]), mapped))
    boxes = {v: np.array([m for _, _, m in items]).reshape(-1, 4) for v, items in per_view.items()}
    ranks = {v: np.array([r for r, _, _ in items], dtype=np.int64) for v, items in per_view.items()}
    scores = {
        v: np.array([s for _, s, _ in items], dtype=np.float64) for v, items in per_view.items()
    }
    readouts: dict[str, dict[str, float]] = {}
    if zero_shot:
        from medvl_engine.data.mammo_prompts import zero_shot_probabilities

        readouts = zero_shot_probabilities(model, out.embedding)[0]
    grid = model.geometry.grid
    return TopKResult(
        boxes=boxes,
        ranks=ranks,
        scores=scores,
        breast_boxes=breast_boxes,
        breast_scores=probs[indices].astype(np.float64),
        importance=probs.reshape(grid, grid).astype(np.float32),
        cell_bounds=model.geometry.cell_bounds() * scale,
        zero_shot=readouts,
        embedding=out.embedding[0].cpu().numpy(),
    )
