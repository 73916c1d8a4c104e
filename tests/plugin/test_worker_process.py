"""The model process: jobs run there, errors come back as their one sentence, it stops with
its viewer, and napari's own process never imports torch."""

from __future__ import annotations

import os

import pytest

from medvl_engine.errors import MedVLError, ModelNotFoundError
from napari_medvl import _worker_process
from napari_medvl._worker_process import ENV_SWITCH, ModelProcess, model_process
from tests.support.model_process import assert_stopped_with_viewer, finished, gone, run_probe

STATUS = "napari_medvl._worker_process:status_in_child"


@pytest.fixture
def process():
    started = ModelProcess()
    yield started
    started.stop()


def test_an_error_in_the_child_comes_back_as_its_sentence_and_a_dead_child_as_one(
    process, small_slide, tmp_path
):
    status = process.call(STATUS, ["torch"])
    assert status["pid"] == process.pid != os.getpid()
    assert status["imported"] == []  # the child imports torch only for a model
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        process.call("napari_medvl._worker_heatmap:preload_in_child", {"model": "no-such-model"})
    request = {
        "slide": str(small_slide.path),
        "model": "medvl-demo",
        "prompts": ("tumor",),
        "root": tmp_path,
    }
    job = process.run("napari_medvl._worker_heatmap:heatmap_in_child", request)
    assert next(job).stage == "loading model"  # the child now imports torch for seconds
    pid = process.pid
    os.kill(pid, 9)
    with pytest.raises(MedVLError, match="model process stopped unexpectedly"):
        for _ in job:  # what the child sent before it died, then the error
            pass
    assert process.call(STATUS, [])["pid"] not in (pid, None)  # the next job starts a child
    assert gone(pid)


def test_without_a_process_jobs_run_in_threads_and_say_so_once(monkeypatch, caplog):
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert model_process() is None
    monkeypatch.setenv(ENV_SWITCH, "1")
    monkeypatch.setattr(_worker_process, "_shared", None)
    monkeypatch.setattr(_worker_process, "_unavailable", None)

    def refuse(self, cancel=None):
        raise OSError("no processes here")

    monkeypatch.setattr(ModelProcess, "start", refuse)
    with caplog.at_level("WARNING", logger=_worker_process.__name__):
        assert model_process() is None
        assert model_process() is None
    said = [record.message for record in caplog.records if "model process" in record.message]
    assert len(said) == 1 and "no processes here" in said[0]


# run_probe appends CLOSE_AND_REPORT: the viewer is closed and the report printed
PROBE = r"""
import json, os, sys, time
import napari, npe2
from qtpy.QtWidgets import QApplication
from napari_medvl._heatmap_job import FeatureCache
from napari_medvl._heatmap_widget import HeatmapWidget
from napari_medvl import _worker_process

slide_path, features = sys.argv[1], sys.argv[2]
viewer = napari.Viewer(show=False)
app = QApplication.instance()
npe2.PluginManager.instance().discover()
layer = viewer.open(slide_path, plugin="napari-medvl")[0]
widget = HeatmapWidget(viewer, cache=FeatureCache(root=features), preload=False)
widget.slide_choice.value = layer
widget.prompts.value = "tumor"
widget.run()
end = time.time() + 240
while (widget.runner.running or widget.last_outcome is None) and time.time() < end:
    app.processEvents()
    time.sleep(0.01)
heat = [lay for lay in viewer.layers if lay.metadata.get("medvl_kind") == "heatmap"]
process = _worker_process._shared
report = {
    "error": repr(widget.runner.last_error),
    "torch": sorted(name for name in ("torch", "transformers") if name in sys.modules),
    "finite_cells": int((heat[0].data == heat[0].data).sum()) if heat else 0,
    "child": process.pid if process is not None else None,
}
"""


@pytest.mark.gui
@pytest.mark.slow  # a fresh napari, the model process and the model: ~60 s on 2 busy cores
def test_a_heatmap_in_the_dock_runs_in_the_model_process_and_it_stops_with_the_viewer(
    small_slide, medvl_cache, tmp_path
):
    report = run_probe(PROBE, str(small_slide.path), str(tmp_path / "features"), timeout=300)
    assert report["error"] == "None"
    assert report["torch"] == []  # napari's process: the model ran in the child
    assert report["finite_cells"] > 0  # the map over the slide's tissue arrived
    assert_stopped_with_viewer(report)


