"""Damaged, odd and lying DICOM slides and mammograms: a sentence in words, never wrong pixels."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading

import imagecodecs
import numpy as np
import pydicom
import pytest
from pydicom.encaps import encapsulate
from pydicom.uid import JPEGBaseline8Bit, generate_uid

from medvl_engine.cli.main import main
from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io import open_mammogram, open_slide

RAW_PYTHON_TEXT = (
    "object has no attribute",
    "out of range",
    "division by zero",
    "could not convert",
    "invalid literal",
    "unsupported operand",
    "not subscriptable",
    "Expected total bytes",
    "NoneType",
    "KeyError",
    "Traceback",
)


def info_error(capsys, path) -> str:
    """`medvl info PATH` must exit 2; its stderr (one sentence) is returned."""
    capsys.readouterr()
    assert main(["info", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def info_json(capsys, path) -> dict:
    """`medvl info --json PATH` must exit 0; its one description is returned."""
    capsys.readouterr()
    assert main(["info", "--json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)[0]


def assert_words_only(message: str) -> None:
    for fragment in RAW_PYTHON_TEXT:
        assert fragment not in message, f"raw Python text {fragment!r} in: {message}"


@pytest.fixture(scope="session")
def edited_sm_dicom(write_sm_dicom, coordinate_image):
    """``edited_sm_dicom(tmp_path, name, edit, image=None, tile=32)`` -> a synthetic DICOM WSI
    instance whose header ``edit(dataset)`` changed, alone in a folder."""

    def edited_sm(tmp_path, name: str, edit, image=None, tile: int = 32):
        folder = tmp_path / name
        folder.mkdir()
        image = coordinate_image(100, 130) if image is None else image
        path = write_sm_dicom(folder / f"{name}.dcm", image, tile=tile, series_uid=generate_uid())
        dataset = pydicom.dcmread(path)
        edit(dataset)
        dataset.save_as(path, enforce_file_format=True)
        return path

    return edited_sm


# ---------------------------------------------------------------- mammograms


@pytest.mark.parametrize("intent", ["FOR PRESENTATION", "FOR PROCESSING"])
def test_placeholder_mammogram_gives_its_header_facts_and_names_the_placeholder(
    tmp_path, capsys, intent, write_dicom
):
    path = write_dicom(
        tmp_path / "ge.dcm",
        np.array([[0, 4095]], np.uint16),
        ImageLaterality="L",
        ViewPosition="CC",
        Manufacturer="GE MEDICAL SYSTEMS",
        ManufacturerModelName="Senographe Essential",
        PresentationIntentType=intent,
        WindowCenter=2047,
        WindowWidth=4096,
    )
    described = info_json(capsys, path)
    assert described["laterality"] == "L" and described["view"] == "CC"
    assert described["properties"]["manufacturer"] == "GE MEDICAL SYSTEMS"
    assert described["voi"] == "window 2047/4096 LINEAR"
    assert described["presentation_intent"] == intent
    assert described["shape"] == [1, 2]
    assert (
        "holds a 1 x 2 pixel placeholder (rows x columns), not an image"
        in (described["pixel_problem"])
    )
    with pytest.raises(UnsupportedFormatError, match=r"^ge\.dcm: holds a 1 x 2 pixel placeholder"):
        open_mammogram(path)
    for argv in (["info", str(path)], ["info", "--kind", "mammogram", str(path)]):
        capsys.readouterr()
        main(argv)
        assert "is not a 2-D image" not in capsys.readouterr().err


def test_a_real_image_has_no_pixel_problem(tmp_path, capsys, write_dicom):
    path = write_dicom(tmp_path / "ok.dcm", np.arange(12, dtype=np.uint16).reshape(3, 4))
    assert open_mammogram(path).pixel_problem is None
    assert "pixel_problem" not in info_json(capsys, path)


@pytest.mark.parametrize(
    ("attributes", "phrase"),
    [
        ({"RescaleSlope": "NaN"}, "its rescale slope (Rescale Slope) is NaN, not a finite number"),
        ({"RescaleSlope": "inf"}, "its rescale slope (Rescale Slope) is inf, not a finite number"),
        (
            {"RescaleIntercept": "-inf"},
            "its rescale intercept (Rescale Intercept) is -inf, not a finite number",
        ),
        ({"RescaleSlope": "0"}, "its rescale slope (Rescale Slope) is 0, which would turn every"),
        (
            {"WindowCenter": 100, "WindowWidth": "0"},
            "its window width (Window Width) is 0, where LINEAR needs a number of at least 1",
        ),
        (
            {"WindowCenter": 100, "WindowWidth": "NaN"},
            "its window width (Window Width) is NaN, where LINEAR needs a number of at least 1",
        ),
        (
            {"WindowCenter": 100, "WindowWidth": "-5", "VOILUTFunction": "SIGMOID"},
            "its window width (Window Width) is -5, where SIGMOID needs a number above 0",
        ),
        (
            {"WindowCenter": "NaN", "WindowWidth": 400},
            "its window centre (Window Center) is NaN, not a number",
        ),
        (
            {"PhotometricInterpretation": "PALETTE COLOR"},
            "says its pixels are palette colours (PALETTE COLOR) but holds no palette",
        ),
        (
            {"ModalityLUTSequence": [{"ModalityLUTType": "US"}]},
            "its Modality LUT Sequence has no valid LUT Descriptor or LUT Data",
        ),
    ],
)
def test_mammogram_values_that_would_give_a_wrong_picture_are_refused(
    tmp_path, capsys, attributes, phrase, write_dicom
):
    stored = (np.arange(64 * 64).reshape(64, 64) % 4000).astype(np.uint16)
    with pytest.warns(UserWarning) if _invalid_ds(attributes) else _no_check():
        path = write_dicom(tmp_path / "m.dcm", stored, **attributes)
    with pytest.raises(CorruptFileError) as caught:
        open_mammogram(path)
    assert str(caught.value).startswith("m.dcm: ")
    assert phrase in str(caught.value)
    assert_words_only(str(caught.value))
    err = info_error(capsys, path)
    assert phrase in err and err.count("\n") == 1
    assert "Warning" not in err


def _invalid_ds(attributes: dict) -> bool:
    return any(str(v) in ("NaN", "inf", "-inf") for v in attributes.values())


class _no_check:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_an_invalid_window_names_the_other_choices(tmp_path, write_dicom):
    stored = np.array([[0, 1000], [2000, 4000]], np.uint16)
    path = write_dicom(tmp_path / "w.dcm", stored, WindowCenter=[100, 2000], WindowWidth=[0, 4000])
    with pytest.raises(CorruptFileError, match=r"pick another VOI choice \(0\.\.1\)"):
        open_mammogram(path)
    mammogram = open_mammogram(path, voi_index=1)
    expected = np.clip((stored - 1999.5) / 3999 + 0.5, 0, 1)
    assert mammogram.pixels == pytest.approx(expected, abs=1e-6)
    assert mammogram.voi_choices[0] == "window 100/0 LINEAR"


@pytest.mark.parametrize(
    ("spacing", "stated"),
    [(["0", "-1"], "0\\-1"), (["NaN", "0.07"], "NaN\\0.07"), (["0.07"], "0.07")],
)
def test_impossible_pixel_spacing_is_unknown_with_a_warning(
    tmp_path, capsys, spacing, stated, write_dicom
):
    stored = np.array([[0, 100], [200, 300]], np.uint16)
    with pytest.warns(UserWarning) if "NaN" in spacing else _no_check():
        path = write_dicom(tmp_path / "s.dcm", stored, PixelSpacing=spacing)
    mammogram = open_mammogram(path)
    assert mammogram.pixel_spacing is None
    warning = mammogram.properties["medvl.pixel_spacing_warning"]
    assert warning.startswith(f"Pixel Spacing {stated} mm is not two positive numbers")
    assert mammogram.pixels == pytest.approx(np.array([[0, 1 / 3], [2 / 3, 1]]))
    described = info_json(capsys, path)
    assert described["pixel_spacing_mm"] is None
    assert described["properties"]["medvl.pixel_spacing_warning"] == warning


def test_palette_colour_with_its_palette_shows_the_palette_luminance(tmp_path, write_dicom):
    def words(values):
        return np.asarray(values, "<u2").tobytes()

    descriptor = [4, 0, 16]
    path = write_dicom(
        tmp_path / "p.dcm",
        np.array([[0, 1], [2, 3]], np.uint8),
        PhotometricInterpretation="PALETTE COLOR",
        RescaleSlope=7,  # a Modality LUT does not apply to palette indices
        RedPaletteColorLookupTableDescriptor=descriptor,
        GreenPaletteColorLookupTableDescriptor=descriptor,
        BluePaletteColorLookupTableDescriptor=descriptor,
        RedPaletteColorLookupTableData=words([0, 65535, 0, 65535]),
        GreenPaletteColorLookupTableData=words([0, 0, 65535, 65535]),
        BluePaletteColorLookupTableData=words([0, 0, 0, 65535]),
    )
    mammogram = open_mammogram(path)
    # index 0 black, 1 red, 2 green, 3 white -> luminance 0, 0.299, 0.587, 1
    assert mammogram.pixels == pytest.approx(np.array([[0, 0.299], [0.587, 1.0]]), abs=1e-6)
    assert mammogram.voi == "palette"


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        (
            np.zeros((8, 8, 3), np.uint8).tobytes(),
            "its header says 1 sample per pixel (Samples per Pixel) but its pixel data holds 3",
        ),
        (
            np.zeros((8, 4), np.uint8).tobytes(),
            "holds 32 bytes of pixel data where its 8 x 8 image of 8-bit samples needs 64",
        ),
        (np.zeros((8, 8 * 5), np.uint8).tobytes(), "holds 320 bytes of pixel data, more than"),
    ],
)
def test_mammogram_pixel_data_of_the_wrong_length_is_refused(
    tmp_path, capsys, data, phrase, write_dicom
):
    path = write_dicom(tmp_path / "n.dcm", np.zeros((8, 8), np.uint8), PixelData=data)
    with pytest.raises(CorruptFileError) as caught:
        open_mammogram(path)
    assert phrase in str(caught.value)
    assert_words_only(str(caught.value))
    assert phrase in info_error(capsys, path)


def test_damaged_mammogram_headers_give_sentences_without_raw_text(tmp_path, write_dicom):
    stored = (np.arange(32 * 32).reshape(32, 32) * 3).astype(np.uint16)
    original = write_dicom(
        tmp_path / "orig.dcm",
        stored,
        WindowCenter=1500,
        WindowWidth=3000,
        RescaleSlope=1,
        RescaleIntercept=0,
        PixelSpacing=[0.1, 0.1],
        ImageLaterality="R",
        ViewPosition="MLO",
    ).read_bytes()
    rng = np.random.default_rng(7)
    outcomes = {"read": 0, "refused": 0}
    for trial in range(120):
        data = bytearray(original)
        if trial % 2:
            data = data[: int(rng.integers(140, len(data)))]
        for _ in range(int(rng.integers(1, 4))):
            position = int(rng.integers(128, min(len(data), 900)))
            data[position] ^= 1 << int(rng.integers(0, 8))
        path = tmp_path / f"d{trial}.dcm"
        path.write_bytes(bytes(data))
        try:
            mammogram = open_mammogram(path)
        except MedVLError as error:
            assert str(error).startswith(f"d{trial}.dcm: ")
            assert_words_only(str(error))
            outcomes["refused"] += 1
        else:
            assert np.isfinite(mammogram.pixels).all()
            assert mammogram.pixels.min() >= 0 and mammogram.pixels.max() <= 1
            outcomes["read"] += 1
    assert outcomes["refused"] > 20


# ---------------------------------------------------------------- slides: neighbours


def _open_within(path, seconds: float):
    """open_slide(path) in a daemon thread, waiting at most ``seconds`` (a hang guard);
    (slide or error or None, whether the thread still runs)."""
    result: dict = {}

    def run() -> None:
        try:
            result["value"] = open_slide(path)
        except Exception as error:  # handed to the test, which asserts on it
            result["value"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    return result.get("value"), worker.is_alive()


def _release_fifo(path) -> None:
    """Let a reader blocked on the FIFO go (so a failing test does not leave a hung thread)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def _cut_inside_rows_value(data: bytes) -> bytes:
    """The file cut one byte into the value of its Rows element (explicit VR little endian)."""
    tag = data.index(b"\x28\x00\x10\x00US\x02\x00")
    return data[: tag + 9]


