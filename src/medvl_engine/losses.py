"""Training objectives of the two papers, one function per loss.

LIMIT (pathology): :func:`weighted_infonce` (Eq. 3-4) and :func:`siglit_loss`
(Eq. 6, the SigLIT ablation). TopKSigLIP (mammography): :func:`sup_sigmoid_loss`
(Eq. 5) with its soft target :func:`tabular_similarity`, :func:`soft_dice_loss` for ROI
supervision, :func:`roi_pointing_loss` for the patch scorer (not in the paper; for a scorer
that starts without pretrained weights), and :func:`clip_contrastive_loss` /
:func:`soft_target_contrastive_loss` for the contrastive ablations (Table 5). Every function
returns a scalar tensor (mean over the batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "weighted_infonce",
    "siglit_loss",
    "sup_sigmoid_loss",
    "tabular_similarity",
    "soft_dice_loss",
    "roi_pointing_loss",
    "clip_contrastive_loss",
    "soft_target_contrastive_loss",
    "negative_weights",
]


def negative_weights(report_embeddings: torch.Tensor) -> torch.Tensor:
    """Difficulty weights of LIMIT Eq. 3: ``w_ij = 1 - (cos(r_i, r_j) + 1) / 2``.

    report_embeddings: ``[K, D]``. Returns ``[K, K]`` in ``[0, 1]``, computed
    without gradient; the diagonal (positives) is set to 1.
    """
    with torch.no_grad():
        unit = F.normalize(report_embeddings.float(), dim=-1)
        weights = 1.0 - (unit @ unit.T + 1.0) / 2.0
        weights = weights.clamp(0.0, 1.0)
        weights.fill_diagonal_(1.0)
    return weights


def weighted_infonce(
    similarity: torch.Tensor,
    report_embeddings: torch.Tensor,
    tau: float = 0.07,
    weighted: bool = True,
) -> torch.Tensor:
    """Difficulty-weighted InfoNCE over a bag of K slide-report pairs (LIMIT Eq. 3-4).

    ``loss = -1/K sum_i log( e^{s_ii/tau} / (e^{s_ii/tau} + sum_{j != i} w_ij e^{s_ij/tau}) )``

    similarity: ``[K, K]`` with ``similarity[i, j] = sim(h_{W_i}(r_j), r_j)``, the
    report-conditioned pooled representation of slide i against report j.
    report_embeddings: ``[K, D]`` (the weights ``w_ij`` use their cosine; no gradient
    flows through ``w``). ``weighted=False`` sets every ``w_ij = 1``: plain InfoNCE.
    """
    if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"similarity must be [K, K], got {tuple(similarity.shape)}")
    if report_embeddings.shape[0] != similarity.shape[0]:
        raise ValueError("report_embeddings must have one row per bag entry (K)")
    logits = similarity.float() / tau
    if weighted:
        logits = logits + torch.log(negative_weights(report_embeddings))
    positives = torch.diagonal(logits)
    return (torch.logsumexp(logits, dim=1) - positives).mean()


def siglit_loss(
    similarity: torch.Tensor,
    labels: torch.Tensor,
    logit_scale: torch.Tensor | float,
    logit_bias: torch.Tensor | float = 0.0,
) -> torch.Tensor:
    """Sigmoid loss of the SigLIT ablation (LIMIT Eq. 6).

    ``loss = -1/R sum_i log sigmoid( y_i (logit_scale * s_i + logit_bias) )``

    similarity: any shape (``[R]`` or ``[K, K]``), ``s_i = h_W^T r_i``.
    labels: same shape, ``y_i = +1`` for a matching slide-report pair and ``-1``
    otherwise (a bool tensor is read as True = +1). logit_scale is ``1 / tau``
    itself (exponentiate a learnt log-scale before passing it).
    """
    if labels.dtype == torch.bool:
        labels = labels.float() * 2.0 - 1.0
    labels = labels.to(similarity.dtype)
    if labels.shape != similarity.shape:
        raise ValueError(
            f"labels {tuple(labels.shape)} must match similarity {tuple(similarity.shape)}"
        )
    logits = logit_scale * similarity + logit_bias
    return -F.logsigmoid(labels * logits).mean()


def tabular_similarity(attributes: torch.Tensor) -> torch.Tensor:
    """Soft target of Sup-sigmoid: cosine similarity of tabular label vectors (TopKSigLIP Eq. 5).

    attributes: ``[B, F]``, the concatenated one-hot (BI-RADS, density, cancer) and
    multi-hot (finding types) vectors. Returns ``[B, B]``, ``S_ij = cos(a_i, a_j)``.

    Missing labels are NaN entries (a whole field's slots). With ``m_i`` the 0/1 mask of the
    entries row i has and ``a_i`` its vector with NaN read as 0, the cosine runs over the
    entries both rows have::

        S_ij = sum_f m_if m_jf a_if a_jf
               / ( sqrt(sum_f m_if m_jf a_if^2) * sqrt(sum_f m_if m_jf a_jf^2) )

    and is 0 when either norm is 0 (no shared field, or no positive entry in it). Without NaN
    this is the plain cosine. The diagonal is 1: each image's own report is its positive.
    """
    values = attributes.float()
    present = ~torch.isnan(values)
    vector = torch.where(present, values, torch.zeros_like(values))
    mask = present.to(vector.dtype)
    dot = vector @ vector.T
    norm_i = (vector * vector) @ mask.T  # [i, j]: sum_f a_if^2 over the entries row j has
    denominator = torch.sqrt(norm_i * norm_i.T)
    safe = torch.where(denominator > 1e-12, denominator, torch.ones_like(denominator))
    similarity = torch.where(denominator > 1e-12, dot / safe, torch.zeros_like(dot))
    return similarity.fill_diagonal_(1.0)


def sup_sigmoid_loss(
    image_embeddings: torch.Tensor,
    text_embeddings: torch.Tensor,
    target: torch.Tensor,
    logit_scale: torch.Tensor | float,
    logit_bias: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Supervised sigmoid loss against a soft target matrix (TopKSigLIP Eq. 5).

    ``S_hat = z_v z_t^T``, ``p = sigmoid(logit_scale * S_hat + logit_bias)``,
    ``loss = -1/B sum_i sum_j [ S_ij log p_ij + (1 - S_ij) log(1 - p_ij) ]``

    image_embeddings, text_embeddings: ``[B, C]`` (L2-normalised here).
    target: ``[B, B]`` in ``[0, 1]`` (e.g. :func:`tabular_similarity`, or the identity
    for plain SigLIP).
    """
    z_v = F.normalize(image_embeddings.float(), dim=-1)
    z_t = F.normalize(text_embeddings.float(), dim=-1)
    logits = logit_scale * (z_v @ z_t.T)
    if logit_bias is not None:
        logits = logits + logit_bias
    batch = z_v.shape[0]
    per_pair = F.binary_cross_entropy_with_logits(logits, target.float(), reduction="none")
    return per_pair.sum() / batch


def soft_dice_loss(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Soft Dice loss between a selection mask and an ROI mask (TopKSigLIP ROI supervision).

    ``loss = mean_b [ 1 - 2 |M P| / (|M| + |P|) ]`` with sums over pixels.
    pred, target: ``[B, H, W]`` in ``[0, 1]``. ``eps`` keeps two empty masks at loss 0.
    """
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ")
    pred = pred.float().flatten(1)
    target = target.float().flatten(1)
    overlap = (pred * target).sum(dim=1)
    total = pred.sum(dim=1) + target.sum(dim=1)
    return (1.0 - (2.0 * overlap + eps) / (total + eps)).mean()


def roi_pointing_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross entropy of the candidate softmax against the ROI cells (pretraining of the scorer).

    ``loss = -mean_b log sum_{n : m_bn = 1} softmax_n(s_b)``: the probability that one draw
    from ``softmax(s_b)`` (a top-1 Gumbel sample of log w = s) lands in an ROI cell, so it is
    the Pointing Game's relaxation. logits ``s [B, N]``; target ``m [B, N]`` in {0, 1}, each
    row with at least one ROI cell.
    """
    if logits.shape != target.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and target {tuple(target.shape)} differ")
    inside = target.bool()
    if not bool(inside.any(dim=1).all()):
        raise ValueError("every row of target needs at least one ROI cell")
    log_probs = F.log_softmax(logits.float(), dim=1)
    masked = log_probs.masked_fill(~inside, float("-inf"))
    return -torch.logsumexp(masked, dim=1).mean()


def clip_contrastive_loss(
    image_embeddings: torch.Tensor,
    text_embeddings: torch.Tensor,
    logit_scale: torch.Tensor | float,
) -> torch.Tensor:
    """Symmetric InfoNCE of CLIP (the "contrastive" objective ablation of TopKSigLIP).

    image_embeddings, text_embeddings: ``[B, C]`` (L2-normalised here); pair i is
    the positive of row i. ``loss = (CE(logits, I) + CE(logits^T, I)) / 2``.
    """
    z_v = F.normalize(image_embeddings.float(), dim=-1)
    z_t = F.normalize(text_embeddings.float(), dim=-1)
    logits = logit_scale * (z_v @ z_t.T)
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2.0


def soft_target_contrastive_loss(
    image_embeddings: torch.Tensor,
    text_embeddings: torch.Tensor,
    target: torch.Tensor,
    logit_scale: torch.Tensor | float,
) -> torch.Tensor:
    """Contrastive loss with soft targets (the supervised-contrastive ablation of TopKSigLIP
    Table 5).

    ``logits = gamma z_v z_t^T`` ``[B, B]``; the image -> text target of row i is
    ``q_ij = S_ij / sum_k S_ik`` and the text -> image target of column j is
    ``q'_ji = S_ij / sum_k S_kj``;
    ``loss = 1/2 [ -1/B sum_i sum_j q_ij log softmax_j(logits_i.)
    - 1/B sum_j sum_i q'_ji log softmax_i(logits_.j) ]``.

    image_embeddings, text_embeddings: ``[B, C]`` (L2-normalised here); target ``[B, B]`` in
    ``[0, 1]`` with a positive diagonal (e.g. :func:`tabular_similarity`). With ``S = I`` it
    equals :func:`clip_contrastive_loss`.
    """
    z_v = F.normalize(image_embeddings.float(), dim=-1)
    z_t = F.normalize(text_embeddings.float(), dim=-1)
    logits = logit_scale * (z_v @ z_t.T)
    rows = target / target.sum(dim=1, keepdim=True).clamp_min(1e-12)
    cols = target.T / target.T.sum(dim=1, keepdim=True).clamp_min(1e-12)
    return (F.cross_entropy(logits, rows) + F.cross_entropy(logits.T, cols)) / 2.0
