"""The demo viewer's heatmap dock is given paths: the demo's written feature store (read by
the model process) rather than the encoder and store loaded in napari's process."""

from __future__ import annotations

from types import SimpleNamespace

import npe2
import numpy as np
import pytest

from medvl_engine.demo import DemoScene
from napari_medvl._demo_viewer import dock_heatmap_widget


def test_a_written_store_is_named_and_only_a_store_without_a_file_keeps_the_loaded_model(
    make_napari_viewer, small_slide, tmp_path
):
    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    viewer.open(str(small_slide.path), plugin="napari-medvl")
    written = tmp_path / "features.zarr"
    written.mkdir()
    encoder = SimpleNamespace(name="medvl-demo")  # as if loaded in napari's process
    scene = DemoScene(out=tmp_path, slide_path=small_slide.path, prompt="tumor", encoder=encoder)
    scene.feature_store, scene.features_path = SimpleNamespace(path=written), written
    widget = dock_heatmap_widget(viewer, scene)
    assert widget.features.value == written  # the model process reads it
    assert widget.cache.encoders == {} and widget.cache.stores == {}
    scene.feature_store, scene.features_path = SimpleNamespace(path=None), None
    widget = dock_heatmap_widget(viewer, scene)
    assert widget.features.value in (None, "")  # nothing on disk to name: threads
    assert widget.cache.encoders == {"medvl-demo": encoder}
    assert list(widget.cache.stores.values()) == [scene.feature_store]


@pytest.mark.slow  # the demo scene, then the model process loads the model: ~40 s on 2 cores
def test_the_demo_dock_reprompts_in_the_model_process_from_the_written_store(
    tmp_path, qtbot, medvl_cache, tiny_topk, wait_for_runner, monkeypatch
):
    from medvl_engine.demo import build_scene
    from napari_medvl._demo_viewer import show_scene
    from napari_medvl._heatmap_widget import HeatmapWidget
    from napari_medvl._worker_process import ENV_SWITCH, model_process, shutdown_model_process
    from napari_medvl._worker_results import StoreSummary

    monkeypatch.setenv(ENV_SWITCH, "1")
    scene = build_scene(tmp_path, "tumor", "medvl-demo", str(tiny_topk), 4, (1024, 768))
    assert scene.features_path == tmp_path / "features.zarr" and scene.features_path.exists()
    viewers = show_scene(scene, run=False)
    try:
        widget = next(
            w for w in viewers[0].window.dock_widgets.values() if isinstance(w, HeatmapWidget)
        )
        assert widget.run() is not None  # the demo's own prompt, "tumor"
        wait_for_runner(qtbot, widget.runner, timeout_ms=240_000)
        assert widget.runner.last_error is None, widget.runner.last_error
        outcome = widget.last_outcome
        # the child's answer: the store's summary, not the store; its features read, not made
        assert isinstance(outcome.store, StoreSummary) and not outcome.extracted
        np.testing.assert_allclose(outcome.heatmap.grid, scene.heatmap.grid, rtol=1e-5)
        process = model_process()
        assert process is not None
        imported = process.call("napari_medvl._worker_process:status_in_child", ["torch"])
        assert imported["imported"] == ["torch"]
    finally:
        for viewer in viewers:
            viewer.close()
        shutdown_model_process()
