"""Dock widgets in a real viewer (Xvfb): heatmap on a synthetic slide, cancel, bad input."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from napari.utils.notifications import notification_manager
from PIL import Image

from medvl_engine.demo_models import DEMO_NOTICE
from napari_medvl._export_job import exportable
from napari_medvl._export_widget import ExportWidget
from napari_medvl._heatmap_job import FeatureCache
from napari_medvl._heatmap_overlay import PENDING_KIND
from napari_medvl._heatmap_widget import HeatmapWidget

pytestmark = pytest.mark.gui
WORKER_TIMEOUT_MS = 120_000


def _open_slide(viewer, path):
    import npe2

    npe2.PluginManager.instance().discover()
    return viewer.open(str(path), plugin="napari-medvl")[0]


def _assert_no_heatmap_shown(viewer):
    """No result layer, and the overlay layers the dock added ahead of results show nothing."""
    assert not any(layer.metadata.get("medvl_kind") == "heatmap" for layer in viewer.layers)
    for layer in viewer.layers:
        if layer.name.startswith(("heatmap", "top patches")):
            assert layer.metadata.get("medvl_kind") == PENDING_KIND, layer.name
            if layer.name.startswith("heatmap"):
                assert np.isnan(layer.data).all()
            else:
                assert layer.opacity == 0.0


@pytest.fixture(scope="session")
def run_and_wait(wait_for_runner):
    """``run_and_wait(qtbot, widget)`` runs the dock's job and waits until it has ended."""

    def _run_and_wait(qtbot, widget):
        worker = widget.run()
        assert worker is not None
        wait_for_runner(qtbot, widget.runner, WORKER_TIMEOUT_MS)
        return worker

    return _run_and_wait


