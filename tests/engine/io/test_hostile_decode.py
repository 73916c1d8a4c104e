"""Issue 26, image readers: budgets before allocation, and decoded pixels that mean something.

* A small PNG declaring a huge image is refused from its header, counting the bytes every
  buffer of the decode holds (16-bit RGBA takes 8 bytes a pixel in the file), in one
  sentence, in a child process under a 1 GB address space.
* DICOM rescale, window and LUT values that would turn an image into one grey (or NaN) are
  refused in words; LUT data shorter than its descriptor too.
* TIFF levels: min-is-white and palette pages show as the scanner saw them; other colour
  models, JPEG or raw tiles cut short and cut JPEG tables are refused; an impossible mpp is
  treated as unknown with a warning.
* Correct files still decode to the same values (the loaders were rewritten to save memory).
"""

from __future__ import annotations

import shutil
import struct
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import tifffile
from PIL import Image

from medvl_engine.cli.main import main
from medvl_engine.errors import CorruptFileError, ResourceLimitError
from medvl_engine.io import open_mammogram, open_slide

MEDVL = [sys.executable, "-m", "medvl_engine.cli.main"]
TIME_LIMIT_S = 60.0  # a hang guard for the child process, not a speed claim
ADDRESS_SPACE_MB = 1024.0


