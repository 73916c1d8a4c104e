"""Segment-by-prompts dock in a real viewer (Xvfb): the tissue-map labels layer, its outlines,
the legend and the areas, a changed class list, and areas that follow a painted map."""

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
    # the outlines: one closed path per ring of each region, in the slide's um, its colours
    shapes = viewer.layers[f"regions: {small_slide.path.name}"]
    assert len(shapes.data) == sum(len(region.rings) for region in reference.regions) > 0
    first = reference.regions[0]
    np.testing.assert_allclose(shapes.data[0], first.rings_um[0][:, ::-1], atol=1e-6)
    colour = np.array([*class_colors(3)[first.label - 1], 255]) / 255
    np.testing.assert_allclose(shapes.edge_color[0], colour, atol=1e-6)
    assert shapes.features["class"][0] == first.name
    assert [name for name, _ in widget.legend.entries()] == [
        "tumor",
        "stroma",
        "adipose",
        "uncertain",
    ]
    assert widget.legend.entries()[0][1] == class_colors(3)[0]

    # a changed class list: the features stay, only the new class's text is encoded; every
    # class shows first, the new one from its first wording, saying its ensemble is to come
    looks = []
    show_first_look = widget.runner.on_partial

    def first_look(look):
        show_first_look(look)
        legend = [name for name, _ in widget.legend.entries()]
        looks.append((look, widget.controls.status.value, np.array(layer.data), legend))

    widget.runner.on_partial = first_look
    widget.classes.value = "adipose=adipose tissue, fat\ntumor=carcinoma\nnecrosis=necrotic tissue"
    widget._prefetch_timer.stop()  # Run at once: the run itself encodes the new class
    assert widget.run() is not None
    wait_for_runner(qtbot, widget.runner, 120_000)
    assert widget.runner.last_error is None, widget.runner.last_error
    (look, status, shown, legend), *later = looks
    assert not later and look.pending == ("necrosis",)
    assert status == "First look, 'necrosis' from one wording: encoding the prompt ensemble..."
    assert legend[:3] == ["adipose", "tumor", "necrosis"]
    known = {"adipose": ("adipose", "adipose tissue", "fat"), "tumor": ("tumor", "carcinoma")}
    encoder = widget.cache.encoders["medvl-demo"]
    one_wording = segment(
        small_slide.path, {**known, "necrosis": ("necrosis",)}, encoder, templates="none"
    )
    np.testing.assert_array_equal(shown, one_wording.class_map.labels)
    changed = segment(
        small_slide.path,
        {**known, "necrosis": ("necrosis", "necrotic tissue")},
        encoder,
        templates="none",
    )
    np.testing.assert_array_equal(layer.data, changed.class_map.labels)
    assert viewer.layers[layer.name] is layer  # updated in place
    assert [name for name, _ in widget.legend.entries()][:3] == ["adipose", "tumor", "necrosis"]
    assert len(widget.cache.stores) == 1

    # a new class of one wording and no templates is its own ensemble: no first look
    widget.classes.value = "adipose=adipose tissue, fat\ntumor=carcinoma\nmucin"
    widget._prefetch_timer.stop()
    assert widget.run() is not None
    wait_for_runner(qtbot, widget.runner, 120_000)
    assert widget.runner.last_error is None, widget.runner.last_error
    assert len(looks) == 1
    assert [name for name, _ in widget.legend.entries()][:3] == ["adipose", "tumor", "mucin"]

    # painting a tissue cell "tumor" moves its area into the tumor row of the table
    tissue_cells = np.argwhere((layer.data > 0) & (layer.data != 2))
    row, col = tissue_cells[0]
    before = {r["class"]: r["area_um2"] for r in widget.last_outcome.result.table}
    cell_um2 = widget.last_outcome.result.class_map.cell_areas_px2()[row, col] * 0.25
    painted_from = widget.last_outcome.result.class_map.label_names[layer.data[row, col]]
    layer.data_setitem((np.array([row]), np.array([col])), 2)  # label 2: tumor in this list
    qtbot.waitUntil(
        lambda: widget.controls.status.value.startswith("Areas recounted"), timeout=10_000
    )
    after = {r["class"]: r["area_um2"] for r in widget.last_outcome.result.table}
    assert after["tumor"] == pytest.approx(before["tumor"] + cell_um2)
    assert after[painted_from] == pytest.approx(before[painted_from] - cell_um2)
    assert widget.table.value.splitlines()[1].split()[0] == "tumor"
    assert layer.metadata["segmentation"] is widget.last_outcome.result

    recounts = widget.presenter.edits
    layer.undo()  # napari says no "paint" on an undo; the table follows the cells all the same
    qtbot.waitUntil(lambda: widget.presenter.edits > recounts, timeout=10_000)
    wait_for_runner(qtbot, widget.presenter.recounts, 10_000)
    undone = {r["class"]: r["area_um2"] for r in widget.last_outcome.result.table}
    assert undone == pytest.approx(before)

    widget.classes.value = "tumor"
    assert widget.run() is None  # one class: refused in one sentence, nothing started
    assert widget.controls.status.value.startswith("Choosing among classes needs at least 2")
