"""Synthetic mammograms: DICOM files, lesion boxes, report form, BI-RADS consistency, cohorts."""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pydicom
import pytest

from medvl_engine.synthetic import (
    BIRADS_SENTENCES,
    CANCER_SENTENCES,
    DENSITY_SENTENCES,
    FINDING_TYPES,
    MAMMO_MANIFEST_COLUMNS,
    NEGATIVE_FINDINGS,
    birads_sentence,
    make_mammogram_case,
    make_mammogram_cohort,
)

SIZE = (384, 256)


def _mono2_values(path) -> tuple[pydicom.Dataset, np.ndarray]:
    """Modality values with dense tissue high, whatever the photometric interpretation."""
    ds = pydicom.dcmread(path)
    values = ds.pixel_array.astype(np.float64) * float(ds.RescaleSlope)
    values += float(ds.RescaleIntercept)
    if ds.PhotometricInterpretation == "MONOCHROME1":
        values = (2**ds.BitsStored - 1) * float(ds.RescaleSlope) - values
    return ds, values


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    out = tmp_path_factory.mktemp("mammo")
    return make_mammogram_case(
        out,
        seed=5,
        laterality="R",
        size=SIZE,
        findings=["mass", "calcification"],
        cancer=True,
        density="C",
        photometric="MONOCHROME1",
        write_png=True,
    )


def test_dicom_tags_and_pixels(case):
    for view, path in (("CC", case.cc_path), ("MLO", case.mlo_path)):
        ds = pydicom.dcmread(path)
        assert path.name == f"{case.exam_id}_R_{view}.dcm"
        assert ds.SOPClassUID == "1.2.840.10008.5.1.4.1.1.1.2"
        assert ds.Modality == "MG" and ds.ViewPosition == view and ds.ImageLaterality == "R"
        assert ds.PresentationIntentType == "FOR PRESENTATION"
        assert ds.PhotometricInterpretation == "MONOCHROME1"
        assert (ds.BitsAllocated, ds.BitsStored, ds.PixelRepresentation) == (16, 12, 0)
        assert (ds.Rows, ds.Columns) == SIZE
        assert "SYNTHETIC" in str(ds.PatientName) and ds.PatientID.startswith("SYNTH-")
        pixels = ds.pixel_array
        assert pixels.dtype == np.uint16 and pixels.max() <= 4095
        assert float(ds.WindowWidth) > 0 and ds.VOILUTFunction == "LINEAR"
        assert [float(v) for v in ds.PixelSpacing] == list(case.pixel_spacing)


def test_right_breast_is_mirrored_with_chest_wall_on_the_right(case):
    _, values = _mono2_values(case.cc_path)
    left_band, right_band = values[:, :10].mean(), values[:, -10:].mean()
    assert right_band > left_band + 200
    mask = case.breast_masks["CC"]
    assert mask[:, -1].mean() > 0.6 and mask[:, 0].mean() == 0


def test_boxes_lie_inside_the_breast_and_hold_the_lesions(case):
    assert case.box_findings["CC"] == ["mass", "calcification"]
    for view, path in (("CC", case.cc_path), ("MLO", case.mlo_path)):
        _, values = _mono2_values(path)
        mask = case.breast_masks[view]
        for (x0, y0, x1, y1), kind in zip(case.boxes[view], case.box_findings[view], strict=True):
            assert 0 <= x0 < x1 <= SIZE[1] and 0 <= y0 < y1 <= SIZE[0]
            assert mask[y0:y1, x0:x1].mean() > 0.95
            inside = values[y0:y1, x0:x1]
            pad = max(x1 - x0, y1 - y0)
            surround = np.concatenate(
                [
                    values[max(y0 - pad, 0) : y0, x0:x1].ravel(),
                    values[y1 : y1 + pad, x0:x1].ravel(),
                    values[y0:y1, max(x0 - pad, 0) : x0].ravel(),
                    values[y0:y1, x1 : x1 + pad].ravel(),
                ]
            )
            if kind == "calcification":  # fine pleomorphic: small, fainter than coarse ones
                assert np.percentile(inside, 99) > np.percentile(surround, 99) + 250
            else:  # masses may be as faint as dense tissue nearby, but sit above their surround
                assert inside.mean() > surround.mean() + 80


def test_lesions_sit_at_the_same_depth_in_both_views(case):
    for cc_box, mlo_box in zip(case.boxes["CC"], case.boxes["MLO"], strict=True):
        assert abs((cc_box[0] + cc_box[2]) / 2 - (mlo_box[0] + mlo_box[2]) / 2) <= 3


def test_report_follows_the_parsed_form(case):
    lines = case.report.split("\n")
    assert lines[0] == f"Density: {DENSITY_SENTENCES['C']}"
    assert lines[1].startswith("Findings: ") and "mass" in lines[1] and "calcifications" in lines[1]
    assert "right breast" in lines[1] and "left" not in case.report
    assert lines[3] == birads_sentence(case.birads) and case.birads in (4, 5)
    assert lines[4] == CANCER_SENTENCES[True]
    assert birads_sentence(4) == "BIRADS 4: S – Suspicious."


def test_png_copies_match_the_dicom_orientation(case):
    from PIL import Image

    png = np.asarray(Image.open(case.png_paths["CC"]))
    assert png.shape == SIZE and case.png_paths["CC"].name == f"{case.exam_id}_R_CC.png"
    _, values = _mono2_values(case.cc_path)
    assert np.corrcoef(png.ravel().astype(float), values.ravel())[0, 1] > 0.9


