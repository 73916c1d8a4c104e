"""H&E-like tissue textures rendered through a Beer-Lambert stain model.

Every class is described by three optical-density (OD) concentration maps, each [H, W] float32:
hematoxylin ``c_h`` (nuclei, blue-purple), eosin ``c_e`` (cytoplasm, collagen, pink) and a
neutral grey ``c_n`` (debris, haze). The colour of a pixel is

    I = white * exp(-(c_h * h + c_e * e + c_n * [1, 1, 1]))          (Beer-Lambert)

with ``h`` and ``e`` the unit OD vectors of the slide's stains (Ruifrok & Johnston, perturbed per
slide). All maps are periodic (they wrap around both borders), so a rendered texture can be tiled
over a large slide without seams. Sizes are given in micrometres and converted with ``mpp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree

from medvl_engine.synthetic._errors import SyntheticDataError

__all__ = [
    "TISSUE_CLASSES",
    "Stain",
    "class_id",
    "random_stain",
    "render_tissue",
    "tissue_density",
    "density_to_rgb",
]

TISSUE_CLASSES: tuple[str, ...] = (
    "background",
    "tumor",
    "stroma",
    "lymphocytes",
    "adipose",
    "necrosis",
)

_H_REF = np.array([0.5626, 0.7201, 0.4062])
_E_REF = np.array([0.2159, 0.8012, 0.5581])


@dataclass(frozen=True)
class Stain:
    """One slide's stain appearance: unit OD vectors (R, G, B), strengths and the white level."""

    h_vector: tuple[float, float, float] = tuple(_H_REF / np.linalg.norm(_H_REF))
    e_vector: tuple[float, float, float] = tuple(_E_REF / np.linalg.norm(_E_REF))
    h_strength: float = 1.0
    e_strength: float = 1.0
    white: tuple[float, float, float] = (246.0, 244.0, 247.0)


def random_stain(rng: np.random.Generator) -> Stain:
    """A stain drawn around the reference H&E vectors (per-slide colour variation)."""

    def jitter(ref: np.ndarray, scale: float) -> tuple[float, float, float]:
        vec = np.clip(ref + rng.normal(0.0, scale, 3), 0.02, None)
        x, y, z = (float(v) for v in vec / np.linalg.norm(vec))
        return x, y, z

    white = 240.0 + rng.uniform(0.0, 12.0) + rng.normal(0.0, 1.5, 3)
    red, green, blue = (float(v) for v in np.clip(white, 225.0, 255.0))
    return Stain(
        h_vector=jitter(_H_REF, 0.05),
        e_vector=jitter(_E_REF, 0.04),
        h_strength=float(rng.uniform(0.8, 1.2)),
        e_strength=float(rng.uniform(0.75, 1.25)),
        white=(red, green, blue),
    )


def class_id(tissue_class: str | int) -> int:
    """Index of a class in :data:`TISSUE_CLASSES`; accepts a name or an id."""
    if isinstance(tissue_class, (int, np.integer)):
        if not 0 <= int(tissue_class) < len(TISSUE_CLASSES):
            last = len(TISSUE_CLASSES) - 1
            raise SyntheticDataError(f"tissue class id {tissue_class} is outside 0..{last}")
        return int(tissue_class)
    try:
        return TISSUE_CLASSES.index(str(tissue_class).lower())
    except ValueError:
        raise SyntheticDataError(
            f"unknown tissue class {tissue_class!r}; use one of {', '.join(TISSUE_CLASSES)}"
        ) from None