@pytest.mark.slow  # the model process loads the model: ~30 s on 2 busy cores
def test_the_model_process_gives_the_same_maps_and_classes_as_threads(
    small_slide, medvl_cache, tmp_path, monkeypatch
):
    import numpy as np

    from medvl_engine.io.slide import open_slide
    from napari_medvl._classify_job import ClassifyCache, ClassifyRequest, classify_job
    from napari_medvl._heatmap_job import FeatureCache, HeatmapRequest, heatmap_job
    from napari_medvl._worker_process import shutdown_model_process

    slide = open_slide(small_slide.path)
    heatmap = HeatmapRequest(slide=slide, model="medvl-demo", prompts=("tumor",), top_n=3)
    classes = ClassifyRequest(slide=slide, model="medvl-demo", classes=("tumor", "stroma"))
    outcomes = {}
    try:
        for switch in ("0", "1"):
            monkeypatch.setenv(ENV_SWITCH, switch)
            root = tmp_path / f"features-{switch}"
            outcomes[switch] = (
                finished(heatmap_job(heatmap, FeatureCache(root=root))),
                finished(classify_job(classes, ClassifyCache(root=root))),
            )
        process = model_process()
        assert process is not None
        assert process.call(STATUS, ["torch"])["imported"] == ["torch"]  # the model is there
    finally:
        shutdown_model_process()
        slide.close()
    (here_map, here_classes), (there_map, there_classes) = outcomes["0"], outcomes["1"]
    assert type(there_map.heatmap).__module__ == "medvl_engine.heatmap"  # the engine Heatmap
    np.testing.assert_allclose(there_map.heatmap.grid, here_map.heatmap.grid, rtol=1e-5)
    np.testing.assert_array_equal(there_map.top_patches[0], here_map.top_patches[0])
    np.testing.assert_array_equal(there_map.store.coords, here_map.store.coords)
    assert there_classes.classification.ranked[0][0] == here_classes.classification.ranked[0][0]
    np.testing.assert_allclose(
        there_classes.classification.scores, here_classes.classification.scores, rtol=1e-5
    )
    for name, attention in here_classes.heatmaps.items():
        np.testing.assert_allclose(there_classes.heatmaps[name].grid, attention.grid, rtol=1e-5)


CLASSIFY_PROBE = r"""
import json, sys, time
import napari, npe2
from qtpy.QtWidgets import QApplication
from napari_medvl._classify_job import ClassifyCache
from napari_medvl._classify_widget import ClassifyWidget
from napari_medvl import _worker_process

slide_path, features = sys.argv[1], sys.argv[2]
viewer = napari.Viewer(show=False)
app = QApplication.instance()
npe2.PluginManager.instance().discover()
viewer.open(slide_path, plugin="napari-medvl")
widget = ClassifyWidget(viewer, cache=ClassifyCache(root=features))
widget.classes.value = "tumor\nstroma\nadipose"
widget.run()
end = time.time() + 240
while (widget.runner.running or widget.last_outcome is None) and time.time() < end:
    app.processEvents()
    time.sleep(0.01)
process = _worker_process._shared
report = {
    "error": repr(widget.runner.last_error),
    "torch": sorted(name for name in ("torch", "transformers") if name in sys.modules),
    "ranked": len(widget.ranking.value.splitlines()),
    "child": process.pid if process is not None else None,
}
"""


@pytest.mark.gui
@pytest.mark.slow  # a fresh napari, the model process and the model: ~60 s on 2 busy cores
def test_a_classification_in_the_dock_runs_in_the_model_process_and_it_stops_with_the_viewer(
    small_slide, medvl_cache, tmp_path
):
    report = run_probe(
        CLASSIFY_PROBE, str(small_slide.path), str(tmp_path / "features"), timeout=300
    )
    assert report["error"] == "None"
    assert report["torch"] == []  # napari's process: the model ran in the child
    assert report["ranked"] == 3  # every class ranked
    assert_stopped_with_viewer(report)
