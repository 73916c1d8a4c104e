"""Pieces of the TopK DICOM export that need no model: the VOI kept, the codes, the sources."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest

pytest.importorskip("highdicom")

from medvl_engine.errors import ExportError  # noqa: E402
from medvl_engine.export.dicom.common import (  # noqa: E402
    require_dicom,
    source_reference,
)
from medvl_engine.export.dicom.mammo_codes import (  # noqa: E402
    class_code,
    probability_concept,
    task_concept,
)
from medvl_engine.export.dicom.mammo_gsps import voi_transformations  # noqa: E402
from medvl_engine.io.mammo import Mammogram  # noqa: E402


def _two_window_header() -> pydicom.Dataset:
    header = pydicom.Dataset()
    header.WindowCenter = ["2000", "1500"]
    header.WindowWidth = ["4000", "800"]
    header.WindowCenterWidthExplanation = ["NORMAL", "HARDER"]
    header.VOILUTFunction = "SIGMOID"
    item = pydicom.Dataset()
    item.LUTDescriptor = [4, 0, 8]
    item.LUTData = [0, 80, 160, 255]
    item.LUTExplanation = "TABLE"
    header.VOILUTSequence = [item]
    return header


def _view(voi: str, choices: list[str]) -> Mammogram:
    return Mammogram(
        path=Path("v.dcm"), pixels=np.zeros((2, 2), np.float32), voi=voi, voi_choices=choices
    )


@pytest.mark.parametrize("chosen", [0, 1])
def test_the_presentation_state_keeps_the_window_the_view_was_shown_with(chosen):
    choices = ["window A", "window B", "VOI LUT 1"]
    (voi,) = voi_transformations(_two_window_header(), _view(choices[chosen], choices))
    assert float(voi.WindowCenter) == [2000.0, 1500.0][chosen]
    assert float(voi.WindowWidth) == [4000.0, 800.0][chosen]
    assert voi.WindowCenterWidthExplanation == ["NORMAL", "HARDER"][chosen]
    assert voi.VOILUTFunction == "SIGMOID"


def test_a_chosen_voi_table_is_kept_and_full_range_leaves_the_viewer_default():
    choices = ["window A", "window B", "VOI LUT 1"]
    (voi,) = voi_transformations(_two_window_header(), _view("VOI LUT 1", choices))
    table = voi.VOILUTSequence[0]
    assert [int(v) for v in table.LUTDescriptor][:2] == [4, 0]
    assert "WindowCenter" not in voi
    assert voi_transformations(pydicom.Dataset(), _view("full range", [])) is None


def test_readouts_get_standard_codes_and_others_valid_private_ones():
    assert (task_concept("density").value, task_concept("density").scheme_designator) == (
        "129715009",
        "SCT",
    )
    assert class_code("birads", "5").value == "397145000"
    assert class_code("mass", "positive").value == "10828004"
    assert probability_concept("cancer", "positive").value == "111047"
    odd = probability_concept("skin thickening of the left breast", "probably yes")
    assert odd.scheme_designator == "99MEDVL" and len(odd.value) <= 16
    assert len(odd.meaning) <= 64
    assert task_concept("skin thickening").scheme_designator == "99MEDVL"
    assert probability_concept("density", "A").value != probability_concept("density", "B").value


def test_a_colour_or_non_dicom_source_is_refused_in_one_sentence(tmp_path):
    png = tmp_path / "view.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(200))
    with pytest.raises(ExportError, match="DICOM outputs need DICOM sources"):
        require_dicom({"CC": png})
    colour = tmp_path / "colour.dcm"
    ds = pydicom.Dataset()
    ds.SOPClassUID = pydicom.uid.SecondaryCaptureImageStorage
    ds.SOPInstanceUID = ds.StudyInstanceUID = ds.SeriesInstanceUID = pydicom.uid.generate_uid()
    ds.SamplesPerPixel = 3
    ds.Rows = ds.Columns = 2
    ds.file_meta = pydicom.dataset.FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    ds.save_as(colour, enforce_file_format=True)
    with pytest.raises(ExportError, match="colour image") as caught:
        source_reference(colour)
    assert str(caught.value).count(". ") == 0
