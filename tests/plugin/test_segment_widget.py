"""Segment-by-prompts dock in a real viewer (Xvfb): one tissue-map labels layer and the areas."""

from __future__ import annotations

import npe2
import numpy as np
import pytest

from medvl_engine.demo_models import DEMO_NOTICE
from medvl_engine.export.regions import class_colors
from napari_medvl._segment_job import SegmentCache
from napari_medvl._segment_widget import SegmentWidget

pytestmark = [pytest.mark.gui, pytest.mark.slow]  # a model run in a viewer: tens of seconds


def test_segmentation_maps_the_slide_and_lists_areas(
    make_napari_viewer, qtbot, medvl_cache, small_slide, wait_for_runner
):
    from medvl_engine.pathology import segment

    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    slide_layer = viewer.open(str(small_slide.path), plugin="napari-medvl")[0]
    widget = SegmentWidget(viewer, cache=SegmentCache())
    assert widget.slide_choice.value is slide_layer
    # the demo preset, with its synonyms, as `medvl segment --class` takes them
    assert widget.class_lines()[0] == "tumor=carcinoma, malignant epithelium, tumour"
    widget.classes.value = "tumor=carcinoma\nstroma\nadipose=adipose tissue, fat"
    widget.templates.value = "none"
    assert widget.run() is not None
    wait_for_runner(qtbot, widget.runner, 300_000)
    assert widget.runner.last_error is None, widget.runner.last_error

    result = widget.last_outcome.result
    reference = segment(
        small_slide.path,
        {
            "tumor": ("tumor", "carcinoma"),
            "stroma": ("stroma",),
            "adipose": ("adipose", "adipose tissue", "fat"),
        },
        widget.cache.encoders["medvl-demo"],
        templates="none",
    )
    np.testing.assert_array_equal(result.class_map.labels, reference.class_map.labels)
    layer = viewer.layers[f"tissue map: {small_slide.path.name}"]
    np.testing.assert_array_equal(layer.data, reference.class_map.labels)
    np.testing.assert_allclose(layer.scale, reference.class_map.scale)  # the slide's um frame
    tumor = np.array([*class_colors(3)[0], 255]) / 255
    np.testing.assert_allclose(layer.colormap.map(np.array([1]))[0], tumor, atol=1e-6)
    lines = widget.table.value.splitlines()
    assert [line.split()[0] for line in lines] == ["tumor", "stroma", "adipose", "uncertain"]
    assert widget.controls.status.value.endswith(f"({DEMO_NOTICE})")

    widget.classes.value = "tumor"
    assert widget.run() is None  # one class: refused in one sentence, nothing started
    assert widget.controls.status.value.startswith("Choosing among classes needs at least 2")
