"""The segment dock's layers and recount, without a viewer: outlines in the slide's um frame in
the exports' colours, areas that follow an edited map, class text encoded once per class."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from napari.layers import Layer

from medvl_engine.export.regions import class_colors
from medvl_engine.prompts import ensemble_embeddings
from medvl_engine.segmentation import ClassMap, SegmentResult, area_table, class_regions
from napari_medvl._segment_job import SegmentCache, class_embeddings, first_look_embeddings
from napari_medvl._segment_layers import label_colormap, recount, regions_layer

MPP = (0.5, 0.5)
CELL = 100  # level-0 px: a cell is 50 x 50 um


def _result() -> SegmentResult:
    """Class "tumor" (1) a 6 x 6 block with a 2 x 2 hole of "stroma" (2), the rest "adipose"
    (3); one column of "uncertain" (4)."""
    labels = np.full((10, 12), 3, np.int16)
    labels[2:8, 2:8] = 1
    labels[4:6, 4:6] = 2
    labels[:, 11] = 4
    names = ["tumor", "stroma", "adipose"]
    mapped = ClassMap(
        names=names,
        labels=labels,
        probabilities=np.zeros((3, 10, 12), np.float32),
        confidence=np.ones((10, 12), np.float32),
        patch_probabilities=np.zeros((0, 3), np.float32),
        origin_level0=(0, 0),
        cell_size_level0=CELL,
        mpp=MPP,
        slide_dimensions=(12 * CELL, 10 * CELL),
        min_confidence=0.5,
        logit_scale=100.0,
    )
    regions = class_regions(mapped, min_area_um2=0.0)
    return SegmentResult(
        class_map=mapped,
        regions=regions,
        table=area_table(mapped, regions),
        store=None,  # the layers never read the features
        model="demo",
        templates=None,
        classes={name: (name,) for name in names},
    )


def test_outlines_sit_on_the_map_in_um_with_the_export_colours():
    result = _result()
    data, kwargs, kind = regions_layer(result, "regions: s.tiff")
    layer = Layer.create(data, kwargs, kind)
    features = layer.features
    tumor = int(np.flatnonzero((features["class"] == "tumor") & (features["ring"] == "outline"))[0])
    hole = np.flatnonzero((features["class"] == "tumor") & (features["ring"] == "hole"))
    assert len(hole) == 1  # the stroma island is a hole of the tumor region, drawn as a ring
    # vertices (y, x) um = level-0 (x, y) px * mpp: the tumor block spans cells 2..8, i.e.
    # 100..400 um from the corner (the outline passes through the border cells' centres)
    corners = layer.data[tumor]
    assert corners[:, 0].min() == pytest.approx(125.0, abs=30) and corners[:, 1].max() == (
        pytest.approx(375.0, abs=30)
    )
    region = next(r for r in result.regions if r.name == "tumor")
    np.testing.assert_allclose(layer.data[tumor], region.rings_um[0][:, ::-1])  # closed path
    assert set(layer.shape_type) == {"path"}
    tumor_rgb = np.array(class_colors(3)[0]) / 255
    np.testing.assert_allclose(layer.edge_color[tumor][:3], tumor_rgb, atol=1e-6)
    np.testing.assert_allclose(layer.edge_color[hole[0]][:3], tumor_rgb, atol=1e-6)
    # the map's colour of each label is the outline's and the export's
    colormap = label_colormap(3)
    for label in (1, 2, 3, 4):
        expected = np.array(class_colors(3)[label - 1]) / 255
        np.testing.assert_allclose(colormap.map(np.array([label]))[0][:3], expected, atol=1e-6)
    assert layer.text.values[tumor] == "tumor" and layer.text.values[hole[0]] == ""


def test_painting_cells_moves_their_area_to_the_painted_class():
    result = _result()
    before = {row["class"]: row for row in result.table}
    labels = result.class_map.labels.copy()
    labels[4:6, 4:6] = 1  # the stroma island painted tumor: 4 cells of 50 x 50 um
    labels[0, 0] = 9  # no label of this map
    after = recount(result, labels)
    rows = {row["class"]: row for row in after.table}
    assert rows["tumor"]["area_um2"] == pytest.approx(before["tumor"]["area_um2"] + 4 * 2500.0)
    assert rows["stroma"]["area_um2"] == 0.0 and rows["stroma"]["regions"] == 0
    assert rows["adipose"]["area_um2"] == pytest.approx(before["adipose"]["area_um2"] - 2500.0)
    tissue = sum(row["area_um2"] for row in after.table)
    assert tissue == pytest.approx(119 * 2500.0)
    assert rows["tumor"]["share_of_tissue"] == pytest.approx(36 * 2500.0 / tissue)
    assert after.notes == [
        "1 cells carry a label that is no class (1..4); they count as no tissue."
    ]
    tumor = [r for r in after.regions if r.name == "tumor"]
    assert len(tumor) == 1 and len(tumor[0].rings) == 1  # the hole is gone
    assert result.class_map.labels[4, 4] == 2  # the run's own result is left as it was


class _CountingText:
    """A text encoder that records every text it is given: [T] -> [T, 4]."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.batches: list[int] = []

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        self.seen.extend(texts)
        self.batches.append(len(texts))
        rows = [[float(len(t)), float(t.count("a")), float(t.count("o")), 1.0] for t in texts]
        return torch.tensor(rows)