def test_damaged_and_special_neighbours_do_not_stop_a_valid_sample_wsi(
    tmp_path, sample_file, capsys
):
    for name in ("boxes_0.dcm", "boxes_1.dcm"):
        shutil.copyfile(sample_file(f"dicom/{name}"), tmp_path / name)
    with open_slide(sample_file("dicom/boxes_0.dcm")) as clean:
        expected = np.asarray(clean.levels[0])
        expected_thumbnail = clean.associated_images["thumbnail"]
    data = (tmp_path / "boxes_0.dcm").read_bytes()
    (tmp_path / "cut.dcm").write_bytes(_cut_inside_rows_value(data))
    (tmp_path / "empty.dcm").write_bytes(b"")
    os.mkfifo(tmp_path / "x.dcm")
    try:
        slide, running = _open_within(tmp_path / "boxes_0.dcm", 60)
    finally:
        _release_fifo(tmp_path / "x.dcm")
    assert not running, "opening a slide next to a FIFO must not wait on the FIFO"
    assert not isinstance(slide, Exception), slide
    with slide:
        assert slide.level_dimensions == [(16, 16)]
        assert np.array_equal(np.asarray(slide.levels[0]), expected)
        assert np.array_equal(slide.associated_images["thumbnail"], expected_thumbnail)
        # the truncated copy, the empty file and the FIFO were skipped
        assert slide.properties["medvl.skipped_files"] == 3
    described = info_json(capsys, tmp_path / "boxes_0.dcm")
    assert described["properties"]["medvl.skipped_files"] == 3


