"""npe2 reader: whole-slide images, mammograms and DICOM results through the engine's openers.

``get_reader`` answers by file name only (napari calls it for every file a
user drops); the returned function opens the files with medvl_engine.io and
turns them into layers with the builders in ``_layers``. A DICOM result object (SR, GSPS,
parametric map, segmentation, bulk annotations) is told apart from an image by its SOP
Class and drawn on its source image when that is open in the viewer, else alone in source
px (``_dicom_result_layers``). A ``dicomweb://`` reference to a study or series on a PACS
opens its mammograms, slides and results (``_dicomweb_reader``). Files that turn out to be
unreadable, and servers that fail, give their one-sentence MedVLError as a notification.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from napari_medvl._layer_frame import LayerData
from napari_medvl._mammogram_layers import MAMMOGRAM_GAP_PX, MAMMOGRAM_KIND, mammogram_layers
from napari_medvl._notify import report_error
from napari_medvl._slide_layers import slide_layer

__all__ = ["READ_SUFFIXES", "get_reader", "read_paths"]

# Slides (SVS, NDPI, SCN, BIF, generic and OME TIFF, DICOM WSI, plain images) and mammograms
# (DICOM, PNG, TIFF): which one a file is, the engine decides when it is opened.
READ_SUFFIXES = (".svs", ".ndpi", ".tif", ".tiff", ".scn", ".bif", ".jpg", ".jpeg", ".png")
DICOM_SUFFIXES = (".dcm", ".dicom")
NULL_LAYER: list[LayerData] = [(None,)]  # type: ignore[list-item]


def _accepts(path: str) -> bool:
    """By name only: a readable suffix, a folder holding DICOM files (a DICOM WSI), or a
    ``dicomweb://`` reference."""
    from napari_medvl._dicomweb_reader import is_dicomweb_path

    if is_dicomweb_path(path):
        return True
    candidate = Path(path)
    if candidate.is_dir():
        return any(child.suffix.lower() in DICOM_SUFFIXES for child in candidate.iterdir())
    return candidate.suffix.lower() in READ_SUFFIXES + DICOM_SUFFIXES


def get_reader(path: str | Sequence[str]) -> Callable[..., list[LayerData]] | None:
    """Return ``read_paths`` when every path looks like a slide or mammogram, else None."""
    paths = [path] if isinstance(path, str | Path) else list(path)
    if not paths or not all(_accepts(str(p)) for p in paths):
        return None
    return read_paths


def _open(path: str) -> tuple[str, Any]:
    """Open one file or DICOM folder as ("slide", Slide) or ("mammogram", Mammogram).

    The engine decides which: DICOM by its Modality (SM = slide), other images by
    colour (grayscale = mammogram).
    """
    from medvl_engine.io.kind import detect_kind

    candidate = Path(path)
    if detect_kind(candidate) == "mammogram":
        from medvl_engine.io.mammo import open_mammogram

        return "mammogram", open_mammogram(candidate)
    from medvl_engine.io.slide import open_slide

    slide = open_slide(candidate)
    _probe(slide)
    return "slide", slide


def _probe(slide: Any) -> None:
    """Decode a corner of the coarsest level, the one napari draws first.

    Slides open lazily, so a file whose tiles cannot be decoded would otherwise only
    fail inside napari's drawing code, as a traceback; reading one tile here turns
    that into the engine's one-sentence CorruptFileError at open time.
    """
    level = len(slide.level_dimensions) - 1
    width, height = slide.level_dimensions[level]
    slide.read_region((0, 0), level, (min(width, 256), min(height, 256)))


def read_paths(path: str | Sequence[str], stack: bool = False) -> list[LayerData]:
    """Layers for every readable path: slides as multiscale images, mammograms side by side.

    A file that fails gives its MedVLError sentence as a notification and is
    skipped; when nothing could be read the null-layer sentinel is returned
    so napari does not add a second, generic error.
    """
    from medvl_engine.errors import MedVLError

    paths = [path] if isinstance(path, str | Path) else list(path)
    layers: list[LayerData] = []
    mammograms = []
    for item in paths:
        try:
            if _is_dicomweb(str(item)):
                layers.extend(_dicomweb_layers(str(item)))
                continue
            if _is_dicom_result(str(item)):
                layers.extend(_result_layers(str(item)))
                continue
            kind, opened = _open(str(item))
        except MedVLError as error:
            report_error(error)
            continue
        if kind == "mammogram":
            mammograms.append(opened)
        else:
            layers.append(slide_layer(opened, levels=_display_levels(opened)))
    if mammograms:
        layers.extend(mammogram_layers(mammograms, start_x=_free_x_in_current_viewer()))
    return layers or NULL_LAYER


def _is_dicomweb(path: str) -> bool:
    from napari_medvl._dicomweb_reader import is_dicomweb_path

    return is_dicomweb_path(path)


def _dicomweb_layers(url: str) -> list[LayerData]:
    """Layers of a study or series on a PACS, results on their images (see
    ``_dicomweb_reader``)."""
    import napari

    from napari_medvl._dicomweb_reader import read_dicomweb

    return read_dicomweb(url, napari.current_viewer(), start_x=_free_x_in_current_viewer())


def _is_dicom_result(path: str) -> bool:
    candidate = Path(path)
    if candidate.is_dir() or candidate.suffix.lower() not in DICOM_SUFFIXES:
        return False
    from medvl_engine.io.dicom_results import is_dicom_result

    return bool(is_dicom_result(candidate))


def _result_layers(path: str) -> list[LayerData]:
    """Layers of a DICOM result, each part on its source image's layer when that is open."""
    import napari

    from medvl_engine.io.dicom_results import read_dicom_result
    from napari_medvl._dicom_result_layers import dicom_result_layers

    return dicom_result_layers(read_dicom_result(path), napari.current_viewer(), read_dicom_result)


def _display_levels(slide: Any) -> list[Any] | None:
    """Levels that never decode on the GUI thread (see ``_slide_display``)."""
    from napari_medvl._slide_display import display_levels

    return display_levels(slide)


def _free_x_in_current_viewer() -> float:
    """World x right of the mammograms already open, plus a gap (0 without a viewer).

    napari hands a reader one file at a time, so views opened together or one
    after the other are placed side by side here rather than on top of each other.
    """
    import napari

    viewer = napari.current_viewer()
    if viewer is None:
        return 0.0
    right_edges = [
        layer.metadata["world_frame"]["offset_x"] + layer.data.shape[1]
        for layer in viewer.layers
        if layer.metadata.get("medvl_kind") == MAMMOGRAM_KIND
    ]
    return max(right_edges) + MAMMOGRAM_GAP_PX if right_edges else 0.0
