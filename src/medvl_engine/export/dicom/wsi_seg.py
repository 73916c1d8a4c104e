"""A tissue map or a prompt heatmap of a DICOM whole-slide image as a DICOM Segmentation.

Both are tiled images at the map's resolution aligned to the source's total pixel matrix,
placed like :mod:`medvl_engine.export.dicom.wsi_pmap`'s parametric map
(:func:`~medvl_engine.export.dicom.wsi_source.grid_on_source`,
:func:`~medvl_engine.export.dicom.wsi_source.slide_placement`): with s the map's
cell (level-0 px), pixel (c, r) covers level-0 px x in [x0 + c * s, x0 + (c + 1) * s), y
likewise, x0 = origin_x mod s (y alike); Pixel Spacing is s times the source's, the origin
is the source's moved by (x0, y0) level-0 px, and the Frame of Reference is the source's.
Frames are TILED_SPARSE (frames of only zeros are left out).

- :func:`write_class_map_segmentation`: a BINARY Segmentation of a :class:`SegmentResult`'s
  class map with one segment per class, in the order of the classes: segment k + 1 holds
  the cells labelled class k; "no tissue" and "uncertain" cells are in no segment. Each
  segment names the class, its property category and type (SNOMED CT where one exists,
  else a 99MEDVL code, :mod:`.tissue_codes`) and its recommended display colour (CIELab of
  the class's colour in the GeoJSON and PNG exports), and identifies the algorithm: the
  model (name, medvl version, family "Artificial Intelligence") with the classes and their
  names, the templates, the minimum confidence and the logit scale as its parameters (one
  JSON object in Algorithm Parameters).
  (LABELMAP, one segment number per pixel, is a newer SOP class that the validator
  ``dciodvfy`` of 2022 and many viewers do not know yet, so BINARY is written.)
- :func:`write_heatmap_segmentation`: a FRACTIONAL (probability) Segmentation of a
  heatmap, one segment. A score s becomes f = clip((s - lo) / (hi - lo), 0, 1) with (lo,
  hi) the heatmap's display range (the parametric map's window): the identity for a
  softmax map of probabilities in [0, 1]. Cells with no patch hold 0. The segment's
  description states the mapping; f is stored in 1/255 steps (Maximum Fractional Value
  255), so it comes back within 1/510 of f.

A demo model's notice rides in the content description and the algorithm's parameters; no
file path of this machine is written into either object.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import ExportError
from medvl_engine.export.dicom.common import require_highdicom, write_dataset
from medvl_engine.export.dicom.wsi_source import (
    ResultMaker,
    grid_on_source,
    require_dicom_slide,
    result_maker,
    slide_placement,
)

if TYPE_CHECKING:
    from medvl_engine.heatmap import Heatmap
    from medvl_engine.io.dicom_results.source import DicomImageSource
    from medvl_engine.segmentation import SegmentResult

__all__ = [
    "algorithm_with_parameters",
    "class_map_parameters",
    "fraction_mapping",
    "grid_on_source",
    "write_class_map_segmentation",
    "write_heatmap_segmentation",
]

_TILE = 256
_MAX_PIXELS = 1 << 28
_SERIES_NUMBER = 902
_HEATMAP_SERIES_NUMBER = 903
_MAX_PARAMETERS = 10240  # LT


def fraction_mapping(heatmap: Heatmap) -> tuple[float, float]:
    """(lo, hi) of the score-to-fraction mapping f = clip((s - lo) / (hi - lo), 0, 1): the
    heatmap's display range (symmetric for a signed map), widened to (lo, lo + 1) when
    empty."""
    from medvl_engine.colormaps import display_limits, is_signed

    mode = str(getattr(heatmap, "mode", "cosine"))
    low, high = display_limits(heatmap.value_range, is_signed(mode, heatmap.value_range))
    low, high = float(low), float(high)
    if not (np.isfinite(low) and np.isfinite(high)) or high <= low:
        low = low if np.isfinite(low) else 0.0
        high = low + 1.0
    return low, high


def write_class_map_segmentation(
    path: str | Path,
    result: SegmentResult,
    slide: Any,
    *,
    model: str | Path | None = None,
) -> Path:
    """Write ``result``'s class map of the DICOM WSI ``slide`` (an open Slide or its path)
    to ``path`` as a BINARY Segmentation, one segment per class (module docstring);
    ``model`` defaults to the result's. Written atomically; a non-DICOM slide is refused
    with one sentence."""
    path = Path(path)
    source = require_dicom_slide(slide, path)
    require_highdicom()
    mapped = result.class_map
    labels, corner = grid_on_source(
        np.asarray(mapped.labels, np.int16),
        mapped.origin_level0,
        mapped.cell_size_level0,
        source.size,
        0,
    )
    _check_size(path, labels)
    import highdicom as hd

    from medvl_engine.export.dicom.tissue_codes import class_codes, display_color
    from medvl_engine.export.regions import class_colors

    maker = result_maker(model if model is not None else result.model)
    algorithm = algorithm_with_parameters(maker, class_map_parameters(result, maker))
    colours = class_colors(len(mapped.names))
    segments = []
    for number, name in enumerate(mapped.names, start=1):
        codes = class_codes(name)
        segments.append(
            hd.seg.SegmentDescription(
                segment_number=number,
                segment_label=name[:64],
                segmented_property_category=codes.category,
                segmented_property_type=codes.type,
                algorithm_type="AUTOMATIC",
                algorithm_identification=algorithm,
                display_color=display_color(colours[number - 1]),
            )
        )
    masks = np.stack(
        [labels == number for number in range(1, len(mapped.names) + 1)], axis=-1
    )  # [rows, cols, K]
    what = f"tissue map: {', '.join(mapped.names)}"
    dataset = _segmentation(
        masks[None],
        "BINARY",
        segments,
        source,
        maker,
        corner,
        mapped.cell_size_level0,
        series_number=_SERIES_NUMBER,
        label="TISSUE_MAP",
        what=what,
    )
    return write_dataset(dataset, path, sources=[source.path])


def write_heatmap_segmentation(
    path: str | Path,
    heatmap: Heatmap,
    slide: Any,
    *,
    model: str | Path | None = None,
) -> Path:
    """Write ``heatmap`` of the DICOM WSI ``slide`` (an open Slide or its path) to ``path``
    as a FRACTIONAL Segmentation of one segment, the scores mapped to [0, 1] as the module
    docstring states; ``model`` defaults to the encoder recorded on the heatmap. Written
    atomically; a non-DICOM slide is refused with one sentence."""
    path = Path(path)
    source = require_dicom_slide(slide, path)
    require_highdicom()
    if model is None:
        model = (getattr(heatmap, "metadata", None) or {}).get("encoder") or None
    grid = np.asarray(heatmap.grid, np.float32)
    values, corner = grid_on_source(
        grid, heatmap.origin_level0, heatmap.cell_size_level0, source.size, np.nan
    )
    _check_size(path, values)
    import highdicom as hd

    from medvl_engine.export.dicom.tissue_codes import class_codes

    low, high = fraction_mapping(heatmap)
    with np.errstate(invalid="ignore"):
        fractions = np.clip((values.astype(np.float64) - low) / (high - low), 0.0, 1.0)
    fractions = np.nan_to_num(fractions, nan=0.0).astype(np.float32)
    prompt = str(getattr(heatmap, "prompt", "")) or "heatmap"
    mode = str(getattr(heatmap, "mode", "cosine"))
    maker = result_maker(model)
    shift = f"- {low:.6g}" if low >= 0 else f"+ {-low:.6g}"
    mapping = f"f = clip((s {shift}) / {high - low:.6g}, 0, 1); no patch: 0"
    parameters: dict[str, Any] = {
        "prompt": prompt,
        "mode": mode,
        "normalize": str(getattr(heatmap, "normalize", "none")),
        "fraction": f"{mapping}; s is the {mode} score",
        "score_range": [low, high],
    }
    if maker.notice:
        parameters["notice"] = maker.notice
    codes = class_codes(prompt)
    segment = hd.seg.SegmentDescription(
        segment_number=1,
        segment_label=prompt[:64],
        segmented_property_category=codes.category,
        segmented_property_type=codes.type,
        algorithm_type="AUTOMATIC",
        algorithm_identification=algorithm_with_parameters(maker, parameters),
    )
    segment.SegmentDescription = mapping[:64]
    dataset = _segmentation(
        fractions[None],
        "FRACTIONAL",
        [segment],
        source,
        maker,
        corner,
        heatmap.cell_size_level0,
        series_number=_HEATMAP_SERIES_NUMBER,
        label="HEATMAP",
        what=f"{mode} heatmap: {prompt}",
    )
    return write_dataset(dataset, path, sources=[source.path])


def _check_size(path: Path, values: np.ndarray) -> None:
    if values.size > _MAX_PIXELS:
        raise ExportError(
            f"Cannot write {path.name}: a map of {values.shape[1]} x {values.shape[0]} cells "
            "is too large for one Segmentation; use a larger patch step.",
            path,
        )


def class_map_parameters(result: SegmentResult, maker: ResultMaker) -> dict[str, Any]:
    """The algorithm's parameters: classes with their names, templates, thresholds."""
    mapped = result.class_map
    parameters: dict[str, Any] = {
        "classes": {name: list(result.classes.get(name, (name,))) for name in mapped.names},
        "templates": None if result.templates is None else list(result.templates),
        "min_confidence": mapped.min_confidence,
        "logit_scale": mapped.logit_scale,
        "cell_level0_px": mapped.cell_size_level0,
        "uncertain": "cells whose best class is below min_confidence; in no segment",
    }
    if maker.notice:
        parameters["notice"] = maker.notice
    return parameters