def test_negative_case_and_birads_consistency_over_many_seeds(tmp_path):
    for seed in range(12):
        c = make_mammogram_case(tmp_path, seed=seed, size=(192, 128))
        assert set(c.findings) <= set(FINDING_TYPES)
        assert len(c.boxes["CC"]) == len(c.boxes["MLO"]) == len(c.box_findings["CC"])
        assert birads_sentence(c.birads) in c.report
        assert CANCER_SENTENCES[c.cancer] in c.report
        if not c.findings:
            assert c.birads == 1 and not c.cancer and NEGATIVE_FINDINGS in c.report
        else:
            assert c.birads >= 2 and NEGATIVE_FINDINGS not in c.report
        if c.cancer:
            assert c.birads >= 4
            assert set(c.findings) & {"mass", "calcification", "architectural distortion"}
    assert sorted(BIRADS_SENTENCES) == [1, 2, 3, 4, 5]


def test_same_seed_same_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = make_mammogram_case(tmp_path / "a", seed=9, size=(192, 128))
    b = make_mammogram_case(tmp_path / "b", seed=9, size=(192, 128))
    for view in ("cc_path", "mlo_path"):
        assert (
            hashlib.sha256(getattr(a, view).read_bytes()).digest()
            == hashlib.sha256(getattr(b, view).read_bytes()).digest()
        )
    assert a.boxes == b.boxes and a.report == b.report


def test_contradictory_request_is_refused(tmp_path):
    with pytest.raises(ValueError, match="BI-RADS 1 contradicts"):
        make_mammogram_case(tmp_path, seed=1, size=(192, 128), findings=["mass"], birads=1)
    with pytest.raises(ValueError, match="needs at least one finding"):
        make_mammogram_case(tmp_path, seed=1, size=(192, 128), findings=[], cancer=True)


def test_monochrome1_and_monochrome2_decode_to_the_same_values(tmp_path):
    kinds = {}
    for photometric in ("MONOCHROME1", "MONOCHROME2"):
        (tmp_path / photometric).mkdir()
        c = make_mammogram_case(
            tmp_path / photometric, seed=3, size=(192, 128), photometric=photometric
        )
        kinds[photometric] = _mono2_values(c.cc_path)[1]
    assert np.abs(kinds["MONOCHROME1"] - kinds["MONOCHROME2"]).max() < 1e-6


def test_cohort_manifest(tmp_path):
    cases = make_mammogram_cohort(tmp_path, 6, seed=4, size=(192, 128))
    with open(tmp_path / "manifest.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == MAMMO_MANIFEST_COLUMNS and len(rows) == 6
    assert [r["laterality"] for r in rows] == ["L", "R"] * 3
    for row, c in zip(rows, cases, strict=True):
        assert json.loads(row["roi_boxes"]) == c.boxes
        assert row["findings"].split(";") == (c.findings or [""])
        assert int(row["birads"]) == c.birads and row["cancer"] == str(int(c.cancer))
        assert pydicom.dcmread(row["cc_path"]).ViewPosition == "CC"
    for k in range(0, 6, 2):
        left, right = rows[k], rows[k + 1]
        assert left["exam_id"] == right["exam_id"]
        assert (left["split"], left["density"]) == (right["split"], right["density"])


def test_denser_categories_give_more_fibroglandular_signal(tmp_path):
    means = []
    for density in "ABCD":
        (tmp_path / density).mkdir()
        c = make_mammogram_case(
            tmp_path / density,
            seed=8,
            size=(256, 160),
            findings=[],
            cancer=False,
            density=density,
            photometric="MONOCHROME2",
        )
        _, values = _mono2_values(c.cc_path)
        means.append(values[c.breast_masks["CC"]].mean())
        assert DENSITY_SENTENCES[density] in c.report
    assert all(b > a + 50 for a, b in zip(means, means[1:], strict=False)), means


def test_case_creates_its_output_folder(tmp_path):
    folder = tmp_path / "not" / "yet" / "there"
    case = make_mammogram_case(folder, seed=5, laterality="L", size=(256, 160))
    assert case.cc_path.parent == folder
    assert case.cc_path.exists() and case.mlo_path.exists()


def test_a_benign_cluster_whose_specks_all_fall_outside_its_window_is_still_drawn(tmp_path):
    # seed 100417 (validation case 414 of synthetic_seed 0) draws a benign calcification
    # whose two coarse specks both land beyond the lesion's window; it used to crash with
    # "zero-size array to reduction operation minimum"
    case = make_mammogram_case(tmp_path, seed=100_417, laterality="L", size=(320, 224))
    assert case.findings == ["calcification"] and not case.cancer
    for view in ("CC", "MLO"):
        (box,) = case.boxes[view]
        x0, y0, x1, y1 = box
        assert 2 <= x1 - x0 <= 43 and 2 <= y1 - y0 <= 43  # within the 43 px window
        _, values = _mono2_values(case.cc_path if view == "CC" else case.mlo_path)
        inside = values[y0:y1, x0:x1].max()
        around = values[max(y0 - 30, 0) : y1 + 30, max(x0 - 30, 0) : x1 + 30]
        assert inside >= np.percentile(around, 99)  # the specks are the brightest there