def _cli_error(capsys, *argv: str) -> str:
    """`medvl ARGV` must exit 2 with one line on stderr and nothing on stdout; that line."""
    capsys.readouterr()
    assert main(list(argv)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


# ------------------------------------------------------------------ budgets before decoding


def _zlib_of_zeros(count: int) -> bytes:
    """A zlib stream of ``count`` zero bytes, made in well under a second: after a full flush
    the compressor starts afresh, so each further 16 MiB of zeros is the same run of bytes;
    the Adler-32 of n zeros is (n mod 65521) << 16 | 1."""
    piece = 1 << 24
    full, rest = divmod(count, piece)
    packer = zlib.compressobj(9)
    if full < 2:
        return packer.compress(bytes(count)) + packer.flush()
    head = packer.compress(bytes(piece)) + packer.flush(zlib.Z_FULL_FLUSH)
    unit = packer.compress(bytes(piece)) + packer.flush(zlib.Z_FULL_FLUSH)
    tail = packer.compress(bytes(rest)) + packer.flush()
    stream = head + unit * (full - 1) + tail[:-4]
    return stream + struct.pack(">I", (count % 65521) << 16 | 1)


def _png_of_zeros(path: Path, size: int, bit_depth: int, colour_type: int, channels: int):
    """A PNG of ``size`` x ``size`` zero pixels: tiny on disk, huge once decoded."""
    raw_bytes = size * (1 + size * channels * bit_depth // 8)  # a filter byte per row
    pixels = _zlib_of_zeros(raw_bytes)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", size, size, bit_depth, colour_type, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )
    return path


PNG_BOMBS = {  # name -> (bit depth, colour type, channels, kind the file is read as)
    "grey8": (8, 0, 1, "mammogram"),
    "grey16": (16, 0, 1, "mammogram"),
    "rgb8": (8, 2, 3, "slide"),
    "rgba16": (16, 6, 4, "slide"),
}


@pytest.fixture(scope="module")
def png_bombs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("png-bombs")
    return {
        name: _png_of_zeros(folder / f"{name}.png", 12_000, depth, colour, channels)
        for name, (depth, colour, channels, _) in PNG_BOMBS.items()
    }


@pytest.fixture(scope="module")
def png_refusals(png_bombs, run_limited_in_background, selected_params, request):
    """``png_refusals(name)`` -> what ``run_limited`` gives for `medvl info` of that bomb; the
    first call starts the child of every selected case, two at a time."""
    started = {}

    def result(name: str):
        test = "test_info_refuses_a_small_png_of_a_huge_image_in_one_sentence"
        for case in [name, *selected_params(request, test, "name")]:
            if case not in started:
                command = [*MEDVL, "info", str(png_bombs[case])]
                started[case] = run_limited_in_background(
                    command, TIME_LIMIT_S, 1024.0, ADDRESS_SPACE_MB
                )
        return started[name].result()

    return result


@pytest.mark.parametrize("name", list(PNG_BOMBS))
def test_info_refuses_a_small_png_of_a_huge_image_in_one_sentence(png_bombs, png_refusals, name):
    path = png_bombs[name]
    assert path.stat().st_size < 2_000_000
    returncode, stdout, stderr, peak_mb = png_refusals(name)
    assert returncode == 2, stderr[-2000:]
    assert peak_mb < 400, peak_mb
    line = stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, line
    assert f"{path.name}: the image is 12,000 x 12,000 px" in line
    assert "bytes per pixel" in line and "MEDVL_MAX_DECODE_PIXELS" in line
    assert stdout == ""


@pytest.mark.parametrize("kind", ["mammogram", "slide"])
def test_a_png_past_pillows_own_limit_is_refused_in_words(tmp_path, capsys, kind):
    path = _png_of_zeros(tmp_path / "vast.png", 20_000, 8, 0, 1)  # 400 million px
    err = _cli_error(capsys, "info", "--kind", kind, str(path))
    assert "vast.png: a plain image this large cannot be decoded in one piece" in err


def test_the_zeros_stream_is_valid_zlib():
    count = 3 * (1 << 24) + 12_345
    assert zlib.decompress(_zlib_of_zeros(count)) == bytes(count)


def test_sixteen_bit_rgba_counts_its_eight_bytes_a_pixel(png_bombs):
    from medvl_engine.io.limits import pil_bytes_per_pixel

    with Image.open(png_bombs["rgba16"]) as image:
        assert pil_bytes_per_pixel(image) == 8  # Pillow keeps 4, the file holds 8
    with Image.open(png_bombs["rgb8"]) as image:
        assert pil_bytes_per_pixel(image) == 4  # Pillow pads RGB to 4 bytes


def test_the_decode_budget_counts_bytes_and_follows_its_setting(tmp_path, monkeypatch):
    """A 400 x 300 RGB PNG needs 9 bytes a pixel as a slide (Pillow's 4, RGB 3, pyramid and
    bands 2): refused at 3 bytes for 300,000 px, opened at 3 bytes for 400,000 px."""
    path = tmp_path / "plain.png"
    Image.fromarray(np.full((300, 400, 3), 90, np.uint8)).save(path)
    monkeypatch.setenv("MEDVL_MAX_DECODE_PIXELS", str(3 * 400 * 300 - 1))
    with pytest.raises(ResourceLimitError, match=r"400 x 300 px, which takes 1.08 MB"):
        open_slide(path)
    monkeypatch.setenv("MEDVL_MAX_DECODE_PIXELS", str(3 * 400 * 300))
    with open_slide(path) as slide:
        assert slide.dimensions == (400, 300)
        assert int(slide.read_region((0, 0), 0, (4, 4)).max()) == 90


def test_a_multiframe_dicom_counts_every_frame_before_decoding(tmp_path, run_limited, write_dicom):
    import imagecodecs
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit

    frame = imagecodecs.jpeg8_encode(np.zeros((8, 8), np.uint8))
    path = write_dicom(
        tmp_path / "frames.dcm",
        np.zeros((8, 8), np.uint8),
        Rows=2048,
        Columns=2048,
        NumberOfFrames=200,
        PixelData=encapsulate([frame] * 200),
        transfer_syntax=JPEGBaseline8Bit,
    )
    returncode, _, stderr, peak_mb = run_limited(
        [*MEDVL, "info", str(path)], TIME_LIMIT_S, 1024.0, ADDRESS_SPACE_MB
    )
    assert returncode == 2 and peak_mb < 400, stderr[-2000:]
    assert "frames.dcm: the mammogram (200 frames decoded at once) is 2,048 x 2,048 px" in stderr


# ------------------------------------------------------------- correct files decode the same


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "P", "LA", "I;16"])
def test_plain_slide_loader_gives_the_straightforward_rgb(tmp_path, mode, monkeypatch):
    """The banded loader equals converting the whole image at once (alpha over white,
    16-bit grey scaled by its maximum), including bands that do not divide the height."""
    import medvl_engine.io.slide._plain as plain
    from medvl_engine.io.slide.pixel_sources import to_rgb

    monkeypatch.setattr(plain, "_TO_RGB_BAND_ROWS", 7)
    rng = np.random.default_rng(5)
    if mode == "I;16":
        image = Image.fromarray(rng.integers(0, 4096, (50, 61), dtype=np.uint16))
    else:
        image = Image.fromarray(rng.integers(0, 256, (50, 61, 4), dtype=np.uint8), "RGBA")
        image = image.convert(mode)
    path = tmp_path / "image.png"
    image.save(path)
    with Image.open(path) as decoded:
        decoded.load()
        if mode == "I;16":
            values = np.asarray(decoded, dtype=np.float32)
            expected = to_rgb(np.round(values * (255.0 / values.max())).astype(np.uint8))
        else:
            kept = (
                decoded
                if decoded.mode in ("RGB", "RGBA", "L")
                else decoded.convert("RGBA" if "A" in decoded.mode else "RGB")
            )
            expected = to_rgb(np.asarray(kept))
    assert np.array_equal(plain.pil_loader(path)(), expected)


