"""npe2 writers (GeoJSON, PNG, TIFF, CSV) write files that read back; the features reader opens
a TRIDENT .h5 as an overlay on its slide, and the classification dock uses it without extracting."""

from __future__ import annotations

import csv
import json

import npe2
import numpy as np
import pytest
import torch
from napari.utils.notifications import notification_manager
from PIL import Image

from napari_medvl._classify_job import ClassifyCache
from napari_medvl._classify_widget import ClassifyWidget

pytestmark = pytest.mark.gui
DIM = 8


class _FixedText:
    """A text tower stand-in: each prompt maps to a fixed random unit vector of DIM."""

    name = "fixed-text"
    embed_dim = DIM

    def encode_text(self, texts):
        rows = [torch.randn(DIM, generator=torch.Generator().manual_seed(len(t))) for t in texts]
        return torch.nn.functional.normalize(torch.stack(rows), dim=-1)


def _write_h5(path, rng):
    import h5py

    cols, rows = np.meshgrid(np.arange(6) * 224, np.arange(4) * 224)
    coords = np.stack([cols.ravel(), rows.ravel()], axis=1).astype(np.int64)
    features = rng.standard_normal((len(coords), DIM)).astype(np.float32)
    with h5py.File(path, "w") as handle:
        handle["features"] = features
        handle["coords"] = coords
        handle["coords"].attrs["patch_size_level0"] = 224
    return coords, features


@pytest.fixture
def viewer_with_features(make_napari_viewer, tmp_path, small_slide):
    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    viewer.open(str(small_slide.path), plugin="napari-medvl")
    h5_path = tmp_path / f"{small_slide.path.stem}.h5"  # named after its slide, as TRIDENT does
    coords, _ = _write_h5(h5_path, np.random.default_rng(0))
    (layer,) = viewer.open(str(h5_path), plugin="napari-medvl")
    return viewer, layer, coords


def test_h5_features_open_as_an_overlay_on_their_slide(viewer_with_features, small_slide):
    viewer, layer, coords = viewer_with_features
    assert layer.name == f"features: {small_slide.path.stem}.h5"
    store = layer.metadata["feature_store"]
    assert store.n_patches == 24 and store.embed_dim == DIM
    np.testing.assert_array_equal(np.sort(store.coords, axis=0), np.sort(coords, axis=0))
    assert layer.metadata["slide"] is viewer.layers[small_slide.path.name].metadata["slide"]
    # one cell per 224 px patch, in the slide's micrometre frame (0.5 um/px)
    assert layer.data.shape == (4, 6) and np.all(layer.data == 1.0)
    np.testing.assert_allclose(layer.scale, [112.0, 112.0])
    np.testing.assert_allclose(layer.translate, [56.0, 56.0])


def test_features_without_their_slide_are_refused_in_one_sentence(make_napari_viewer, tmp_path):
    viewer = make_napari_viewer()
    npe2.PluginManager.instance().discover()
    h5_path = tmp_path / "orphan.h5"
    _write_h5(h5_path, np.random.default_rng(1))
    before = len(notification_manager.records)
    viewer.open(str(h5_path), plugin="napari-medvl")
    assert not any(layer.name.startswith("features:") for layer in viewer.layers)
    message = notification_manager.records[before].message
    assert message == (
        "orphan.h5: features are shown on their slide; open the slide first, then open the "
        "features file."
    )


def test_classification_uses_the_opened_features_and_writers_save_its_map(
    viewer_with_features, qtbot, tmp_path, small_slide, wait_for_runner
):
    from medvl_engine.heatmap import classify_slide

    viewer, features_layer, _ = viewer_with_features
    encoder = _FixedText()
    cache = ClassifyCache(root=tmp_path / "extracted")
    cache.encoders["fixed-text"] = encoder
    widget = ClassifyWidget(viewer, cache=cache)
    widget.model.value = "fixed-text"
    widget.classes.value = "tumor\nstroma\nadipose tissue"
    widget.tau.value = 0.5
    assert widget.request().store is features_layer.metadata["feature_store"]
    widget.run()
    wait_for_runner(qtbot, widget.runner)
    assert widget.runner.last_error is None, widget.runner.last_error
    assert not (tmp_path / "extracted").exists()  # nothing extracted
    from medvl_engine.prompts import CONCH_TEMPLATES, expand_classes

    names = ["tumor", "stroma", "adipose tissue"]
    reference = classify_slide(  # the dock reads each class as CONCH's prompt ensemble
        features_layer.metadata["feature_store"],
        encoder,
        expand_classes({name: (name,) for name in names}, CONCH_TEMPLATES),
        0.5,
    )
    assert widget.ranking.value.splitlines()[0].split()[1] == reference[0][0].split()[0]
    assert not widget.controls.notice.value  # not a demo model: no notice

    attention = viewer.layers[f"attention: {small_slide.path.name}"]
    viewer.layers.selection = {attention}
    saved = {}
    for suffix in (".geojson", ".csv", ".png", ".tiff"):
        path = tmp_path / f"attention{suffix}"
        written = viewer.layers.save(str(path), selected=True, plugin="napari-medvl")
        assert written == [str(path)], suffix
        saved[suffix] = path
    geojson = json.loads(saved[".geojson"].read_text())
    assert len(geojson["features"]) == 24
    with open(saved[".csv"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 24
    with Image.open(saved[".png"]) as image:
        assert image.width > 0 and image.height > 0
    import tifffile

    with tifffile.TiffFile(saved[".tiff"]) as tiff:
        assert tiff.pages[0].shape[0] > 0

    # a layer MedVL did not make: one sentence, no file
    viewer.layers.selection = {viewer.layers[small_slide.path.name]}
    before = len(notification_manager.records)
    path = tmp_path / "slide.geojson"
    assert not viewer.layers.save(str(path), selected=True, plugin="napari-medvl")
    assert not path.exists()
    assert "not a MedVL heatmap or TopK overlay" in notification_manager.records[before].message

    # the slide itself as the target: refused in one sentence, the slide unchanged
    viewer.layers.selection = {attention}
    slide_bytes = small_slide.path.read_bytes()
    before = len(notification_manager.records)
    assert not viewer.layers.save(str(small_slide.path), selected=True, plugin="napari-medvl")
    assert small_slide.path.read_bytes() == slide_bytes
    assert "is the input small.tiff" in notification_manager.records[before].message
