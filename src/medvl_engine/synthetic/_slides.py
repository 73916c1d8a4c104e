"""Synthetic H&E whole-slide images written as real tiled pyramidal TIFFs with ground truth.

A slide is a ground-truth label map (class ids of ``TISSUE_CLASSES`` at ``label_downsample``)
painted with periodic class textures, optionally with pen-ink strokes, and written with tifffile:
256-px tiles, JPEG or deflate, the pyramid in SubIFDs, and the pixel size in the resolution tags
(ResolutionUnit centimetre), which tiffslide reports as mpp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tifffile
from scipy import ndimage

from medvl_engine.common.atomic import atomic_write
from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._tissue import (
    TISSUE_CLASSES,
    Stain,
    class_id,
    density_to_rgb,
    random_stain,
    smooth_noise,
    tissue_density,
)
from medvl_engine.synthetic.reports import ORGANS, make_report

__all__ = ["SyntheticSlide", "make_label_map", "paint_slide", "make_synthetic_slide"]

_TILE = 256
_BLOCK = 512
_PEN_TRANSMISSION: dict[str, tuple[float, float, float]] = {
    "blue": (0.10, 0.22, 0.72),
    "green": (0.12, 0.58, 0.25),
    "black": (0.08, 0.08, 0.09),
}
_CLASS_PRIOR = {"tumor": 0.75, "lymphocytes": 0.6, "adipose": 0.5, "necrosis": 0.35}


@dataclass
class SyntheticSlide:
    """A written synthetic slide and its ground truth.

    ``label_map`` uint8 [h_m, w_m] holds class ids of ``TISSUE_CLASSES``; pixel (r, c) covers
    level-0 px x in [c * label_downsample, (c + 1) * label_downsample), likewise y. ``pen_mask``
    (same grid) is True under pen ink. ``size`` is (width, height) in level-0 px.
    """

    path: Path
    label_map: np.ndarray
    label_downsample: int
    classes_present: tuple[str, ...]
    report: str
    organ: str
    mpp: float | None
    size: tuple[int, int]
    seed: int
    slide_id: str
    pen_mask: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0), bool))

    @property
    def tissue_mask(self) -> np.ndarray:
        """Ground-truth tissue (any class but background), bool [h_m, w_m]."""
        return np.asarray(self.label_map != 0)


def _label_downsample(width: int, height: int) -> int:
    downsample = 1
    while max(width, height) / downsample > 1024:
        downsample *= 2
    return downsample


def _choose_classes(rng: np.random.Generator, classes: tuple[str, ...] | None) -> list[str]:
    if classes is not None:
        chosen = {TISSUE_CLASSES[class_id(c)] for c in classes} - {"background"}
        if not chosen:
            raise SyntheticDataError(
                "a synthetic slide needs at least one tissue class besides background"
            )
        return sorted(chosen, key=TISSUE_CLASSES.index)
    drawn = ["stroma"] + [name for name, p in _CLASS_PRIOR.items() if rng.uniform() < p]
    return sorted(drawn, key=TISSUE_CLASSES.index)


def make_label_map(
    shape: tuple[int, int],
    classes: list[str],
    rng: np.random.Generator,
    tissue_fraction: float | None = None,
) -> np.ndarray:
    """Ground-truth label map, uint8 [h_m, w_m] of class ids: noisy tissue blob split into regions.

    Every class in ``classes`` covers at least 4 % of the tissue; holes inside tissue are filled.
    """
    height, width = shape
    fraction = float(rng.uniform(0.35, 0.6)) if tissue_fraction is None else tissue_fraction
    yy, xx = np.meshgrid(
        np.linspace(-1.0, 1.0, height, dtype=np.float32),
        np.linspace(-1.0, 1.0, width, dtype=np.float32),
        indexing="ij",
    )
    centre = rng.uniform(-0.15, 0.15, 2)
    radii = rng.uniform(0.6, 0.9, 2)
    envelope = 1.0 - ((yy - centre[0]) / radii[0]) ** 2 - ((xx - centre[1]) / radii[1]) ** 2
    blob = envelope + 0.45 * smooth_noise(rng, shape, min(shape) / 10.0)
    tissue = blob > np.quantile(blob, 1.0 - fraction)
    tissue = ndimage.binary_opening(tissue, iterations=2)
    components, count = ndimage.label(tissue)
    if count > 1:
        sizes = ndimage.sum(tissue, components, index=np.arange(1, count + 1))
        keep = np.flatnonzero(sizes >= 0.02 * tissue.sum()) + 1
        tissue = np.isin(components, keep)
    tissue = ndimage.binary_fill_holes(tissue)

    inside = np.argwhere(tissue)
    ids = np.array([class_id(c) for c in classes])
    seeds_per_class = [3 if c == "stroma" else int(rng.integers(1, 3)) for c in classes]
    scale = float(min(shape))
    warps = [smooth_noise(rng, shape, min(shape) / 14.0) for _ in classes]
    rows = np.arange(height, dtype=np.float32)[:, None]
    cols = np.arange(width, dtype=np.float32)[None, :]
    bias = np.zeros(len(classes), np.float32)
    labels = np.zeros(shape, np.uint8)
    seeds = [inside[rng.integers(len(inside), size=n)] for n in seeds_per_class]
    for _ in range(8):
        distance = np.empty((len(classes),) + shape, np.float32)
        for k, points in enumerate(seeds):
            best = np.full(shape, np.inf, np.float32)
            for row, col in points:
                best = np.minimum(best, np.hypot(rows - row, cols - col))
            distance[k] = best / scale + 0.12 * warps[k] - bias[k]
        labels = np.where(tissue, ids[np.argmin(distance, axis=0)], 0).astype(np.uint8)
        areas = np.array([(labels == i).sum() for i in ids], np.float64)
        small = areas < 0.04 * tissue.sum()
        if not small.any():
            break
        bias[small] += 0.06
    return labels


def _pen_strokes(
    rng: np.random.Generator, shape: tuple[int, int], um_per_cell: float
) -> dict[str, np.ndarray]:
    """One to three marker curves (about 70 um wide) of different colours, bool [h_m, w_m] each."""
    height, width = shape
    colours = list(_PEN_TRANSMISSION)
    strokes: dict[str, np.ndarray] = {}
    for colour in rng.permutation(colours)[: int(rng.integers(1, 4))]:
        start = rng.uniform(0.05, 0.95, 2) * (height, width)
        direction = rng.normal(size=2)
        direction /= np.linalg.norm(direction)
        length = rng.uniform(0.25, 0.5) * min(shape)
        t = np.linspace(0.0, 1.0, 64)[:, None]
        bend = np.sin(np.pi * t) * rng.uniform(-0.15, 0.15) * min(shape)
        normal = np.array([-direction[1], direction[0]])
        points = start + t * length * direction + bend * normal
        canvas = np.ones(shape, bool)
        rows = np.clip(np.round(points[:, 0]).astype(int), 0, height - 1)
        cols = np.clip(np.round(points[:, 1]).astype(int), 0, width - 1)
        canvas[rows, cols] = False
        width_px = max(2.0, 35.0 / um_per_cell)
        strokes[str(colour)] = ndimage.distance_transform_edt(canvas) <= width_px
    return strokes


def paint_slide(
    labels: np.ndarray,
    label_downsample: int,
    size: tuple[int, int],
    rng: np.random.Generator,
    stain: Stain,
    mpp: float,
    pens: dict[str, np.ndarray] | None = None,
) -> np.ndarray:
    """Level-0 RGB image, uint8 [height, width, 3], for ``size`` = (width, height) px."""
    width, height = size
    atlas_side = _BLOCK if max(width, height) <= _BLOCK else 2 * _BLOCK
    atlases: dict[int, np.ndarray] = {}
    for cid in np.unique(labels):
        maps = tissue_density(int(cid), (atlas_side, atlas_side), rng, mpp)
        texture = density_to_rgb(*maps, stain, rng)
        shift = rng.integers(0, atlas_side, 2)
        atlases[int(cid)] = np.roll(texture, tuple(int(s) for s in shift), axis=(0, 1))
    adipose = labels == class_id("adipose")
    edge_cells = max(1, int(round(2.0 / (mpp * label_downsample))))
    fat_edge = adipose & ndimage.binary_dilation(~adipose, iterations=edge_cells)
    c_h, c_e, c_n = (np.full((1, 1), v, np.float32) for v in (0.02, 0.7, 0.0))
    membrane = density_to_rgb(c_h, c_e, c_n, stain)
    image = np.empty((height, width, 3), np.uint8)
    cells = _BLOCK // label_downsample
    for y0 in range(0, height, _BLOCK):
        for x0 in range(0, width, _BLOCK):
            y1, x1 = min(y0 + _BLOCK, height), min(x0 + _BLOCK, width)
            ly, lx = y0 // label_downsample, x0 // label_downsample
            block = labels[ly : ly + cells, lx : lx + cells]
            ay, ax = y0 % atlas_side, x0 % atlas_side
            out = image[y0:y1, x0:x1]
            counts = np.bincount(block.ravel(), minlength=len(TISSUE_CLASSES))
            order = np.argsort(counts)[::-1]
            out[:] = atlases[int(order[0])][ay : ay + y1 - y0, ax : ax + x1 - x0]
            if counts[order[1]] > 0:
                full = np.repeat(np.repeat(block, label_downsample, 0), label_downsample, 1)
                full = full[: y1 - y0, : x1 - x0]
                for cid in order[1:]:
                    if counts[cid] == 0:
                        break
                    texture = atlases[int(cid)][ay : ay + y1 - y0, ax : ax + x1 - x0]
                    where = full == cid
                    out[where] = texture[where]
            edge = fat_edge[ly : ly + cells, lx : lx + cells]
            if edge.any():
                edge = np.repeat(np.repeat(edge, label_downsample, 0), label_downsample, 1)
                out[edge[: y1 - y0, : x1 - x0]] = membrane[0, 0]
            for colour, stroke in (pens or {}).items():
                ink = stroke[ly : ly + cells, lx : lx + cells]
                if not ink.any():
                    continue
                ink = np.repeat(np.repeat(ink, label_downsample, 0), label_downsample, 1)
                ink = ink[: y1 - y0, : x1 - x0]
                tinted = out[ink].astype(np.float32) * np.asarray(_PEN_TRANSMISSION[colour])
                out[ink] = tinted.astype(np.uint8)
    return image


def _halve(image: np.ndarray) -> np.ndarray:
    """2x2 box downsample of uint8 [H, W, 3] (odd last row/column dropped)."""
    h, w = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
    acc = image[:h:2, :w:2].astype(np.uint16) + image[1:h:2, :w:2]
    acc += image[:h:2, 1:w:2]
    acc += image[1:h:2, 1:w:2]
    return np.asarray(((acc + 2) // 4).astype(np.uint8))


def _aperio_description(
    shape: tuple[int, ...], full: tuple[int, ...], mpp: float | None, compression: str, extra: str
) -> str:
    """An Aperio-style ImageDescription: header line, then ``key = value`` fields after '|'."""
    height, width = shape[:2]
    fields = [
        f"{full[1]}x{full[0]} [0,0 {width}x{height}] ({_TILE}x{_TILE}) {compression.upper()}{extra}"
    ]
    if mpp is not None:
        fields += [f"AppMag = {10.0 / mpp:g}", f"MPP = {mpp:g}"]
    fields.append("Filename = synthetic")
    return "Aperio Image Library medvl-synthetic\r\n" + "|".join(fields)


def _label_image(text: str) -> np.ndarray:
    """A slide label: white card with a bar pattern derived from ``text``, uint8 [256, 256, 3]."""
    label = np.full((256, 256, 3), 250, np.uint8)
    bits = np.unpackbits(np.frombuffer(text.encode()[:24].ljust(24, b"-"), np.uint8))
    for index, bit in enumerate(bits[:192]):
        if bit:
            label[40:120, 32 + index] = 20
    return label


def write_pyramid_tiff(
    path: Path,
    image: np.ndarray,
    mpp: float | None,
    compression: str = "jpeg",
    min_level_side: int = 512,
    description: str = "",
    layout: str = "subifd",
) -> list[tuple[int, int]]:
    """Write uint8 [H, W, 3] as a tiled pyramidal TIFF atomically; returns (w, h) per level.

    ``layout="subifd"``: a generic TIFF, reduced levels in SubIFDs, pixel size in the resolution
    tags. ``layout="svs"``: Aperio-style pages (baseline, thumbnail, levels, label) with the pixel
    size as ``MPP = ...`` in the ImageDescription, as scanners write it.
    """
    if layout not in ("subifd", "svs"):
        raise SyntheticDataError(f"layout must be 'subifd' or 'svs', got {layout!r}")
    levels = [image]
    while max(levels[-1].shape[:2]) > min_level_side and min(levels[-1].shape[:2]) >= 2 * _TILE:
        levels.append(_halve(levels[-1]))
    options: dict[str, Any] = {"photometric": "rgb", "compression": compression, "metadata": None}
    if compression == "jpeg":
        options["compressionargs"] = {"level": 90}

    def write(temporary: Path) -> None:
        with tifffile.TiffWriter(temporary) as tif:
            if layout == "svs":
                _write_svs_pages(tif, levels, mpp, compression, description, options)
                return
            for index, level in enumerate(levels):
                extra: dict[str, Any] = {"tile": (_TILE, _TILE)}
                if mpp is not None:
                    scale = image.shape[1] / level.shape[1]
                    extra["resolution"] = (1e4 / (mpp * scale), 1e4 / (mpp * scale))
                    extra["resolutionunit"] = "CENTIMETER"
                if index == 0:
                    extra["subifds"] = len(levels) - 1
                    extra["description"] = description
                else:
                    extra["subfiletype"] = 1
                tif.write(level, **options, **extra)

    atomic_write(path, write, what="slide")
    return [(lvl.shape[1], lvl.shape[0]) for lvl in levels]


def _write_svs_pages(
    tif: tifffile.TiffWriter,
    levels: list[np.ndarray],
    mpp: float | None,
    compression: str,
    description: str,
    options: dict[str, Any],
) -> None:
    full = levels[0].shape
    tif.write(
        levels[0],
        tile=(_TILE, _TILE),
        description=_aperio_description(full, full, mpp, compression, f"|Title = {description}"),
        **options,
    )
    thumbnail = levels[-1]
    while max(thumbnail.shape[:2]) > 768:
        thumbnail = _halve(thumbnail)
    tif.write(
        thumbnail,
        description=_aperio_description(thumbnail.shape, full, None, compression, " thumbnail"),
        **options,
    )
    for level in levels[1:]:
        tif.write(
            level,
            tile=(_TILE, _TILE),
            description=_aperio_description(level.shape, full, mpp, compression, ""),
            **options,
        )
    label_options = {**options, "compression": "deflate"}
    label_options.pop("compressionargs", None)
    tif.write(
        _label_image(description),
        subfiletype=1,
        description="Aperio Image Library medvl-synthetic\r\nlabel 256x256",
        **label_options,
    )


def make_synthetic_slide(
    path: str | Path,
    *,
    seed: int,
    size: tuple[int, int] = (4096, 4096),
    mpp: float | None = 0.5,
    classes: tuple[str, ...] | None = None,
    organ: str | None = None,
    pen_marks: bool = False,
    compression: str = "jpeg",
    slide_id: str | None = None,
    layout: str = "subifd",
) -> SyntheticSlide:
    """Write a deterministic synthetic H&E slide and return it with its ground truth.

    ``size`` is (width, height) level-0 px; ``mpp`` the level-0 pixel size in um (None writes no
    resolution, textures are then drawn as if at 0.5 um/px). ``classes`` fixes the tissue classes
    (default: stroma plus a random subset); ``organ`` one of ``ORGANS`` (default: random).
    ``layout`` "subifd" writes a generic pyramidal TIFF, "svs" an Aperio-style one (see
    :func:`write_pyramid_tiff`). The same arguments give the same bytes.
    """
    path = Path(path)
    width, height = int(size[0]), int(size[1])
    if width < 64 or height < 64:
        raise SyntheticDataError(f"slide size must be at least 64x64 px, got {size}")
    if layout not in ("subifd", "svs"):
        raise SyntheticDataError(f"layout must be 'subifd' or 'svs', got {layout!r}")
    rng = np.random.default_rng(seed)
    organ = organ.lower() if organ else str(ORGANS[int(rng.integers(len(ORGANS)))])
    if organ not in ORGANS:
        raise SyntheticDataError(f"unknown organ {organ!r}; use one of {', '.join(ORGANS)}")
    chosen = _choose_classes(rng, classes)
    downsample = _label_downsample(width, height)
    grid = (-(-height // downsample), -(-width // downsample))
    labels = make_label_map(grid, chosen, rng)
    pens = _pen_strokes(rng, grid, (mpp or 0.5) * downsample) if pen_marks else {}
    stain = random_stain(rng)
    image = paint_slide(labels, downsample, (width, height), rng, stain, mpp or 0.5, pens)
    present = tuple(TISSUE_CLASSES[i] for i in np.unique(labels) if i != 0)
    report = make_report(present, rng, organ)
    slide_id = slide_id or path.stem
    description = f"medvl synthetic slide {slide_id}"
    write_pyramid_tiff(path, image, mpp, compression, description=description, layout=layout)
    pen_mask = np.zeros(grid, bool)
    for stroke in pens.values():
        pen_mask |= stroke
    return SyntheticSlide(
        path=path,
        label_map=labels,
        label_downsample=downsample,
        classes_present=present,
        report=report,
        organ=organ,
        mpp=float(mpp) if mpp is not None else None,
        size=(width, height),
        seed=int(seed),
        slide_id=slide_id,
        pen_mask=pen_mask,
    )
