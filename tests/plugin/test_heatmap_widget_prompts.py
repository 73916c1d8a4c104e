"""`medvl heatmap` and the heatmap dock take the same prompts and name their maps alike (Xvfb).

For every mode, the same prompts are given to the command (`main`) and to the dock in a real
viewer, both on the same slide and feature store: both accept or both refuse, with the same
sentence, and an accepted map carries the same label in the command's export and in the dock's
layer name, layer metadata and colour-bar title.
"""

from __future__ import annotations

import numpy as np
import pytest
from napari.utils.notifications import notification_manager

from medvl_engine.cli.main import main
from napari_medvl._heatmap_job import FeatureCache
from napari_medvl._heatmap_widget import HeatmapWidget

pytestmark = pytest.mark.gui
WORKER_TIMEOUT_MS = 120_000

CASES = [
    ("cosine", ("tumor",)),
    ("cosine", ("tumor", "stroma")),
    ("softmax", ("tumor",)),
    ("softmax", ("tumor", "stroma", "adipose tissue")),
    ("contrast", ("tumor",)),
    ("contrast", ("tumor", "stroma")),
    ("contrast", ("tumor", "stroma", "adipose tissue")),
]


@pytest.fixture(scope="module")
def feature_store(medvl_cache, small_slide, tmp_path_factory):
    """The slide's features, made once by `medvl features` and read by both sides."""
    folder = tmp_path_factory.mktemp("stores")
    assert main(["features", str(small_slide.path), "--out", str(folder)]) == 0
    (store,) = folder.glob("*.zarr")
    return store


def _by_the_command(slide, store, mode, prompts, out, capsys):
    """("label", text) of the map the command wrote, or ("refused", its sentence)."""
    capsys.readouterr()
    argv = ["heatmap", str(slide), "--features", str(store), "--mode", mode]
    for prompt in prompts:
        argv += ["--prompt", prompt]
    status = main([*argv, "--out", str(out)])
    if status != 0:
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and line.startswith("medvl: error: ")
        return "refused", line.removeprefix("medvl: error: ")
    with np.load(out) as saved:
        assert str(saved["mode"]) == mode
        return "label", str(saved["prompt"])


@pytest.fixture(scope="session")
def shown_by_the_dock(wait_for_runner):
    """``shown_by_the_dock(viewer, widget, qtbot, mode, prompts)`` -> ("label", text) of the map
    the dock showed, or ("refused", its notification)."""

    def _by_the_dock(viewer, widget, qtbot, mode, prompts):
        widget.mode.value = mode
        widget.prompts.value = "; ".join(prompts)
        before = len(notification_manager.records)
        worker = widget.run()
        if worker is None:
            assert not widget.runner.running
            return "refused", notification_manager.records[before].message
        wait_for_runner(qtbot, widget.runner, WORKER_TIMEOUT_MS)
        assert widget.runner.last_error is None, widget.runner.last_error
        label = widget.last_outcome.heatmap.prompt  # what the export dock writes
        layer = viewer.layers[f"heatmap: {label}"]
        assert layer.metadata["prompt"] == label and layer.metadata["mode"] == mode
        assert widget.colorbar.title.text().startswith(f"{label}  ({mode}")
        return "label", label

    return _by_the_dock


def test_command_and_dock_accept_refuse_and_label_prompts_alike(
    make_napari_viewer, qtbot, tmp_path, capsys, small_slide, feature_store, shown_by_the_dock
):
    import npe2

    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    viewer.open(str(small_slide.path), plugin="napari-medvl")
    widget = HeatmapWidget(viewer, cache=FeatureCache(root=tmp_path / "features"), preload=False)
    widget.features.value = feature_store
    widget.top_n.value = 0
    command, dock = {}, {}
    for number, (mode, prompts) in enumerate(CASES):
        out = tmp_path / f"map{number}.npz"
        command[mode, prompts] = _by_the_command(
            small_slide.path, feature_store, mode, prompts, out, capsys
        )
        dock[mode, prompts] = shown_by_the_dock(viewer, widget, qtbot, mode, prompts)
    assert dock == command
    # the rules themselves, as a user meets them
    assert command["softmax", ("tumor", "stroma", "adipose tissue")] == (
        "label",
        "tumor vs stroma, adipose tissue",
    )
    assert command["contrast", ("tumor", "stroma")] == ("label", "tumor - stroma")
    assert command["cosine", ("tumor",)] == ("label", "tumor")
    refused = [case for case, (outcome, _) in command.items() if outcome == "refused"]
    assert refused == [
        ("cosine", ("tumor", "stroma")),
        ("softmax", ("tumor",)),
        ("contrast", ("tumor",)),
        ("contrast", ("tumor", "stroma", "adipose tissue")),
    ]
