"""GUI-thread stalls of TopK on a four-view exam against napari's own floor, in the same run.

The probe is a 10 ms QTimer recording the gaps of the Qt event loop. The floor is napari
drawing the same scene (the four views and the dock's layers as they are at that moment)
panned along the same path at the same window size, while no job runs: what drawing alone
costs on this display (under Xvfb software OpenGL a frame takes 40 - 300 ms depending on how
busy the cores are). It is measured before each run and after the last, and each run is
compared with the floors around it. Panning while the first TopK runs (Run once the dock's
layers are there, the model not loaded: the model process starts, loads it and runs) and
while the other breast's TopK runs and its layers are filled must stay near that floor.
Each phase must stay within the targets ``bench/bench_first_topk.py`` measures over longer
runs: worst <= 2x the floor's worst, p99 <= 1.5x its p99 (each run pans at least
``MIN_PASSES`` passes). These bounds were 4x / 2.5x while a result's fill could move the
viewer's dims by a fraction of a pixel (a box on the image's edge) and napari then re-sliced
every layer inside one fill turn (``_napari_compat.one_dims_update`` now skips that re-slice
when every dimension is on screen). Adding the other breast's eight layers while its TopK ran
(what this guards against) held the loop 0.5 - 1.5 s at a time, about 5x the floor
(bench_first_topk.py).
"""

from __future__ import annotations

import npe2
import pytest

from napari_medvl._stall_probe import StallProbe
from napari_medvl._topk_widget import TopKWidget

pytestmark = [
    pytest.mark.gui,
    pytest.mark.slow,
]  # the model process starts and loads the model: a minute on 2 busy cores

WORST_RATIO = 2.0
P99_RATIO = 1.5
MIN_PASSES = 3
PAN_STEPS = 20
STEP_MS = 40


def _pan(qtbot, viewer, path: tuple[float, float, float], passes: int) -> None:
    """``passes`` passes of ``PAN_STEPS`` steps along the row ``path`` = (y, x0, x1), back and
    forth, one step every ``STEP_MS``."""
    y, x0, x1 = path
    for index in range(passes):
        for step in range(PAN_STEPS + 1):
            share = step / PAN_STEPS if index % 2 == 0 else 1.0 - step / PAN_STEPS
            viewer.camera.center = (y, x0 + share * (x1 - x0))
            qtbot.wait(STEP_MS)


def _floor(qtbot, viewer, path, passes: int) -> list[float]:
    """The scene as it is, panned for ``passes`` passes with no job running."""
    qtbot.wait(300)
    with StallProbe() as floor:
        _pan(qtbot, viewer, path, passes)
    return floor.gaps_ms


def _run_panning(qtbot, widget, viewer, path) -> tuple[list[float], int]:
    """Run, and pan until the result is drawn; the gaps and the passes it took."""
    with StallProbe() as probe:
        assert widget.run() is not None
        passes = 0
        while (widget.runner.running or widget.drawing or passes < MIN_PASSES) and passes < 200:
            _pan(qtbot, viewer, path, 1)
            passes += 1
        qtbot.wait(200)
    assert widget.runner.last_error is None, widget.runner.last_error
    return probe.gaps_ms, passes


def test_topk_on_both_breasts_of_an_exam_stays_near_naparis_floor(
    make_napari_viewer, qtbot, tmp_path, mammo_case, tiny_topk, monkeypatch, assert_within_floor
):
    from medvl_engine.synthetic import make_mammogram_case
    from napari_medvl._worker_process import ENV_SWITCH, shutdown_model_process

    monkeypatch.setenv(ENV_SWITCH, "1")  # the model process, as napari runs the dock
    shutdown_model_process()  # the model is not loaded when Run is clicked
    right = make_mammogram_case(
        tmp_path, seed=3, laterality="R", size=(512, 320), exam_id=mammo_case.cc_path.stem[:-5]
    )
    viewer = make_napari_viewer(show=True)
    npe2.PluginManager.instance().discover()
    for file in (mammo_case.cc_path, mammo_case.mlo_path, right.cc_path, right.mlo_path):
        viewer.open(str(file), plugin="napari-medvl")
    viewer.reset_view()
    (y0, x0), (y1, x1) = viewer.layers.extent.world[:, -2:]
    viewer.camera.zoom *= 2.0  # half the exam's width on screen
    path = ((y0 + y1) / 4, x0 + (x1 - x0) / 4, x1 - (x1 - x0) / 4)  # the CC row
    qtbot.wait(1000)
    try:
        widget = TopKWidget(viewer)
        widget.model.value = str(tiny_topk)
        widget.k.value = 6
        widget.cc_choice.value = viewer.layers["L CC"]
        widget.mlo_choice.value = viewer.layers["L MLO"]
        qtbot.waitUntil(lambda: len(viewer.layers) == 4 + 8, timeout=120_000)
        added = list(viewer.layers)
        qtbot.waitUntil(lambda: not any(layer.visible for layer in added[4:]), timeout=30_000)
        before = _floor(qtbot, viewer, path, 2)
        first, first_passes = _run_panning(qtbot, widget, viewer, path)
        between = _floor(qtbot, viewer, path, max(2, first_passes // 2))

        widget.cc_choice.value = viewer.layers["R CC"]
        widget.mlo_choice.value = viewer.layers["R MLO"]
        qtbot.wait(1000)
        second, second_passes = _run_panning(qtbot, widget, viewer, path)
        after = _floor(qtbot, viewer, path, max(2, second_passes))
        assert list(viewer.layers) == added  # both results filled the dock's layers
        assert widget.outcomes.keys() == {"L", "R"}
    finally:
        shutdown_model_process()
    assert_within_floor(
        first, before + between, f"first TopK, {first_passes} passes", WORST_RATIO, P99_RATIO
    )
    assert_within_floor(
        second, between + after, f"second breast, {second_passes} passes", WORST_RATIO, P99_RATIO
    )
