"""EMBED manifest builder: synthetic EMBED-style tables, manifest read back by the reader."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from medvl_engine.cli.main import main
from medvl_engine.data.embed_manifest import (
    CLINICAL_COLUMNS,
    METADATA_COLUMNS,
    build_embed_manifest,
)
from medvl_engine.data.mammo_manifest import read_mammo_manifest, read_mammo_manifest_contents
from medvl_engine.errors import DataError

PREFIX = "/mnt/NAS2/mammo/anon_dicom/"


def _image(acc, side, view, cohort, roi="", kind="2D", spot="", name=None):
    name = name or f"{acc}_{side}_{view}.dcm"
    return {
        "acc_anon": acc,
        "empi_anon": "p" + acc,
        "anon_dicom_path": f"{PREFIX}cohort_{cohort}/{name}",
        "ImageLateralityFinal": side,
        "ViewPosition": view,
        "FinalImageType": kind,
        "spot_mag": spot,
        "ROI_coords": roi,
        "cohort_num": cohort,
    }


def _finding(acc, side, asses, den="", sev="", shape="", margin="", calc="", distri=""):
    return {
        "acc_anon": acc,
        "side": side,
        "asses": asses,
        "tissueden": den,
        "path_severity": sev,
        "massshape": shape,
        "massmargin": margin,
        "calcfind": calc,
        "calcdistri": distri,
    }


def _write(path: Path, columns, rows) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture
def tables(tmp_path):
    images = [
        # exam 1 (cohort 1): both breasts; right CC has one ROI box in EMBED's (y0, x0, y1, x1)
        _image("1", "L", "CC", 1),
        _image("1", "L", "MLO", 1),
        _image("1", "R", "CC", 1, roi="((100, 20, 300, 80),)"),
        _image("1", "R", "MLO", 1),
        _image("1", "R", "CC", 1, kind="cview", name="1_R_CC_cview.dcm"),
        _image("1", "R", "MLO", 1, spot="1", name="1_R_MLO_spot.dcm"),
        # exam 2 (cohort 8): left breast has XCCL instead of CC; right breast has no MLO
        _image("2", "L", "XCCL", 8),
        _image("2", "L", "MLO", 8),
        _image("2", "R", "CC", 8),
        # exam 3 (cohort 9): BI-RADS 0 on the left, 6 on the right -> both dropped
        _image("3", "L", "CC", 9),
        _image("3", "L", "MLO", 9),
        _image("3", "R", "CC", 9),
        _image("3", "R", "MLO", 9),
        # exam 4 (cohort 5): outside every split
        _image("4", "L", "CC", 5),
        _image("4", "L", "MLO", 5),
        # exam 5 (cohort 10): no clinical row
        _image("5", "L", "CC", 10),
        _image("5", "L", "MLO", 10),
        # exam 6 (cohort 10): side B row, density missing
        _image("6", "L", "CC", 10),
        _image("6", "L", "MLO", 10),
        _image("6", "R", "CC", 10),
        _image("6", "R", "MLO", 10),
    ]
    findings = [
        _finding("1", "L", "N", den="2"),
        _finding("1", "R", "B", den="2", sev="3", calc="K", distri="G"),
        _finding("1", "R", "M", den="2", sev="0", shape="X", margin="S"),
        _finding("2", "L", "S", den="4", sev="1", shape="Q"),
        _finding("3", "L", "A", den="1"),
        _finding("3", "R", "K", den="1"),
        _finding("4", "L", "N", den="3"),
        _finding("6", "B", "P", shape="B"),
    ]
    metadata = _write(tmp_path / "EMBED_OpenData_metadata.csv", METADATA_COLUMNS, images)
    clinical = _write(tmp_path / "EMBED_OpenData_clinical.csv", CLINICAL_COLUMNS, findings)
    return metadata, clinical, tmp_path


def test_labels_pairing_splits_and_rois(tables):
    metadata, clinical, root = tables
    out = root / "out" / "breasts.csv"
    out.parent.mkdir()
    counts = build_embed_manifest(metadata, clinical, root / "images", out)

    assert counts["images_read"] == 21
    assert counts["images_kept"] == 19  # the C-view and the spot view are left out
    assert counts["breasts_without_pair"] == 1  # exam 2 right: no MLO
    assert counts["views_substituted"] == 1  # exam 2 left: XCCL for CC
    assert counts["dropped_birads_0"] == 1 and counts["dropped_birads_6"] == 1
    assert counts["breasts_outside_splits"] == 1  # cohort 5
    assert counts["breasts_without_clinical"] == 1  # exam 5
    assert counts["breasts_written"] == 5
    assert (counts["breasts_train"], counts["breasts_val"], counts["breasts_test"]) == (2, 1, 2)
    assert counts["breasts_with_roi"] == 1 and counts["roi_boxes"] == 1

    records = {(r.exam_id, r.laterality): r for r in read_mammo_manifest(out)}
    assert sorted(records) == [("1", "L"), ("1", "R"), ("2", "L"), ("6", "L"), ("6", "R")]

    left, right = records[("1", "L")], records[("1", "R")]
    assert (left.birads, left.density, left.cancer, left.findings) == (1, "B", False, [])
    assert right.birads == 5 and right.cancer is True and right.density == "B"
    assert set(right.findings) == {"mass", "calcification"}
    assert right.cc_path == root / "images" / "cohort_1" / "1_R_CC.dcm"
    assert right.mlo_path == root / "images" / "cohort_1" / "1_R_MLO.dcm"
    assert right.roi_boxes == {"CC": [[20.0, 100.0, 80.0, 300.0]]}
    assert left.roi_boxes == {} and left.split == "train"

    substituted = records[("2", "L")]
    assert substituted.cc_path.name == "2_L_XCCL.dcm" and substituted.split == "val"
    assert substituted.findings == ["architectural distortion"]
    assert (substituted.birads, substituted.density, substituted.cancer) == (4, "D", True)

    for lateral in ("L", "R"):  # side B applies to both breasts
        both = records[("6", lateral)]
        assert (both.birads, both.density, both.cancer) == (3, None, False)
        assert both.findings == ["asymmetry"] and both.split == "test"
    with out.open(newline="") as handle:
        density_cells = [row["density"] for row in csv.DictReader(handle)]
    assert density_cells.count("") == 2


def test_configurable_splits_and_xyxy_order(tables):
    metadata, clinical, root = tables
    out = root / "breasts.csv"
    counts = build_embed_manifest(
        metadata,
        clinical,
        root / "images",
        out,
        splits={"train": (1, 5), "test": (8,)},
        roi_order="xyxy",
    )
    assert counts["breasts_outside_splits"] == 2  # exam 6 (cohort 10) both breasts
    contents = read_mammo_manifest_contents(out, "train")
    assert {(r.exam_id, r.laterality) for r in contents.records} == {
        ("1", "L"),
        ("1", "R"),
        ("4", "L"),
    }
    right = next(r for r in contents.records if r.laterality == "R")
    assert right.roi_boxes == {"CC": [[100.0, 20.0, 300.0, 80.0]]}
    assert [r.exam_id for r in read_mammo_manifest(out, "test")] == ["2"]


def test_missing_column_is_one_sentence(tables, capsys):
    metadata, clinical, root = tables
    rows = list(csv.DictReader(metadata.open(newline="")))
    columns = [c for c in METADATA_COLUMNS if c != "ViewPosition"]
    for row in rows:
        del row["ViewPosition"]
    _write(metadata, columns, rows)
    with pytest.raises(DataError, match="has no column ViewPosition"):
        build_embed_manifest(metadata, clinical, root, root / "m.csv")

    status = main(
        [
            "embed-manifest",
            "--metadata",
            str(metadata),
            "--clinical",
            str(clinical),
            "--image-root",
            str(root),
            "--out",
            str(root / "m.csv"),
        ]
    )
    error = capsys.readouterr().err.strip()
    assert status == 2
    assert len(error.splitlines()) == 1
    assert "EMBED metadata table" in error and "EMBED_OpenData_metadata.csv" in error
    assert "has no column ViewPosition" in error
    assert not (root / "m.csv").exists()


def test_command_writes_manifest(tables, capsys):
    metadata, clinical, root = tables
    out = root / "cli.csv"
    status = main(
        [
            "embed-manifest",
            "--metadata",
            str(metadata),
            "--clinical",
            str(clinical),
            "--image-root",
            str(root / "images"),
            "--out",
            str(out),
            "--train-cohorts",
            "1,2",
            "--val-cohorts",
            "8",
            "--test-cohorts",
            "9,10",
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0
    assert "wrote 5 breasts" in printed and "dropped_birads_0: 1" in printed
    assert len(read_mammo_manifest(out)) == 5


def test_unreadable_roi_names_the_cell(tables):
    metadata, clinical, root = tables
    rows = list(csv.DictReader(metadata.open(newline="")))
    rows[0]["ROI_coords"] = "((1, 2, 3"
    _write(metadata, METADATA_COLUMNS, rows)
    with pytest.raises(DataError, match="ROI_coords .* of accession 1 is not a list"):
        build_embed_manifest(metadata, clinical, root, root / "m.csv")
