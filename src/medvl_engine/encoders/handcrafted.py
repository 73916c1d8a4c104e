"""Handcrafted H&E patch descriptors: colour (RGB, HED, HSV), nuclear density and texture.

``handcrafted_features(patches)`` maps uint8 [B, H, W, 3] to float32 [B, 64]; every
feature is a fixed, deterministic function of the pixels (no learned weights).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["FEATURE_NAMES", "handcrafted_features"]

# Ruifrok & Johnston stain vectors (rows: haematoxylin, eosin, DAB), as skimage's rgb_from_hed.
_RGB_FROM_HED = torch.tensor(
    [[0.65, 0.70, 0.29], [0.07, 0.99, 0.11], [0.27, 0.57, 0.78]], dtype=torch.float64
)
_HED_FROM_RGB = torch.linalg.inv(_RGB_FROM_HED).float()
_WORK_SIZE = 96
_OD_SCALE = 0.6  # optical densities are divided by this before histogramming into [0, 1]

FEATURE_NAMES: tuple[str, ...] = (
    *(f"rgb_mean_{c}" for c in "rgb"),
    *(f"rgb_std_{c}" for c in "rgb"),
    *(f"hed_mean_{c}" for c in "hed"),
    *(f"hed_std_{c}" for c in "hed"),
    "sat_mean",
    "sat_std",
    "val_mean",
    "val_std",
    "hue_cos",
    "hue_sin",
    *(f"gray_hist_{i}" for i in range(8)),
    *(f"haem_hist_{i}" for i in range(8)),
    *(f"eosin_hist_{i}" for i in range(8)),
    "haem_gt_0.15",
    "haem_gt_0.30",
    "haem_gt_0.45",
    "dark_lt_0.35",
    "dark_lt_0.50",
    "white_gt_0.85",
    "white_gt_0.92",
    "grad_mean",
    "grad_std",
    "grad2_mean",
    "grad2_std",
    "lap_mean",
    "lap2_mean",
    "local_var",
    "haem_grad_mean",
    "gray_corr_x",
    "gray_corr_y",
    "haem_corr_x",
    "haem_corr_y",
    "corr_rg",
    "corr_rb",
    "corr_gb",
)


def handcrafted_features(patches: torch.Tensor) -> torch.Tensor:
    """Descriptors of RGB patches: uint8 [B, H, W, 3] -> float32 [B, 64] (see FEATURE_NAMES)."""
    rgb = _to_work_size(patches)  # [B, 3, 96, 96] float32 in [0, 1], contiguous
    batch = rgb.shape[0]
    flat = rgb.flatten(2)  # [B, 3, P]
    gray = (0.299 * rgb[:, 0] + 0.587 * rgb[:, 1] + 0.114 * rgb[:, 2]).unsqueeze(1)  # [B, 1, h, w]

    optical_density = -_math(np.log, rgb.clamp_min(1 / 255))  # [B, 3, h, w]
    hed = _unmix_stains(optical_density).clamp_min(0)  # [B, 3 (h, e, d), h, w]
    haem = hed[:, :1]
    hed_flat = hed.flatten(2)

    value = flat.max(1).values
    minimum = flat.min(1).values
    saturation = (value - minimum) / value.clamp_min(1e-6)
    hue = _hue(flat, value, minimum)
    weight = saturation / saturation.sum(1, keepdim=True).clamp_min(1e-6)
    hue_cos = (_math(np.cos, hue) * weight).sum(1)
    hue_sin = (_math(np.sin, hue) * weight).sum(1)

    gray_flat = gray.flatten(1)
    haem_flat = haem.flatten(1)
    grad, lap = _gradient_magnitude(gray), _laplacian(gray)
    gray_half = F.avg_pool2d(gray, 2)
    grad2, lap2 = _gradient_magnitude(gray_half), _laplacian(gray_half)
    local_mean = _box_mean(gray, 5)
    local_var = _box_mean(gray**2, 5) - local_mean**2

    features = [
        flat.mean(2),
        _std(flat, 2),
        hed_flat.mean(2),
        _std(hed_flat, 2),
        torch.stack([saturation.mean(1), _std(saturation, 1), value.mean(1), _std(value, 1)], 1),
        torch.stack([hue_cos, hue_sin], 1),
        _histogram(gray_flat, 8),
        _histogram(haem_flat / _OD_SCALE, 8),
        _histogram(hed_flat[:, 1] / _OD_SCALE, 8),
        torch.stack([(haem_flat > t).float().mean(1) for t in (0.15, 0.30, 0.45)], 1),
        torch.stack([(gray_flat < t).float().mean(1) for t in (0.35, 0.50)], 1),
        torch.stack([(gray_flat > t).float().mean(1) for t in (0.85, 0.92)], 1),
        torch.stack(
            [
                grad.flatten(1).mean(1),
                _std(grad.flatten(1), 1),
                grad2.flatten(1).mean(1),
                _std(grad2.flatten(1), 1),
                lap.abs().flatten(1).mean(1),
                lap2.abs().flatten(1).mean(1),
                local_var.flatten(1).mean(1),
                _gradient_magnitude(haem).flatten(1).mean(1),
            ],
            1,
        ),
        torch.stack(
            [
                _neighbour_correlation(gray, dim=-1),
                _neighbour_correlation(gray, dim=-2),
                _neighbour_correlation(haem, dim=-1),
                _neighbour_correlation(haem, dim=-2),
            ],
            1,
        ),
        _channel_correlations(flat),
    ]
    out = torch.cat([f.reshape(batch, -1) for f in features], dim=1)
    return torch.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)


def _math(function: np.ufunc, values: torch.Tensor) -> torch.Tensor:
    """``function`` (np.log, np.cos, np.sin, np.sqrt) of ``values``, the same bits every call.

    On the CPU torch hands these to a vector-math library whose first call in a process
    sometimes gives one thread's share of the batch different last bits; numpy computes every
    element with one kernel on one thread. Other devices use torch's own function.
    """
    if values.device.type != "cpu":
        result: torch.Tensor = getattr(torch, function.__name__)(values)
        return result
    return torch.from_numpy(function(values.contiguous().numpy()))


def _unmix_stains(optical_density: torch.Tensor) -> torch.Tensor:
    """Stain densities [B, 3 (h, e, d), h, w] of optical densities [B, 3 (r, g, b), h, w].

    Elementwise products summed in a fixed order rather than a matrix product: a BLAS kernel's
    summation order depends on the batch size and thread count, which would make a patch's
    descriptors differ in the last bits depending on the batch it was encoded in.
    """
    unmix = _HED_FROM_RGB.to(optical_density.device)  # [3 (r, g, b), 3 (h, e, d)]
    red, green, blue = optical_density.unbind(1)
    return torch.stack(
        [red * unmix[0, d] + green * unmix[1, d] + blue * unmix[2, d] for d in range(3)], 1
    )


def _to_work_size(patches: torch.Tensor) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> float32 [B, 3, 96, 96] in [0, 1]: area (adaptive average) resize.

    Separable adaptive average pooling (what ``F.interpolate(..., mode="area")`` computes):
    output sample i averages input samples [floor(i L / 96), ceil((i + 1) L / 96)), first
    along rows, then along columns, each as a few gathers of whole rows (no per-window loop).
    """
    _, height, width, _ = patches.shape
    if (height, width) == (_WORK_SIZE, _WORK_SIZE):
        return patches.permute(0, 3, 1, 2).float().div_(255.0).contiguous()
    pixels = patches.float()  # [B, H, W, 3]; each gather below copies whole contiguous rows
    rows = _window_average(pixels, dim=1, size=_WORK_SIZE)  # [B, 96, W, 3]
    columns_first = rows.transpose(1, 2).contiguous()  # [B, W, 96, 3]
    shrunk = _window_average(columns_first, dim=1, size=_WORK_SIZE)  # [B, 96 (x), 96 (y), 3]
    return shrunk.permute(0, 3, 2, 1).div(255.0).contiguous()  # [B, 3, 96 (y), 96 (x)]