def test_a_changed_class_list_encodes_only_its_new_classes():
    cache, encoder = SegmentCache(), _CountingText()
    first = {"tumor": ("tumor", "carcinoma"), "stroma": ("stroma",)}
    class_embeddings(cache, encoder, "m", "conch", first)
    assert len(encoder.seen) == 3 * 22  # three names in CONCH's 22 templates
    encoder.seen.clear()
    changed = {"adipose": ("adipose", "fat"), "tumor": ("tumor", "carcinoma")}
    embeddings = class_embeddings(cache, encoder, "m", "conch", changed)
    assert len(encoder.seen) == 2 * 22 and all("tumor" not in t for t in encoder.seen)
    assert encoder.batches == [3 * 22, 2 * 22]  # every template x name of a list: one batch
    from medvl_engine.prompts import CONCH_TEMPLATES

    reference = ensemble_embeddings(_CountingText().encode_text, changed, CONCH_TEMPLATES)
    np.testing.assert_allclose(embeddings.numpy(), reference.numpy(), rtol=1e-6, atol=1e-7)
    encoder.seen.clear()
    class_embeddings(cache, encoder, "m", "none", changed)  # other templates: other texts
    assert encoder.seen == ["adipose", "fat", "tumor", "carcinoma"]


def test_a_first_look_takes_each_new_class_from_its_first_wording():
    from medvl_engine.errors import ConfigError
    from medvl_engine.prompts import CONCH_TEMPLATES

    cache, encoder = SegmentCache(), _CountingText()
    known = {"tumor": ("tumor", "carcinoma"), "stroma": ("stroma",)}
    kept = class_embeddings(cache, encoder, "m", "conch", known)
    encoder.seen.clear()
    changed = {"tumor": known["tumor"], "adipose": ("adipose", "fat"), "stroma": ("stroma",)}
    embeddings, pending = first_look_embeddings(cache, encoder, "m", "conch", changed)
    assert pending == ("adipose",)
    # one text for the new class, in the first template; nothing kept for it
    assert encoder.seen == [CONCH_TEMPLATES[0].format("adipose")]
    assert len(cache.embeddings) == 2
    np.testing.assert_allclose(embeddings[[0, 2]].numpy(), kept.numpy(), rtol=0, atol=0)
    alone = ensemble_embeddings(
        _CountingText().encode_text, {"a": ("adipose",)}, CONCH_TEMPLATES[:1]
    )
    np.testing.assert_allclose(embeddings[1].numpy(), alone[0].numpy(), rtol=1e-6, atol=1e-7)
    full = class_embeddings(cache, encoder, "m", "conch", changed)
    assert not np.allclose(full[1].numpy(), embeddings[1].numpy())  # the ensemble differs

    # nothing to look at first: every class known, or a new class of one name and no templates
    assert first_look_embeddings(cache, encoder, "m", "conch", changed) is None
    class_embeddings(cache, encoder, "m", "none", known)
    assert first_look_embeddings(cache, encoder, "m", "none", {**known, "fat": ("fat",)}) is None
    with pytest.raises(ConfigError, match="Class 'fat'"):
        first_look_embeddings(cache, encoder, "m", "none", {**known, "fat": ()})
