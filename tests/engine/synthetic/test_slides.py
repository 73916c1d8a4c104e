"""Synthetic H&E slides: textures, label maps, TIFF files, reports, cohorts."""

from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
import tiffslide
from scipy import ndimage

from medvl_engine.errors import ExportError
from medvl_engine.synthetic import (
    CLASS_SYNONYMS,
    ORGANS,
    SLIDE_MANIFEST_COLUMNS,
    TISSUE_CLASSES,
    class_id,
    make_report,
    make_synthetic_cohort,
    make_synthetic_slide,
    render_tissue,
)


def _features(patch: np.ndarray) -> np.ndarray:
    """Mean RGB, saturation, grey std and dark-pixel fraction: a deliberately simple descriptor."""
    pixels = patch.reshape(-1, 3).astype(np.float64)
    saturation = (pixels.max(1) - pixels.min(1)) / np.maximum(pixels.max(1), 1.0)
    grey = pixels.mean(axis=1)
    return np.concatenate(
        [pixels.mean(0) / 255.0, [saturation.mean(), grey.std() / 64.0, (grey < 120).mean()]]
    )


def test_render_tissue_shape_dtype_and_determinism():
    first = render_tissue("tumor", (48, 80), np.random.default_rng(3))
    again = render_tissue("tumor", (48, 80), np.random.default_rng(3))
    other = render_tissue("tumor", (48, 80), np.random.default_rng(4))
    assert first.shape == (48, 80, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(
        render_tissue(1, (16, 16), np.random.default_rng(0)),
        render_tissue("TUMOR", (16, 16), np.random.default_rng(0)),
    )


def test_render_tissue_rejects_unknown_class():
    with pytest.raises(ValueError, match="unknown tissue class 'bone'"):
        render_tissue("bone", (8, 8), np.random.default_rng(0))
    with pytest.raises(ValueError, match="outside"):
        class_id(17)


def test_classes_are_separable_by_colour_and_texture_across_stains():
    rng = np.random.default_rng(11)
    train, test = [], []
    for cid in range(len(TISSUE_CLASSES)):
        feats = [_features(render_tissue(cid, (96, 96), rng)) for _ in range(12)]
        train.append(np.mean(feats[:6], axis=0))
        test.extend((f, cid) for f in feats[6:])
    centroids = np.stack(train)
    predicted = [int(np.argmin(((centroids - f) ** 2).sum(1))) for f, _ in test]
    accuracy = np.mean([p == c for p, (_, c) in zip(predicted, test, strict=True)])
    assert accuracy >= 0.95


def test_textures_tile_without_seams():
    texture = render_tissue("stroma", (128, 128), np.random.default_rng(5)).astype(np.float32)
    interior = np.abs(np.diff(texture, axis=1)).mean()
    across_wrap = np.abs(texture[:, 0] - texture[:, -1]).mean()
    assert across_wrap < 1.5 * interior


@pytest.fixture(scope="module")
def slide(tmp_path_factory):
    path = tmp_path_factory.mktemp("slides") / "demo.tif"
    return make_synthetic_slide(
        path,
        seed=7,
        size=(1536, 1024),
        classes=("tumor", "stroma", "lymphocytes", "adipose", "necrosis"),
        organ="colon",
    )


def test_slide_opens_with_tiffslide_with_levels_and_mpp(slide):
    with tiffslide.TiffSlide(slide.path) as ts:
        assert ts.dimensions == (1536, 1024)
        assert ts.level_count > 1
        assert ts.level_dimensions[1] == (768, 512)
        assert ts.properties["tiffslide.mpp-x"] == pytest.approx(0.5)
        assert ts.properties["tiffslide.mpp-y"] == pytest.approx(0.5)
        tile = ts.read_region((0, 0), 0, (256, 256), as_array=True)
        assert tile.shape == (256, 256, 3) and tile.dtype == np.uint8


def test_label_map_covers_requested_classes(slide):
    assert slide.classes_present == ("tumor", "stroma", "lymphocytes", "adipose", "necrosis")
    expected_shape = (-(-1024 // slide.label_downsample), -(-1536 // slide.label_downsample))
    assert slide.label_map.shape == expected_shape
    tissue = slide.label_map > 0
    for name in slide.classes_present:
        assert (slide.label_map == class_id(name)).sum() >= 0.04 * tissue.sum()
        assert _mentions(slide.report, name)[0], (name, slide.report)
    assert 0.2 < tissue.mean() < 0.8


def test_pixels_follow_the_label_map(slide):
    """Inside each labelled region the slide shows that class's colour."""
    with tiffslide.TiffSlide(slide.path) as ts:
        level0 = ts.read_region((0, 0), 0, ts.dimensions, as_array=True).astype(np.float32)
    ds = slide.label_downsample
    grey, red_minus_blue = {}, {}
    for cid in np.unique(slide.label_map):
        core = ndimage.binary_erosion(slide.label_map == cid, iterations=6)
        rows, cols = np.nonzero(core)
        pick = np.random.default_rng(0).permutation(len(rows))[:200]
        pixels = np.stack(
            [
                level0[r * ds : (r + 1) * ds, c * ds : (c + 1) * ds].reshape(-1, 3).mean(0)
                for r, c in zip(rows[pick], cols[pick], strict=True)
            ]
        ).mean(0)
        grey[TISSUE_CLASSES[cid]] = pixels.mean()
        red_minus_blue[TISSUE_CLASSES[cid]] = pixels[0] - pixels[2]
    assert grey["background"] > 225 and grey["adipose"] > 215
    assert grey["tumor"] < grey["stroma"] - 10 and grey["lymphocytes"] < grey["stroma"] - 10
    assert grey["stroma"] < grey["necrosis"] + 10 < grey["background"]
    # eosin-dominated stroma is pink (red above blue); nuclei-dense classes are purple
    assert red_minus_blue["stroma"] > 20
    assert red_minus_blue["tumor"] < red_minus_blue["stroma"] - 20
    assert red_minus_blue["lymphocytes"] < red_minus_blue["stroma"] - 20


def test_same_seed_same_bytes_and_other_seed_differs(tmp_path):
    def digest(folder, seed):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "slide.tif"
        make_synthetic_slide(path, seed=seed, size=(512, 512), compression="deflate")
        assert [p.name for p in path.parent.iterdir()] == ["slide.tif"]
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert digest("a", 3) == digest("b", 3)
    assert digest("c", 4) != digest("a2", 3)


def test_slide_without_mpp_and_at_quarter_micron(tmp_path):
    no_mpp = make_synthetic_slide(tmp_path / "nompp.tif", seed=1, size=(512, 512), mpp=None)
    with tiffslide.TiffSlide(no_mpp.path) as ts:
        assert ts.properties["tiffslide.mpp-x"] is None
    fine = make_synthetic_slide(tmp_path / "fine.tif", seed=1, size=(512, 512), mpp=0.25)
    with tiffslide.TiffSlide(fine.path) as ts:
        assert ts.properties["tiffslide.mpp-x"] == pytest.approx(0.25)
    assert no_mpp.mpp is None and fine.mpp == 0.25


def test_unwritable_folder_gives_export_error(tmp_path):
    with pytest.raises(ExportError, match="could not write slide"):
        make_synthetic_slide(tmp_path / "missing" / "x.tif", seed=1, size=(256, 256))


def _mentions(report: str, name: str) -> tuple[bool, bool]:
    """(mentioned positively, mentioned only inside negated sentences) for one class."""
    sentences = re.split(r"(?<=\.)\s+|\n", report)
    terms = [t.lower() for t in CLASS_SYNONYMS[name]]
    if name == "tumor":
        terms += ["adenocarcinoma"]
    hits = [s for s in sentences if any(t in s.lower() for t in terms)]
    negated = [s for s in hits if s.startswith(("No ", "Negative for "))]
    return len(hits) > len(negated), len(hits) == len(negated)


@pytest.mark.parametrize("organ", ORGANS)
def test_reports_name_present_classes_and_only_negate_absent_ones(organ):
    rng = np.random.default_rng(21)
    diagnoses = set()
    for _ in range(40):
        present = [c for c in TISSUE_CLASSES[1:] if rng.uniform() < 0.5] or ["stroma"]
        report = make_report(present, rng, organ)
        for name in TISSUE_CLASSES[1:]:
            positive, only_negated = _mentions(report, name)
            if name in present:
                assert positive, (name, report)
            else:
                assert only_negated, (name, report)
        assert re.search(r"Accession: S\d\d-\d{5}|Dr\. [A-Z][a-z]+|Phone: 555-", report)
        lines = report.split("\n")
        heading = next(i for i, line in enumerate(lines) if line.endswith(("DIAGNOSIS:", "ION:")))
        diagnoses.add(lines[heading + 1])
    assert len(diagnoses) >= 35


def test_report_rejects_unknown_organ():
    with pytest.raises(ValueError, match="unknown organ 'liver'"):
        make_report(["tumor"], np.random.default_rng(0), "liver")


def test_cohort_writes_manifest_labels_and_stratified_splits(tmp_path):
    slides = make_synthetic_cohort(
        tmp_path, n_slides=8, seed=2, organs=("breast", "lung"), size=(384, 384)
    )
    with open(tmp_path / "manifest.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == SLIDE_MANIFEST_COLUMNS
    assert [r["slide_id"] for r in rows] == [s.slide_id for s in slides]
    assert {r["organ"] for r in rows} == {"breast", "lung"}
    for organ in ("breast", "lung"):
        assert "train" in {r["split"] for r in rows if r["organ"] == organ}
    for row, slide in zip(rows, slides, strict=True):
        assert row["report"] == slide.report
        assert Path(row["slide_path"]).is_file()
        np.testing.assert_array_equal(np.load(row["label_path"]), slide.label_map)
        assert row["classes"].split(";") == list(slide.classes_present)


def test_svs_layout_reads_as_aperio_with_same_pixels(tmp_path):
    generic = make_synthetic_slide(tmp_path / "g.tif", seed=6, size=(1024, 768))
    aperio = make_synthetic_slide(tmp_path / "a.svs", seed=6, size=(1024, 768), layout="svs")
    np.testing.assert_array_equal(generic.label_map, aperio.label_map)
    with tiffslide.TiffSlide(aperio.path) as ts, tiffslide.TiffSlide(generic.path) as tg:
        assert ts.properties["tiffslide.vendor"] == "aperio"
        assert ts.properties["tiffslide.mpp-x"] == pytest.approx(0.5)
        assert ts.level_dimensions == tg.level_dimensions == ((1024, 768), (512, 384))
        assert set(ts.associated_images) == {"thumbnail", "label"}
        np.testing.assert_array_equal(
            ts.read_region((0, 0), 0, (1024, 768), as_array=True),
            tg.read_region((0, 0), 0, (1024, 768), as_array=True),
        )
    with pytest.raises(ValueError, match="layout must be"):
        make_synthetic_slide(tmp_path / "x.tif", seed=1, size=(256, 256), layout="ome")