def test_plain_mammograms_keep_their_values(tmp_path):
    """8-bit / 255, 16-bit over its own range, colour as Rec. 601 luminance / 255: the same
    float32 values as the float64 formulas."""
    rng = np.random.default_rng(9)
    grey8 = rng.integers(3, 250, (40, 30), dtype=np.uint8)
    grey16 = rng.integers(100, 4000, (40, 30), dtype=np.uint16)
    colour = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    Image.fromarray(grey8).save(tmp_path / "g8.png")
    tifffile.imwrite(tmp_path / "g16.tif", grey16)
    Image.fromarray(colour).save(tmp_path / "rgb.png")
    expected = {
        "g8.png": np.clip(grey8 / 255.0, 0, 1).astype(np.float32),
        "g16.tif": ((grey16 - 100.0) / (grey16.max() - 100.0)).astype(np.float32),
        "rgb.png": np.clip(
            colour.astype(np.float64) @ np.array([0.299, 0.587, 0.114]) / 255.0, 0, 1
        ).astype(np.float32),
    }
    expected["g16.tif"] = (
        (grey16 - float(grey16.min())) / (float(grey16.max()) - float(grey16.min()))
    ).astype(np.float32)
    for name, values in expected.items():
        pixels = open_mammogram(tmp_path / name).pixels
        assert pixels.dtype == np.float32
        assert np.array_equal(pixels, values), name


def test_a_min_is_white_tiff_mammogram_is_inverted(tmp_path):
    stored = np.tile(np.arange(0, 250, 10, dtype=np.uint8), (4, 1))
    tifffile.imwrite(tmp_path / "mw.tif", stored, photometric="miniswhite")
    pixels = open_mammogram(tmp_path / "mw.tif").pixels
    assert np.array_equal(pixels, ((255 - stored) / 255.0).astype(np.float32))


# -------------------------------------------------------------------- DICOM grey pipeline

GREY_STORED = (np.arange(64 * 64).reshape(64, 64) % 4000).astype(np.uint16)


def _lut_bytes(values) -> bytes:
    return np.asarray(values, "<u2").tobytes()


