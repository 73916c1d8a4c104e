"""A heatmap written to the file its suffix names, and a heatmap .npz read back.

:func:`export_heatmap` picks the format from the file suffix and hands the heatmap to the
writer of that format (:mod:`.geojson`, :mod:`.image`, :mod:`.tiff`, :mod:`.tables`).
Coordinates are level-0 px with the origin at the slide's top-left (QuPath's convention).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from medvl_engine.common.model_label import model_metadata
from medvl_engine.errors import CorruptFileError, ExportError
from medvl_engine.export.formats import EXPORT_SUFFIXES
from medvl_engine.export.geojson import (
    boxes_geojson,
    heatmap_contours_geojson,
    heatmap_tiles_geojson,
    write_geojson,
)
from medvl_engine.export.image import composite_image, write_image
from medvl_engine.export.tables import write_boxes_csv, write_npz, write_patches_csv
from medvl_engine.export.tiff import write_heatmap_tiff
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import Heatmap

if TYPE_CHECKING:
    from medvl_engine.io.slide import Slide

__all__ = ["EXPORT_SUFFIXES", "PatchLayout", "export_heatmap", "load_heatmap_npz"]


@dataclass
class PatchLayout:
    """Where the scored patches lie, without their features (what exports need of a store).

    ``coords`` int64 [N, 2] (x, y) level-0 px top-left; ``mpp`` (x, y) um per level-0 px.
    """

    coords: np.ndarray
    patch_size_level0: int
    mpp: tuple[float, float] | None = None
    slide_dimensions: tuple[int, int] | None = None


def _float_pair(values: np.ndarray) -> tuple[float, float]:
    first, second = (float(v) for v in values)
    return first, second


def _int_pair(values: np.ndarray) -> tuple[int, int]:
    first, second = (int(v) for v in values)
    return first, second


def load_heatmap_npz(path: str | Path) -> tuple[Heatmap, PatchLayout]:
    """Read back a heatmap written as .npz by :func:`export_heatmap`.

    The file is read through :func:`medvl_engine.guarded_files.load_npz`: a regular file only
    (a named pipe or device is refused unopened), zip members and array headers within the
    array limit (no zip bomb), never unpickled.
    """
    from medvl_engine.guarded_files import load_npz

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ExportError(f"Heatmap file {path} does not exist; check the path.", path)
    try:
        values = load_npz(path, "heatmap .npz")
        mpp = _float_pair(values["mpp"])
        dims = _int_pair(values["slide_dimensions"])
        heatmap = Heatmap(
            grid=values["grid"].astype(np.float32),
            scores=values["scores"].astype(np.float32),
            origin_level0=_int_pair(values["origin_level0"]),
            cell_size_level0=int(values["cell_size_level0"]),
            scale=_float_pair(values["scale"]),
            translate=_float_pair(values["translate"]),
            units=str(values["units"]),
            mode=str(values["mode"]),
            normalize=str(values["normalize"]),
            prompt=str(values["prompt"]),
            value_range=_float_pair(values["value_range"]),
            metadata={"encoder": str(values["model"])} if "model" in values else {},
        )
        layout = PatchLayout(
            coords=values["coords"].astype(np.int64),
            patch_size_level0=int(values["patch_size_level0"]),
            mpp=None if any(np.isnan(mpp)) else mpp,
            slide_dimensions=None if dims[0] < 0 else dims,
        )
    except FileNotFoundError as error:
        raise ExportError(f"Heatmap file {path} does not exist; check the path.", path) from error
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CorruptFileError(
            f"{path.name} is not a heatmap .npz written by medvl ({type(error).__name__}: "
            f"{error}); write it again with `medvl heatmap --out FILE.npz`.",
            path,
        ) from error
    return heatmap, layout


def _image_text(heatmap: Heatmap, model: str | Path | None) -> dict[str, str]:
    """PNG text chunks of a heatmap composite: prompt, mode, model and notice."""
    provenance = model_metadata(model)
    return {
        "medvl:prompt": heatmap.prompt,
        "medvl:mode": str(getattr(heatmap, "mode", "")),
        "medvl:model": provenance["model"],
        "medvl:notice": provenance["notice"],
    }


def export_heatmap(
    path: str | Path,
    heatmap: Heatmap,
    store: FeatureStore | PatchLayout,
    *,
    slide: Slide | None = None,
    boxes: np.ndarray | None = None,
    box_scores: np.ndarray | None = None,
    geojson_style: str = "tiles",
    contour_levels: list[float] | None = None,
    max_size: int = 2048,
    level: int | None = None,
    alpha: float = 0.5,
    colormap: str | None = None,
    tiff_values: str = "rgba",
    tiff_downsample: int | None = None,
    model: str | Path | None = None,
    threshold: float | None = None,
) -> Path:
    """Write ``heatmap`` (and optional ``boxes`` [N, 4] level-0 px) to ``path`` by its suffix.

    .geojson/.json: tiles (one square per patch) or iso-contours (``geojson_style``), plus
    boxes; .png/.jpg: composite over ``slide`` (needed) at pyramid ``level`` or fitting
    ``max_size``, with legend; .tif/.tiff: a pyramidal TIFF over the slide's whole level-0
    extent, pixel (x, y) at level-0 (x * d, y * d) with d = ``tiff_downsample`` (default
    about 8 um per pixel) and mpp = slide mpp * d, holding RGBA colours (alpha 0 where no
    tissue) or float32 scores (``tiff_values``); .npz: scores, coords and transform;
    .csv: one row per patch, or per box when ``boxes`` are given.

    ``colormap`` None / "auto" takes the shared sequential map, or the diverging map over
    limits symmetric around 0 for a signed heatmap (contrast, or a range crossing 0).
    GeoJSON tiles are classified by score: ``threshold`` gives two classes, else equal
    score bins. Every file names ``model`` (default: the encoder recorded in
    ``heatmap.metadata``) and, for a demo model, carries
    "demo model trained on synthetic data, not for diagnosis".
    """
    path = Path(path)
    suffix = path.suffix.lower()
    prompt = heatmap.prompt
    mode = getattr(heatmap, "mode", None)
    if model is None:
        model = (getattr(heatmap, "metadata", None) or {}).get("encoder") or None
    if suffix in (".geojson", ".json"):
        if geojson_style == "tiles":
            collection = heatmap_tiles_geojson(
                store.coords,
                store.patch_size_level0,
                heatmap.scores,
                prompt,
                value_range=heatmap.value_range,
                colormap=colormap,
                mode=mode,
                model=model,
                threshold=threshold,
            )
        elif geojson_style == "contours":
            levels = contour_levels or [float(np.mean(heatmap.value_range))]
            collection = heatmap_contours_geojson(
                heatmap.grid,
                heatmap.origin_level0,
                heatmap.cell_size_level0,
                prompt,
                levels,
                colormap=colormap,
                value_range=heatmap.value_range,
                mode=mode,
                model=model,
            )
        else:
            raise ExportError(
                f"GeoJSON style '{geojson_style}' is unknown; use 'tiles' or 'contours'.", path
            )
        extra = (
            [boxes_geojson(boxes, box_scores, prompt=prompt, model=model)]
            if boxes is not None
            else []
        )
        return write_geojson(path, collection, *extra)
    if suffix in (".png", ".jpg", ".jpeg"):
        if slide is None:
            raise ExportError(
                f"Cannot write {path.name}: a composite image needs the slide; pass the slide "
                "(or choose .tiff for the heatmap alone).",
                path,
            )
        rgb = composite_image(
            slide,
            heatmap,
            max_size=max_size,
            level=level,
            alpha=alpha,
            colormap=colormap,
            boxes=boxes,
            model=model,
        )
        return write_image(path, rgb, text=_image_text(heatmap, model))
    if suffix in (".tif", ".tiff"):
        dimensions, mpp = store.slide_dimensions, store.mpp
        if slide is not None:
            dimensions = dimensions or slide.dimensions
            mpp = mpp or slide.mpp
        return write_heatmap_tiff(
            path,
            heatmap,
            slide_dimensions=dimensions,
            mpp=mpp,
            downsample=tiff_downsample,
            values=tiff_values,
            colormap=colormap,
            model=model,
        )
    if suffix == ".npz":
        return write_npz(
            path,
            heatmap,
            store.coords,
            store.patch_size_level0,
            store.mpp,
            store.slide_dimensions,
            model=model,
        )
    if suffix == ".csv":
        if boxes is not None:
            return write_boxes_csv(path, boxes, box_scores, prompt, model=model)
        return write_patches_csv(
            path, store.coords, store.patch_size_level0, heatmap.scores, prompt, model=model
        )
    raise ExportError(
        f"Cannot export to {path.name}: unknown file type '{path.suffix}'; use one of "
        f"{', '.join(EXPORT_SUFFIXES)}.",
        path,
    )
