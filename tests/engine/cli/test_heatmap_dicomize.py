"""`medvl heatmap SLIDE --out map.dcm` with --dicomize (a non-DICOM slide converted to the
DICOM series the outputs reference) and --pyramid (the map with its coarser levels): what is
refused before any model loads, and what is written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pydicom
import pytest

from medvl_engine.cli.main import main

pytest.importorskip("highdicom")

SAMPLE_SVS = (
    Path(__file__).resolve().parents[3].parent
    / "shared"
    / "sample-data"
    / "slides"
    / "CMU-1-Small-Region.svs"
)
NO_MODEL = ["--model", "no-such-model-folder"]


def _dciodvfy_errors(path: Path) -> list[str]:
    report = subprocess.run(["dciodvfy", str(path)], capture_output=True, text=True, timeout=120)
    return [line for line in report.stderr.splitlines() if line.startswith("Error")]


def _one_sentence(capsys) -> str:
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    return error


@pytest.fixture(scope="module")
def tiff_slide(tmp_path_factory, write_svs) -> Path:
    rgb = np.full((128, 128, 3), 235, np.uint8)
    return Path(write_svs(tmp_path_factory.mktemp("svs") / "s.svs", rgb, tile=64))


@pytest.fixture(scope="module")
def dicom_slide(tmp_path_factory) -> Path:
    from tests.support.dicom_wsi import write_dicom_wsi

    rgb = np.full((512, 640, 3), 235, np.uint8)
    rgb[96:416, 128:512] = (150, 60, 140)
    return write_dicom_wsi(tmp_path_factory.mktemp("wsi"), rgb, mpp=0.5, tile=128)[0]


def test_the_refusal_of_a_non_dicom_slide_names_dicomize(tiff_slide, tmp_path, capsys):
    argv = ["heatmap", str(tiff_slide), "--prompt", "tumor", "--out", str(tmp_path / "m.dcm")]
    assert main([*argv, *NO_MODEL]) == 2
    error = _one_sentence(capsys)
    assert "s.svs is not a DICOM whole-slide image" in error
    assert "--dicomize" in error
    assert list(tmp_path.iterdir()) == []


def test_dicomize_is_refused_for_a_dicom_slide_and_without_a_dcm_output(
    tiff_slide, dicom_slide, tmp_path, capsys
):
    out = str(tmp_path / "m.dcm")
    argv = ["heatmap", str(dicom_slide), "--prompt", "tumor", "--out", out, "--dicomize"]
    assert main([*argv, *NO_MODEL]) == 2
    assert "already a DICOM whole-slide image; leave out --dicomize" in _one_sentence(capsys)
    argv = ["heatmap", str(tiff_slide), "--prompt", "tumor", "--out", str(tmp_path / "m.npz")]
    assert main([*argv, "--pyramid", *NO_MODEL]) == 2
    assert "--pyramid shapes a DICOM output" in _one_sentence(capsys)
    argv = ["heatmap", str(dicom_slide), "--prompt", "tumor", "--out", out, "--pyramid"]
    assert main([*argv, "--dicom-kind", "seg", *NO_MODEL]) == 2
    assert "leave it out with --dicom-kind seg" in _one_sentence(capsys)
    assert list(tmp_path.iterdir()) == []


def test_dicomize_folders_that_hold_files_or_the_output_are_refused(tiff_slide, tmp_path, capsys):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x.dcm").write_bytes(b"old")
    argv = ["heatmap", str(tiff_slide), "--prompt", "tumor", *NO_MODEL]
    assert main([*argv, "--out", str(tmp_path / "m.dcm"), "--dicomize", str(taken)]) == 2
    assert "taken already holds files" in _one_sentence(capsys)
    inside = ["--out", str(tmp_path / "conv" / "m.dcm"), "--dicomize", str(tmp_path / "conv")]
    assert main([*argv, *inside]) == 2
    assert "lies inside the --dicomize folder" in _one_sentence(capsys)
    assert main([*argv, "--out", str(tmp_path / "m.dcm"), "--dicomize", str(tiff_slide)]) == 2
    assert "s.svs" in _one_sentence(capsys)
    assert (taken / "x.dcm").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.skipif(shutil.which("dciodvfy") is None, reason="dciodvfy is not installed")
def test_pyramid_writes_valid_levels_of_one_series(dicom_slide, tmp_path, capsys):
    import argparse

    from medvl_engine.cli._pathology import add_dicom_arguments, write_outputs
    from medvl_engine.export.dicom.wsi_pmap import halve_map
    from medvl_engine.heatmap import Heatmap
    from medvl_engine.io.dicom_results import read_dicom_result

    parser = argparse.ArgumentParser()
    add_dicom_arguments(parser)
    out = tmp_path / "map.dcm"
    args = parser.parse_args(["--pyramid"])
    args.out, args.top, args.command = [out], 0, "heatmap"
    grid = np.random.default_rng(0).random((512, 640)).astype(np.float32)
    grid[:100, :100] = np.nan  # no tissue
    heatmap = Heatmap(
        grid=grid,
        scores=grid[np.isfinite(grid)],
        origin_level0=(0, 0),
        cell_size_level0=1,  # one cell per level-0 px: 640 x 512 needs two halvings
        scale=(0.5, 0.5),
        translate=(0.0, 0.0),
        units="um",
        prompt="tumor",
        value_range=(0.0, 1.0),
        metadata={"encoder": "medvl-demo"},
    )
    written = write_outputs(args, heatmap, None, dicom_slide)
    assert [p.name for p in written] == ["map.dcm", "map-level1.dcm", "map-level2.dcm"]
    assert capsys.readouterr().out.split() == [str(p) for p in written]
    headers = [pydicom.dcmread(p, stop_before_pixels=True) for p in written]
    assert len({h.PyramidUID for h in headers}) == 1
    assert len({h.SeriesInstanceUID for h in headers}) == 1
    assert [(h.TotalPixelMatrixColumns, h.TotalPixelMatrixRows) for h in headers] == [
        (640, 512),
        (320, 256),
        (160, 128),
    ]
    for path in written:
        assert _dciodvfy_errors(path) == []
    images = [read_dicom_result(p, source=dicom_slide).images[0] for p in written]
    np.testing.assert_array_equal(images[0].values, grid)
    assert images[2].pixel_size == (4, 4)
    np.testing.assert_array_equal(images[2].values, halve_map(halve_map(grid)))


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLE_SVS.is_file(), reason="sample data (shared/sample-data) is absent")
def test_dicomize_converts_the_svs_and_the_outputs_line_up_with_it(demo_encoder, tmp_path, capsys):
    pytest.importorskip("wsidicomizer")
    from medvl_engine.io.dicom_results import read_dicom_result
    from medvl_engine.io.dicom_results.source import dicom_image_source

    demo_encoder()
    out = tmp_path / "out" / "map.dcm"
    argv = ["heatmap", str(SAMPLE_SVS), "--prompt", "tumor", "--top", "3", "--dicomize"]
    assert main([*argv, "--out", str(out), "--out", str(tmp_path / "out" / "map.npz")]) == 0
    folder = tmp_path / "out" / "CMU-1-Small-Region_dicom"
    printed = capsys.readouterr().out.split()
    assert printed[0] == str(folder)
    source = dicom_image_source(folder)
    assert source.size == (2220, 2967)
    assert {p.name for p in tmp_path.joinpath("out").iterdir()} == {
        "CMU-1-Small-Region_dicom",
        "map.dcm",
        "map_top.dcm",
        "map.npz",
    }
    level0 = pydicom.dcmread(source.path, stop_before_pixels=True)
    pmap = pydicom.dcmread(out, stop_before_pixels=True)
    assert pmap.FrameOfReferenceUID == level0.FrameOfReferenceUID
    annotations = pydicom.dcmread(tmp_path / "out" / "map_top.dcm")
    referenced = annotations.ReferencedImageSequence[0].ReferencedSOPInstanceUID
    assert referenced == level0.SOPInstanceUID
    for result in (pmap, annotations):
        assert result.StudyInstanceUID == level0.StudyInstanceUID
    if shutil.which("dciodvfy"):
        assert _dciodvfy_errors(out) == []
        # dicom3tools 1.00~20220618 flags an absent Common Z Coordinate Value on 2D
        # annotations (where the standard wants it absent); nothing else may be reported
        errors = _dciodvfy_errors(tmp_path / "out" / "map_top.dcm")
        assert all("<CommonZCoordinateValue> = <>" in line for line in errors), errors
    saved = np.load(tmp_path / "out" / "map.npz")
    assert tuple(saved["slide_dimensions"]) == source.size  # the converted grid is the slide's
    (image,) = read_dicom_result(out, source=folder).images
    cell = int(saved["cell_size_level0"])
    assert image.pixel_size == (cell, cell)
    assert image.values.shape == (-(-2967 // cell), -(-2220 // cell))  # covers the slide
    at_patches = [
        image.values[(y - int(image.origin[1])) // cell, (x - int(image.origin[0])) // cell]
        for x, y in saved["coords"]
    ]
    np.testing.assert_array_equal(at_patches, saved["scores"])
    assert np.isfinite(image.values).sum() == len(saved["scores"])
    (shapes,) = read_dicom_result(tmp_path / "out" / "map_top.dcm", source=folder).shapes
    corners = np.array([[*s.min(0), *s.max(0)] for s in shapes.shapes])
    best = np.argsort(-saved["scores"], kind="stable")[:3]
    size = int(saved["patch_size_level0"])
    expected = np.concatenate([saved["coords"][best], saved["coords"][best] + size], axis=1)
    np.testing.assert_allclose(corners, expected)


def test_dicom_kind_seg_writes_the_heatmap_as_a_fractional_segmentation(dicom_slide, tmp_path):
    import argparse

    from medvl_engine.cli._pathology import add_dicom_arguments, write_outputs
    from medvl_engine.heatmap import Heatmap

    parser = argparse.ArgumentParser()
    add_dicom_arguments(parser)
    args = parser.parse_args(["--dicom-kind", "seg"])
    args.out, args.top, args.command = [tmp_path / "map.dcm"], 0, "heatmap"
    grid = np.array([[np.nan, 0.0, 0.5], [1.0, 0.25, 0.75]], np.float32)
    heatmap = Heatmap(
        grid=grid,
        scores=grid[np.isfinite(grid)],
        origin_level0=(0, 0),
        cell_size_level0=224,
        scale=(112.0, 112.0),
        translate=(0.0, 0.0),
        units="um",
        prompt="tumor",
        mode="softmax",
        value_range=(0.0, 1.0),
        metadata={"encoder": "medvl-demo"},
    )
    (written,) = write_outputs(args, heatmap, None, dicom_slide)
    dataset = pydicom.dcmread(written)
    assert dataset.SOPClassUID == "1.2.840.10008.5.1.4.1.1.66.4"  # Segmentation Storage
    assert dataset.SegmentationType == "FRACTIONAL"
    assert (dataset.TotalPixelMatrixColumns, dataset.TotalPixelMatrixRows) == (3, 3)


def test_a_level_off_the_powers_of_two_is_found():
    from medvl_engine.export.dicom.dicomize import first_odd_level

    assert first_odd_level([1.0, 2.0, 4.0, 16.0, 32.000_9]) is None
    assert first_odd_level([1.0, 2.0, 4.016129, 8.086312]) == 3  # boxes.tiff: 37 x 31 px of 300
    assert first_odd_level([1.0, 3.0]) == 1


@pytest.mark.skipif(not SAMPLE_SVS.is_file(), reason="sample data (shared/sample-data) is absent")
def test_slides_that_cannot_be_converted_are_one_sentence_and_leave_nothing(tmp_path):
    pytest.importorskip("wsidicomizer")
    from medvl_engine.errors import ExportError
    from medvl_engine.export.dicom.dicomize import dicomize_slide

    samples = SAMPLE_SVS.parents[1]
    with pytest.raises(ExportError) as caught:
        dicomize_slide(samples / "bad" / "unreadable.svs", tmp_path / "a", workers=1)
    assert str(caught.value) == "Cannot convert unreadable.svs to DICOM: Bogus marker length."
    with pytest.raises(ExportError, match=r"its level 3 \(37 x 31 px\) is a downsample of 8.086"):
        dicomize_slide(samples / "slides" / "boxes.tiff", tmp_path / "b", workers=1)
    assert list(tmp_path.iterdir()) == []