def smooth_noise(rng: np.random.Generator, shape: tuple[int, int], sigma: float) -> np.ndarray:
    """Periodic Gaussian-filtered white noise with zero mean and unit std, [H, W] float32."""
    factor = int(sigma // 2.0)
    if factor >= 2 and min(shape) >= 4 * factor:
        coarse_shape = (-(-shape[0] // factor), -(-shape[1] // factor))
        coarse = ndimage.gaussian_filter(
            rng.standard_normal(coarse_shape).astype(np.float32), sigma=sigma / factor, mode="wrap"
        )
        zoom = (shape[0] / coarse_shape[0], shape[1] / coarse_shape[1])
        field = ndimage.zoom(coarse, zoom, order=1, mode="grid-wrap", grid_mode=True)
        field = field[: shape[0], : shape[1]]
    else:
        field = ndimage.gaussian_filter(
            rng.standard_normal(shape).astype(np.float32), sigma=sigma, mode="wrap"
        )
    std = float(field.std())
    return np.asarray((field - field.mean()) / (std if std > 0 else 1.0))


@lru_cache(maxsize=256)
def _stamp(radius: int, aspect: float = 1.0, angle_step: int = 0) -> np.ndarray:
    """Soft-edged ellipse profile in [0, 1], [2r+1, 2r+1]; ``angle_step`` counts 22.5 degrees."""
    offsets = np.arange(-radius, radius + 1, dtype=np.float32)
    yy, xx = np.meshgrid(offsets, offsets, indexing="ij")
    theta = angle_step * np.pi / 8.0
    along = xx * np.cos(theta) + yy * np.sin(theta)
    across = -xx * np.sin(theta) + yy * np.cos(theta)
    minor = max(radius / aspect, 1.0)
    dist = np.sqrt((along / radius) ** 2 + (across / minor) ** 2) * radius
    return np.asarray(np.clip(radius - dist + 0.5, 0.0, 1.0).astype(np.float32))


def _stamp_nuclei(
    canvas: np.ndarray,
    centres_yx: np.ndarray,
    radii: np.ndarray,
    aspect: float = 1.0,
    angle_step: int = 0,
) -> None:
    """Max-composite soft ellipses at ``centres_yx`` [N, 2] (row, col) px into ``canvas``."""
    height, width = canvas.shape
    centres = np.round(centres_yx).astype(np.int64)
    for radius in np.unique(radii):
        chosen = centres[radii == radius]
        if len(chosen) == 0:
            continue
        stamp = _stamp(int(radius), aspect, angle_step)
        offsets = np.arange(-int(radius), int(radius) + 1)
        rows = (chosen[:, 0, None, None] + offsets[None, :, None]) % height
        cols = (chosen[:, 1, None, None] + offsets[None, None, :]) % width
        rows, cols = np.broadcast_arrays(rows, cols)
        values = np.broadcast_to(stamp, rows.shape)
        np.maximum.at(canvas, (rows.ravel(), cols.ravel()), values.ravel())


def _jittered_grid(
    rng: np.random.Generator, shape: tuple[int, int], spacing: float, jitter: float
) -> np.ndarray:
    """Cell centres on a jittered square lattice, [N, 2] (row, col) px."""
    rows = np.arange(0.0, shape[0], spacing)
    cols = np.arange(0.0, shape[1], spacing)
    grid = np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1).reshape(-1, 2)
    return grid + rng.uniform(-jitter, jitter, grid.shape) * spacing


def _uniform_points(rng: np.random.Generator, shape: tuple[int, int], density: float) -> np.ndarray:
    """Uniformly scattered points, ``density`` per px^2, [N, 2] (row, col) px."""
    count = max(1, int(rng.poisson(density * shape[0] * shape[1])))
    return rng.uniform(0.0, 1.0, (count, 2)) * np.array(shape, dtype=np.float64)


def _px(um: float, mpp: float) -> float:
    return um / mpp


def _tumor(
    rng: np.random.Generator, shape: tuple[int, int], mpp: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c_h = np.zeros(shape, np.float32)
    centres = _jittered_grid(rng, shape, _px(10.0, mpp), 0.3)
    keep = rng.uniform(size=len(centres)) < 0.92
    centres = centres[keep]
    radii = np.clip(np.round(rng.normal(_px(4.6, mpp), _px(1.0, mpp), len(centres))), 3, None)
    nuclei = np.zeros(shape, np.float32)
    _stamp_nuclei(nuclei, centres, radii.astype(np.int64))
    chromatin = 0.85 + 0.35 * smooth_noise(rng, shape, 1.2)
    c_h = nuclei * np.clip(chromatin, 0.4, 1.5) * 1.05 + 0.16
    c_e = 0.30 + 0.06 * smooth_noise(rng, shape, 3.0) - 0.12 * nuclei
    return c_h, c_e, np.full(shape, 0.02, np.float32)


def _stroma(
    rng: np.random.Generator, shape: tuple[int, int], mpp: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    height, width = shape
    streaks = ndimage.gaussian_filter(
        rng.standard_normal(shape).astype(np.float32),
        sigma=(_px(0.7, mpp), _px(7.0, mpp)),
        mode="wrap",
    )
    streaks /= max(float(streaks.std()), 1e-6)
    # shearing the rows by +-1 px per column turns the horizontal streaks by -+45 degrees
    shear = int(rng.integers(-1, 2)) if height == width else 0
    warp = np.round(_px(2.5, mpp) * smooth_noise(rng, shape, _px(12.0, mpp))).astype(np.int64)
    cols = np.arange(width)[None, :]
    rows = (np.arange(height)[:, None] + shear * cols + warp) % height
    fibres = streaks[rows, cols]
    angle = {0: 0, 1: 6, -1: 2}[shear]
    if height == width and rng.uniform() < 0.5:
        fibres = fibres.T.copy()
        angle = {0: 4, 6: 6, 2: 2}[angle]
    c_e = 0.55 + 0.25 * np.tanh(1.5 * fibres)
    nuclei = np.zeros(shape, np.float32)
    centres = _uniform_points(rng, shape, 1.0 / _px(28.0, mpp) ** 2)
    radius = max(int(round(_px(4.0, mpp))), 3)
    _stamp_nuclei(nuclei, centres, np.full(len(centres), radius), aspect=3.0, angle_step=angle)
    c_h = 0.04 + 1.1 * nuclei
    return c_h, c_e, np.full(shape, 0.01, np.float32)


def _lymphocytes(
    rng: np.random.Generator, shape: tuple[int, int], mpp: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    centres = _jittered_grid(rng, shape, _px(6.5, mpp), 0.35)
    centres = centres[rng.uniform(size=len(centres)) < 0.9]
    radii = np.clip(np.round(rng.normal(_px(2.6, mpp), _px(0.3, mpp), len(centres))), 2, None)
    nuclei = np.zeros(shape, np.float32)
    _stamp_nuclei(nuclei, centres, radii.astype(np.int64))
    c_h = 0.10 + 1.65 * nuclei * (0.95 + 0.1 * smooth_noise(rng, shape, 1.0))
    c_e = 0.18 + 0.05 * smooth_noise(rng, shape, 4.0)
    return c_h, c_e, np.full(shape, 0.03, np.float32)


def _adipose(
    rng: np.random.Generator, shape: tuple[int, int], mpp: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    height, width = shape
    cell_px = _px(rng.uniform(40.0, 55.0), mpp)
    sites = _jittered_grid(rng, shape, cell_px, 0.35)
    tiles = [sites + np.array([dy * height, dx * width]) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
    tree = cKDTree(np.concatenate(tiles))
    step = 2 if min(shape) >= 64 else 1
    yy, xx = np.meshgrid(
        np.arange(0, height, step) + step / 2.0,
        np.arange(0, width, step) + step / 2.0,
        indexing="ij",
    )
    dist = np.asarray(tree.query(np.stack([yy.ravel(), xx.ravel()], axis=1), k=2)[0])
    gap = (dist[:, 1] - dist[:, 0]).reshape(yy.shape).astype(np.float32)
    if step > 1:
        gap = np.repeat(np.repeat(gap, step, axis=0), step, axis=1)[:height, :width]
    thickness = _px(2.0, mpp)
    membrane = np.clip(1.0 - gap / thickness, 0.0, 1.0)
    membrane = ndimage.gaussian_filter(membrane, 0.6, mode="wrap")
    c_e = 0.03 + 0.75 * membrane
    nuclei = np.zeros(shape, np.float32)
    ridge = np.argwhere(membrane > 0.8)
    if len(ridge):
        picks = ridge[rng.uniform(size=len(ridge)) < 1.0 / _px(60.0, mpp) ** 2 * 40.0]
        _stamp_nuclei(nuclei, picks, np.full(len(picks), max(int(_px(2.0, mpp)), 2)), aspect=2.5)
    c_h = 0.01 + 0.9 * nuclei
    return c_h, c_e, np.zeros(shape, np.float32)


def _necrosis(
    rng: np.random.Generator, shape: tuple[int, int], mpp: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    blotch = smooth_noise(rng, shape, _px(6.0, mpp))
    c_e = 0.22 + 0.07 * blotch + 0.04 * smooth_noise(rng, shape, 1.0)
    c_n = 0.15 + 0.05 * smooth_noise(rng, shape, _px(10.0, mpp))
    debris = np.zeros(shape, np.float32)
    centres = _uniform_points(rng, shape, 1.0 / _px(7.0, mpp) ** 2)
    radii = rng.integers(1, max(int(_px(1.2, mpp)), 1) + 1, len(centres))
    _stamp_nuclei(debris, centres, radii)
    c_h = 0.05 + 0.75 * debris * rng.uniform(0.5, 1.0)
    return c_h, c_e, c_n


def _background(
    rng: np.random.Generator, shape: tuple[int, int], mpp: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    haze = smooth_noise(rng, shape, _px(20.0, mpp))
    c_e = np.full(shape, 0.012, np.float32) + 0.004 * haze
    c_h = np.full(shape, 0.004, np.float32)
    return c_h, c_e, np.full(shape, 0.006, np.float32)


_RENDERERS = (_background, _tumor, _stroma, _lymphocytes, _adipose, _necrosis)


def tissue_density(
    tissue_class: str | int,
    shape: tuple[int, int],
    rng: np.random.Generator,
    mpp: float = 0.5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Periodic stain concentrations (c_h, c_e, c_n) of one class, each [H, W] float32 OD units."""
    if shape[0] < 1 or shape[1] < 1:
        raise SyntheticDataError(f"texture shape must be positive, got {shape}")
    maps = _RENDERERS[class_id(tissue_class)](rng, (int(shape[0]), int(shape[1])), float(mpp))
    return tuple(np.clip(m, 0.0, None).astype(np.float32, copy=False) for m in maps)


def density_to_rgb(
    c_h: np.ndarray,
    c_e: np.ndarray,
    c_n: np.ndarray,
    stain: Stain,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Beer-Lambert colour I = white * exp(-(c_h h + c_e e + c_n 1)), uint8 [H, W, 3]."""
    h = np.asarray(stain.h_vector, np.float32) * stain.h_strength
    e = np.asarray(stain.e_vector, np.float32) * stain.e_strength
    optical = c_h[..., None] * h + c_e[..., None] * e + c_n[..., None]
    if rng is not None:
        optical += rng.normal(0.0, 0.015, optical.shape[:2] + (1,)).astype(np.float32)
    rgb = np.asarray(stain.white, np.float32) * np.exp(-optical)
    return np.asarray(np.clip(rgb + 0.5, 0, 255).astype(np.uint8))


def render_tissue(
    tissue_class: str | int,
    size: tuple[int, int],
    rng: np.random.Generator,
    *,
    stain: Stain | None = None,
    mpp: float = 0.5,
) -> np.ndarray:
    """H&E-like texture of one tissue class, uint8 [h, w, 3] for ``size`` = (h, w) px at ``mpp``.

    Without ``stain`` a stain is drawn from ``rng`` (colour variation between calls). The texture
    is periodic in both axes, so it tiles without seams.
    """
    stain = random_stain(rng) if stain is None else stain
    c_h, c_e, c_n = tissue_density(tissue_class, size, rng, mpp)
    return density_to_rgb(c_h, c_e, c_n, stain, rng)