def test_the_opened_file_itself_damaged_is_refused_in_words(tmp_path, sample_file, capsys):
    data = sample_file("dicom/boxes_0.dcm").read_bytes()
    (tmp_path / "cut.dcm").write_bytes(_cut_inside_rows_value(data))
    with pytest.raises(CorruptFileError) as caught:
        open_slide(tmp_path / "cut.dcm")
    assert str(caught.value).startswith("cut.dcm: ")
    assert_words_only(str(caught.value))
    assert "re-copy or re-export it" in info_error(capsys, tmp_path / "cut.dcm")


def test_a_truncated_level_beside_the_opened_one_is_skipped(
    tmp_path, coordinate_image, write_sm_dicom
):
    image = coordinate_image(256, 320)
    series = generate_uid()
    write_sm_dicom(tmp_path / "l0.dcm", image, tile=64, series_uid=series)
    level1 = write_sm_dicom(tmp_path / "l1.dcm", image[::2, ::2], tile=64, series_uid=series)
    data = level1.read_bytes()
    level1.write_bytes(data[: len(data) - 5000])
    with open_slide(tmp_path / "l0.dcm") as slide:
        assert slide.level_dimensions == [(320, 256)]
        assert np.array_equal(slide.read_region((10, 20), 0, (100, 50)), image[20:70, 10:110])
        assert slide.properties["medvl.skipped_files"] == 1
    with pytest.raises(CorruptFileError, match=r"^l1\.dcm: holds \d+ bytes of pixel data where"):
        open_slide(level1)


