"""`medvl heatmap SLIDE.dcm --out map.dcm --top N`: the map as a Parametric Map and the top
patches as bulk annotations beside it, equal to the heatmap the same command writes as npz; a
slide that is not DICOM is refused before any model loads."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest

from medvl_engine.cli.main import main

pytest.importorskip("highdicom")


@pytest.fixture(scope="module")
def dicom_slide(tmp_path_factory, demo_encoder):
    from tests.support.dicom_wsi import write_dicom_wsi

    demo_encoder()
    rgb = np.full((512, 640, 3), 235, np.uint8)
    rgb[96:416, 128:512] = (150, 60, 140)  # a stained block on white glass
    rgb[200:300, 250:400] = (90, 30, 110)
    return write_dicom_wsi(tmp_path_factory.mktemp("wsi"), rgb, mpp=0.5, tile=128)[0]


def test_dicom_outputs_hold_the_scores_and_top_patches(dicom_slide, tmp_path, capsys):
    from medvl_engine.io.dicom_results import read_dicom_result

    out = tmp_path / "map.dcm"
    argv = ["heatmap", str(dicom_slide), "--prompt", "tumor", "--top", "3"]
    assert main([*argv, "--out", str(out), "--out", str(tmp_path / "map.npz")]) == 0
    printed = capsys.readouterr().out.split()
    top = tmp_path / "map_top.dcm"
    assert str(out) in printed and str(top) in printed
    saved = np.load(tmp_path / "map.npz")
    (image,) = read_dicom_result(out, source=dicom_slide).images
    scores = saved["scores"]
    assert np.isfinite(image.values).sum() == np.isfinite(scores).sum()
    assert np.nanmax(image.values) == pytest.approx(float(np.nanmax(scores)), abs=1e-6)
    annotations = pydicom.dcmread(top)
    assert annotations.AnnotationGroupSequence[0].NumberOfAnnotations == 3
    assert "medvl-demo" in annotations.AnnotationGroupSequence[0].AnnotationGroupDescription
    for dataset in (annotations, pydicom.dcmread(out)):
        assert "synthetic data, not for diagnosis" in dataset.ContentDescription


def test_a_dicom_output_of_a_tiff_slide_is_one_sentence_before_any_model(tmp_path, capsys):
    from medvl_engine.synthetic import make_synthetic_slide

    slide = make_synthetic_slide(tmp_path / "s.tiff", seed=1, size=(256, 256)).path
    argv = ["heatmap", str(slide), "--prompt", "tumor", "--out", str(tmp_path / "m.dcm")]
    assert main([*argv, "--model", str(tmp_path / "no-such-model")]) == 2
    error = capsys.readouterr().err.strip()
    assert "DICOM outputs need a DICOM source" in error and "s.tiff" in error
    assert len(error.splitlines()) == 1
    assert not (tmp_path / "m.dcm").exists()