DICOM_CASES = {
    "slope 1e308": (
        {"RescaleSlope": "1e308"},
        "its rescale slope 1e+308 and intercept 0 (Rescale Slope, Rescale Intercept) take its "
        "stored values 0..3999 beyond the largest number",
    ),
    "intercept 1e308": (
        {"RescaleIntercept": "1e308"},
        "its rescale (Rescale Slope 1, Rescale Intercept 1e+308) turns its stored values 0..3,999 "
        "into one grey",
    ),
    "window width 1e308": (
        {"WindowCenter": 2000, "WindowWidth": "1e308"},
        "its VOI window 2000/1e+308 LINEAR turns its stored values 0..3,999 into one grey",
    ),
    "window width 1e10": (
        {"WindowCenter": 2000, "WindowWidth": "1e10"},
        "its VOI window 2000/1e+10 LINEAR turns its stored values 0..3,999 into one grey",
    ),
    "window centre 1e308": (
        {"WindowCenter": "1e308", "WindowWidth": 4000},
        "its VOI window 1e+308/4000 LINEAR turns its stored values 0..3,999 into one grey",
    ),
    "window width inf": (
        {"WindowCenter": 2000, "WindowWidth": "inf"},
        "its window width (Window Width) is inf, where LINEAR needs a number of at least 1",
    ),
    "window width -1 exact": (
        {"WindowCenter": 2000, "WindowWidth": "-1", "VOILUTFunction": "LINEAR_EXACT"},
        "its window width (Window Width) is -1, where LINEAR_EXACT needs a number above 0",
    ),
    "short VOI LUT": (
        {
            "VOILUTSequence": [
                {"LUTDescriptor": [4096, 0, 16], "LUTData": _lut_bytes(range(0, 40000, 4000))}
            ]
        },
        "its VOI LUT Sequence item 1 declares 4,096 entries (LUT Descriptor) but its LUT Data "
        "holds 10",
    ),
    "2-entry Modality LUT": (
        {
            "ModalityLUTSequence": [
                {
                    "LUTDescriptor": [2, 0, 16],
                    "LUTData": _lut_bytes([0, 65535]),
                    "ModalityLUTType": "US",
                }
            ]
        },
        "its Modality LUT Sequence maps stored values 0..1 (2 entries, LUT Descriptor), but the "
        "image's stored values run 0..3,999",
    ),
    "VOI LUT of one value": (
        {"VOILUTSequence": [{"LUTDescriptor": [4096, 0, 16], "LUTData": _lut_bytes([7] * 4096)}]},
        "its VOI LUT 1 turns its stored values 0..3,999 into one grey",
    ),
}


@pytest.mark.parametrize("name", list(DICOM_CASES))
def test_dicom_values_that_give_one_grey_are_refused_in_words(tmp_path, capsys, write_dicom, name):
    attributes, phrase = DICOM_CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydicom warns of the invalid DS values it writes
        path = write_dicom(tmp_path / "m.dcm", GREY_STORED, **attributes)
    with pytest.raises(CorruptFileError) as caught:
        open_mammogram(path)
    assert str(caught.value).startswith("m.dcm: ") and phrase in str(caught.value)
    assert phrase in _cli_error(capsys, "info", str(path))


def test_a_dicom_of_one_stored_value_opens_with_a_warning(tmp_path, capsys, write_dicom):
    """A blank image stays blank, and says so: only a step that turns different values into
    one is refused."""
    path = write_dicom(
        tmp_path / "blank.dcm", np.full((8, 8), 300, np.uint16), WindowCenter=2000, WindowWidth=4000
    )
    assert float(np.ptp(open_mammogram(path).pixels)) == 0.0
    capsys.readouterr()
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "medvl.blank_warning: every pixel stores the same value (300)" in out
    image = write_dicom(tmp_path / "image.dcm", GREY_STORED, WindowCenter=2000, WindowWidth=4000)
    assert "medvl.blank_warning" not in open_mammogram(image).properties