def test_a_fifo_in_an_opened_folder_is_skipped(tmp_path, coordinate_image, write_sm_dicom):
    image = coordinate_image(70, 90)
    write_sm_dicom(tmp_path / "a.dcm", image, tile=32, series_uid=generate_uid())
    os.mkfifo(tmp_path / "pipe.dcm")
    try:
        slide, running = _open_within(tmp_path, 60)
    finally:
        _release_fifo(tmp_path / "pipe.dcm")
    assert not running
    with slide:
        assert np.array_equal(np.asarray(slide.levels[0]), image)
        assert slide.properties["medvl.skipped_files"] == 1


# ---------------------------------------------------------------- slides: lying headers


def _set(**values):
    def edit(dataset):
        for keyword, value in values.items():
            setattr(dataset, keyword, value)

    return edit


@pytest.mark.parametrize(
    ("edit", "error", "phrase"),
    [
        (
            _set(TotalPixelMatrixColumns=0),
            CorruptFileError,
            "gives the slide width in pixels (TotalPixelMatrixColumns) as 0, which is not a "
            "positive whole number",
        ),
        (
            _set(TotalPixelMatrixRows=0),
            CorruptFileError,
            "gives the slide height in pixels (TotalPixelMatrixRows) as 0",
        ),
        (_set(Rows=0), CorruptFileError, "gives the tile height in pixels (Rows) as 0"),
        (
            _set(TotalPixelMatrixColumns=260),
            CorruptFileError,
            "holds 20 tiles but its 260 x 100 pixel slide in tiles of 32 x 32 needs 36",
        ),
        (
            _set(SamplesPerPixel=1, PhotometricInterpretation="MONOCHROME2"),
            CorruptFileError,
            "its header says 1 sample per pixel (Samples per Pixel) but the pixel data of its "
            "20 tiles of 32 x 32 pixels holds 3",
        ),
        (
            _set(PhotometricInterpretation="RGB", SamplesPerPixel=1),
            CorruptFileError,
            "its header says RGB pixels with 1 sample per pixel (Samples per Pixel), which do "
            "not go together",
        ),
        (
            _set(PhotometricInterpretation="PALETTE COLOR", SamplesPerPixel=1),
            CorruptFileError,
            "says its pixels are palette colours (PALETTE COLOR) but holds no palette",
        ),
        (
            _set(PhotometricInterpretation="MONOCHROME1", SamplesPerPixel=1),
            UnsupportedFormatError,
            "stores inverted grayscale (MONOCHROME1)",
        ),
    ],
    ids=[
        "matrix-width-0",
        "matrix-height-0",
        "rows-0",
        "tiles-missing",
        "samples-1-of-3",
        "rgb-1-sample",
        "palette-no-lut",
        "monochrome1",
    ],
)
def test_slide_headers_that_would_give_wrong_pixels_are_refused(
    tmp_path, capsys, edit, error, phrase, edited_sm_dicom
):
    path = edited_sm_dicom(tmp_path, "s", edit)
    with pytest.raises(error) as caught:
        with open_slide(path) as slide:
            slide.read_region((0, 0), 0, (64, 64))
    assert str(caught.value).startswith("s.dcm: ")
    assert phrase in str(caught.value)
    assert_words_only(str(caught.value))
    err = info_error(capsys, path)
    assert phrase in err and err.count("\n") == 1


