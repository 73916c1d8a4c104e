"""Tissue masks of a slide thumbnail: Otsu on saturation (brightness on dark-field scans), pen
ink removed, small gaps closed, holes filled, specks dropped (:func:`tissue_mask`)."""

from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

from medvl_engine.tiling._slide_like import SlideLike, mean_mpp

__all__ = ["FALLBACK_MPP", "closing", "pen_mask", "tissue_mask"]

FALLBACK_MPP = 0.5
"""um/px the mask's um sizes are taken at when the slide has no mpp."""


def pen_mask(rgb: np.ndarray) -> np.ndarray:
    """Pixels of blue, green or black marker ink, bool [h, w] for uint8 [h, w, 3].

    Hematoxylin never exceeds red by more than ~75 grey levels in blue, nor reaches 1.8x red
    while 60 levels above it; H&E is never green-dominant; near-black pixels are dense nuclei or
    ink, which :func:`tissue_mask` tells apart by stroke width and area.
    """
    red, green, blue = (rgb[..., i].astype(np.int16) for i in range(3))
    blue_ink = ((blue - red > 90) | ((blue - red > 60) & (blue > 1.8 * red))) & (blue - green > 30)
    green_ink = (green - red > 30) & (green - blue > 10)
    black_ink = _channel_max(rgb) < 60
    return blue_ink | green_ink | black_ink