def _window_average(values: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """Adaptive average pooling of ``values`` along ``dim`` to ``size`` samples."""
    length = values.shape[dim]
    index = torch.arange(size)
    starts = (index * length) // size
    counts = -((-(index + 1) * length) // size) - starts
    total: torch.Tensor | None = None
    for offset in range(int(counts.max())):
        inside = offset < counts
        picked = values.index_select(dim, (starts + offset).clamp_max(length - 1))
        if not bool(inside.all()):
            shape = [1] * values.ndim
            shape[dim] = size
            picked = picked * inside.view(shape).to(values.dtype)
        total = picked if total is None else total + picked
    if total is None:
        raise ValueError(f"cannot average {length} samples into {size}")
    shape = [1] * values.ndim
    shape[dim] = size
    return total / counts.view(shape).to(values.dtype)


def _std(values: torch.Tensor, dim: int) -> torch.Tensor:
    """Sample standard deviation along ``dim``: sqrt(sum((x - mean)^2) / (n - 1)), two passes."""
    centred = values - values.mean(dim, keepdim=True)
    return _math(np.sqrt, centred.square().sum(dim) / (values.shape[dim] - 1))


def _box_mean(image: torch.Tensor, size: int) -> torch.Tensor:
    """Mean over each ``size`` x ``size`` window (stride 1, no padding): [B, 1, h, w] -> [B, 1,
    h - size + 1, w - size + 1], as ``F.avg_pool2d(image, size, stride=1)`` (separable sums)."""
    rows = image.shape[-2] - size + 1
    cols = image.shape[-1] - size + 1
    summed_rows = image[..., 0:rows, :]
    for k in range(1, size):
        summed_rows = summed_rows + image[..., k : k + rows, :]
    summed = summed_rows[..., 0:cols]
    for k in range(1, size):
        summed = summed + summed_rows[..., k : k + cols]
    return summed / (size * size)


def _hue(flat: torch.Tensor, value: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    """Hue angle in radians [B, P] of RGB pixels [B, 3, P] (HSV hexcone)."""
    r, g, b = flat[:, 0], flat[:, 1], flat[:, 2]
    chroma = (value - minimum).clamp_min(1e-6)
    hue = torch.where(
        value == r,
        ((g - b) / chroma) % 6,
        torch.where(value == g, (b - r) / chroma + 2, (r - g) / chroma + 4),
    )
    return hue * (torch.pi / 3)


def _histogram(values: torch.Tensor, bins: int) -> torch.Tensor:
    """Fraction of each row's values in ``bins`` equal bins over [0, 1]: [B, P] -> [B, bins]."""
    index = (values.clamp(0, 1 - 1e-6) * bins).long()
    counts = torch.zeros(values.shape[0], bins, device=values.device)
    counts.scatter_add_(1, index, torch.ones_like(values))
    return counts / values.shape[1]


def _gradient_magnitude(image: torch.Tensor) -> torch.Tensor:
    """Central-difference gradient magnitude of [B, 1, h, w] -> [B, 1, h-2, w-2]."""
    dx = image[..., 1:-1, 2:] - image[..., 1:-1, :-2]
    dy = image[..., 2:, 1:-1] - image[..., :-2, 1:-1]
    return _math(np.sqrt, dx**2 + dy**2 + 1e-12)


def _laplacian(image: torch.Tensor) -> torch.Tensor:
    """4-neighbour Laplacian of [B, 1, h, w] -> [B, 1, h-2, w-2]."""
    centre = image[..., 1:-1, 1:-1]
    return (
        image[..., :-2, 1:-1]
        + image[..., 2:, 1:-1]
        + image[..., 1:-1, :-2]
        + image[..., 1:-1, 2:]
        - 4 * centre
    )


def _neighbour_correlation(image: torch.Tensor, dim: int) -> torch.Tensor:
    """Pearson correlation of pixels with their neighbour along ``dim``: [B, 1, h, w] -> [B]."""
    a = image.narrow(dim, 0, image.shape[dim] - 1).flatten(1)
    b = image.narrow(dim, 1, image.shape[dim] - 1).flatten(1)
    a = a - a.mean(1, keepdim=True)
    b = b - b.mean(1, keepdim=True)
    result: torch.Tensor = (a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-6)
    return result


def _channel_correlations(flat: torch.Tensor) -> torch.Tensor:
    """Pearson correlations r-g, r-b, g-b of [B, 3, P] -> [B, 3]."""
    centred = flat - flat.mean(2, keepdim=True)
    norms = centred.norm(dim=2).clamp_min(1e-6)
    pairs = [(0, 1), (0, 2), (1, 2)]
    return torch.stack(
        [(centred[:, i] * centred[:, j]).sum(1) / (norms[:, i] * norms[:, j]) for i, j in pairs], 1
    )
