"""Model picker (registry + folders on disk + browse), the docks' Run shortcut, and
`medvl classify --preset`."""

from __future__ import annotations

import pytest
from napari.utils.notifications import notification_manager

from medvl_engine.cli.main import main
from napari_medvl._model_picker import BROWSE, ModelPicker

pytestmark = pytest.mark.gui


@pytest.fixture
def cache_with_a_model(tmp_path, monkeypatch, tiny_topk_folder):
    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    return tiny_topk_folder(tmp_path / "cache" / "models")


def test_picker_lists_registry_and_disk_models_and_browse_adds_a_folder(
    qtbot, tmp_path, cache_with_a_model, monkeypatch
):
    picker = ModelPicker("topksiglip", "topksiglip-demo")
    listed = list(picker.combo.choices)
    assert listed[0] == "topksiglip-demo"
    assert str(cache_with_a_model) in listed
    assert listed[-1] == BROWSE
    assert picker.value == "topksiglip-demo"

    chosen = tmp_path / "elsewhere"
    chosen.mkdir()
    monkeypatch.setattr(ModelPicker, "_ask_folder", lambda self: str(chosen))
    picker.combo.value = BROWSE
    assert picker.value == str(chosen)
    assert str(chosen) in picker.combo.choices
    # a cancelled dialog keeps the previous choice
    monkeypatch.setattr(ModelPicker, "_ask_folder", lambda self: None)
    picker.combo.value = BROWSE
    assert picker.value == str(chosen)
    picker.refresh()
    assert picker.value == str(chosen)


def test_ctrl_enter_runs_the_dock(make_napari_viewer, qtbot):
    from napari_medvl._topk_widget import TopKWidget

    viewer = make_napari_viewer()
    widget = TopKWidget(viewer)
    shortcuts = [
        child
        for child in widget.native.children()
        if type(child).__name__ == "QShortcut" and child.key().toString() == "Ctrl+Return"
    ]
    assert len(shortcuts) == 1
    before = len(notification_manager.records)
    shortcuts[0].activated.emit()  # Run without views: the dock says what it needs
    assert "CC and an MLO" in notification_manager.records[before].message
    assert "Ctrl+Enter" in widget.controls.run_button.tooltip


def test_classify_cli_takes_a_preset_or_classes_not_both(tmp_path, capsys):
    slide = tmp_path / "missing.svs"
    assert main(["classify", str(slide)]) == 2
    assert "--classes A B ... or --preset NAME" in capsys.readouterr().err
    assert main(["classify", str(slide), "--preset", "liver"]) == 2
    assert "'liver' is not a class preset; use one of: breast (SPIDER-C)" in (
        capsys.readouterr().err
    )
