"""Synthetic mammogram views: breast outline, fibroglandular texture and lesions with their boxes.

Images are attenuation maps, float32 [rows, cols], for a LEFT breast with the chest wall on
column 0 and the nipple pointing to larger columns; right breasts are mirrored by the caller.
Lesions are placed by breast coordinates shared between views: ``depth`` is the fraction of the
chest-wall-to-nipple distance (the same in CC and MLO, as in a real exam) and ``offset`` the
position across the breast in [-1, 1] (view-specific: medio-lateral in CC, oblique in MLO).
Boxes are (x0, y0, x1, y1) source px: x = column, y = row, x1/y1 exclusive.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from medvl_engine.synthetic._tissue import smooth_noise

__all__ = [
    "BENIGN_STRUCTURES",
    "LESION_REACH",
    "FINDING_TYPES",
    "DENSITY_FRACTION",
    "BenignStructure",
    "Lesion",
    "BreastGeometry",
    "lesion_centre",
    "render_view",
]

FINDING_TYPES: tuple[str, ...] = ("mass", "calcification", "architectural distortion", "asymmetry")
DENSITY_FRACTION: dict[str, float] = {"A": 0.08, "B": 0.28, "C": 0.55, "D": 0.82}


LESION_REACH: dict[str, float] = {
    "mass": 2.8,
    "calcification": 1.6,
    "architectural distortion": 1.3,
    "asymmetry": 2.2,
}
"""How far a finding's drawing reaches from its centre, in multiples of its radius."""

BENIGN_STRUCTURES: tuple[str, ...] = (
    "vascular calcification",
    "coarse calcification",
    "skin marker",
    "dense island",
    "lymph node",
)
"""Normal or benign bright structures drawn in any breast, with no box and no report line."""


@dataclass(frozen=True)
class Lesion:
    """One finding in breast coordinates; ``size`` is a radius as a fraction of image rows.

    ``malignant`` picks the malignant appearance (irregular or spiculated mass, fine pleomorphic
    clustered calcifications) over the benign one (circumscribed mass, a few coarse scattered
    calcifications); ``contrast`` scales the added attenuation.
    """

    kind: str
    depth: float
    offset_cc: float
    offset_mlo: float
    size: float
    spiculated: bool = False
    seed: int = 0
    malignant: bool = False
    contrast: float = 1.0


@dataclass(frozen=True)
class BenignStructure:
    """A normal bright structure (see :data:`BENIGN_STRUCTURES`) in breast coordinates.

    ``depth`` / ``offset_*`` as for :class:`Lesion` (for a skin marker ``offset_cc`` is the
    angle on the skin line in radians); ``size`` a radius as a fraction of rows; ``seed``
    drives its shape.
    """

    kind: str
    depth: float
    offset_cc: float
    offset_mlo: float
    size: float
    seed: int


@dataclass(frozen=True)
class BreastGeometry:
    """Ellipse semi-axes as fractions of rows/cols, shared by both views of one breast."""

    depth: float
    height_cc: float
    height_mlo: float
    centre_cc: float
    centre_mlo: float
    pectoral_width: float
    pectoral_height: float

    @classmethod
    def random(cls, rng: np.random.Generator) -> BreastGeometry:
        return cls(
            depth=float(rng.uniform(0.70, 0.86)),
            height_cc=float(rng.uniform(0.36, 0.44)),
            height_mlo=float(rng.uniform(0.40, 0.46)),
            centre_cc=float(rng.uniform(0.47, 0.53)),
            centre_mlo=float(rng.uniform(0.52, 0.56)),
            pectoral_width=float(rng.uniform(0.22, 0.32)),
            pectoral_height=float(rng.uniform(0.38, 0.50)),
        )


def outline(
    view: str, geo: BreastGeometry, shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float, float]:
    """(breast mask bool, normalised radius rho, pectoral mask bool, centre row, semi-axes)."""
    rows, cols = shape
    centre = (geo.centre_cc if view == "CC" else geo.centre_mlo) * rows
    half_height = (geo.height_cc if view == "CC" else geo.height_mlo) * rows
    half_depth = geo.depth * cols
    rr = np.arange(rows, dtype=np.float32)[:, None]
    cc = np.arange(cols, dtype=np.float32)[None, :]
    rho = np.sqrt(((rr - centre) / half_height) ** 2 + (cc / half_depth) ** 2)
    breast = rho < 1.0
    pectoral = np.zeros(shape, bool)
    if view == "MLO":
        width, height = geo.pectoral_width * cols, geo.pectoral_height * rows
        pectoral = cc < width * (1.0 - rr / height)
        breast |= pectoral
    return breast, rho, pectoral, centre, half_height, half_depth


