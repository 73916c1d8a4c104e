"""npe2 reader: patch features (TRIDENT/CLAM ``.h5``, CLAM ``.pt``, medvl ``.zarr`` stores) as a
prompt-ready overlay on their slide.

Features files do not hold their slide, so the slide must be open: the reader takes the open
slide whose file name matches the features file's (TRIDENT and CLAM name features after the
slide), else the only open slide, and lets the engine check that the features belong to it
(:func:`medvl_engine.features.open_features_for_slide`). The layer, ``features: <file>``,
marks the patches that have features (1 on each patch cell, NaN elsewhere) in the slide's
frame, and carries the store in ``metadata["feature_store"]``: the slide classification dock
uses it instead of extracting, and it answers prompts at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_medvl._layers import SLIDE_KIND, LayerData, slide_frame
from napari_medvl._notify import report_error

__all__ = ["FEATURES_KIND", "features_layer", "get_features_reader", "read_features"]

FEATURES_KIND = "features"
_FILE_SUFFIXES = (".h5", ".hdf5", ".pt")
NULL_LAYER: list[LayerData] = [(None,)]  # type: ignore[list-item]


def _accepts(path: str) -> bool:
    candidate = Path(path)
    if candidate.suffix.lower() == ".zarr":
        return candidate.is_dir()
    return candidate.suffix.lower() in _FILE_SUFFIXES


def get_features_reader(path: str | Sequence[str]) -> Callable[..., list[LayerData]] | None:
    """``read_features`` for one features file or store (by name), else None."""
    if not isinstance(path, str | Path):
        return None
    return read_features if _accepts(str(path)) else None


def _open_slides() -> list[tuple[Any, Any]]:
    import napari

    viewer = napari.current_viewer()
    if viewer is None:
        return []
    return [
        (layer, layer.metadata["slide"])
        for layer in viewer.layers
        if layer.metadata.get("medvl_kind") == SLIDE_KIND and layer.metadata.get("slide")
    ]


def _slide_for(path: Path) -> Any:
    from medvl_engine.errors import DataError

    slides = _open_slides()
    stem = path.name.split(".")[0]
    named = [slide for _, slide in slides if Path(str(slide.path)).name.split(".")[0] == stem]
    if named:
        return named[-1]
    if len(slides) == 1:
        return slides[0][1]
    if not slides:
        raise DataError(
            f"{path.name}: features are shown on their slide; open the slide first, then "
            "open the features file.",
            path,
        )
    raise DataError(
        f"{path.name}: no open slide is named like it and {len(slides)} slides are open; "
        "name the features file after its slide (as TRIDENT and CLAM do) or open only its slide.",
        path,
    )


def features_layer(store: Any, slide: Any, name: str, source: Path | None = None) -> LayerData:
    """Image layer of the patches of ``store`` on ``slide`` (1 per patch cell, NaN elsewhere)."""
    from medvl_engine.slide_classification import values_heatmap

    label = f"{name} ({store.n_patches} patches, {store.embed_dim}-d)"
    heatmap = values_heatmap(store, np.ones(store.n_patches, np.float32), label, "features")
    frame = slide_frame(slide.mpp)
    kwargs = {
        "name": f"features: {name}",
        "colormap": "cyan",
        "opacity": 0.25,
        "blending": "translucent",
        "contrast_limits": (0.0, 1.0),
        "interpolation2d": "nearest",
        "units": ("um", "um") if frame.units == "um" else ("pixel", "pixel"),
        "scale": tuple(float(v) for v in heatmap.scale),
        "translate": tuple(float(v) for v in heatmap.translate),
        "metadata": {
            "medvl_kind": FEATURES_KIND,
            "feature_store": store,
            "slide": slide,
            "path": str(source) if source is not None else None,
            "encoder": store.encoder,
            "world_frame": frame.as_dict(),
        },
    }
    return np.asarray(heatmap.grid, dtype=np.float32), kwargs, "image"


def read_features(path: str | Sequence[str], stack: bool = False) -> list[LayerData]:
    """The features overlay of one file, or its MedVLError sentence as a notification."""
    from medvl_engine.errors import MedVLError
    from medvl_engine.features import open_features_for_slide

    source = Path(path if isinstance(path, str | Path) else path[0])
    try:
        slide = _slide_for(source)
        store = open_features_for_slide(source, slide)  # takes the slide's mpp if it has none
    except MedVLError as error:
        report_error(error)
        return NULL_LAYER
    return [features_layer(store, slide, source.name, source)]
