"""CC/MLO pair checks from DICOM tags (patient, study, laterality, view), refused in words."""

from __future__ import annotations

import dataclasses

import pydicom
import pytest

from medvl_engine.cli.main import main
from medvl_engine.io.mammo import (
    PairMismatchError,
    breast_image,
    check_pair,
    chest_wall_side,
    open_mammogram,
)
from medvl_engine.synthetic import make_mammogram_case


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """Two synthetic left-breast examinations of two patients (DICOM, 256 x 160 px)."""
    folder = tmp_path_factory.mktemp("pairs")
    first = make_mammogram_case(folder, seed=1, laterality="L", size=(256, 160), exam_id="e1")
    second = make_mammogram_case(folder, seed=2, laterality="L", size=(256, 160), exam_id="e2")
    return first, second


def _rewrite(source, target, **tags):
    """Copy a DICOM file, changing the given tags (keyword=value)."""
    dataset = pydicom.dcmread(source)
    for keyword, value in tags.items():
        setattr(dataset, keyword, value)
    dataset.save_as(target)
    return target


def test_views_of_one_examination_pair(cases):
    first, _ = cases
    cc, mlo = open_mammogram(first.cc_path), open_mammogram(first.mlo_path)
    assert cc.private_properties["PatientID"] == mlo.private_properties["PatientID"]
    assert "StudyInstanceUID" in cc.private_properties  # identifying: kept apart
    assert "StudyInstanceUID" not in cc.properties
    check_pair(cc, mlo)
    assert breast_image(cc, mlo).image.shape == (1536, 1536)


def test_views_of_two_patients_are_refused_without_naming_them(cases):
    first, second = cases
    cc, mlo = open_mammogram(first.cc_path), open_mammogram(second.mlo_path)
    with pytest.raises(PairMismatchError) as caught:
        breast_image(cc, mlo)
    message = str(caught.value)
    assert message.startswith(
        f"{first.cc_path.name} and {second.mlo_path.name} are from different patients"
    )
    assert cc.private_properties["PatientID"] not in message
    assert mlo.private_properties["PatientID"] not in message


def test_same_patient_other_study_is_refused(cases, tmp_path):
    first, _ = cases
    other = _rewrite(first.mlo_path, tmp_path / "later_L_MLO.dcm", StudyInstanceUID="1.2.3.4.5")
    with pytest.raises(PairMismatchError, match="different studies"):
        breast_image(open_mammogram(first.cc_path), open_mammogram(other))


def test_other_breast_is_refused(cases, tmp_path):
    first, _ = cases
    right = _rewrite(first.mlo_path, tmp_path / "view_MLO.dcm", ImageLaterality="R")
    with pytest.raises(PairMismatchError, match=r"\(L\) and view_MLO.dcm \(R\) are different"):
        breast_image(open_mammogram(first.cc_path), open_mammogram(right))


def test_two_views_of_one_kind_swapped_views_and_one_file_twice_are_refused(cases, tmp_path):
    first, _ = cases
    cc, mlo = open_mammogram(first.cc_path), open_mammogram(first.mlo_path)
    second_cc = open_mammogram(_rewrite(first.cc_path, tmp_path / "again_L_CC.dcm"))
    with pytest.raises(PairMismatchError, match="same kind of view"):
        breast_image(cc, second_cc)
    with pytest.raises(PairMismatchError, match="views are swapped; give the CC view first"):
        breast_image(mlo, cc)
    with pytest.raises(PairMismatchError, match="given as both the CC and the MLO view"):
        breast_image(cc, open_mammogram(first.cc_path))
    unknown = dataclasses.replace(mlo, view=None, path=tmp_path / "scan.png")
    with pytest.raises(PairMismatchError, match="is a MLO view but was given as the CC view"):
        check_pair(mlo, unknown)


def test_sample_mammogram_with_an_unrelated_radiograph_is_refused(sample_file):
    film = open_mammogram(sample_file("dicom/MG1_J2KI.dcm"))  # L MLO, film mammogram
    other = open_mammogram(sample_file("dicom/dx_image.dcm"))  # L, another patient's DX
    assert (film.view, film.laterality, other.laterality) == ("MLO", "L", "L")
    with pytest.raises(PairMismatchError) as caught:
        breast_image(other, film)
    assert "dx_image.dcm and MG1_J2KI.dcm are from different patients" in str(caught.value)


def test_cli_refuses_a_mismatched_pair_in_one_sentence(cases, tmp_path, capsys):
    first, second = cases
    code = main(
        [
            "topk",
            str(first.cc_path),
            str(second.mlo_path),
            "--model",
            str(tmp_path / "unused-model"),
            "--out",
            str(tmp_path / "boxes.csv"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "are from different patients" in err and "Traceback" not in err
    assert not (tmp_path / "boxes.csv").exists()


@pytest.mark.parametrize("laterality", ["L", "R"])
def test_chest_wall_side_of_synthetic_views(tmp_path, laterality):
    case = make_mammogram_case(tmp_path, seed=4, laterality=laterality, size=(256, 160))
    cc, mlo = open_mammogram(case.cc_path), open_mammogram(case.mlo_path)
    placements = breast_image(cc, mlo).placements
    expected = "right" if laterality == "R" else "left"
    for view, mammogram in (("CC", cc), ("MLO", mlo)):
        assert chest_wall_side(mammogram.pixels, None) == expected
        assert chest_wall_side(mammogram.pixels[:, ::-1], None) != expected
        # the breast image flips exactly the views whose chest wall is on the right
        assert placements[view].flipped == (expected == "right")