def test_slide_header_says_3_samples_where_the_data_holds_1(
    tmp_path, coordinate_image, edited_sm_dicom
):
    gray = coordinate_image(64, 64)[..., 0]
    path = edited_sm_dicom(
        tmp_path,
        "g",
        lambda ds: setattr(ds, "PixelData", ds.PixelData[: len(ds.PixelData) // 3]),
        image=coordinate_image(64, 64),
    )
    assert gray.size == len(pydicom.dcmread(path).PixelData)
    with pytest.raises(CorruptFileError, match=r"says 3 samples per pixel .* holds 1;"):
        open_slide(path)


def test_jpeg_tiles_that_decode_to_1_sample_under_an_rgb_header(
    tmp_path, capsys, coordinate_image, edited_sm_dicom
):
    image = coordinate_image(64, 64)

    def to_gray_jpeg(dataset):
        tiles = [image[r : r + 32, c : c + 32, 0].copy() for r in (0, 32) for c in (0, 32)]
        dataset.PixelData = encapsulate([imagecodecs.jpeg8_encode(t) for t in tiles])
        dataset["PixelData"].VR = "OB"
        dataset.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
        dataset.PhotometricInterpretation = "YBR_FULL_422"

    path = edited_sm_dicom(tmp_path, "j", to_gray_jpeg, image=image)
    phrase = "its header says 3 samples per pixel (Samples per Pixel) but its tiles decode to 1"
    with open_slide(path) as slide:
        with pytest.raises(CorruptFileError) as caught:
            slide.read_region((0, 0), 0, (64, 64))
    assert phrase in str(caught.value)
    assert phrase in info_error(capsys, path)


def test_impossible_slide_pixel_spacing_leaves_the_mpp_unknown_with_a_warning(
    tmp_path, coordinate_image, edited_sm_dicom
):
    def spacing(dataset):
        measures = dataset.SharedFunctionalGroupsSequence[0].PixelMeasuresSequence[0]
        measures.PixelSpacing = ["0", "-1"]

    with open_slide(edited_sm_dicom(tmp_path, "m", spacing)) as slide:
        assert slide.mpp is None
        assert slide.properties["medvl.pixel_spacing_warning"].startswith(
            "Pixel Spacing 0\\-1 mm is not two positive numbers"
        )
        assert np.array_equal(slide.read_region((0, 0), 0, (130, 100)), coordinate_image(100, 130))


def test_damaged_slide_headers_give_sentences_without_raw_text(
    tmp_path, coordinate_image, write_sm_dicom
):
    image = coordinate_image(100, 130)
    original = write_sm_dicom(
        tmp_path / "orig.dcm", image, tile=32, series_uid=generate_uid()
    ).read_bytes()
    rng = np.random.default_rng(11)
    refused = 0
    for trial in range(120):
        data = bytearray(original)
        if trial % 2:
            data = data[: int(rng.integers(140, len(data)))]
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(128, min(len(data), 1500)))] ^= 1 << int(rng.integers(0, 8))
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        (folder / "d.dcm").write_bytes(bytes(data))
        try:
            with open_slide(folder / "d.dcm") as slide:
                slide.read_region((0, 0), 0, (130, 100))
        except MedVLError as error:
            assert str(error).startswith("d.dcm: ")
            assert_words_only(str(error))
            refused += 1
    assert refused > 20


