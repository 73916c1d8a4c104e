"""TopK-Patch: differentiable top-K selection of high-resolution patches (TopKSigLIP Sec. 3.2.1).

Three pieces, each usable on its own:

* :func:`gumbel_topk_relaxed` - Gumbel-top-K with the iterative temperature softmax (Eq. 2-3),
  and :func:`selection_mask` - the soft union of the K selections (Eq. 6).
* :class:`~medvl_engine.data.patch_geometry.PatchGeometry` (in :mod:`medvl_engine.data`, which
  rasterises ROI boxes on the same grid) - where the N = G x G candidate patches lie.
* :func:`extract_patches` - the e-weighted sum of candidate patches (Eq. 4) computed without
  materialising the N candidates, and :func:`crop_patches` for hard (inference) selections.

Coordinates are (x, y) in breast-image pixels with the origin at the top-left; candidate n sits
at grid row ``n // G`` and column ``n % G`` (row-major, the order of a flattened [G, G] map).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from medvl_engine.data.patch_geometry import PatchGeometry

__all__ = [
    "crop_patches",
    "extract_patches",
    "gumbel_topk_relaxed",
    "hard_topk",
    "sample_gumbel",
    "selection_mask",
]

# 1 - e is clamped to this before the log so that alpha stays finite when e saturates at 1.
_MIN_REMAINING = 1e-20


def sample_gumbel(
    shape: torch.Size | tuple[int, ...],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Standard Gumbel(0, 1) noise ``g = -log(-log(u))``, ``u ~ U(0, 1)``, of the given shape."""
    u = torch.rand(shape, device=device, dtype=dtype or torch.float32, generator=generator)
    tiny = torch.finfo(u.dtype).tiny
    return -torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-7)))


def gumbel_topk_relaxed(
    log_weights: torch.Tensor,
    k: int,
    tau: float,
    gumbel_noise: torch.Tensor | None = None,
) -> torch.Tensor:
    """Relaxed Gumbel-top-K selections (TopKSigLIP Eq. 2-3).

    ``r = log_weights + g``; ``alpha^(1) = r``; for ``j = 1..K``:
    ``e^(j) = softmax(alpha^(j) / tau)`` and ``alpha^(j+1) = alpha^(j) + log(1 - e^(j))``.

    log_weights: ``[B, N]`` (``log w``). gumbel_noise: ``[B, N]``, drawn from Gumbel(0, 1) when
    None (pass zeros for a deterministic relaxation). Returns ``e`` of shape ``[B, K, N]``; each
    row sums to 1 and, as ``tau -> 0``, rows are the one-hots of the top-K entries of ``r`` in
    decreasing order. ``1 - e`` is clamped to a tiny positive before the log.
    """
    if log_weights.ndim != 2:
        raise ValueError(f"log_weights must be [B, N], got {tuple(log_weights.shape)}")
    if not 1 <= k <= log_weights.shape[1]:
        raise ValueError(f"k must lie in 1..{log_weights.shape[1]}, got {k}")
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    if gumbel_noise is None:
        gumbel_noise = sample_gumbel(log_weights.shape, device=log_weights.device)
    alpha = log_weights.float() + gumbel_noise.to(log_weights.device, torch.float32)
    selections = []
    for _ in range(k):
        e = torch.softmax(alpha / tau, dim=-1)
        selections.append(e)
        alpha = alpha + torch.log((1.0 - e).clamp_min(_MIN_REMAINING))
    return torch.stack(selections, dim=1)


def selection_mask(e: torch.Tensor) -> torch.Tensor:
    """Soft union of the K selections (TopKSigLIP Eq. 6): ``1 - prod_j (1 - e^(j))``.

    e: ``[B, K, N]``. Returns ``[B, N]`` in ``[0, 1]``; reshape to ``[B, G, G]`` for the grid.
    """
    return 1.0 - torch.prod(1.0 - e, dim=1)


def hard_topk(log_weights: torch.Tensor, k: int) -> torch.Tensor:
    """Indices ``[B, K]`` of the K largest log-weights per row, in decreasing order."""
    return torch.topk(log_weights, k, dim=-1, sorted=True).indices


def extract_patches(images: torch.Tensor, e: torch.Tensor, geometry: PatchGeometry) -> torch.Tensor:
    """Soft patches ``x^(j) = sum_n e^(j)_n X^(n)`` (TopKSigLIP Eq. 4), differentiable in e.

    images: ``[B, C, S, S]``; e: ``[B, K, N]`` with ``N = G * G``. Returns ``[B, K, C, P, P]``.

    Because the candidates lie on a regular grid with integer stride s, the sum over n is a
    correlation of the image with the ``[G, G]`` map ``e^(j)`` dilated by s:
    ``x^(j)[u, v] = sum_{a, b} e^(j)[a, b] I[offset + a s + u, offset + b s + v]``. It runs as one
    grouped, dilated ``conv2d`` (one group per image, one output channel per (j, channel)).
    This is the exact Eq. 4 with every candidate's weight (no truncation of e, no
    straight-through approximation), its gradient reaches every ``e^(j)_n``, and memory is
    ``O(B K C P^2)`` - the N = 256 candidates (``N P^2``, 32x the image for the paper's grid) are
    never materialised. The cost is N multiply-adds per output pixel.
    """
    if (
        images.ndim != 4
        or images.shape[-1] != geometry.image_size
        or images.shape[-2] != geometry.image_size
    ):
        raise ValueError(
            f"images must be [B, C, {geometry.image_size}, {geometry.image_size}], got "
            f"{tuple(images.shape)}"
        )
    batch, channels = images.shape[:2]
    if e.ndim != 3 or e.shape[0] != batch or e.shape[2] != geometry.num_candidates:
        raise ValueError(f"e must be [{batch}, K, {geometry.num_candidates}], got {tuple(e.shape)}")
    k = e.shape[1]
    lo, hi = geometry.offset, geometry.offset + geometry.span
    region = images[:, :, lo:hi, lo:hi].reshape(1, batch * channels, geometry.span, geometry.span)
    # Kernel for group (b, c): K output channels, one [G, G] selection map each.
    kernel = e.to(images.dtype).reshape(batch, 1, k, geometry.grid, geometry.grid)
    kernel = kernel.expand(batch, channels, k, geometry.grid, geometry.grid)
    kernel = kernel.reshape(batch * channels * k, 1, geometry.grid, geometry.grid)
    out = F.conv2d(region, kernel, dilation=geometry.stride, groups=batch * channels)
    return out.reshape(batch, channels, k, geometry.patch_size, geometry.patch_size).transpose(1, 2)


def crop_patches(
    images: torch.Tensor, indices: torch.Tensor, geometry: PatchGeometry
) -> torch.Tensor:
    """Hard patches of the selected candidates: images ``[B, C, S, S]``, indices ``[B, K]``.

    Returns ``[B, K, C, P, P]`` (plain crops; equal to :func:`extract_patches` with one-hot e).
    """
    origins = torch.as_tensor(geometry.origins(), device=images.device)
    p = geometry.patch_size
    rows = []
    for b in range(images.shape[0]):
        crops = [images[b, :, y : y + p, x : x + p] for x, y in origins[indices[b]].tolist()]
        rows.append(torch.stack(crops))
    return torch.stack(rows)
