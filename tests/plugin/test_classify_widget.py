"""Slide classification dock in a real viewer (Xvfb): ranked classes, one attention layer."""

from __future__ import annotations

import npe2
import numpy as np
import pytest
from napari.utils.notifications import notification_manager

from medvl_engine.demo_models import DEMO_NOTICE
from napari_medvl._classify_job import ClassifyCache
from napari_medvl._classify_widget import ClassifyWidget

pytestmark = pytest.mark.gui


def _open_slide(viewer, path):
    npe2.PluginManager.instance().discover()
    return viewer.open(str(path), plugin="napari-medvl")[0]


def test_classification_ranks_the_classes_and_explains_each_on_the_slide(
    make_napari_viewer, qtbot, tmp_path, medvl_cache, small_slide, wait_for_runner
):
    from medvl_engine.heatmap import classify_slide
    from medvl_engine.prompts import CONCH_TEMPLATES, expand_classes

    viewer = make_napari_viewer()
    slide_layer = _open_slide(viewer, small_slide.path)
    widget = ClassifyWidget(viewer, cache=ClassifyCache(root=tmp_path / "features"))
    assert widget.slide_choice.value is slide_layer
    assert widget.classes.value.splitlines() == ["tumor", "stroma", "adipose"]  # demo preset
    widget.preset.value = "breast (SPIDER-C)"
    assert widget.classes.value.splitlines()[0] == "breast tumor"
    widget.classes.value = "tumor\nstroma\nadipose"
    widget.tau.value = 0.05
    assert widget.run() is not None
    wait_for_runner(qtbot, widget.runner, 300_000)
    assert widget.runner.last_error is None, widget.runner.last_error

    outcome = widget.last_outcome
    names = ["tumor", "stroma", "adipose"]
    # the dock reads each class as CONCH's prompt ensemble of its name, as `medvl classify` does
    reference = classify_slide(
        outcome.store,
        widget.cache.encoders["medvl-demo"],
        expand_classes({name: (name,) for name in names}, CONCH_TEMPLATES),
        0.05,
    )
    lines = widget.ranking.value.splitlines()
    assert [line.split()[1] for line in lines] == [name for name, _ in reference]
    assert [float(line.split()[-1]) for line in lines] == pytest.approx(
        [score for _, score in reference], abs=1e-4
    )
    predicted = reference[0][0]
    assert widget.controls.status.value.startswith(f"Predicted: {predicted} (tau_attn 0.05")
    assert widget.controls.status.value.endswith(f"({DEMO_NOTICE})")

    name = f"attention: {small_slide.path.name}"
    attention = viewer.layers[name]
    np.testing.assert_allclose(attention.data, outcome.heatmaps[predicted].grid)
    np.testing.assert_allclose(attention.scale, [112.0, 112.0])  # the slide's um frame
    assert attention.data.shape == (4, 6)
    # alpha sums to 1 over the patches, so alpha x N averages 1
    assert np.nanmean(outcome.heatmaps[predicted].scores) == pytest.approx(1.0, rel=1e-4)
    assert attention.colormap.name == "medvl viridis"
    # the colour bar names the class, the range and the demo notice
    assert widget.colorbar.title.text().startswith(f"attention of {predicted}  (attention)")
    assert DEMO_NOTICE in widget.colorbar.details.text()
    assert widget.colorbar.limits == pytest.approx(tuple(attention.contrast_limits))

    other = reference[-1][0]
    widget.shown_class.value = other
    assert viewer.layers[name] is attention  # the same layer, updated in place
    np.testing.assert_allclose(attention.data, outcome.heatmaps[other].grid)
    assert attention.metadata["prompt"] == f"attention of {other}"
    assert sum(layer.name.startswith("attention:") for layer in viewer.layers) == 1


def test_classification_without_enough_classes_says_what_to_do(make_napari_viewer, small_slide):
    viewer = make_napari_viewer()
    _open_slide(viewer, small_slide.path)
    widget = ClassifyWidget(viewer)
    widget.preset.value = "custom (type below)"
    widget.classes.value = "tumor\n\ntumor"
    before = len(notification_manager.records)
    assert widget.run() is None
    assert "at least two classes" in notification_manager.records[before].message
    assert not widget.runner.running


def test_docked_dock_keeps_its_class_list_when_layers_are_added(
    make_napari_viewer, qtbot, tmp_path, medvl_cache, small_slide, wait_for_runner
):
    viewer = make_napari_viewer()
    _open_slide(viewer, small_slide.path)
    widget = ClassifyWidget(viewer, cache=ClassifyCache(root=tmp_path / "features"))
    viewer.window.add_dock_widget(widget, name="Slide classification")
    widget.classes.value = "tumor\nstroma\nadipose"
    assert widget.run() is not None
    wait_for_runner(qtbot, widget.runner, 300_000)
    assert widget.runner.last_error is None, widget.runner.last_error
    ranked = [name for name, _ in widget.last_outcome.classification.ranked]
    # the attention layer was added by the run; napari then resets a docked widget's choices
    assert [c for c in widget.shown_class.choices if c is not None] == ranked
    widget.shown_class.value = ranked[1]
    viewer.add_image(np.zeros((8, 8), dtype=np.float32), name="another layer")
    assert [c for c in widget.shown_class.choices if c is not None] == ranked
    assert widget.shown_class.value == ranked[1]
    attention = viewer.layers[f"attention: {small_slide.path.name}"]
    np.testing.assert_allclose(attention.data, widget.last_outcome.heatmaps[ranked[1]].grid)