def test_a_text_file_named_dcm_is_called_not_dicom_in_words(tmp_path, capsys):
    path = tmp_path / "notes.dcm"
    path.write_text("a note, not an image")
    err = info_error(capsys, path)
    assert "notes.dcm: " in err and "it is not a DICOM file" in err
    assert "force=True" not in err and "File Meta Information" not in err


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs Linux /proc")
def test_a_neighbour_linked_into_proc_is_skipped_unread(tmp_path, coordinate_image, write_sm_dicom):
    image = coordinate_image(70, 90)
    path = write_sm_dicom(tmp_path / "a.dcm", image, tile=32, series_uid=generate_uid())
    (tmp_path / "mem.dcm").symlink_to("/proc/self/mem")
    with open_slide(path) as slide:
        assert np.array_equal(np.asarray(slide.levels[0]), image)
        assert slide.properties["medvl.skipped_files"] == 1


def test_a_fifo_opened_as_a_mammogram_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "x.dcm")
    outcome: dict = {}

    def run() -> None:
        try:
            open_mammogram(tmp_path / "x.dcm")
        except MedVLError as error:
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    _release_fifo(tmp_path / "x.dcm")
    assert not worker.is_alive()
    assert isinstance(outcome["error"], UnsupportedFormatError)
    assert "x.dcm: is a named pipe (FIFO), not a regular file" in str(outcome["error"])


def test_a_mammogram_declaring_a_huge_size_is_refused_before_decoding(
    tmp_path, run_limited, write_dicom
):
    # 65,535 x 65,535 px (the most DICOM allows) of JPEG pixels: refused from the header alone
    tile = imagecodecs.jpeg8_encode(np.zeros((8, 8), np.uint8))
    path = write_dicom(
        tmp_path / "huge.dcm",
        np.zeros((8, 8), np.uint8),
        Rows=65_535,
        Columns=65_535,
        PixelData=encapsulate([tile]),
        transfer_syntax=JPEGBaseline8Bit,
    )
    code = "import sys; from medvl_engine.io import open_mammogram; open_mammogram(sys.argv[1])"
    returncode, _, stderr, peak_mb = run_limited(
        [sys.executable, "-c", code, str(path)], timeout_s=60, max_mb=1024
    )
    assert returncode != 0 and peak_mb < 1024
    assert "ResourceLimitError" in stderr and "65,535 x 65,535 px" in stderr
