"""Exports read back: QuPath GeoJSON schema, TIFF via open_slide, composite, npz, CSV; atomic."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from medvl_engine.colormaps import apply_colormap
from medvl_engine.errors import ExportError
from medvl_engine.export import (
    boxes_geojson,
    export_heatmap,
    heatmap_contours_geojson,
    write_geojson,
)
from medvl_engine.features import FeatureStore
from medvl_engine.heatmap import similarity_map

QUPATH_OBJECT_TYPES = {"annotation", "detection", "tile", "cell", "tma_core"}


def assert_qupath_geojson(document: dict) -> None:
    """What QuPath's GeoJSON import needs: a FeatureCollection of Features with (Multi)Polygon
    geometries whose rings are closed, and properties naming objectType and classification."""
    assert document["type"] == "FeatureCollection"
    assert isinstance(document["features"], list) and document["features"]
    for feature in document["features"]:
        assert feature["type"] == "Feature"
        geometry = feature["geometry"]
        polygons = (
            [geometry["coordinates"]] if geometry["type"] == "Polygon" else geometry["coordinates"]
        )
        assert geometry["type"] in ("Polygon", "MultiPolygon")
        for polygon in polygons:
            for ring in polygon:
                assert len(ring) >= 4 and ring[0] == ring[-1]
                assert all(len(point) == 2 and all(np.isfinite(point)) for point in ring)
        properties = feature["properties"]
        assert properties["objectType"] in QUPATH_OBJECT_TYPES
        classification = properties["classification"]
        assert isinstance(classification["name"], str) and classification["name"]
        assert len(classification["color"]) == 3
        assert all(isinstance(c, int) and 0 <= c <= 255 for c in classification["color"])


def _store(mpp=(0.5, 0.5)) -> FeatureStore:
    # 3 x 4 patches of 100 px, with the patch at column 1, row 1 missing (no tissue)
    coords = [(x * 100, y * 100) for y in range(3) for x in range(4) if (x, y) != (1, 1)]
    coords = np.array(coords, dtype=np.int64) + np.array([200, 100])
    angle = np.linspace(0, np.pi / 2, len(coords))
    features = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return FeatureStore(
        features,
        coords,
        patch_size_level0=100,
        patch_size=224,
        mpp=mpp,
        slide_dimensions=(800, 500),
    )


def _heatmap(store, normalize="minmax"):
    return similarity_map(store, torch.tensor([[1.0, 0.0]]), normalize=normalize, prompt="tumor")


def test_tiles_geojson_reads_back_with_scores_and_coordinates(tmp_path):
    store = _store()
    heatmap = _heatmap(store)
    boxes = np.array([[200, 100, 300, 200]])
    path = export_heatmap(
        tmp_path / "map.geojson", heatmap, store, boxes=boxes, box_scores=np.array([0.9])
    )
    document = json.loads(path.read_text())
    assert_qupath_geojson(document)
    tiles = [f for f in document["features"] if f["properties"]["objectType"] == "detection"]
    assert len(tiles) == store.n_patches
    first = tiles[0]
    assert first["geometry"]["coordinates"] == [
        [[200, 100], [300, 100], [300, 200], [200, 200], [200, 100]]
    ]
    assert first["properties"]["classification"]["name"] == "tumor: score 0.8 to 1"
    assert first["properties"]["measurements"]["score"] == pytest.approx(heatmap.scores[0])
    assert first["properties"]["prompt"] == "tumor"
    box = [f for f in document["features"] if f["properties"]["objectType"] == "annotation"]
    assert box[0]["properties"]["measurements"] == {"rank": 1.0, "score": 0.9}


def test_contours_enclose_the_high_region_with_its_hole(tmp_path):
    grid = np.zeros((7, 7), np.float32)
    grid[1:6, 1:6] = 1.0
    grid[3, 3] = 0.0
    document = heatmap_contours_geojson(grid, (1000, 2000), 10, "lymphocytes", [0.5])
    path = write_geojson(tmp_path / "c.geojson", document)
    document = json.loads(path.read_text())
    assert_qupath_geojson(document)
    (feature,) = document["features"]
    (polygon,) = feature["geometry"]["coordinates"]
    outer, hole = np.array(polygon[0]), np.array(polygon[1])
    # cells 1..5 are high: their centres span x 1015..1055; the 0.5 level lies half a cell out
    assert outer[:, 0].min() == pytest.approx(1010) and outer[:, 0].max() == pytest.approx(1060)
    assert outer[:, 1].min() == pytest.approx(2010) and outer[:, 1].max() == pytest.approx(2060)
    assert hole[:, 0].min() == pytest.approx(1030) and hole[:, 0].max() == pytest.approx(1040)
    assert feature["properties"]["measurements"]["level"] == 0.5


def test_boxes_geojson_ranks():
    document = boxes_geojson(np.array([[0, 0, 10, 20], [5, 5, 6, 6]]), np.array([0.7, 0.2]))
    assert_qupath_geojson(document)
    assert [f["properties"]["rank"] for f in document["features"]] == [1, 2]


def test_heatmap_tiff_reads_back_with_open_slide(tmp_path):
    from medvl_engine.io.slide import open_slide

    store = _store(mpp=(0.5, 0.5))
    heatmap = _heatmap(store)
    path = export_heatmap(tmp_path / "heat.tiff", heatmap, store)
    with open_slide(path) as slide:
        # about 8 um per pixel at 0.5 um/px is 16 level-0 px; the largest divisor of the
        # 100 px cell (and of the grid origin) not above it is 10: the TIFF is the 800 x 500
        # slide at downsample 10, 5 um per pixel
        assert slide.mpp == pytest.approx((5.0, 5.0), rel=1e-6)
        assert slide.dimensions == (80, 50)
        pixels = slide.read_region((0, 0), 0, slide.dimensions)
    first_row, first_col = 1, 2  # origin (200, 100) level-0 px over 100 px cells
    expected = apply_colormap(np.array([heatmap.grid[0, 0]]))[0]
    np.testing.assert_array_equal(pixels[first_row * 10 + 5, first_col * 10 + 5], expected)
    assert (pixels[3, 3] == 255).all()  # outside the grid: transparent, read over white
    assert (pixels[(first_row + 1) * 10 + 5, (first_col + 1) * 10 + 5] == 255).all()  # NaN


def test_npz_and_csv_read_back(tmp_path):
    store = _store()
    heatmap = _heatmap(store, normalize="none")
    with np.load(export_heatmap(tmp_path / "h.npz", heatmap, store)) as data:
        np.testing.assert_allclose(data["scores"], heatmap.scores)
        np.testing.assert_array_equal(data["coords"], store.coords)
        assert tuple(data["scale"]) == heatmap.scale and str(data["units"]) == "um"
        assert str(data["prompt"]) == "tumor"
    with open(export_heatmap(tmp_path / "p.csv", heatmap, store), newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == store.n_patches
    assert rows[0]["x0"] == "200" and rows[0]["x1"] == "300" and rows[0]["y1"] == "200"
    assert float(rows[0]["score"]) == pytest.approx(heatmap.scores[0], rel=1e-5)
    boxes_path = export_heatmap(
        tmp_path / "b.csv", heatmap, store, boxes=np.array([[1, 2, 3, 4]]), box_scores=[0.5]
    )
    with open(boxes_path, newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row == {
        "rank": "1",
        "x0": "1",
        "y0": "2",
        "x1": "3",
        "y1": "4",
        "score": "0.5",
        "prompt": "tumor",
        "model": "unknown",
        "notice": "",
    }


def test_png_composite_blends_heatmap_and_draws_legend(tmp_path):
    from PIL import Image

    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    truth = make_synthetic_slide(tmp_path / "s.tiff", seed=4, size=(800, 500), compression="zlib")
    store = _store()
    heatmap = _heatmap(store)
    with open_slide(truth.path) as slide:
        thumbnail = np.asarray(slide.thumbnail(400))[..., :3]
        path = export_heatmap(
            tmp_path / "c.png",
            heatmap,
            store,
            slide=slide,
            max_size=400,
            alpha=1.0,
            boxes=np.array([[600, 300, 700, 400]]),
        )
    image = np.asarray(Image.open(path).convert("RGB"))
    height, width = thumbnail.shape[:2]
    assert image.shape[1:] == (width + 110, 3)
    footer = image[max(height, 160) :]
    assert 12 <= footer.shape[0] <= 40  # one line naming the model, under image and legend
    assert (footer == 255).all(axis=-1).mean() > 0.8 and (footer < 100).all(axis=-1).any()
    # the patch at level-0 (200, 100) has score 1 after min-max: drawn at full opacity
    scale = 800 / width
    np.testing.assert_array_equal(
        image[int(150 / scale), int(250 / scale)], apply_colormap(np.array([1.0]))[0]
    )
    # top-left corner has no patch: the slide shows through unchanged
    np.testing.assert_array_equal(image[5, 5], thumbnail[5, 5])
    assert tuple(image[int(300 / scale), int(650 / scale)]) != tuple(thumbnail[0, 0])
    top, bottom = apply_colormap(np.array([1.0, 0.0]))
    np.testing.assert_allclose(image[30, width + 20], top, atol=12)  # colour bar: high on top
    np.testing.assert_allclose(image[max(height, 160) - 19, width + 20], bottom, atol=12)


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    import tifffile

    store = _store()
    heatmap = _heatmap(store)

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tifffile.TiffWriter, "write", broken)
    with pytest.raises(ExportError, match="heat.tiff.*No space left"):
        export_heatmap(tmp_path / "heat.tiff", heatmap, store)
    assert list(tmp_path.iterdir()) == []


def test_bad_export_requests_are_explained(tmp_path):
    store = _store()
    heatmap = _heatmap(store)
    with pytest.raises(ExportError, match="unknown file type '.bmp'"):
        export_heatmap(tmp_path / "x.bmp", heatmap, store)
    with pytest.raises(ExportError, match="needs the slide"):
        export_heatmap(tmp_path / "x.png", heatmap, store)
    with pytest.raises(ExportError, match="does not exist"):
        export_heatmap(tmp_path / "missing" / "x.csv", heatmap, store)


def test_composite_at_a_chosen_pyramid_level(tmp_path):
    from medvl_engine.export import composite_image
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    truth = make_synthetic_slide(tmp_path / "s.tiff", seed=6, size=(1600, 1000))
    store = _store()
    with open_slide(truth.path) as slide:
        width, height = slide.level_dimensions[1]
        rgb = composite_image(slide, _heatmap(store), level=1, legend=False, alpha=1.0)
        assert rgb.shape[1:] == (width, 3) and height < rgb.shape[0] <= height + 40
        # patch (200, 100) level-0 is at (100, 50) on level 1; min-max score 1 there
        np.testing.assert_array_equal(rgb[75, 125], apply_colormap(np.array([1.0]))[0])
        with pytest.raises(ExportError, match="Level 9 does not exist"):
            composite_image(slide, _heatmap(store), level=9)
