"""TopK-Patch inference: the one computation behind every TopKSigLIP answer.

:func:`score_breasts` runs the vision tower (eval mode: the hard top-K of ``log w``, no
Gumbel noise) and the paper's zero-shot prompts on breast images ``[B, S, S]`` at the model's
own side S, one breast at a time, so a breast's numbers never depend on the others scored
with it (a batch of 8 and a batch of 1 differ in the last bits of the embedding).
``medvl topk``, the TopK dock and the demo reach it through :func:`predict_topk` (via
:func:`medvl_engine.mammography.topk`), the evaluation through
:func:`medvl_engine.tasks.topksiglip.evaluation.collect_outputs`: the same breast gives the
same boxes, scores, importance map, embedding and readouts, to the last bit.

:func:`predict_topk` then maps one breast's K boxes back to each source view's pixels; its
:class:`TopKResult` is defined, torch-free, in :mod:`medvl_engine.models.topksiglip_results`
(and still importable from here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from medvl_engine.errors import ConfigError
from medvl_engine.models.topksiglip import TopKSigLIP
from medvl_engine.models.topksiglip_results import TopKResult

__all__ = [
    "BreastLike",
    "BreastScores",
    "PromptEmbeddings",
    "TopKResult",
    "predict_topk",
    "prompt_embeddings",
    "score_breasts",
]

PromptEmbeddings = dict[str, torch.Tensor]
"""``{task: [classes, C]}`` L2-normalised text embeddings of the paper's zero-shot prompts."""


class BreastLike(Protocol):
    """A breast image (CC on top, MLO below) that maps its pixels back to each source view."""

    image: np.ndarray

    def to_source(self, view: str, points_xy: np.ndarray) -> np.ndarray: ...


@dataclass
class BreastScores:
    """What the vision tower and the zero-shot prompts give for B breast images at K.

    log_weights ``[B, N]`` float32 (``log w`` of the N = G^2 candidates; None for the
    full-image tower); importance ``[B, G, G]`` float32 = ``softmax(log w)`` = ``w / sum w``
    (None likewise); indices ``[B, K]`` int64, the selected candidates in rank order (None
    likewise); embedding ``[B, C]`` float32 on the CPU (L2-normalised); zero_shot
    ``{task: [B, classes]}`` float32, the softmax over each task's prompts of
    ``gamma * cos(z_v, z_t)`` (empty when not asked for); k: the K selected.
    """

    log_weights: np.ndarray | None
    importance: np.ndarray | None
    indices: np.ndarray | None
    embedding: torch.Tensor
    zero_shot: dict[str, np.ndarray]
    k: int

    def readouts(self, row: int) -> dict[str, dict[str, float]]:
        """``{task: {class: probability}}`` of breast ``row``."""
        from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS

        return {
            task: {
                name: float(p)
                for name, p in zip(ZERO_SHOT_PROMPTS[task][0], probs[row], strict=True)
            }
            for task, probs in self.zero_shot.items()
        }


@torch.no_grad()
def prompt_embeddings(model: TopKSigLIP) -> PromptEmbeddings:
    """``{task: [classes, C]}``: the paper's zero-shot prompts (Tables 9-12) encoded once, in
    one text batch of the unique prompts, on the model's device."""
    from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS

    prompts = [p for _, texts in ZERO_SHOT_PROMPTS.values() for p in texts]
    unique = list(dict.fromkeys(prompts))
    text = model.encode_text(unique).float()
    index = {p: i for i, p in enumerate(unique)}
    return {task: text[[index[p] for p in texts]] for task, (_, texts) in ZERO_SHOT_PROMPTS.items()}


def _check_k(model: TopKSigLIP, k: int) -> int:
    candidates = int(model.geometry.num_candidates)
    if not 1 <= int(k) <= candidates:
        raise ConfigError(
            f"k={k} is outside 1..{candidates}, the model's candidate patches; choose a smaller k."
        )
    return int(k)