def algorithm_with_parameters(maker: ResultMaker, parameters: dict[str, Any]) -> Any:
    """An Algorithm Identification Sequence naming the model (family: AI) with
    ``parameters`` as one JSON object (ASCII) in its Algorithm Parameters."""
    import json

    sequence = maker.algorithm()
    text = json.dumps(parameters, ensure_ascii=True)
    if len(text) > _MAX_PARAMETERS:
        short = {k: v for k, v in parameters.items() if k != "templates"}
        short["templates"] = f"{len(parameters.get('templates') or [])} templates"
        text = json.dumps(short, ensure_ascii=True)[:_MAX_PARAMETERS]
    sequence[0].AlgorithmParameters = text
    return sequence


def _segmentation(
    pixels: np.ndarray,
    kind: str,
    segments: list[Any],
    source: DicomImageSource,
    maker: ResultMaker,
    corner: tuple[int, int],
    cell: int,
    *,
    series_number: int,
    label: str,
    what: str,
) -> Any:
    """One tiled Segmentation instance of ``pixels`` [1, rows, cols(, K)] on ``source``."""
    import highdicom as hd

    rows, cols = pixels.shape[1:3]
    dataset = hd.seg.Segmentation(
        source_images=[source.dataset],
        pixel_array=pixels,
        segmentation_type=kind,
        segment_descriptions=segments,
        **maker.instance(label=label, what=what, series_number=series_number),
        fractional_type="PROBABILITY" if kind == "FRACTIONAL" else None,
        **slide_placement(source, corner, cell),
        tile_pixel_array=True,
        tile_size=(min(_TILE, rows), min(_TILE, cols)),
        dimension_organization_type="TILED_SPARSE",
    )
    # General Image's Patient Orientation (Type 2C) is required of an image without Image
    # Orientation (Patient); a slide's frame has none, so it is present and empty.
    dataset.PatientOrientation = ""
    return dataset
