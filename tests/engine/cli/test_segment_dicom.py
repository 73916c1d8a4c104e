"""`medvl segment SLIDE.dcm --out regions.dcm [--dicom-kind seg|ann|both]`: the class map as
a DICOM Segmentation and the regions as bulk annotations, equal to the map and the GeoJSON
regions of the same run; a slide that is not DICOM is refused before any model loads."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pydicom
import pytest

from medvl_engine.cli.main import main

CLASSES = ["--class", "tumor", "--class", "stroma", "--class", "adipose"]


def test_a_dicom_output_of_an_svs_slide_is_one_sentence_before_any_model(
    tmp_path, capsys, write_svs
):
    slide = write_svs(tmp_path / "s.svs", np.full((64, 64, 3), 200, np.uint8), tile=64)
    argv = ["segment", str(slide), *CLASSES, "--out", str(tmp_path / "r.geojson")]
    argv += ["--out", str(tmp_path / "r.dcm"), "--dicom-kind", "both"]
    assert main([*argv, "--model", str(tmp_path / "no-such-model")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "Cannot write r.dcm: DICOM outputs need a DICOM source" in error
    assert "s.svs is not a DICOM whole-slide image" in error and "GeoJSON, CSV or PNG" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.svs"]


@pytest.mark.slow
def test_segment_of_a_dicom_slide_writes_the_map_and_regions_as_dicom(
    tmp_path, capsys, demo_encoder
):
    pytest.importorskip("highdicom")
    from medvl_engine.io.dicom_results import read_dicom_result
    from medvl_engine.io.slide import open_slide
    from medvl_engine.pathology import segment
    from medvl_engine.synthetic import make_synthetic_slide
    from tests.support.dicom_wsi import write_dicom_wsi

    make_synthetic_slide(tmp_path / "s.tiff", seed=1, size=(1024, 768))
    with open_slide(tmp_path / "s.tiff") as slide:
        rgb = np.asarray(slide.read_region((0, 0), 0, slide.dimensions))[..., :3]
    level0 = write_dicom_wsi(tmp_path / "wsi", rgb, mpp=0.5, tile=256, levels=2)[0]
    expected = segment(
        level0, ["tumor", "stroma", "adipose"], demo_encoder(), templates=None, min_area_um2=0
    )
    assert (expected.class_map.labels == 1).any() and (expected.class_map.labels == 2).any()
    out = tmp_path / "out"
    out.mkdir()
    argv = ["segment", str(level0), *CLASSES, "--templates", "none", "--min-area", "0"]
    argv += ["--out", str(out / "r.geojson"), "--out", str(out / "r.dcm")]
    assert main([*argv, "--dicom-kind", "both"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-3:] == [str(out / "r.geojson"), str(out / "r.dcm"), str(out / "r_ann.dcm")]
    # the Segmentation: each class's segment is the class's cells of the map
    mapped = expected.class_map
    cell = mapped.cell_size_level0
    assert mapped.origin_level0[0] % cell == 0 and mapped.origin_level0[1] % cell == 0
    seg = read_dicom_result(out / "r.dcm", source=level0)
    assert seg.kind == "SEG" and [i.name for i in seg.images] == ["tumor", "stroma", "adipose"]
    r0, c0 = mapped.origin_level0[1] // cell, mapped.origin_level0[0] // cell
    rows, cols = mapped.labels.shape
    for number, image in enumerate(seg.images, start=1):
        assert image.pixel_size == (cell, cell) and image.origin == (0.0, 0.0)
        placed = np.zeros(image.values.shape, bool)
        placed[r0 : r0 + rows, c0 : c0 + cols] = mapped.labels == number
        np.testing.assert_array_equal(image.values.astype(bool), placed)
    # the annotations: each class region's outline, as the GeoJSON has it
    geojson = json.loads((out / "r.geojson").read_text())
    outlines: dict[str, list[np.ndarray]] = {}
    for feature in geojson["features"]:
        name = feature["properties"]["classification"]["name"]
        if name != "uncertain":
            outlines.setdefault(name, []).append(np.array(feature["geometry"]["coordinates"][0]))
    ann = read_dicom_result(out / "r_ann.dcm", source=level0)
    assert ann.kind == "ANN" and {s.name for s in ann.shapes} == set(outlines)
    width, height = mapped.slide_dimensions
    for shapes in ann.shapes:
        assert len(shapes.shapes) == len(outlines[shapes.name])
        for polygon, ring in zip(shapes.shapes, outlines[shapes.name], strict=True):
            np.testing.assert_allclose(polygon, ring[:-1], atol=0.5)
            assert (polygon >= 0).all() and (polygon <= (width, height)).all()
    for path in (out / "r.dcm", out / "r_ann.dcm"):
        dataset = pydicom.dcmread(path, stop_before_pixels=True)
        assert "not for diagnosis" in dataset.ContentDescription
    if shutil.which("dciodvfy"):
        report = subprocess.run(
            ["dciodvfy", str(out / "r.dcm")], capture_output=True, text=True, timeout=60
        )
        assert [line for line in report.stderr.splitlines() if line.startswith("Error")] == []
    # --dicom-kind ann: the annotations alone, at the name given
    argv[-1] = str(out / "only.dcm")
    assert main([*argv, "--dicom-kind", "ann"]) == 0
    assert pydicom.dcmread(out / "only.dcm").Modality == "ANN"
    assert not (out / "only_ann.dcm").exists()