def test_complete_luts_still_apply(tmp_path, write_dicom):
    """A Modality LUT covering the stored values and an 8-bit VOI LUT of an odd number of
    entries packed in bytes (padded to even length) give the table's values."""
    stored = np.arange(0, 4000, 16, dtype=np.uint16).reshape(10, 25)
    modality = np.arange(4096, dtype=np.uint16) // 2  # stored -> stored / 2
    voi = (np.arange(2047) % 256).astype(np.uint8)  # 2047 entries from 0
    path = write_dicom(
        tmp_path / "luts.dcm",
        stored,
        ModalityLUTSequence=[
            {
                "LUTDescriptor": [4096, 0, 16],
                "LUTData": _lut_bytes(modality),
                "ModalityLUTType": "US",
            }
        ],
        VOILUTSequence=[{"LUTDescriptor": [2047, 0, 8], "LUTData": voi.tobytes() + b"\x00"}],
    )
    pixels = open_mammogram(path).pixels
    expected = voi[np.minimum(stored // 2, 2046)] / 255.0
    assert np.allclose(pixels, expected, atol=1e-6)


def test_sample_dx_monochrome1_with_a_huge_window_is_refused(tmp_path, capsys, sample_file):
    import pydicom

    source = sample_file("dicom/dx_image.dcm")
    before = open_mammogram(source).pixels
    assert float(np.ptp(before)) > 0.5  # the sample itself shows an image
    dataset = pydicom.dcmread(source)
    dataset.WindowWidth = "1e308"
    path = tmp_path / "dx.dcm"
    dataset.save_as(path)
    err = _cli_error(capsys, "info", str(path))
    assert "dx.dcm: its VOI window 128/1e+308 LINEAR turns its stored values" in err
    assert np.array_equal(open_mammogram(source).pixels, before)


# ------------------------------------------------------------------------- TIFF pixels


def _ramp(height: int = 256, width: int = 256) -> np.ndarray:
    return (np.arange(height * width) % 251).astype(np.uint8).reshape(height, width)


def test_min_is_white_and_palette_tiles_show_their_real_colours(tmp_path):
    grey = _ramp()
    tifffile.imwrite(tmp_path / "mw.tif", grey, tile=(128, 128), photometric="miniswhite")
    colormap = np.zeros((3, 256), np.uint16)
    colormap[0] = np.arange(256) * 257
    colormap[2] = 65535
    tifffile.imwrite(
        tmp_path / "pal.tif", grey, tile=(128, 128), photometric="palette", colormap=colormap
    )
    with open_slide(tmp_path / "mw.tif") as slide:
        shown = slide.read_region((0, 0), 0, (256, 256))
    assert np.array_equal(shown, np.repeat((255 - grey)[..., None], 3, axis=-1))
    with open_slide(tmp_path / "pal.tif") as slide:
        shown = slide.read_region((0, 0), 0, (256, 256))
    assert np.array_equal(shown[..., 0], grey)
    assert (shown[..., 1] == 0).all() and (shown[..., 2] == 255).all()


@pytest.mark.parametrize(
    ("photometric", "words"),
    [(8, "CIELab colour"), (5, "CMYK (separated) colour"), (32844, "LogL (high dynamic range)")],
)
def test_colour_models_that_are_not_rgb_are_refused(tmp_path, capsys, photometric, words):
    path = tmp_path / "model.tif"
    samples = 4 if photometric == 5 else 3 if photometric == 8 else 1
    pixels = np.zeros((256, 256, samples), np.uint8).squeeze()
    tifffile.imwrite(path, pixels, tile=(128, 128), photometric="minisblack", planarconfig="contig")
    with tifffile.TiffFile(path) as tiff:
        at = tiff.pages[0].tags[262].offset
    data = bytearray(path.read_bytes())
    data[at + 8 : at + 10] = struct.pack("<H", photometric)
    path.write_bytes(bytes(data))
    err = _cli_error(capsys, "info", "--kind", "slide", str(path))
    assert f"model.tif: level 0 stores its pixels as {words}" in err
    assert f"(TIFF Photometric {photometric})" in err and "export the slide as RGB" in err


def _halve_byte_counts(path: Path, tag: int) -> None:
    """Halve every entry of the byte-count tag ``tag`` (325 tiles, 279 strips) in place."""
    with tifffile.TiffFile(path) as tiff:
        page = tiff.pages[0]
        entry = page.tags[tag]
        counts = np.asarray(page.databytecounts, dtype=np.int64)
        item = {3: "<u2", 4: "<u4", 16: "<u8"}[int(entry.dtype)]
        at = entry.valueoffset
    data = bytearray(path.read_bytes())
    halved = (counts // 2).astype(item).tobytes()
    data[at : at + len(halved)] = halved
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("compression", "phrase"),
    [
        ("jpeg", "is cut short (its JPEG data stops before its end marker)"),
        (None, "is cut short (it holds 24,576 of its 49,152 bytes)"),
    ],
)
def test_tiles_whose_byte_counts_were_halved_are_refused(tmp_path, capsys, compression, phrase):
    rgb = np.dstack([_ramp(), _ramp()[::-1], _ramp().T])
    path = tmp_path / "halved.tif"
    tifffile.imwrite(path, rgb, tile=(128, 128), photometric="rgb", compression=compression)
    _halve_byte_counts(path, 325)
    err = _cli_error(capsys, "info", str(path))
    assert "halved.tif: the tile at column" in err and "of level 0" in err and phrase in err


def test_jpeg_strips_cut_short_are_refused_at_open(tmp_path):
    rgb = np.dstack([_ramp(), _ramp()[::-1], _ramp().T])
    path = tmp_path / "strips.tif"
    tifffile.imwrite(path, rgb, rowsperstrip=64, photometric="rgb", compression="jpeg")
    with open_slide(path) as slide:
        assert slide.read_region((0, 0), 0, (256, 256)).std() > 10
    _halve_byte_counts(path, 279)
    with pytest.raises(CorruptFileError, match=r"the strip at number 0 of level 0 is cut short"):
        open_slide(path)


def test_a_jpeg_tiff_mammogram_cut_short_is_refused(tmp_path, capsys):
    path = tmp_path / "view.tif"
    tifffile.imwrite(path, _ramp(), rowsperstrip=64, compression="jpeg", photometric="minisblack")
    assert open_mammogram(path).pixels.std() > 0.1
    _halve_byte_counts(path, 279)
    err = _cli_error(capsys, "info", str(path))
    assert "view.tif: the strip at number 0 of level 0 is cut short (its JPEG data" in err


def _sample_svs_copy(sample_file, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    shutil.copyfile(sample_file("slides/CMU-1-Small-Region.svs"), path)
    return path


def test_sample_svs_with_halved_tile_byte_counts_is_refused(tmp_path, capsys, sample_file):
    path = _sample_svs_copy(sample_file, tmp_path, "halved.svs")
    _halve_byte_counts(path, 325)
    err = _cli_error(capsys, "info", str(path))
    assert "halved.svs: the tile at column" in err
    assert "is cut short (its JPEG data stops before its end marker)" in err


def test_sample_svs_with_cut_jpeg_tables_is_refused(tmp_path, capsys, sample_file):
    path = _sample_svs_copy(sample_file, tmp_path, "tables.svs")
    with tifffile.TiffFile(path) as tiff:
        at = tiff.pages[0].tags[347].offset
    data = bytearray(path.read_bytes())
    (count,) = struct.unpack("<I", data[at + 4 : at + 8])
    data[at + 4 : at + 8] = struct.pack("<I", count // 2)
    path.write_bytes(bytes(data))
    err = _cli_error(capsys, "info", str(path))
    assert (
        f"tables.svs: the JPEG tables of level 0 (TIFF tag JPEGTables, {count // 2} bytes)" in err
    )


def test_sample_svs_still_decodes_and_keeps_its_mpp(sample_file):
    with open_slide(sample_file("slides/CMU-1-Small-Region.svs")) as slide:
        assert slide.mpp == pytest.approx((0.499, 0.499))
        assert slide.read_region((0, 0), 0, (512, 512)).std() > 5


def test_an_impossible_ome_tiff_mpp_is_unknown_with_a_warning(tmp_path):
    path = tmp_path / "tiny.ome.tif"
    metadata = {"axes": "YXS", "PhysicalSizeX": 1e-300, "PhysicalSizeY": 1e-300}
    tifffile.imwrite(path, np.zeros((64, 64, 3), np.uint8), ome=True, metadata=metadata)
    with open_slide(path) as slide:
        assert slide.mpp is None
        assert "is finer than any light microscope" in slide.properties["medvl.mpp_warning"]


def test_an_impossible_svs_mpp_is_unknown_with_a_warning(tmp_path, capsys, sample_file):
    path = _sample_svs_copy(sample_file, tmp_path, "mpp.svs")
    data = path.read_bytes()
    at = data.find(b"MPP = 0.4990")
    assert at > 0
    path.write_bytes(data[:at] + b"MPP = 1e-300" + data[at + 12 :])
    with open_slide(path) as slide:
        assert slide.mpp is None
        warning = slide.properties["medvl.mpp_warning"]
    assert "1e-300 x 1e-300 um is finer than any light microscope records" in warning
    capsys.readouterr()
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "mpp: None" in out and "treated as unknown" in out


# ------------------------------------------------------------------------ DICOM WSI frames


@pytest.mark.parametrize("cut", [False, True])
def test_dicom_wsi_jpeg_frames_cut_short_are_refused(
    tmp_path, capsys, coordinate_image, write_sm_dicom, cut
):
    import imagecodecs
    import pydicom
    from pydicom.encaps import encapsulate
    from pydicom.uid import JPEGBaseline8Bit, generate_uid

    image = coordinate_image(64, 64)
    folder = tmp_path / "wsi"
    folder.mkdir()
    path = write_sm_dicom(folder / "cut.dcm", image, tile=32, series_uid=generate_uid())
    dataset = pydicom.dcmread(path)
    frames = [
        imagecodecs.jpeg8_encode(image[r : r + 32, c : c + 32].copy(), level=95)
        for r in (0, 32)
        for c in (0, 32)
    ]
    if cut:
        frames[1] = frames[1][: len(frames[1]) // 2]
    dataset.PixelData = encapsulate(frames)
    dataset["PixelData"].VR = "OB"
    dataset.file_meta.TransferSyntaxUID = JPEGBaseline8Bit
    dataset.PhotometricInterpretation = "YBR_FULL_422"
    dataset.save_as(path, enforce_file_format=True)
    if not cut:
        with open_slide(path) as slide:
            shown = slide.read_region((0, 0), 0, (64, 64)).astype(int)
        assert np.abs(shown - image.astype(int)).mean() < 4
        return
    err = _cli_error(capsys, "info", str(path))
    assert (
        "cut.dcm: tile 2 of level 0 is cut short (its JPEG data stops before its end marker)" in err
    )


@pytest.mark.parametrize("suffix", [".png", ".tiff"])
def test_a_plain_mammogram_of_one_value_opens_with_a_warning(tmp_path, capsys, suffix):
    """Blank PNG and TIFF mammograms say so as DICOM ones do; a real image says nothing."""
    from PIL import Image

    blank = tmp_path / f"blank_L_CC{suffix}"
    Image.fromarray(np.full((64, 48), 90, np.uint8)).save(blank)
    warning = open_mammogram(blank).properties["medvl.blank_warning"]
    assert warning.startswith("every pixel stores the same value (90)")
    capsys.readouterr()
    assert main(["info", str(blank)]) == 0
    assert "medvl.blank_warning: every pixel stores the same value (90)" in capsys.readouterr().out
    image = tmp_path / f"image_L_CC{suffix}"
    Image.fromarray(np.arange(64 * 48, dtype=np.uint16).reshape(64, 48).astype(np.uint8)).save(
        image
    )
    assert "medvl.blank_warning" not in open_mammogram(image).properties