@torch.no_grad()
def score_breasts(
    model: TopKSigLIP,
    images: torch.Tensor | np.ndarray,
    k: int | None = None,
    zero_shot: bool | PromptEmbeddings = True,
) -> BreastScores:
    """Score breast images ``[B, S, S]`` (or ``[B, 1, S, S]``) in ``[0, 1]`` at K patches.

    S must be the model's ``config.image_size`` (build the breast image at that side; see
    :func:`medvl_engine.mammography.topk`). k: patches to select (None: ``config.k``; 1 <= K
    <= G^2). zero_shot: True encodes the paper's prompts, a :func:`prompt_embeddings` result
    reuses them, False skips the readouts. The model is put in eval mode; each breast is a
    forward of its own (``[1, 1, S, S]``): the scorer gives ``log w [N]``, the hard top-K of
    ``log w`` picks the patches, their mean feature is projected to ``z_v [C]``, and each
    task's readout is ``softmax_c(gamma * z_v . z_t,c)``.
    """
    tensor = torch.as_tensor(images)
    if tensor.ndim == 3:
        tensor = tensor[:, None]
    side = int(model.config.image_size)
    if tensor.ndim != 4 or tensor.shape[1] != 1 or tuple(tensor.shape[2:]) != (side, side):
        raise ValueError(
            f"breast images must be [B, {side}, {side}] (the model's side), got "
            f"{tuple(tensor.shape)}"
        )
    topk_mode = model.config.vision_mode == "topk"
    chosen = _check_k(model, model.config.k if k is None else k) if topk_mode else 0
    model.eval()
    device = model.log_logit_scale.device
    prompts: PromptEmbeddings | None = None
    if zero_shot is True:
        prompts = prompt_embeddings(model)
    elif zero_shot is not False:
        prompts = zero_shot
    scale = float(model.logit_scale.detach())
    grid = model.geometry.grid
    embeddings, log_weights, importance, indices = [], [], [], []
    probabilities: dict[str, list[np.ndarray]] = {task: [] for task in prompts or {}}
    for row in range(tensor.shape[0]):
        image = tensor[row : row + 1].to(device=device, dtype=torch.float32).clamp(0.0, 1.0)
        out = model.encode_image(image, k=chosen or None)
        embedding = out.embedding.float()
        embeddings.append(embedding.cpu())
        if out.log_weights is not None and out.indices is not None:
            weights = out.log_weights.float()
            log_weights.append(weights.cpu().numpy())
            importance.append(torch.softmax(weights, dim=-1).cpu().numpy().reshape(1, grid, grid))
            indices.append(out.indices.cpu().numpy().astype(np.int64))
        for task, text in (prompts or {}).items():
            logits = scale * embedding @ text.to(embedding.device).T
            probabilities[task].append(torch.softmax(logits, dim=-1).cpu().numpy())
    return BreastScores(
        log_weights=np.concatenate(log_weights) if log_weights else None,
        importance=np.concatenate(importance) if importance else None,
        indices=np.concatenate(indices) if indices else None,
        embedding=torch.cat(embeddings),
        zero_shot={task: np.concatenate(rows) for task, rows in probabilities.items()},
        k=chosen or int(model.config.k),
    )


def _view_of(box: np.ndarray, size: int) -> str:
    return "CC" if (box[1] + box[3]) / 2.0 < size / 2.0 else "MLO"


@torch.no_grad()
def predict_topk(
    model: TopKSigLIP, breast: BreastLike | np.ndarray, k: int = 15, zero_shot: bool = True
) -> TopKResult:
    """Run TopK-Patch (:func:`score_breasts`) on one breast image and map the K boxes back to
    their source views.

    breast: a BreastImage (``image`` float32 ``[S', S']`` in [0, 1], ``to_source``) or a bare
    ``[S', S']`` array (boxes then stay in breast px for both views). At the model's side S
    (what :func:`medvl_engine.mammography.topk` builds) the image is scored as it is, exactly
    as the evaluation scores it; another side is first resized to S (bilinear, antialiased),
    which is not the image the model was evaluated on, and boxes are scaled back. A box is
    assigned to the view (top half CC, bottom half MLO) holding its centre, clipped to that
    half, and its corners mapped; when ``breast`` knows its views' ``source_size`` the box is
    then clipped to that view's pixels, so no coordinate is negative or past the image.
    """
    image = np.asarray(getattr(breast, "image", breast), dtype=np.float32)
    if image.ndim != 2 or image.shape[0] != image.shape[1]:
        raise ValueError(f"breast image must be square [S, S], got {image.shape}")
    if model.config.vision_mode != "topk":
        raise ValueError("predict_topk needs a TopK-Patch model (vision_mode='topk').")
    _check_k(model, k)
    side = int(model.config.image_size)
    tensor = torch.from_numpy(image)[None, None]
    if image.shape[0] != side:
        tensor = F.interpolate(
            tensor, size=(side, side), mode="bilinear", antialias=True, align_corners=False
        )
    scored = score_breasts(model, tensor, k=k, zero_shot=zero_shot)
    if scored.importance is None or scored.indices is None:
        raise ValueError("predict_topk needs a TopK-Patch model (vision_mode='topk').")
    probs = scored.importance[0].reshape(-1)
    indices = scored.indices[0]
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
    return TopKResult(
        boxes=boxes,
        ranks=ranks,
        scores=scores,
        breast_boxes=breast_boxes,
        breast_scores=probs[indices].astype(np.float64),
        importance=scored.importance[0],
        cell_bounds=model.geometry.cell_bounds() * scale,
        zero_shot=scored.readouts(0) if zero_shot else {},
        embedding=scored.embedding[0].numpy(),
        k=scored.k,
        image_size=side,
    )