def lesion_centre(
    lesion: Lesion, view: str, geo: BreastGeometry, shape: tuple[int, int]
) -> tuple[float, float]:
    """(row, col) source px of a lesion's centre in one view (left-breast orientation)."""
    rows, cols = shape
    centre = (geo.centre_cc if view == "CC" else geo.centre_mlo) * rows
    half_height = (geo.height_cc if view == "CC" else geo.height_mlo) * rows
    offset = lesion.offset_cc if view == "CC" else lesion.offset_mlo
    col = lesion.depth * geo.depth * cols
    row = centre + offset * half_height * np.sqrt(max(1.0 - lesion.depth**2, 0.0))
    return float(row), float(col)


def _segment_distance(
    rr: np.ndarray, cc: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    direction = end - start
    length2 = float(direction @ direction) or 1.0
    t = np.clip(((rr - start[0]) * direction[0] + (cc - start[1]) * direction[1]) / length2, 0, 1)
    return np.asarray(
        np.hypot(rr - (start[0] + t * direction[0]), cc - (start[1] + t * direction[1]))
    )


def _paint_disk(out: np.ndarray, centre: np.ndarray, radius: float, level: float) -> None:
    """``out = max(out, level * disk)`` for an anti-aliased disk of ``radius`` px at ``centre``
    (row, col) source px, computed in a window around it."""
    reach = int(np.ceil(radius)) + 2
    r0, c0 = int(np.floor(centre[0])) - reach, int(np.floor(centre[1])) - reach
    rs, cs = max(r0, 0), max(c0, 0)
    re = min(r0 + 2 * reach + 2, out.shape[0])
    ce = min(c0 + 2 * reach + 2, out.shape[1])
    if rs >= re or cs >= ce:
        return
    rr = np.arange(rs, re, dtype=np.float32)[:, None]
    cc = np.arange(cs, ce, dtype=np.float32)[None, :]
    disk = np.clip(radius - np.hypot(rr - centre[0], cc - centre[1]) + 0.5, 0.0, 1.0)
    np.maximum(out[rs:re, cs:ce], np.float32(level) * disk, out=out[rs:re, cs:ce])


def _paint_spots(
    out: np.ndarray,
    rr: np.ndarray,
    cc: np.ndarray,
    spots: np.ndarray,
    rng: np.random.Generator,
    radius_range: tuple[float, float],
    level_range: tuple[float, float],
) -> np.ndarray:
    """``max(out, spots)``: an anti-aliased disk of random radius and level at each of
    ``spots`` ``[n, 2]`` (row, col) source px, on the window whose px rows / cols are
    ``rr`` ``[h, 1]`` / ``cc`` ``[1, w]``. Not :func:`_paint_disk`: this keeps the float64
    arithmetic the calcification clusters of existing cohorts were drawn with, byte for byte."""
    for position in spots:
        d = np.hypot(rr - position[0], cc - position[1])
        disk = np.clip(rng.uniform(*radius_range) - d + 0.5, 0.0, 1.0)
        out = np.maximum(out, rng.uniform(*level_range) * disk)
    return out


def _lesion_map(
    lesion: Lesion, centre_rc: tuple[float, float], shape: tuple[int, int]
) -> tuple[np.ndarray, tuple[int, int]]:
    """Attenuation added by one lesion in a local window: (map [h, w] float32, (row0, col0))."""
    rows = shape[0]
    rng = np.random.default_rng(lesion.seed)
    radius = max(lesion.size * rows, 2.0)
    half = int(np.ceil(radius * LESION_REACH[lesion.kind])) + 3
    row0, col0 = int(round(centre_rc[0])) - half, int(round(centre_rc[1])) - half
    rr = np.arange(2 * half + 1, dtype=np.float32)[:, None] + row0
    cc = np.arange(2 * half + 1, dtype=np.float32)[None, :] + col0
    dr, dc = rr - centre_rc[0], cc - centre_rc[1]
    dist = np.hypot(dr, dc)
    angle = np.arctan2(dr, dc)
    out = np.zeros((2 * half + 1, 2 * half + 1), np.float32)
    centre = np.array(centre_rc, np.float32)
    if lesion.kind == "mass":
        # circumscribed (benign): smooth oval, sharp margin; malignant: irregular lobes and an
        # indistinct margin, with spicules when ``spiculated``
        irregular = lesion.malignant
        amplitudes = (0.12, 0.25) if irregular else (0.0, 0.06)
        harmonics = sum(
            rng.uniform(*amplitudes) * np.cos(k * angle + rng.uniform(0, 2 * np.pi))
            for k in ((3, 5, 7) if irregular else (2, 3))
        )
        edge = radius * (1.0 + harmonics)
        margin = 5.0 if irregular else 1.5
        density = 0.32 if irregular else 0.2  # malignant masses are mostly high density
        out = (
            density
            * np.clip((edge - dist) / margin + 0.5, 0.0, 1.0)
            * (1.0 - 0.3 * (dist / edge) ** 2)
        )
        if lesion.spiculated:
            for theta in rng.uniform(0, 2 * np.pi, int(rng.integers(8, 14))):
                tip = centre + radius * rng.uniform(1.8, 2.7) * np.array(
                    [np.sin(theta), np.cos(theta)], np.float32
                )
                line = _segment_distance(rr, cc, centre, tip)
                out = np.maximum(out, 0.16 * np.clip(1.8 - line, 0.0, 1.0))
    elif lesion.kind == "calcification":
        if lesion.malignant:  # fine pleomorphic, tightly clustered, many
            count, spread, spot, level = int(rng.integers(20, 36)), 0.3, (0.9, 1.5), (0.45, 0.7)
        else:  # a few coarse round calcifications, loosely grouped
            count, spread, spot, level = int(rng.integers(2, 6)), 1.0, (1.4, 2.2), (0.6, 0.9)
        spots = centre + rng.normal(0.0, radius * spread, (count, 2))
        out = _paint_spots(out, rr, cc, spots, rng, spot, level)
        if not out.any():  # every spot fell outside the window: pull them in to be seen
            spots = np.asarray(centre + np.clip(spots - centre, 3.0 - half, half - 3.0), np.float64)
            out = _paint_spots(out, rr, cc, spots, rng, spot, level)
    elif lesion.kind == "architectural distortion":
        for theta in rng.uniform(0, 2 * np.pi, int(rng.integers(10, 16))):
            start = centre + radius * 0.15 * np.array([np.sin(theta), np.cos(theta)], np.float32)
            tip = centre + radius * rng.uniform(0.8, 1.25) * np.array(
                [np.sin(theta), np.cos(theta)], np.float32
            )
            line = _segment_distance(rr, cc, start, tip)
            out = np.maximum(out, 0.17 * np.clip(1.5 - line, 0.0, 1.0))
    else:
        out = 0.16 * np.exp(-0.5 * (dist / (0.7 * radius)) ** 4)
    return (lesion.contrast * out).astype(np.float32), (row0, col0)


def _skin_point(
    angle: float, view: str, geo: BreastGeometry, shape: tuple[int, int]
) -> tuple[float, float]:
    """(row, col) source px just inside the skin line at ``angle`` radians from the nipple axis."""
    rows, cols = shape
    centre = (geo.centre_cc if view == "CC" else geo.centre_mlo) * rows
    half_height = (geo.height_cc if view == "CC" else geo.height_mlo) * rows
    return centre + 0.95 * half_height * np.sin(angle), 0.95 * geo.depth * cols * np.cos(angle)


def _structure_map(
    structure: BenignStructure, view: str, geo: BreastGeometry, shape: tuple[int, int]
) -> np.ndarray:
    """Attenuation [rows, cols] float32 added by one normal structure in one view."""
    rows, cols = shape
    rng = np.random.default_rng(structure.seed)
    rr = np.arange(rows, dtype=np.float32)[:, None]
    cc = np.arange(cols, dtype=np.float32)[None, :]
    out = np.zeros(shape, np.float32)
    point = Lesion(
        kind="mass",
        depth=structure.depth,
        offset_cc=structure.offset_cc,
        offset_mlo=structure.offset_mlo,
        size=structure.size,
    )
    radius = max(structure.size * rows, 1.0)
    if structure.kind == "vascular calcification":
        # a calcified vessel: two parallel dashed bright lines ("tram tracks") along a curve
        end = Lesion(
            "mass",
            structure.depth + 0.35,
            0.5 * structure.offset_cc,
            0.5 * structure.offset_mlo,
            structure.size,
        )
        start_rc = np.array(lesion_centre(point, view, geo, shape), np.float32)
        end_rc = np.array(lesion_centre(end, view, geo, shape), np.float32)
        bend = rng.normal(0.0, 0.08 * rows, 2).astype(np.float32)
        normal = np.array([end_rc[1] - start_rc[1], start_rc[0] - end_rc[0]], np.float32)
        normal /= max(float(np.hypot(*normal)), 1e-6)
        level = rng.uniform(0.45, 0.8)
        for t in np.linspace(0.0, 1.0, 60):
            if rng.uniform() < 0.3:  # gaps in the calcified wall
                continue
            along = (
                (1 - t) ** 2 * start_rc
                + 2 * t * (1 - t) * ((start_rc + end_rc) / 2 + bend)
                + t**2 * end_rc
            )
            for side in (-1.0, 1.0):
                _paint_disk(out, along + side * 1.4 * normal, 0.7, level)
    elif structure.kind == "coarse calcification":
        centre = np.array(lesion_centre(point, view, geo, shape), np.float32)
        for _ in range(int(rng.integers(1, 4))):
            spot = centre + rng.normal(0.0, 4.0 * radius, 2)
            level = rng.uniform(0.7, 1.0)
            _paint_disk(out, spot, rng.uniform(1.2, 2.4), level)
    elif structure.kind == "skin marker":
        centre = np.array(_skin_point(structure.offset_cc, view, geo, shape), np.float32)
        _paint_disk(out, centre, max(radius, 1.5), rng.uniform(1.0, 1.3))
    elif structure.kind == "dense island":
        centre = np.array(lesion_centre(point, view, geo, shape), np.float32)
        stretch = rng.uniform(1.0, 1.8)
        d = np.hypot((rr - centre[0]) / stretch, cc - centre[1])
        out = rng.uniform(0.10, 0.22) * np.exp(-0.5 * (d / radius) ** 2)
    elif structure.kind == "lymph node" and view == "MLO":
        # axillary node high on the pectoral muscle edge: a dense oval with a fatty hilum
        centre = np.array(
            [geo.centre_mlo * rows - 0.75 * geo.height_mlo * rows, 0.3 * geo.pectoral_width * cols],
            np.float32,
        ) + rng.normal(0.0, 0.02 * rows, 2).astype(np.float32)
        d = np.hypot((rr - centre[0]) / 1.5, cc - centre[1])
        body = np.clip(radius - d + 0.5, 0.0, 1.0)
        hilum = np.clip(
            0.45 * radius - np.hypot((rr - centre[0]) / 1.5, cc - centre[1] - 0.4 * radius) + 0.5,
            0.0,
            1.0,
        )
        out = 0.2 * body - 0.12 * hilum * body
    return out


def _paste(canvas: np.ndarray, patch: np.ndarray, origin: tuple[int, int]) -> None:
    """Add ``patch`` into ``canvas`` at (row0, col0), clipping at the borders."""
    r0, c0 = origin
    r1, c1 = r0 + patch.shape[0], c0 + patch.shape[1]
    rs, cs = max(r0, 0), max(c0, 0)
    re, ce = min(r1, canvas.shape[0]), min(c1, canvas.shape[1])
    if rs < re and cs < ce:
        canvas[rs:re, cs:ce] += patch[rs - r0 : re - r0, cs - c0 : ce - c0]


def render_view(
    view: str,
    geo: BreastGeometry,
    density: str,
    lesions: list[Lesion],
    shape: tuple[int, int],
    rng: np.random.Generator,
    structures: tuple[BenignStructure, ...] | list[BenignStructure] = (),
) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """(attenuation float32 [rows, cols] in ~[0, 1.6], breast mask bool, boxes per lesion).

    ``structures`` (normal bright structures) are added before the lesions and get no box.
    """
    rows, cols = shape
    breast, rho, pectoral, centre, half_height, half_depth = outline(view, geo, shape)
    thickness = np.clip(np.sqrt(np.clip(1.0 - rho**2, 0.0, 1.0)) * 2.2, 0.0, 1.0)
    thickness = np.where(pectoral, 1.0, thickness) * breast

    fraction = DENSITY_FRACTION[density]
    structure = smooth_noise(rng, shape, rows / 30.0) + 0.5 * smooth_noise(rng, shape, rows / 90.0)
    cc = np.arange(cols, dtype=np.float32)[None, :]
    structure += 0.8 * np.exp(-(((cc / half_depth) - 0.45) ** 2) / 0.08)
    inside = breast & ~pectoral & (rho < 0.93)
    threshold = np.quantile(structure[inside], 1.0 - fraction) if inside.any() else 0.0
    gland = 1.0 / (1.0 + np.exp(-(structure - threshold) * 1.8))
    texture = 0.6 * smooth_noise(rng, shape, rows / 200.0) + 0.4 * smooth_noise(rng, shape, 1.2)
    attenuation = thickness * (0.30 + 0.36 * gland + 0.035 * texture * (0.4 + gland))
    attenuation += pectoral * 0.18
    for benign in structures:
        attenuation += _structure_map(benign, view, geo, shape) * breast

    boxes: list[list[int]] = []
    for lesion in lesions:
        patch, origin = _lesion_map(lesion, lesion_centre(lesion, view, geo, shape), shape)
        local = np.zeros(shape, np.float32)
        _paste(local, patch, origin)
        local *= breast
        attenuation += local
        on = np.argwhere(local > 0.3 * float(local.max()))
        (y0, x0), (y1, x1) = on.min(0), on.max(0) + 1
        boxes.append([int(x0), int(y0), int(x1), int(y1)])
    return attenuation.astype(np.float32), breast, boxes