def test_heatmap_widget_adds_heatmap_and_top_patches_in_the_slide_frame(
    make_napari_viewer,
    qtbot,
    tmp_path,
    medvl_cache,
    small_slide,
    run_and_wait,
):
    viewer = make_napari_viewer()
    slide_layer = _open_slide(viewer, small_slide.path)
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"))
    assert widget.slide_choice.value is slide_layer
    widget.prompts.value = "tumor"
    widget.top_n.value = 3
    widget.blending.value = "additive"
    run_and_wait(qtbot, widget)
    assert widget.runner.last_error is None
    assert widget.controls.status.value == "Features extracted; new prompts are instant."
    assert widget.controls.notice.value == DEMO_NOTICE

    heat = viewer.layers["heatmap: tumor"]
    # 224 px patches at 0.5 um/px on a 0.5 um/px slide: one cell = 224 level-0 px = 112 um
    np.testing.assert_allclose(heat.scale, [112.0, 112.0])
    np.testing.assert_allclose(heat.translate, [56.0, 56.0])
    assert heat.blending == "additive"
    assert heat.data.shape == (4, 6)  # 896 / 224 rows, 1344 / 224 columns
    boxes = viewer.layers["top patches: tumor"]
    assert len(boxes.data) == 3
    # every top patch lies on a patch of the 224 px grid, in um
    corners = np.asarray(boxes.data[0])
    np.testing.assert_allclose(np.ptp(corners, axis=0), [112.0, 112.0])
    assert np.allclose(corners % 112.0, 0.0)
    # the best box sits mostly on tumor in the ground truth
    y0, x0 = (corners.min(axis=0) / 0.5).astype(int)  # level-0 px
    d = small_slide.label_downsample
    patch_labels = small_slide.label_map[y0 // d : (y0 + 224) // d, x0 // d : (x0 + 224) // d]
    assert np.mean(patch_labels == 1) > 0.5

    # a new prompt reuses the loaded features: no extraction, and the same layer
    layer_count = len(viewer.layers)
    widget.prompts.value = "adipose tissue"
    run_and_wait(qtbot, widget)
    assert not widget.last_outcome.extracted
    assert viewer.layers["heatmap: adipose tissue"] is heat
    assert "heatmap: tumor" not in viewer.layers
    assert len(viewer.layers) == layer_count
    assert widget.controls.status.value == "Done."
    # the history shows the tumor map again, from the kept scores
    entries = [e for e in widget.history_choice.choices if e is not None]
    assert sorted(e.label for e in entries) == ["adipose tissue (cosine)", "tumor (cosine)"]
    (tumor_entry,) = [e for e in entries if e.label == "tumor (cosine)"]
    widget.history_choice.value = tumor_entry
    assert viewer.layers["heatmap: tumor"] is heat
    assert len(viewer.layers) == layer_count

    # the export dock writes the chosen heatmap through the engine's exporters
    exporter = ExportWidget(viewer)
    exporter.layer_choice.reset_choices()
    exporter.layer_choice.value = viewer.layers["heatmap: tumor"]
    for name in ("tumor.geojson", "tumor.png"):
        exporter.path.value = tmp_path / name
        run_and_wait(qtbot, exporter)
        assert exporter.runner.last_error is None, exporter.runner.last_error
        assert exporter.last_written == tmp_path / name
    collection = json.loads((tmp_path / "tumor.geojson").read_text())
    tiles = [f for f in collection["features"] if f["geometry"]["type"] == "Polygon"]
    assert len(tiles) >= 18 + 3  # one tile per patch plus the three top patches
    with Image.open(tmp_path / "tumor.png") as image:
        assert image.mode == "RGB"

    before = len(notification_manager.records)
    exporter.path.value = tmp_path / "tumor.docx"
    run_and_wait(qtbot, exporter)
    assert "unknown file type '.docx'" in notification_manager.records[before].message
    assert not (tmp_path / "tumor.docx").exists()


def test_cancel_stops_the_job_without_adding_layers(
    make_napari_viewer,
    qtbot,
    tmp_path,
    medvl_cache,
    small_slide,
    wait_for_runner,
):
    viewer = make_napari_viewer()
    _open_slide(viewer, small_slide.path)
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"))
    worker = widget.run()
    widget.controls.cancel_button.changed.emit(True)
    assert worker.abort_requested
    qtbot.waitUntil(lambda: not worker.is_running, timeout=WORKER_TIMEOUT_MS)
    qtbot.wait(100)
    _assert_no_heatmap_shown(viewer)
    assert widget.controls.status.value == "Cancelled."
    assert not widget.runner.running

    # a new request replaces a running one: only the last prompt's heatmap arrives
    first = widget.run()
    widget.prompts.value = "stroma"
    second = widget.run()
    assert first.abort_requested and not second.abort_requested
    wait_for_runner(qtbot, widget.runner, WORKER_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not first.is_running, timeout=WORKER_TIMEOUT_MS)
    heatmaps = [layer.name for layer in viewer.layers if layer.name.startswith("heatmap")]
    assert heatmaps == ["heatmap: stroma"]


def test_overlay_layers_wait_empty_before_run_and_the_first_result_only_fills_them(
    make_napari_viewer, qtbot, tmp_path, medvl_cache, small_slide, run_and_wait
):
    """Adding a layer costs napari 0.3 - 0.8 s on the GUI thread: the dock adds the slide's
    overlay layers when it binds the slide, so a result never adds one."""
    viewer = make_napari_viewer()
    slide_layer = _open_slide(viewer, small_slide.path)
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"))
    widget.top_n.value = 3
    qtbot.waitUntil(lambda: len(viewer.layers) == 3, timeout=10_000)
    _, image, boxes = viewer.layers
    assert type(image).__name__ == "Image" and type(boxes).__name__ == "Shapes"
    _assert_no_heatmap_shown(viewer)
    # in the slide's frame (um), one transparent level-0 px at its origin
    np.testing.assert_allclose(image.scale, [0.5, 0.5])
    assert image.units == slide_layer.units
    assert not exportable(image.metadata) and not widget.colorbar.showing
    # its label (hidden for the layer's first draw) has made napari draw every character of
    # a rank label
    qtbot.waitUntil(lambda: boxes.features["rank"][0] == 1023456789, timeout=10_000)
    assert boxes.text.visible
    assert not exportable(boxes.metadata)

    # a mode chosen before any Run takes the waiting layers over: no layer is added
    widget.mode.value = "contrast"
    qtbot.wait(200)
    assert list(viewer.layers) == [slide_layer, image, boxes]
    assert image.metadata["overlay_key"].endswith("|contrast")
    assert image.colormap.name == "medvl blue-white-red"
    widget.mode.value = "cosine"
    qtbot.wait(200)
    assert image.colormap.name == "medvl viridis"

    added = []
    viewer.layers.events.inserted.connect(lambda event: added.append(event.value))
    run_and_wait(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error
    assert added == []
    assert viewer.layers["heatmap: tumor"] is image
    assert viewer.layers["top patches: tumor"] is boxes
    assert image.metadata["medvl_kind"] == "heatmap" and exportable(image.metadata)
    assert image.data.shape == (4, 6) and np.isfinite(image.data).any()
    np.testing.assert_allclose(image.scale, [112.0, 112.0])
    assert len(boxes.data) == 3 and boxes.opacity == pytest.approx(0.7)
    assert sorted(boxes.features["rank"]) == [1, 2, 3] and boxes.text.visible
    assert widget.colorbar.showing

    # another mode's first result gets its own layer, added when the mode is chosen
    widget.mode.value = "softmax"
    widget.prompts.value = "tumor; stroma"
    qtbot.waitUntil(lambda: len(viewer.layers) == 5, timeout=10_000)
    run_and_wait(qtbot, widget)
    assert added[:2] == [viewer.layers[3], viewer.layers[4]] and len(added) == 2
    assert viewer.layers[3].name == "heatmap: tumor vs stroma"


def test_unknown_model_gives_a_notification_not_an_exception(
    make_napari_viewer,
    qtbot,
    tmp_path,
    small_slide,
    run_and_wait,
):
    viewer = make_napari_viewer()
    _open_slide(viewer, small_slide.path)
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"))
    widget.model.value = str(tmp_path / "no-such-model")
    before = len(notification_manager.records)
    run_and_wait(qtbot, widget)
    qtbot.wait(50)
    messages = [record.message for record in notification_manager.records[before:]]
    assert len(messages) == 1
    assert "no-such-model" in messages[0]
    assert "Traceback" not in messages[0]
    _assert_no_heatmap_shown(viewer)


def test_incomplete_input_is_reported_before_any_work(make_napari_viewer, small_slide):
    viewer = make_napari_viewer()
    widget = HeatmapWidget(viewer)
    before = len(notification_manager.records)
    assert widget.run() is None
    assert "No slide layer" in notification_manager.records[before].message

    _open_slide(viewer, small_slide.path)
    for mode, prompts, expected in (
        ("contrast", "tumor", "exactly two prompts"),
        ("softmax", "tumor", "two or more prompts"),
        ("cosine", " ; ", "prompt is empty"),
    ):
        widget.mode.value = mode
        widget.prompts.value = prompts
        before = len(notification_manager.records)
        assert widget.run() is None
        assert expected in notification_manager.records[before].message
    assert not widget.runner.running


def test_heatmap_is_visible_over_the_tumor_in_a_screenshot(
    make_napari_viewer,
    qtbot,
    tmp_path,
    medvl_cache,
    small_slide,
    run_and_wait,
):
    viewer = make_napari_viewer(show=True)
    _open_slide(viewer, small_slide.path)
    # docked the way a user docks it: from the plugin's manifest, through napari's viewer proxy
    _, widget = viewer.window.add_plugin_dock_widget("napari-medvl", "Text prompt heatmap")
    assert isinstance(widget, HeatmapWidget)
    widget.cache = FeatureCache(root=tmp_path / "features")
    widget.top_n.value = 0
    qtbot.wait(300)  # let the window lay out the new dock before the first screenshot
    with warnings.catch_warnings():
        # no private napari access from the plugin (other libraries' warnings stay warnings:
        # the job imports transformers in its thread while this filter is on)
        warnings.filterwarnings("error", message="Private attribute access")
        run_and_wait(qtbot, widget)
    assert widget.runner.last_error is None, widget.runner.last_error
    heat = viewer.layers["heatmap: tumor"]
    heat.visible = False
    viewer.reset_view()
    plain = viewer.screenshot(canvas_only=True, flash=False)
    heat.visible = True
    widget.opacity.value = 0.6
    assert heat.opacity == pytest.approx(0.6)
    overlaid = viewer.screenshot(canvas_only=True, flash=False)
    assert overlaid.shape == plain.shape

    # the hottest cell that is tumor in the ground truth, as a canvas pixel
    grid = np.nan_to_num(heat.data, nan=-np.inf)
    row, col = np.unravel_index(np.argmax(grid), grid.shape)
    d = small_slide.label_downsample
    labels = small_slide.label_map[
        row * 224 // d : (row + 1) * 224 // d, col * 224 // d : (col + 1) * 224 // d
    ]
    assert np.mean(labels == 1) > 0.5
    world = np.asarray(heat.translate) + np.array([row, col]) * np.asarray(heat.scale)
    centre = np.asarray(viewer.camera.center[-2:])
    canvas = np.array(plain.shape[:2]) / 2.0
    y, x = np.round((world - centre) * viewer.camera.zoom + canvas).astype(int)
    patch_plain = plain[y - 3 : y + 4, x - 3 : x + 4, :3].astype(float).mean(axis=(0, 1))
    patch_over = overlaid[y - 3 : y + 4, x - 3 : x + 4, :3].astype(float).mean(axis=(0, 1))
    assert np.abs(patch_over - patch_plain).max() > 40, (patch_plain, patch_over)

    # "hide below" a threshold above the hottest cell: that cell turns transparent on screen
    widget.threshold.value = float(np.nanmax(heat.data)) + 0.01
    widget.hide_below.value = True
    assert viewer.layers["heatmap: tumor"] is heat
    assert np.isnan(heat.data).all()
    hidden = viewer.screenshot(canvas_only=True, flash=False)
    patch_hidden = hidden[y - 3 : y + 4, x - 3 : x + 4, :3].astype(float).mean(axis=(0, 1))
    assert np.abs(patch_hidden - patch_plain).max() < 3, (patch_plain, patch_hidden)


def test_heatmap_dock_takes_a_trident_h5_instead_of_extracting(
    make_napari_viewer, qtbot, tmp_path, medvl_cache, small_slide, run_and_wait
):
    import h5py

    from medvl_engine.features import FeatureStore

    viewer = make_napari_viewer()
    _open_slide(viewer, small_slide.path)
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "extracted"))
    widget.prompts.value = "tumor"
    run_and_wait(qtbot, widget)
    extracted_heat = np.array(viewer.layers["heatmap: tumor"].data)
    (store_path,) = (tmp_path / "extracted").glob("*.zarr")
    store = FeatureStore.open(store_path)
    h5_path = tmp_path / "trident" / "slide.h5"
    h5_path.parent.mkdir()
    with h5py.File(h5_path, "w") as handle:
        handle["features"] = store.features
        handle["coords"] = store.coords.astype(np.int64)
        handle["coords"].attrs["patch_size_level0"] = 224

    viewer.layers.remove("heatmap: tumor")
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "fresh"))
    widget.prompts.value = "tumor"
    widget.features.value = h5_path
    assert widget.request().features == h5_path
    run_and_wait(qtbot, widget)
    assert widget.runner.last_error is None
    # read from the .h5, nothing extracted
    assert widget.controls.status.value == "Done."
    assert not list((tmp_path / "fresh").glob("*.zarr"))
    np.testing.assert_allclose(viewer.layers["heatmap: tumor"].data, extracted_heat, atol=1e-6)
