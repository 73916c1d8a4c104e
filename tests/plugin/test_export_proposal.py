"""The export dock proposes a file named after the layer, beside its input image."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from napari_medvl._export_job import proposed_export_path


def test_the_proposal_sits_beside_the_input_and_never_is_the_input(tmp_path):
    slide = SimpleNamespace(path=tmp_path / "slides" / "case 7.svs")
    heatmap = {"medvl_kind": "heatmap", "slide": slide}
    assert proposed_export_path("heatmap: tumor", heatmap) == (
        tmp_path / "slides" / "case 7-heatmap-tumor.geojson"
    )
    sources = {"CC": str(tmp_path / "cc" / "L_CC.dcm"), "MLO": str(tmp_path / "mlo" / "L_MLO.dcm")}
    topk = {"medvl_kind": "topk", "sources": sources}
    assert proposed_export_path("TopK L boxes MLO", topk, ".csv") == (
        tmp_path / "mlo" / "L_MLO-TopK-L-boxes-MLO.csv"
    )
    exported = {"slide": SimpleNamespace(path=tmp_path / "a.geojson")}  # an input named so
    assert proposed_export_path("", exported) == tmp_path / "a-overlay.geojson"
    assert proposed_export_path("heatmap: tumor", {}) == Path.home() / "heatmap-tumor.geojson"


@pytest.mark.gui
def test_the_dock_proposes_the_chosen_layers_name_until_the_user_types_one(
    make_napari_viewer, tmp_path
):
    from napari_medvl._export_widget import ExportWidget

    viewer = make_napari_viewer()
    slide = SimpleNamespace(path=tmp_path / "slide.tiff")
    metadata = {"medvl_kind": "heatmap", "heatmap": object(), "feature_store": object()}
    metadata["slide"] = slide
    viewer.add_image(np.zeros((2, 2)), name="heatmap: tumor", metadata=metadata)
    exporter = ExportWidget(viewer)
    assert Path(str(exporter.path.value)) == tmp_path / "slide-heatmap-tumor.geojson"
    exporter.path.value = tmp_path / "mine.png"
    viewer.add_image(
        np.zeros((2, 2)), name="heatmap: stroma", metadata={**metadata, "slide": slide}
    )
    assert Path(str(exporter.path.value)) == tmp_path / "mine.png"


@pytest.mark.gui
def test_a_topk_result_filling_a_pending_layer_is_chosen_and_named_beside_its_view(
    make_napari_viewer, tmp_path
):
    """The TopK dock adds empty pending layers first and fills them with the result (their
    metadata set, then renamed): the export dock then proposes the TopK layer's own file
    beside its view, not the home folder's ``heatmap.geojson``."""
    from napari_medvl._export_widget import ExportWidget

    viewer = make_napari_viewer()
    pending = {"medvl_kind": "topk_pending", "result_name": "TopK L importance CC"}
    layer = viewer.add_image(np.zeros((2, 2)), name="TopK L importance CC (pending)")
    layer.metadata = pending
    exporter = ExportWidget(viewer)
    viewer.window.add_dock_widget(exporter, name="Export overlays")
    assert exporter.layer_choice.value is None  # nothing exportable yet
    sources = {"CC": str(tmp_path / "L_CC.dcm"), "MLO": str(tmp_path / "L_MLO.dcm")}
    layer.metadata = {"medvl_kind": "topk", "topk_result": object(), "sources": sources}
    layer.name = "TopK L importance CC"
    assert exporter.layer_choice.value is layer
    assert Path(str(exporter.path.value)) == tmp_path / "L_CC-TopK-L-importance-CC.geojson"
