"""open_mammogram: the DICOM pipeline order, metadata, plain images and bad files."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest
import tifffile
from PIL import Image

from medvl_engine.errors import (
    CorruptFileError,
    MedVLError,
    MissingDependencyError,
    UnsupportedFormatError,
)
from medvl_engine.io import open_mammogram
from medvl_engine.io.mammo import parse_file_name


def linear(x, center, width):
    """PS3.3 C.11.2.1.2.1 LINEAR, written out again for the expected values."""
    x = np.asarray(x, float)
    y = (x - (center - 0.5)) / (width - 1) + 0.5
    return np.clip(y, 0, 1)


def words(values):
    """LUT Data as 16-bit little-endian words (OW)."""
    return np.asarray(values, "<u2").tobytes()


def test_sample_film_mammogram_jpeg2000(sample_file):
    path = sample_file("dicom/MG1_J2KI.dcm")
    mammogram = open_mammogram(path)
    assert mammogram.shape == (4664, 3064)
    assert mammogram.pixels.dtype == np.float32
    assert mammogram.laterality == "L" and mammogram.view == "MLO"
    assert mammogram.modality == "RG" and mammogram.photometric == "MONOCHROME2"
    assert mammogram.pixel_spacing is None
    stored = pydicom.dcmread(path).pixel_array
    rows, cols = [0, 1000, 2500, 4663], [0, 1500, 2000, 3063]
    expected = linear(stored[rows, cols], 2047, 4095)
    assert mammogram.pixels[rows, cols] == pytest.approx(expected, abs=1e-6)
    assert "CompressedSamples" not in repr(mammogram.properties)
    assert mammogram.private_properties["PatientID"] == "3MG1"


def test_sample_dx_monochrome1_is_inverted_after_the_window(sample_file):
    path = sample_file("dicom/dx_image.dcm")
    mammogram = open_mammogram(path)
    stored = pydicom.dcmread(path).pixel_array
    assert mammogram.shape == (169, 211)
    expected = 1.0 - linear(stored, 128, 256)  # rescale 1 / 0, window 128 / 256
    assert mammogram.pixels == pytest.approx(expected, abs=1e-6)
    assert mammogram.laterality == "L"
    assert mammogram.pixel_spacing == pytest.approx((1.2, 1.2012))
    assert mammogram.presentation_intent == "FOR PRESENTATION"
    assert mammogram.photometric == "MONOCHROME1"
    assert "Dog" not in repr(mammogram.properties)


def test_modality_lut_then_selected_window_then_inversion(tmp_path, write_dicom):
    stored = np.array([[0, 1000, 2000], [3000, 4000, 4095]], np.uint16)
    path = write_dicom(
        tmp_path / "m.dcm",
        stored,
        PhotometricInterpretation="MONOCHROME1",
        RescaleSlope=2,
        RescaleIntercept=-100,
        WindowCenter=[4000, 2000],
        WindowWidth=[8000, 2000],
        WindowCenterWidthExplanation=["WIDE", "NARROW"],
        VOILUTFunction="LINEAR_EXACT",
        ImageLaterality="R",
        ViewPosition="CC",
        PixelSpacing=[0.07, 0.065],
        PresentationIntentType="FOR PRESENTATION",
    )
    values = stored * 2.0 - 100
    for index, (center, width) in enumerate([(4000, 8000), (2000, 2000)]):
        mammogram = open_mammogram(path, voi_index=index)
        exact = np.clip((values - center) / width + 0.5, 0, 1)
        assert mammogram.pixels == pytest.approx(1 - exact, abs=1e-6)
    assert mammogram.voi_choices == [
        "window 4000/8000 LINEAR_EXACT (WIDE)",
        "window 2000/2000 LINEAR_EXACT (NARROW)",
    ]
    assert (mammogram.laterality, mammogram.view) == ("R", "CC")
    assert mammogram.pixel_spacing == pytest.approx((0.07, 0.065))
    with pytest.raises(MedVLError, match=r"m\.dcm: VOI choice 2 does not exist.*pick 0\.\.1"):
        open_mammogram(path, voi_index=2)


def test_signed_stored_values(tmp_path, write_dicom):
    stored = np.array([[-2000, -1000], [0, 1500]], np.int16)
    path = write_dicom(
        tmp_path / "signed.dcm",
        stored,
        RescaleSlope=1,
        RescaleIntercept=1000,
        WindowCenter=1000,
        WindowWidth=2001,
    )
    expected = linear(stored.astype(float) + 1000, 1000, 2001)
    assert open_mammogram(path).pixels == pytest.approx(expected, abs=1e-6)
    full_range = open_mammogram(write_dicom(tmp_path / "plain.dcm", stored)).pixels
    assert full_range == pytest.approx((stored + 2000.0) / 3500.0, abs=1e-6)


def test_presentation_lut_shape_inverse_inverts_monochrome2_once(tmp_path, write_dicom):
    stored = np.array([[0, 1000], [2000, 4095]], np.uint16)
    common = {"WindowCenter": 2048, "WindowWidth": 4096}
    plain = open_mammogram(write_dicom(tmp_path / "a.dcm", stored, **common)).pixels
    inverse = write_dicom(tmp_path / "b.dcm", stored, PresentationLUTShape="INVERSE", **common)
    assert open_mammogram(inverse).pixels == pytest.approx(1 - plain, abs=1e-6)
    both = write_dicom(
        tmp_path / "c.dcm",
        stored,
        PhotometricInterpretation="MONOCHROME1",
        PresentationLUTShape="INVERSE",
        **common,
    )
    assert open_mammogram(both).pixels == pytest.approx(1 - plain, abs=1e-6)


def test_sigmoid_window(tmp_path, write_dicom):
    stored = np.array([[1000, 1500], [2000, 2500]], np.uint16)
    path = write_dicom(
        tmp_path / "s.dcm", stored, WindowCenter=1500, WindowWidth=1000, VOILUTFunction="SIGMOID"
    )
    expected = 1 / (1 + np.exp(-4 * (stored.astype(float) - 1500) / 1000))
    assert open_mammogram(path).pixels == pytest.approx(expected, abs=1e-6)


def test_modality_and_voi_lut_sequences(tmp_path, write_dicom):
    stored = np.array([[0, 1], [2, 3]], np.uint16)
    path = write_dicom(
        tmp_path / "lut.dcm",
        stored,
        ModalityLUTSequence=[
            {
                "LUTDescriptor": [4, 0, 16],
                "ModalityLUTType": "US",
                "LUTData": words([10, 20, 21, 40]),
            }
        ],
        VOILUTSequence=[
            {"LUTDescriptor": [3, 20, 8], "LUTData": words([0, 51, 255]), "LUTExplanation": "SOFT"}
        ],
    )
    mammogram = open_mammogram(path)
    # stored -> modality LUT (10, 20, 21, 40) -> VOI LUT mapping 20, 21, 22 to 0, 51, 255 of 255;
    # 10 is below the first mapped value (first entry), 40 above the last (last entry)
    assert mammogram.pixels.ravel() == pytest.approx([0, 0, 0.2, 1.0])
    assert mammogram.voi_choices == ["VOI LUT 1 (SOFT)"]


def test_without_voi_the_full_range_is_used(tmp_path, write_dicom):
    stored = np.array([[100, 200], [300, 500]], np.uint16)
    mammogram = open_mammogram(write_dicom(tmp_path / "a_L_MLO.dcm", stored))
    assert mammogram.pixels == pytest.approx(np.array([[0, 0.25], [0.5, 1.0]]))
    assert mammogram.voi == "full range"
    assert (mammogram.laterality, mammogram.view) == ("L", "MLO")  # from the file name


def test_view_code_sequence_meaning(tmp_path, write_dicom):
    path = write_dicom(
        tmp_path / "v.dcm",
        np.zeros((4, 4), np.uint16),
        Laterality="R",
        ViewCodeSequence=[{"CodeValue": "R-10226", "CodeMeaning": "medio-lateral oblique"}],
        ImagerPixelSpacing=[0.1, 0.1],
    )
    mammogram = open_mammogram(path)
    assert (mammogram.laterality, mammogram.view) == ("R", "MLO")
    assert mammogram.pixel_spacing == (0.1, 0.1)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("1_L_CC.png", ("L", "CC")),
        ("case7-RMLO.dcm", ("R", "MLO")),
        ("right_cc_2.tif", ("R", "CC")),
        ("LEFT MLO.png", ("L", "MLO")),
        ("scan.png", (None, None)),
    ],
)
def test_file_name_laterality_and_view(name, expected):
    assert parse_file_name(name) == expected


def test_png_8_and_16_bit_and_tiff(tmp_path):
    eight = np.array([[0, 51], [204, 255]], np.uint8)
    Image.fromarray(eight).save(tmp_path / "1_L_CC.png")
    mammogram = open_mammogram(tmp_path / "1_L_CC.png")
    assert mammogram.pixels == pytest.approx(eight / 255)
    assert (mammogram.laterality, mammogram.view) == ("L", "CC")

    sixteen = np.array([[1000, 2000], [3000, 5000]], np.uint16)
    Image.fromarray(sixteen).save(tmp_path / "2_R_MLO.png")
    mammogram = open_mammogram(tmp_path / "2_R_MLO.png")
    assert mammogram.pixels == pytest.approx(np.array([[0, 0.25], [0.5, 1.0]]))
    assert (mammogram.laterality, mammogram.view) == ("R", "MLO")

    tifffile.imwrite(tmp_path / "3_R_CC.tif", sixteen)
    assert open_mammogram(tmp_path / "3_R_CC.tif").pixels == pytest.approx(
        np.array([[0, 0.25], [0.5, 1.0]])
    )


def test_dicom_without_pixel_data(tmp_path, write_dicom):
    path = write_dicom(tmp_path / "report.dcm", None, Modality="SR")
    with pytest.raises(UnsupportedFormatError, match=r"^report\.dcm: .*\(SR\) has no Pixel Data"):
        open_mammogram(path)


def test_transfer_syntax_without_any_decoder(tmp_path, write_dicom):
    path = write_dicom(
        tmp_path / "video.dcm",
        np.zeros((4, 4), np.uint16),
        transfer_syntax="1.2.840.10008.1.2.4.100",  # MPEG2: pydicom has no decoder
    )
    with pytest.raises(MissingDependencyError, match=r"^video\.dcm: .*MPEG2.*no pixel decoder"):
        open_mammogram(path)


def test_missing_decoder_plugin_is_named(tmp_path, sample_file, monkeypatch):
    import pydicom.pixels.decoders.base

    class Unavailable:
        is_available = False

    monkeypatch.setattr(pydicom.pixels.decoders.base, "get_decoder", lambda uid: Unavailable())
    path = sample_file("dicom/MG1_J2KI.dcm")
    with pytest.raises(MissingDependencyError, match="install pylibjpeg-openjpeg"):
        open_mammogram(path)


def test_not_an_image_and_damaged_files(tmp_path, sample_file):
    (tmp_path / "notes.dcm").write_text("this is a note, not DICOM")
    with pytest.raises(UnsupportedFormatError, match=r"^notes\.dcm: not a DICOM file"):
        open_mammogram(tmp_path / "notes.dcm")
    (tmp_path / "notes.txt").write_text("plain text")
    with pytest.raises(UnsupportedFormatError, match=r"^notes\.txt: not a mammogram format"):
        open_mammogram(tmp_path / "notes.txt")
    data = sample_file("dicom/MG1_J2KI.dcm").read_bytes()
    (tmp_path / "cut.dcm").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match=r"^cut\.dcm: "):
        open_mammogram(tmp_path / "cut.dcm")
    with pytest.raises(MedVLError, match="no such file"):
        open_mammogram(tmp_path / "absent.dcm")
