"""The npe2 manifest validates and napari finds the plugin through its entry point."""

from __future__ import annotations

from pathlib import Path

import npe2

import napari_medvl

MANIFEST = Path(napari_medvl.__file__).parent / "napari.yaml"


def test_manifest_validates_and_points_at_importable_commands():
    manifest = npe2.PluginManifest.from_file(MANIFEST)
    assert manifest.name == "napari-medvl"
    manifest.validate_imports()
    ids = {command.id for command in manifest.contributions.commands}
    assert {"napari-medvl.get_reader", "napari-medvl.sample_slide"} <= ids


def test_plugin_is_discovered_by_entry_point():
    manager = npe2.PluginManager()
    manager.discover()
    assert "napari-medvl" in manager._manifests
    readers = list(manager.iter_compatible_readers(["slide.svs"]))
    assert any(reader.plugin_name == "napari-medvl" for reader in readers)
    features = list(manager.iter_compatible_readers(["slide.h5"]))
    assert [r.command for r in features if r.plugin_name == "napari-medvl"] == [
        "napari-medvl.get_features_reader"
    ]
    for layer_type in ("image", "shapes"):
        writers = list(manager.iter_compatible_writers([layer_type]))
        extensions = {
            ext for w in writers if w.plugin_name == "napari-medvl" for ext in w.filename_extensions
        }
        assert {".geojson", ".png", ".csv"} <= extensions
    image_writers = manager.iter_compatible_writers(["image"])
    assert any(".tiff" in w.filename_extensions for w in image_writers)


def test_every_dock_widget_of_the_manifest_opens(make_napari_viewer):
    from napari_medvl._classify_widget import ClassifyWidget
    from napari_medvl._export_widget import ExportWidget
    from napari_medvl._heatmap_widget import HeatmapWidget
    from napari_medvl._segment_widget import SegmentWidget
    from napari_medvl._topk_widget import TopKWidget

    viewer = make_napari_viewer()
    expected = {
        "Text prompt heatmap": HeatmapWidget,
        "Mammogram TopK": TopKWidget,
        "Export overlays": ExportWidget,
        "Slide classification": ClassifyWidget,
        "Segment by prompts": SegmentWidget,
    }
    for name, widget_type in expected.items():
        _, widget = viewer.window.add_plugin_dock_widget("napari-medvl", name)
        assert isinstance(widget, widget_type)
