"""Show a ``medvl demo`` scene in napari: slide + heatmap + top patches, mammograms + TopK.

The docks are given paths, not the scene's loaded objects: the heatmap dock gets the model's
name or folder and the feature store the demo wrote (``scene.features_path``), so its new
prompts run where its jobs run, in the model process (:mod:`._heatmap_job`), which reads
that store instead of extracting again. Only a scene whose store was not written to disk
hands its loaded encoder and store to the dock, whose jobs then run in threads in napari's
process (the model process cannot be given objects).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from napari_medvl._heatmap_layers import heatmap_layers
from napari_medvl._layer_frame import LayerData, WorldFrame
from napari_medvl._mammogram_layers import mammogram_layers
from napari_medvl._slide_layers import slide_layer

__all__ = ["dock_heatmap_widget", "save_screenshots", "scene_layers", "show_scene"]

SETTLE_MS = 300  # event-loop time given to layout and painting before a screenshot
SCREENSHOT_WINDOW = (1440, 900)  # main-window size of the saved screenshots (width, height)


def _save_png(image: Any, temporary: Path) -> None:
    image.save(temporary, "PNG")


def scene_layers(scene: Any) -> tuple[list[LayerData], list[LayerData]]:
    """(slide layers, mammogram layers) for a DemoScene, overlays included where computed.

    The heatmap is the overlay of its slide and mode (``overlay_key``), so the heatmap dock
    updates it in place instead of adding layers of its own."""
    from medvl_engine.io.slide import open_slide
    from napari_medvl._heatmap_overlay import overlay_key
    from napari_medvl._mammo_layers import readable_topk_layers

    slide_data = slide_layer(open_slide(scene.slide_path), name="synthetic H&E")
    slide_frame = WorldFrame.from_dict(slide_data[1]["metadata"]["world_frame"])
    slide_layers = [slide_data]
    if scene.heatmap is not None:
        slide_layers.extend(
            heatmap_layers(
                scene.heatmap,
                scene.top_patches,
                slide_frame,
                scene.prompt,
                store=scene.feature_store,
                slide=slide_data[1]["metadata"]["slide"],
                model=scene.model,
                overlay_key=overlay_key(slide_data[1]["metadata"]["path"], scene.heatmap.mode),
            )
        )
    mammo_layers: list[LayerData] = []
    if scene.cc_path is not None and scene.mlo_path is not None:
        from medvl_engine.io.mammo import open_mammogram

        mammo_layers = mammogram_layers(
            [open_mammogram(scene.cc_path), open_mammogram(scene.mlo_path)]
        )
        if scene.topk is not None:
            frames = {
                view: WorldFrame.from_dict(kwargs["metadata"]["world_frame"])
                for view, (_, kwargs, _) in zip(("CC", "MLO"), mammo_layers, strict=True)
            }
            sources = {"CC": str(scene.cc_path), "MLO": str(scene.mlo_path)}
            mammo_layers.extend(  # as the TopK dock draws its results
                readable_topk_layers(
                    scene.topk,
                    scene.breast,
                    frames,
                    scene.laterality,
                    sources=sources,
                    model=scene.topk_model,
                    run=scene.topk_run,
                )
            )
    return slide_layers, mammo_layers


def dock_heatmap_widget(viewer: Any, scene: Any) -> Any:
    """The heatmap dock for the scene's slide (the viewer's first layer), not yet docked: new
    prompts reuse the demo's features at once. A store on disk is named in the dock's
    features field (the model process reads it); a store without a path, with the loaded
    encoder, is kept in the dock's cache (its jobs then run in threads, see the module
    docstring)."""
    from napari_medvl._heatmap_widget import HeatmapWidget

    widget = HeatmapWidget(viewer)
    widget.model.value = str(scene.model)
    written = scene.features_path
    if written is not None and Path(written).exists():
        widget.features.value = Path(written)
    elif scene.feature_store is not None:
        slide = viewer.layers[0].metadata["slide"]
        widget.cache.remember(slide, scene.model, scene.encoder, scene.feature_store)
    return widget


def show_scene(scene: Any, run: bool = True) -> list[Any]:
    """Open one napari viewer per modality (slide, mammograms) with the scene's layers.

    Docks the heatmap and TopK widgets so the user can keep asking. Blocks in
    ``napari.run()`` unless ``run`` is False; returns the viewers.
    """
    import napari
    from napari.layers import Layer

    from napari_medvl._export_widget import ExportWidget
    from napari_medvl._topk_widget import TopKWidget

    slide_layers, mammo_layers = scene_layers(scene)
    viewers = []
    slide_viewer = napari.Viewer(title="MedVL demo: slide")
    for data in slide_layers:
        slide_viewer.add_layer(Layer.create(*data))
    heatmap_widget = dock_heatmap_widget(slide_viewer, scene)
    slide_viewer.window.add_dock_widget(heatmap_widget, name="Text prompt heatmap")
    slide_viewer.window.add_dock_widget(ExportWidget(slide_viewer), name="Export overlays")
    viewers.append(slide_viewer)
    if mammo_layers:
        mammo_viewer = napari.Viewer(title="MedVL demo: mammograms")
        for data in mammo_layers:
            mammo_viewer.add_layer(Layer.create(*data))
        topk_widget = TopKWidget(mammo_viewer)
        topk_widget.model.value = scene.topk_model
        if scene.topk is not None and scene.topk.k is not None:  # the K the scene ran at
            topk_widget.k.value = int(scene.topk.k)
        mammo_viewer.window.add_dock_widget(topk_widget, name="Mammogram TopK")
        mammo_viewer.window.add_dock_widget(ExportWidget(mammo_viewer), name="Export overlays")
        viewers.append(mammo_viewer)
    for note in scene.notes:
        from napari.utils.notifications import show_info

        show_info(note)
    if run:
        napari.run()
    return viewers


def save_screenshots(viewers: list[Any], out: Any) -> list[Any]:
    """Save each viewer's window as ``viewer-<n>.png`` in ``out``, close it, return the paths."""
    from PIL import Image
    from qtpy.QtTest import QTest

    from medvl_engine import atomic_write

    written = []
    for number, viewer in enumerate(viewers, start=1):
        viewer.window.resize(*SCREENSHOT_WINDOW)
        QTest.qWait(SETTLE_MS)  # type: ignore[call-arg,arg-type]  # a static method
        viewer.reset_view()
        # the docks laid out and painted, colour bars included
        QTest.qWait(SETTLE_MS)  # type: ignore[call-arg,arg-type]  # a static method
        pixels = viewer.screenshot(canvas_only=False, flash=False)
        image = Image.fromarray(pixels[..., :3])
        path = Path(out) / f"viewer-{number}.png"
        written.append(atomic_write(path, partial(_save_png, image)))
        viewer.close()
    return written