def _channel_max(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(np.maximum(np.maximum(rgb[..., 0], rgb[..., 1]), rgb[..., 2]))


def _channel_min(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(np.minimum(np.minimum(rgb[..., 0], rgb[..., 1]), rgb[..., 2]))


def _is_dark_field(brightness: np.ndarray) -> bool:
    """True when the image border (the glass) is dark: a fluorescence scan, not brightfield."""
    border = np.concatenate([brightness[0], brightness[-1], brightness[:, 0], brightness[:, -1]])
    return float(np.median(border)) < 60.0


def _otsu(values: np.ndarray, bins: int = 256) -> float:
    """Otsu's threshold of values in [0, 1] (maximises between-class variance)."""
    hist, edges = np.histogram(values, bins=bins, range=(0.0, 1.0))
    hist = hist.astype(np.float64)
    centres = (edges[:-1] + edges[1:]) / 2.0
    weight0 = np.cumsum(hist)
    weight1 = weight0[-1] - weight0
    mean0 = np.cumsum(hist * centres) / np.maximum(weight0, 1e-12)
    total = (hist * centres).sum()
    mean1 = (total - np.cumsum(hist * centres)) / np.maximum(weight1, 1e-12)
    between = weight0 * weight1 * (mean0 - mean1) ** 2
    return float(centres[int(np.argmax(between))])


def closing(mask: np.ndarray, radius: float) -> np.ndarray:
    """Morphological closing by a disk of ``radius`` px, on a coarser grid when the disk is big."""
    if radius < 1.0:
        return mask
    step = max(1, int(radius // 6))
    rows, cols = mask.shape
    if step > 1:
        padded = np.pad(mask, ((0, -rows % step), (0, -cols % step)))
        blocks = padded.reshape(padded.shape[0] // step, step, padded.shape[1] // step, step)
        coarse = blocks.mean(axis=(1, 3)) >= 0.5
    else:
        coarse = mask
    reach = radius / step
    pad = int(math.ceil(reach)) + 1
    grown = ndimage.distance_transform_edt(~np.pad(coarse, pad)) <= reach
    closed = (ndimage.distance_transform_edt(grown) > reach)[pad:-pad, pad:-pad]
    if step > 1:
        # bilinear upsampling then a 0.5 cut keeps the outline smooth instead of blocky
        smooth = ndimage.zoom(
            closed.astype(np.float32), step, order=1, mode="nearest", grid_mode=True
        )
        closed = smooth[:rows, :cols] > 0.5
    return closed


def tissue_mask(
    slide: SlideLike,
    *,
    max_px: int = 1024,
    min_saturation: float = 0.05,
    close_um: float = 50.0,
    min_object_um2: float = 2.0e4,
    max_hole_um2: float = 1.0e6,
    exclude_pen: bool = True,
    min_pen_width_um: float = 25.0,
    min_pen_um2: float = 5.0e3,
) -> tuple[np.ndarray, float]:
    """Tissue mask of a slide: (mask bool [h, w], downsample from mask px to level-0 px).

    Otsu on HSV saturation of a thumbnail (longest side ``max_px``), threshold at least
    ``min_saturation`` (a blank slide gives an empty mask), with hysteresis down to half the
    threshold for regions touching tissue; pen ink (strokes at least ``min_pen_width_um`` wide
    and ``min_pen_um2`` in area) removed when ``exclude_pen``;
    closing by a disk of ``close_um``, holes up to ``max_hole_um2`` filled, objects under
    ``min_object_um2`` (or a twentieth of the image, if less) dropped. Without an mpp the um
    sizes are taken at 0.5 um/px.
    On a dark-field (fluorescence) scan, recognised by a dark image border, brightness takes the
    place of saturation and pen detection is off.
    Mask pixel (r, c) covers level-0 x in [c * downsample, (c + 1) * downsample), likewise y.
    """
    rgb = np.asarray(slide.thumbnail(max_px))[..., :3]
    width0, _ = slide.dimensions
    downsample = width0 / rgb.shape[1]
    um_per_px = (mean_mpp(slide) or FALLBACK_MPP) * downsample

    top, bottom = _channel_max(rgb), _channel_min(rgb)
    if _is_dark_field(top):
        # fluorescence: tissue is what shines; there is no stain saturation and no pen ink
        signal = top.astype(np.float32) / 255.0
        exclude_pen = False
    else:
        signal = (top - bottom).astype(np.float32) / np.maximum(top, 1).astype(np.float32)
    saturation = ndimage.gaussian_filter(signal, 1.0)
    ink = pen_mask(rgb) if exclude_pen else np.zeros(rgb.shape[:2], bool)
    if ink.any():
        # marker strokes are wide; dark nuclei and their small clusters are not
        ink = ndimage.binary_closing(ink, iterations=2)
        ink = ndimage.binary_opening(
            ink, iterations=max(1, int(round(min_pen_width_um / 2.0 / um_per_px)))
        )
        labels, count = ndimage.label(ink)
        if count:
            sizes = ndimage.sum(ink, labels, np.arange(1, count + 1)) * um_per_px**2
            ink = np.concatenate([[False], sizes >= min_pen_um2])[labels]
        ink = ndimage.binary_dilation(ink, iterations=3)
    usable = saturation[~ink]
    threshold = max(_otsu(usable) if usable.size else 1.0, min_saturation)
    # hysteresis: faint structure (fat membranes) counts when it touches clearly stained tissue
    weak = (saturation > max(threshold / 2.0, min_saturation)) & ~ink
    labels, count = ndimage.label(weak)
    touches_strong = np.zeros(count + 1, bool)
    touches_strong[labels[(saturation > threshold) & weak]] = True
    touches_strong[0] = False
    mask = touches_strong[labels]

    mask |= closing(mask, close_um / um_per_px)
    holes = ndimage.binary_fill_holes(mask) & ~mask
    if holes.any():
        labels, count = ndimage.label(holes)
        sizes = ndimage.sum(holes, labels, np.arange(1, count + 1)) * um_per_px**2
        mask |= np.concatenate([[False], sizes <= max_hole_um2])[labels]
    labels, count = ndimage.label(mask)
    if count:
        sizes = ndimage.sum(mask, labels, np.arange(1, count + 1)) * um_per_px**2
        # on a small image (a crop) an object a twentieth of the field of view still counts
        smallest = min(min_object_um2, 0.05 * mask.size * um_per_px**2)
        mask = np.concatenate([[False], sizes >= smallest])[labels]
    return mask & ~ink, float(downsample)
