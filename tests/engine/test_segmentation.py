"""Segmentation by prompts: the class map (probabilities, overlap averaging, tissue, uncertain),
its polygons (holes, minimum area, inside the slide), the area table and the exports."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.features import FeatureStore
from medvl_engine.segmentation import (
    ClassMap,
    area_table,
    class_map,
    class_probabilities,
    class_regions,
    segment_store,
)
from medvl_engine.segmentation.regions import simplify_ring

CLASSES = np.eye(3, 4, dtype=np.float32)  # three orthogonal class embeddings in 4 dims


def _store(labels: np.ndarray, patch: int = 100, stride: int | None = None, mpp=(0.5, 0.5)):
    """A store with one patch per entry of ``labels`` [rows, cols] (-1: no patch), on a lattice
    of ``stride`` (default: the patch side); a patch's feature is its class's embedding."""
    stride = stride or patch
    rows, cols = np.nonzero(labels >= 0)
    coords = np.stack([cols * stride, rows * stride], axis=1)
    features = CLASSES[labels[rows, cols]]
    return FeatureStore(
        features=features,
        coords=coords,
        patch_size_level0=patch,
        patch_size=patch,
        stride=stride,
        mpp=mpp,
        slide_dimensions=(
            labels.shape[1] * stride + patch - stride,
            labels.shape[0] * stride + patch - stride,
        ),
    )


def _map_from_labels(labels: np.ndarray, cell: int = 10, dims=None, mpp=(1.0, 1.0)) -> ClassMap:
    k = int(labels.max())
    rows, cols = labels.shape
    return ClassMap(
        names=[f"c{i}" for i in range(1, k + 1)],
        labels=labels.astype(np.int16),
        probabilities=np.zeros((k, rows, cols), np.float32),
        confidence=np.ones((rows, cols), np.float32),
        patch_probabilities=np.zeros((0, k), np.float32),
        origin_level0=(0, 0),
        cell_size_level0=cell,
        mpp=mpp,
        slide_dimensions=dims or (cols * cell, rows * cell),
        min_confidence=0.5,
        logit_scale=100.0,
    )


def test_probabilities_are_the_softmax_of_scaled_cosines():
    features = np.array([[1.0, 0, 0, 0], [0.6, 0.8, 0, 0]], np.float32)
    got = class_probabilities(features, CLASSES * 3.0, 10.0)  # classes are renormalised
    logits = 10.0 * features @ CLASSES.T
    expected = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    with pytest.raises(DataError, match="cannot score features"):
        class_probabilities(features, np.eye(3, 5), 10.0)


def test_one_grid_gives_each_patch_its_class_and_low_confidence_is_uncertain():
    truth = np.array([[0, 0, 1], [2, 2, 1], [-1, 2, 1]])
    store = _store(truth)
    probabilities = class_probabilities(store.features, CLASSES, 100.0)
    probabilities[4] = [0.4, 0.35, 0.25]  # the centre patch is unsure
    mapped = class_map(store, probabilities, ["a", "b", "c"], min_confidence=0.5)
    assert mapped.labels.tolist() == [[1, 1, 2], [3, 4, 2], [0, 3, 2]]
    assert mapped.label_names == ["no tissue", "a", "b", "c", "uncertain"]
    assert mapped.cell_size_level0 == 100 and np.isnan(mapped.confidence[2, 0])
    assert mapped.confidence[1, 1] == pytest.approx(0.4)


def test_overlapping_patches_average_into_the_cells_they_cover():
    # patches of 100 px every 50 px: each inner cell is covered by 4 patches
    store = _store(np.array([[0, 0], [0, 1]]), patch=100, stride=50)
    probabilities = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    mapped = class_map(store, probabilities, ["a", "b"])
    assert mapped.labels.shape == (3, 3) and mapped.cell_size_level0 == 50
    np.testing.assert_allclose(mapped.probabilities[1], [[0, 0, 0], [0, 0.25, 0.5], [0, 0.5, 1]])
    assert mapped.labels[2, 2] == 2 and mapped.labels[1, 1] == 1
    assert mapped.labels[1, 2] == 1  # a tie at 0.5 reaches 0.5: the first class
    stricter = class_map(store, probabilities, ["a", "b"], min_confidence=0.6)
    assert stricter.labels[1, 2] == 3 and stricter.labels[1, 1] == 1  # 3: uncertain


def test_the_tissue_mask_removes_cells_off_tissue():
    store = _store(np.zeros((2, 2), int))
    mask = np.array([[True, False], [True, True]])  # one mask px per 100 level-0 px
    mapped = class_map(store, np.ones((4, 1), np.float32), ["a"], tissue=(mask, 100.0))
    assert mapped.labels.tolist() == [[1, 0], [1, 1]]


def test_a_region_has_its_hole_and_lies_at_its_cells():
    labels = np.ones((12, 12), int)
    labels[4:8, 4:8] = 2  # a 4 x 4 island of class 2 makes a hole in class 1
    mapped = _map_from_labels(labels, cell=10)
    regions = class_regions(mapped, min_area_um2=0, smooth=0, simplify=0)
    ring_one = [r for r in regions if r.name == "c1"]
    (outer_region,) = ring_one
    assert len(outer_region.rings) == 2  # outline and one hole
    # marching squares on cell centres cuts each corner of a ring by 1/8 cell
    assert outer_region.area_px2 == pytest.approx(((144 - 0.5) - (16 - 0.5)) * 100, rel=1e-6)
    (island,) = [r for r in regions if r.name == "c2"]
    assert island.rings[0][:, 0].min() == pytest.approx(40) and island.area_um2 == island.area_px2
    half = class_regions(_map_from_labels(labels, cell=10, mpp=(0.5, 0.25)), min_area_um2=0)
    (small,) = [r for r in half if r.name == "c2"]
    np.testing.assert_allclose(small.rings_um[0], small.rings[0] * [0.5, 0.25])
    assert small.area_um2 == pytest.approx(small.area_px2 * 0.125)
    for region in regions:
        for ring in region.rings:
            assert np.array_equal(ring[0], ring[-1])


def test_small_groups_and_holes_go_below_the_minimum_area():
    labels = np.ones((20, 20), int)
    labels[2, 2] = 2  # one cell: 100 um^2
    labels[10:16, 10:16] = 2  # 36 cells
    mapped = _map_from_labels(labels, cell=10)
    regions = class_regions(mapped, min_area_um2=500, smooth=0.5)
    twos = [r for r in regions if r.name == "c2"]
    assert len(twos) == 1 and twos[0].area_um2 == pytest.approx(3600, rel=0.1)  # corners round
    (ones,) = [r for r in regions if r.name == "c1"]
    assert len(ones.rings) == 2  # the 1-cell hole is dropped, the 36-cell one kept


def test_no_polygon_leaves_the_slide():
    rng = np.random.default_rng(0)
    from scipy.ndimage import zoom

    labels = np.clip(zoom(rng.integers(1, 4, (6, 6)), 5, order=0), 1, 3)
    # the grid reaches past the slide's right and bottom edge (patches read past it)
    mapped = _map_from_labels(labels, cell=10, dims=(283, 271))
    regions = class_regions(mapped, min_area_um2=0, smooth=1.0)
    assert regions
    for region in regions:
        for ring in region.rings:
            assert (ring >= 0).all() and (ring[:, 0] <= 283).all() and (ring[:, 1] <= 271).all()


def test_simplification_keeps_a_square_and_drops_collinear_points():
    side = np.linspace(0, 10, 11)
    ring = np.concatenate(
        [
            np.stack([side, np.zeros(11)], 1),
            np.stack([np.full(10, 10.0), side[1:]], 1),
            np.stack([side[::-1][1:], np.full(10, 10.0)], 1),
            np.stack([np.zeros(10), side[::-1][1:]], 1),
        ]
    )
    simple = simplify_ring(ring, 0.1)
    assert simple.tolist() == [[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]


def test_the_area_table_counts_cells_inside_the_slide_and_shares_of_tissue():
    labels = np.array([[1, 1, 0], [2, 3, 0]])  # 3 = uncertain with two classes
    mapped = _map_from_labels(labels, cell=10, dims=(25, 15))
    mapped.names = ["a", "b"]
    table = area_table(mapped, [])
    by_name = {row["class"]: row for row in table}
    # row 1 is cut to 5 px by the slide's bottom edge
    assert by_name["a"]["area_px2"] == 200 and by_name["b"]["area_px2"] == 50
    assert by_name["uncertain"]["area_px2"] == 50
    assert by_name["a"]["share_of_tissue"] == pytest.approx(200 / 300)


def test_empty_and_one_sided_maps_say_so():
    store = _store(np.zeros((2, 2), int))
    named = {"a": ("a",), "b": ("b",)}
    no_tissue = segment_store(store, named, CLASSES[:2], tissue=(np.zeros((2, 2), bool), 100.0))
    assert no_tissue.empty and no_tissue.regions == []
    assert no_tissue.notes == ["No tissue was found on the slide's patches; the map is empty."]
    assert all(row["share_of_tissue"] == 0 for row in no_tissue.table)
    one_sided = segment_store(store, named, CLASSES[:2], min_area_um2=0)
    assert one_sided.notes == ["'b' won no part of the tissue; it has no region."]
    assert {r.name for r in one_sided.regions} == {"a"}


def test_exports_follow_qupath_and_write_every_file(tmp_path):
    from PIL import Image

    from medvl_engine.export.regions import export_segmentation, regions_geojson

    labels = np.zeros((4, 4), int)
    labels[1:3, 1:3] = 1
    store = _store(labels)
    named = {"tumor": ("tumor", "carcinoma"), "stroma": ("stroma",)}
    result = segment_store(store, named, CLASSES[:2], min_area_um2=0, model="medvl-demo")
    collection = regions_geojson(result)
    feature = collection["features"][0]
    properties = feature["properties"]
    assert feature["geometry"]["type"] == "Polygon"
    assert properties["objectType"] == "annotation"
    assert properties["classification"]["name"] in ("tumor", "stroma")
    assert len(properties["classification"]["color"]) == 3
    area = properties["measurements"]["Area um^2"]
    assert area == pytest.approx(result.regions[0].area_um2) and area > 0
    rings = feature["geometry"]["coordinates"]
    assert properties["name"] == "tumor" and len(rings) == 2  # the stroma is a hole in it
    assert rings == [np.round(ring, 2).tolist() for ring in result.regions[0].rings]
    assert collection["medvl"]["classes"]["tumor"] == ["tumor", "carcinoma"]
    assert "not for diagnosis" in properties["notice"]
    written = [
        export_segmentation(tmp_path / f"out{s}", result, max_size=128)
        for s in (".geojson", ".csv", ".png")
    ]
    assert json.loads(written[0].read_text())["features"] == json.loads(
        json.dumps(collection["features"])
    )
    rows = list(csv.DictReader(written[1].open()))
    assert [r["class"] for r in rows] == ["tumor", "stroma", "uncertain"]
    assert float(rows[0]["share_of_tissue"]) + float(rows[1]["share_of_tissue"]) == pytest.approx(1)
    with Image.open(written[2]) as image:
        assert image.width > image.height  # the legend strip on the right
    with pytest.raises(ConfigError, match="unknown type"):
        export_segmentation(tmp_path / "out.tiff", result)
