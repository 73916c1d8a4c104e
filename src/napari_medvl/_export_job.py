"""Export an overlay layer to a file through the engine's exporters (no Qt here).

Heatmap layers (made by the heatmap widget or the demo) keep the engine Heatmap,
its feature store, the slide and the top patches in their metadata; TopK layers
keep the TopKResult, the breast image, the view files and the run (its plain summary,
TopKRunSummary, or the demo's BreastTopK), from which the DICOM report is written as
``medvl topk`` writes it; no model is needed here. The file type follows
the suffix; every write is atomic (the engine writes a temporary file and renames).
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

from napari_medvl._progress import Progress

__all__ = [
    "HEATMAP_SUFFIXES",
    "TOPK_SUFFIXES",
    "exportable",
    "export_job",
    "export_layer_metadata",
    "proposed_export_path",
]

HEATMAP_SUFFIXES = (".png", ".jpg", ".geojson", ".csv", ".tiff", ".npz")
TOPK_SUFFIXES = (".png", ".geojson", ".csv", ".dcm")


def exportable(metadata: dict[str, Any]) -> bool:
    """True for layers this exporter can write: engine heatmaps and TopK overlays."""
    kind = metadata.get("medvl_kind")
    if kind == "heatmap":
        return metadata.get("heatmap") is not None and metadata.get("feature_store") is not None
    return kind == "topk" and metadata.get("topk_result") is not None


def export_layer_metadata(metadata: dict[str, Any], path: str | Path) -> Path:
    """Write the overlay described by a layer's ``metadata`` to ``path``; returns the path."""
    from medvl_engine.errors import ExportError

    path = Path(path)
    suffix = path.suffix.lower()
    kind = metadata.get("medvl_kind")
    allowed = HEATMAP_SUFFIXES if kind == "heatmap" else TOPK_SUFFIXES
    if not exportable(metadata):
        raise ExportError(
            f"Cannot export to {path.name}: the chosen layer is not a MedVL heatmap or TopK "
            "overlay; choose one made by the heatmap or TopK widget.",
            path,
        )
    if suffix not in allowed:
        raise ExportError(
            f"Cannot export to {path.name}: unknown file type '{path.suffix}' for this layer; "
            f"use one of {', '.join(allowed)}.",
            path,
        )
    _refuse_output_over_inputs(metadata, path)
    if kind == "heatmap":
        from medvl_engine.export import export_heatmap

        boxes, scores = metadata.get("top_patches") or (None, None)
        exported: Path = export_heatmap(
            path,
            metadata["heatmap"],
            metadata["feature_store"],
            slide=metadata.get("slide"),
            boxes=boxes,
            box_scores=scores,
            model=metadata.get("model"),
        )
        return exported
    if suffix == ".dcm":
        return _export_topk_report(metadata, path)
    from medvl_engine.export import write_topk_outputs
    from medvl_engine.export.topk import TOPK_PNG_SIDE

    sources = {view: Path(file) for view, file in metadata.get("sources", {}).items() if file}
    breast = metadata["breast"]
    written = write_topk_outputs(
        metadata["topk_result"],
        breast.image,
        sources,
        [path],
        model=metadata.get("model"),
        display_side=TOPK_PNG_SIDE,
    )
    return Path(written[0])


def _export_topk_report(metadata: dict[str, Any], path: Path) -> Path:
    """The TopK run of a layer as a DICOM Structured Report (TID 1500), as ``medvl topk
    --out result.dcm`` writes it: boxes on their source views, readouts, the model (the
    layer's ``model``, else the one the run names)."""
    from medvl_engine.errors import ExportError
    from medvl_engine.export.dicom import require_highdicom, write_topk_sr

    run = metadata.get("topk_run")
    if run is None:
        raise ExportError(
            f"Cannot export to {path.name}: this TopK layer does not hold the run its DICOM "
            "report needs; run TopK again from the dock, then export.",
            path,
        )
    require_highdicom()
    model = metadata.get("model") or getattr(run, "model_name", None)
    return Path(write_topk_sr(run, path, model_name=model))


def _input_of(name: str, metadata: dict[str, Any]) -> Path | None:
    """The image a layer was made from: the slide, or the mammogram view its name names
    (else the first view)."""
    slide_path = getattr(metadata.get("slide"), "path", None)
    if slide_path:
        return Path(str(slide_path))
    sources = {view: file for view, file in (metadata.get("sources") or {}).items() if file}
    named = [file for view, file in sources.items() if view in name.split()]
    chosen = named[0] if named else next(iter(sources.values()), None)
    return Path(str(chosen)) if chosen else None


def proposed_export_path(name: str, metadata: dict[str, Any], suffix: str = ".geojson") -> Path:
    """Where to export layer ``name``: beside its input image, named after the image and the
    layer ("slide-heatmap-tumor.geojson"); in the home folder when the layer names no image
    file. Never the input itself."""
    import re

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "overlay"
    source = _input_of(name, metadata)
    if source is None:
        return Path.home() / f"{slug}{suffix}"
    stem = source.name if source.is_dir() else source.stem  # a DICOM folder: beside it
    return source.parent / f"{stem}-{slug}{suffix}"  # longer than the input's name


def _refuse_output_over_inputs(metadata: dict[str, Any], path: Path) -> None:
    """An export never replaces the slide, the mammogram views or the feature store it shows."""
    from medvl_engine.export.input_guard import check_outputs_spare_inputs, dependent_outputs

    inputs = [getattr(metadata.get("slide"), "path", None)]
    inputs.append(getattr(metadata.get("feature_store"), "path", None))
    inputs.extend(file for file in (metadata.get("sources") or {}).values() if file)
    written = dependent_outputs(path) if metadata.get("medvl_kind") == "topk" else [path]
    check_outputs_spare_inputs(written, inputs)


def export_job(
    metadata: dict[str, Any], path: str | Path, cancel: threading.Event | None = None
) -> Generator[Progress, None, Path]:
    """Generator job around :func:`export_layer_metadata` for the widget's worker."""
    yield Progress(f"writing {Path(path).name}")
    return export_layer_metadata(metadata, path)
