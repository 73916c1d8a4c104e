"""Layers of a study or series on a DICOMweb server (``dicomweb://HOST:PORT/ROOT/studies/UID``).

The engine sorts what is there (:func:`medvl_engine.io.dicomweb.remote_contents`) and
retrieves the mammograms and result objects into its cache; the layers are built by the same
builders as for local files. Mammograms are opened by the local reader (same windowing) and
hung as in a reading room (R CC | L CC over R MLO | L MLO, chest walls on the midline). A
whole-slide series opens lazily (:func:`medvl_engine.io.dicomweb.open_remote_slide`): only its
headers and coarsest level are fetched during the reader call, finer levels when the viewer
first shows them, in the slide's decode worker, never on the GUI thread. Result objects are
drawn on the images of the same call, or on images already open in the viewer.
"""

from __future__ import annotations

from typing import Any

from napari_medvl._layer_frame import LayerData
from napari_medvl._mammogram_layers import mammogram_layers
from napari_medvl._slide_layers import slide_layer

__all__ = ["DICOMWEB_SCHEMES", "hang_layer_data", "is_dicomweb_path", "read_dicomweb"]

DICOMWEB_SCHEMES = ("dicomweb://", "dicomwebs://")
"""What napari hands the reader for a PACS reference (http URLs are left to other readers)."""


def is_dicomweb_path(path: str) -> bool:
    """True for a ``dicomweb://`` or ``dicomwebs://`` reference (by its scheme only)."""
    return str(path).lower().startswith(DICOMWEB_SCHEMES)


def hang_layer_data(layers: list[LayerData]) -> list[LayerData]:
    """Mammogram layers moved into the four-view hanging (see ``_mammo_hanging``); views with
    no slot (unknown laterality or view, a slot already taken) stay where they were."""
    from medvl_engine.io.mammo import chest_wall_side, view_family
    from napari_medvl._mammo_hanging import HungView, hanging_frames

    views: dict[tuple[str, str], HungView] = {}
    for index, (pixels, kwargs, _) in enumerate(layers):
        metadata = kwargs["metadata"]
        laterality, view = metadata.get("laterality"), view_family(metadata.get("view"))
        if laterality not in ("L", "R") or view is None:
            continue
        side = chest_wall_side(pixels, laterality)
        metadata["chest_wall"] = side
        height, width = pixels.shape[:2]
        views[(laterality, view)] = HungView(index, laterality, view, height, width, side)
    for index, frame in hanging_frames(list(views.values())).items():
        kwargs = layers[index][1]
        kwargs.update(frame.image_transform())
        kwargs["metadata"]["world_frame"] = frame.as_dict()
    return layers


def _slide_layers(references: list[Any], timeout: float) -> list[LayerData]:
    """One lazy multiscale layer per whole-slide series, in micrometres when the slide says."""
    from medvl_engine.io.dicomweb import open_remote_slide_and_source
    from napari_medvl._slide_display import display_levels

    layers = []
    for reference in references:
        slide, source = open_remote_slide_and_source(reference, timeout)
        # decode a corner of the coarsest level (already cached) now, so that undecodable
        # tiles are the engine's one sentence here rather than a traceback in napari's drawing
        width, height = slide.level_dimensions[-1]
        slide.read_region((0, 0), slide.level_count - 1, (min(width, 256), min(height, 256)))
        description = str(source.dataset.get("SeriesDescription", "") or "slide")
        data, kwargs, kind = slide_layer(
            slide, name=f"{description} ({reference.server})", levels=display_levels(slide)
        )
        kwargs["metadata"].update({"dicomweb": reference.text(), "dicom_image_source": source})
        layers.append((data, kwargs, kind))
    return layers


def read_dicomweb(url: str, viewer: Any = None, start_x: float = 0.0) -> list[LayerData]:
    """Layers of the study, series or instance at ``url``: mammograms hung, slides lazy,
    results on their images (those of this call first, then those open in ``viewer``).

    Raises the engine's DicomWebError subclasses (one sentence) for a bad reference, a server
    that is down or refuses, UIDs it does not know, and a study with nothing to show.
    """
    from medvl_engine.io.dicom_results import read_dicom_result
    from medvl_engine.io.dicomweb import DEFAULT_TIMEOUT_SECONDS, remote_contents
    from medvl_engine.io.mammo import open_mammogram
    from napari_medvl._dicom_result_layers import dicom_result_layers

    contents = remote_contents(url, DEFAULT_TIMEOUT_SECONDS)
    layers: list[LayerData] = []
    if contents.mammograms:
        mammograms = [open_mammogram(path) for path in contents.mammograms]
        layers.extend(hang_layer_data(mammogram_layers(mammograms, start_x=start_x)))
    layers.extend(_slide_layers(contents.slides, DEFAULT_TIMEOUT_SECONDS))
    images = list(layers)
    for path in contents.results:
        result = read_dicom_result(path)
        # the cached file is named by its UID: the layers are named by the result's kind
        layers.extend(
            dicom_result_layers(result, viewer, read_dicom_result, images, name=result.kind)
        )
    return layers
