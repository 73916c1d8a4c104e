"""Hostile slide files end in bounded memory, with exit status 2 and one sentence.

Every file is opened in a child process under an address-space limit and a timeout
(the ``run_limited`` fixture; two at a time with ``run_limited_in_background``), so a
decompression bomb or an endless loop fails the test instead of taking the machine down.
"""

from __future__ import annotations

import os
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import tifffile

from medvl_engine.errors import CorruptFileError, ResourceLimitError, UnsupportedFormatError
from medvl_engine.io import open_slide
from medvl_engine.io._tiff_ifds import check_ifd_chain
from medvl_engine.io.safe_open import require_regular_file

TIME_LIMIT_S = 60.0  # a hang guard for the child process, not a speed claim
MEMORY_LIMIT_MB = 1024.0

MEDVL = [sys.executable, "-m", "medvl_engine.cli.main"]

API_PROBE = """
import sys
from medvl_engine.errors import MedVLError
from medvl_engine.io import open_slide
try:
    with open_slide(sys.argv[1]) as slide:
        slide.read_region((0, 0), 0, (256, 256))
        slide.thumbnail(512)
except MedVLError as error:
    print(error, file=sys.stderr)
    sys.exit(2)
print("opened and read")
"""


@pytest.fixture(scope="session")
def write_tiled_rgb(write_raw_tiff, zero_deflate):
    """``write_tiled_rgb(path, width, height, tile, **options)`` -> a tiled RGB TIFF of zeros."""

    def _tiled_rgb(path: Path, width: int, height: int, tile: int, **options) -> Path:
        return write_raw_tiff(
            path, width, height, tile=(tile, tile), chunk=zero_deflate(tile * tile * 3), **options
        )

    return _tiled_rgb


@pytest.fixture(scope="module")
def hostile(
    tmp_path_factory,
    sample_data_or_none,
    write_raw_tiff,
    loop_ifd_chain,
    zero_deflate,
    write_tiled_rgb,
) -> dict[str, tuple[Path, str]]:
    """name -> (path, phrase the error sentence must hold)."""
    folder = tmp_path_factory.mktemp("hostile")
    files: dict[str, tuple[Path, str]] = {}

    def add(name: str, path: Path, phrase: str) -> None:
        files[name] = (path, phrase)

    add(
        "sparse tiled 10^6 px a side",
        write_tiled_rgb(folder / "sparse.tif", 10**6, 10**6, 1024, zero_chunks=slice(16, None)),
        "have no data recorded",
    )
    add(
        "tiled 10^6 px a side",
        write_tiled_rgb(folder / "huge.svs", 10**6, 10**6, 1024),
        "a slide may have (MEDVL_MAX_SLIDE_PIXELS)",
    )
    add(
        "grayscale strip 10^5 px a side",
        write_raw_tiff(
            folder / "strips.tif",
            10**5,
            10**5,
            samples=1,
            rows_per_strip=64,
            chunk=zero_deflate(10**5 * 64),
        ),
        "100,000 x 100,000 px",
    )
    add(
        "deflate tile of 16384^2",
        write_tiled_rgb(folder / "bomb.tif", 16384, 16384, 16384),
        "tiles of 16,384 x 16,384 px",
    )
    add(
        "strip table shorter than the size",
        write_raw_tiff(
            folder / "forged.tif",
            10**5,
            10**5,
            rows_per_strip=16,
            chunk=zero_deflate(10**5 * 16 * 3),
            chunk_count=4,
        ),
        "needs 6,250 strips, but its table lists 4",
    )
    add(
        "tile table shorter than the size",
        write_tiled_rgb(folder / "forged_tiles.svs", 10**5, 10**5, 256, chunk_count=4),
        "needs 152,881 tiles, but its table lists 4",
    )
    add(
        "zeroed tile offsets",
        write_tiled_rgb(folder / "zeroed.tif", 512, 512, 256, zero_chunks=slice(0, None)),
        "4 of the 4 tiles of level 0 have no data recorded",
    )
    looped = folder / "loop.tif"
    image = np.full((512, 512, 3), 200, np.uint8)
    with tifffile.TiffWriter(looped) as writer:
        for level in (image, image[::2, ::2]):
            writer.write(level, tile=(256, 256), photometric="rgb", compression="zlib")
    add("IFD chain looping to its start", loop_ifd_chain(looped), "loops back to byte")
    if sample_data_or_none is not None:
        ndpi = sample_data_or_none / "slides" / "test3-DAPI-2.ndpi"
        if ndpi.exists():
            copy = folder / "loop.ndpi"
            shutil.copyfile(ndpi, copy)
            add("NDPI whose IFD chain loops", loop_ifd_chain(copy), "loops back to byte")
    fifo = folder / "pipe.svs"
    os.mkfifo(fifo)
    add("FIFO", fifo, "is a named pipe (FIFO), not a regular file")
    memory = folder / "memory.svs"
    memory.symlink_to("/proc/self/mem")
    add("symlink to /proc/self/mem", memory, "points into /proc")
    zeros = folder / "zeros.ndpi"
    zeros.symlink_to("/dev/zero")
    add("symlink to /dev/zero", zeros, "is a character device, not a regular file")
    as_folder = folder / "folder.svs"
    as_folder.mkdir()
    add("folder named .svs", as_folder, "is a folder named like an image file")
    return files


@pytest.fixture(scope="module")
def sample_data_or_none() -> Path | None:
    """The sample data folder (as in conftest), or None when it is absent."""
    default = Path(__file__).resolve().parents[4] / "shared" / "sample-data"
    folder = Path(os.environ.get("MEDVL_SAMPLE_DATA", default))
    return folder if folder.is_dir() else None


CASES = [
    "sparse tiled 10^6 px a side",
    "tiled 10^6 px a side",
    "grayscale strip 10^5 px a side",
    "deflate tile of 16384^2",
    "strip table shorter than the size",
    "tile table shorter than the size",
    "zeroed tile offsets",
    "IFD chain looping to its start",
    "NDPI whose IFD chain loops",
    "FIFO",
    "symlink to /proc/self/mem",
    "symlink to /dev/zero",
    "folder named .svs",
]


def _case(hostile, name: str) -> tuple[Path, str]:
    if name not in hostile:
        pytest.skip(f"{name}: needs the sample data folder")
    return hostile[name]


def _assert_refused(result, path: Path, phrase: str) -> None:
    returncode, stdout, stderr, peak_mb = result
    assert returncode == 2, f"exit {returncode}; stderr: {stderr[-2000:]}"
    assert peak_mb < MEMORY_LIMIT_MB, f"peak RSS {peak_mb:.0f} MB"
    assert phrase in stderr, stderr[-2000:]
    assert path.name in stderr
    assert "Traceback" not in stderr


def _command(kind: str, path: Path, out: Path) -> list[str]:
    if kind == "api":
        return [sys.executable, "-c", API_PROBE, str(path)]
    if kind == "info":
        return [*MEDVL, "info", str(path)]
    argv = [*MEDVL, "heatmap", str(path), "--model", "medvl-demo", "--prompt", "tumor"]
    return [*argv, "--out", str(out)]


@pytest.fixture(scope="module")
def refusals(hostile, tmp_path_factory, run_limited_in_background, selected_params, request):
    """``refusals(kind, name)`` -> (run_limited result, heatmap output path) of one hostile file
    opened by one kind of child ("api", "info" or "heatmap"), each in its own child process.

    On the first request of a kind, the children of every selected test of that kind start,
    two at a time; each test then waits for its own.
    """
    started: dict[tuple[str, str], tuple] = {}
    outputs = tmp_path_factory.mktemp("heatmap-out")

    def result(kind: str, name: str):
        _case(hostile, name)  # skips a case whose file needs the sample data
        if (kind, name) not in started:
            wanted = selected_params(request, f"test_{kind}_refuses_hostile_file", "name")
            for other in [name, *wanted]:
                if other in hostile and (kind, other) not in started:
                    out = outputs / f"{kind}-{CASES.index(other)}.png"
                    command = _command(kind, hostile[other][0], out)
                    started[kind, other] = (
                        run_limited_in_background(command, TIME_LIMIT_S),
                        out,
                    )
        future, out = started[kind, name]
        return future.result(), out

    return result


@pytest.mark.parametrize("name", CASES)
def test_api_refuses_hostile_file(hostile, refusals, name):
    path, phrase = _case(hostile, name)
    result, _ = refusals("api", name)
    _assert_refused(result, path, phrase)
    # the sentence is the error's whole text (libraries may log above it)
    assert phrase in result[2].strip().splitlines()[-1]


@pytest.mark.parametrize("name", CASES)
def test_info_refuses_hostile_file(hostile, refusals, name):
    path, phrase = _case(hostile, name)
    result, _ = refusals("info", name)
    _assert_refused(result, path, phrase)
    assert result[2].strip().count("\n") == 0, "one line on stderr"


def test_info_as_slide_refuses_huge_grayscale_strip_tiff(hostile, run_limited):
    # read as a mammogram by default (grayscale); as a slide when told so: bounded both ways
    path, phrase = _case(hostile, "grayscale strip 10^5 px a side")
    result = run_limited([*MEDVL, "info", "--kind", "slide", str(path)], TIME_LIMIT_S)
    _assert_refused(result, path, phrase)


@pytest.mark.parametrize("name", CASES)
def test_heatmap_refuses_hostile_file(hostile, refusals, name):
    path, phrase = _case(hostile, name)
    result, out = refusals("heatmap", name)
    _assert_refused(result, path, phrase)
    assert not out.exists()


def test_features_refuses_every_hostile_file_in_one_batch(hostile, run_limited, tmp_path):
    paths = [str(path) for path, _ in hostile.values()]
    argv = [*MEDVL, "features", *paths, "--encoder", "medvl-demo", "--out", str(tmp_path)]
    returncode, _, stderr, peak_mb = run_limited(argv, TIME_LIMIT_S)
    assert returncode == 2, stderr[-3000:]
    assert peak_mb < MEMORY_LIMIT_MB, peak_mb
    for path, phrase in hostile.values():
        line = next((ln for ln in stderr.splitlines() if f"error: {path.name}:" in ln), "")
        assert phrase in line, (path.name, stderr[-3000:])
    assert "Traceback" not in stderr
    assert not list(tmp_path.glob("*.zarr"))


# ---- in-process checks of the guards themselves -------------------------------------------


def test_ifd_walk_counts_a_pyramid_and_stops_on_a_loop(tmp_path, coordinate_image, loop_ifd_chain):
    path = tmp_path / "pyramid.tif"
    image = coordinate_image(256, 256)
    with tifffile.TiffWriter(path) as writer:
        writer.write(image, tile=(128, 128), photometric="rgb", subifds=2)
        writer.write(image[::2, ::2], tile=(128, 128), photometric="rgb", subfiletype=1)
        writer.write(image[::4, ::4], tile=(128, 128), photometric="rgb", subfiletype=1)
        writer.write(image[:64, :64], photometric="rgb")  # a second page: label-like
    assert check_ifd_chain(path) == 4
    with open_slide(path) as slide:
        assert slide.level_count == 3
    loop_ifd_chain(path)
    with pytest.raises(CorruptFileError, match="loops back to byte"):
        check_ifd_chain(path)


def test_ifd_walk_refuses_a_chain_of_too_many_directories(tmp_path, monkeypatch, ifd_offsets):
    import medvl_engine.io._tiff_ifds as ifds

    path = tmp_path / "many.tif"
    with tifffile.TiffWriter(path) as writer:
        for _ in range(12):
            writer.write(np.zeros((8, 8), np.uint8))
    assert len(ifd_offsets(path)) == 12
    monkeypatch.setattr(ifds, "MAX_IFDS", 10)
    with pytest.raises(UnsupportedFormatError, match="more than 10 images"):
        check_ifd_chain(path)


def test_special_files_are_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "pipe.tif"
    os.mkfifo(fifo)  # opening it for reading would block: the check must not
    with pytest.raises(UnsupportedFormatError, match="named pipe"):
        require_regular_file(fifo)
    with pytest.raises(UnsupportedFormatError, match="named pipe"):
        open_slide(fifo)
    device = tmp_path / "null.svs"
    device.symlink_to(os.devnull)
    with pytest.raises(UnsupportedFormatError, match="character device"):
        open_slide(device)
    regular = tmp_path / "a.txt"
    regular.write_text("x")
    link = tmp_path / "link.txt"
    link.symlink_to(regular)
    assert require_regular_file(link) == regular.resolve()


def test_huge_single_level_slide_thumbnail_is_bounded(tmp_path, run_limited, write_tiled_rgb):
    """A valid 60,000 x 60,000 tiled TIFF without a pyramid: thumbnail and tissue mask in
    bounded time and memory (the whole level would be 10 GB)."""
    path = write_tiled_rgb(tmp_path / "flat.tif", 60000, 60000, 256)
    code = (
        "import sys\n"
        "from medvl_engine.io import open_slide\n"
        "from medvl_engine.tiling import tissue_mask\n"
        f"slide = open_slide({str(path)!r})\n"
        "thumb = slide.thumbnail(512)\n"
        "mask, down = tissue_mask(slide)\n"
        "print(thumb.shape, int(thumb.max()), mask.shape, round(down, 3))\n"
    )
    returncode, stdout, stderr, peak_mb = run_limited(code, TIME_LIMIT_S)
    assert returncode == 0, stderr[-2000:]
    assert peak_mb < 600, peak_mb
    assert stdout.split() == ["(512,", "512,", "3)", "0", "(1024,", "1024)", "58.594"]


def test_tiled_thumbnail_is_an_area_resize_and_sampling_repeats_tiles(tmp_path, monkeypatch):
    """A level read tile by tile gives the area-averaged thumbnail; past the tile budget a
    lattice of tiles is read, each stretched over the block it stands for."""
    from PIL import Image

    import medvl_engine.io.slide._slide as slide_module

    rows = np.linspace(0, 255, 1024)[:, None]
    cols = np.linspace(0, 255, 1536)[None, :]
    image = np.stack(np.broadcast_arrays(rows, cols, (rows + cols) / 2), axis=-1)
    image = np.round(image).astype(np.uint8)
    path = tmp_path / "flat.tif"
    tifffile.imwrite(path, image, tile=(128, 128), photometric="rgb", compression="zlib")
    reference = np.asarray(Image.fromarray(image).resize((384, 256), Image.Resampling.BOX))
    monkeypatch.setattr(slide_module, "THUMBNAIL_LEVEL_PIXELS", 10**6)
    with open_slide(path) as slide:
        tiled = slide.thumbnail(384)  # 8 x 12 tiles, all read
        monkeypatch.setattr(slide_module, "THUMBNAIL_TILE_BUDGET", 24 * 128 * 128)
        sampled = slide.thumbnail(384)  # every second tile row and column
    assert tiled.shape == sampled.shape == (256, 384, 3)
    assert np.abs(tiled.astype(int) - reference.astype(int)).max() <= 1
    # the block of 2 x 2 tiles at (0, 0) shows tile (0, 0) stretched: a ramp of twice the span
    block = sampled[:64, :64, 1].astype(int)
    assert block[0, 0] == tiled[0, 0, 1]
    assert abs(block[0, 63] - tiled[0, 31, 1]) <= 1
    assert np.abs(sampled.astype(int) - reference.astype(int)).max() > 10


def test_region_and_plain_image_sizes_are_checked_before_decoding(
    tmp_path, monkeypatch, coordinate_image
):
    path = tmp_path / "pyramid.tif"
    image = coordinate_image(512, 512)
    tifffile.imwrite(path, image, tile=(128, 128), photometric="rgb")
    png = tmp_path / "plain.png"
    from PIL import Image

    Image.fromarray(image).save(png)
    monkeypatch.setenv("MEDVL_MAX_DECODE_PIXELS", str(300 * 300))
    with open_slide(path) as slide:
        assert slide.read_region((0, 0), 0, (300, 300)).shape == (300, 300, 3)
        with pytest.raises(ResourceLimitError, match="301 x 300 px") as error:
            slide.read_region((0, 0), 0, (301, 300))
        assert "ask for a smaller region or a coarser level" in str(error.value)
    with pytest.raises(ResourceLimitError, match="512 x 512 px"):
        open_slide(png)
    monkeypatch.setenv("MEDVL_MAX_TILE_PIXELS", str(64 * 64))
    with pytest.raises(ResourceLimitError, match="tiles of 128 x 128 px"):
        open_slide(path)


def test_tile_data_past_the_end_of_the_file_is_refused_at_open(tmp_path, write_raw_tiff):
    path = tmp_path / "cut.tif"
    chunk = zlib.compress(bytes(256 * 256 * 3))
    write_raw_tiff(path, 512, 512, tile=(256, 256), chunk=chunk)
    data = bytearray(path.read_bytes())
    # every tile points at the chunk at byte 8; claim each is a megabyte long
    (ifd,) = np.frombuffer(bytes(data[4:8]), "<u4")
    entries = int(np.frombuffer(bytes(data[ifd : ifd + 2]), "<u2")[0])
    for index in range(entries):
        at = ifd + 2 + 12 * index
        tag = int(np.frombuffer(bytes(data[at : at + 2]), "<u2")[0])
        if tag == 325:  # TileByteCounts: 4 values stored elsewhere
            pointer = int(np.frombuffer(bytes(data[at + 8 : at + 12]), "<u4")[0])
            data[pointer : pointer + 16] = np.full(4, 2**20, "<u4").tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="lie past the end of the file"):
        open_slide(path)


@pytest.fixture(scope="session")
def write_jpeg2000_tiff_stating(coordinate_image):
    """``write_jpeg2000_tiff_stating(path, stated)`` -> a 64 x 64 JPEG 2000 tiled TIFF whose
    first tile's SIZ states ``stated`` px a side."""

    def _jpeg2000_tiff_stating(path: Path, stated: int) -> Path:
        tifffile.imwrite(path, coordinate_image(64, 64), tile=(32, 32), compression="jpeg2000")
        with tifffile.TiffFile(path) as tiff:
            offset = int(tiff.pages[0].dataoffsets[0])
        data = bytearray(path.read_bytes())
        assert data[offset : offset + 4] == b"\xff\x4f\xff\x51"
        data[offset + 8 : offset + 16] = stated.to_bytes(4, "big") * 2  # Xsiz, Ysiz
        path.write_bytes(bytes(data))
        return path

    return _jpeg2000_tiff_stating


def test_jpeg2000_tile_stating_a_huge_image_is_not_decoded(
    tmp_path, run_limited, write_jpeg2000_tiff_stating
):
    path = write_jpeg2000_tiff_stating(tmp_path / "j2k-bomb.tif", 60_000)
    result = run_limited([sys.executable, "-c", API_PROBE, str(path)], TIME_LIMIT_S)
    _assert_refused(result, path, "states an image of 60,000 x 60,000 px")


def test_jpeg2000_tiles_of_their_own_size_still_decode(tmp_path, coordinate_image):
    path = tmp_path / "j2k.tif"
    image = coordinate_image(64, 64)
    tifffile.imwrite(
        path, image, tile=(32, 32), compression="jpeg2000", compressionargs={"level": 0}
    )
    with open_slide(path) as slide:
        region = np.asarray(slide.read_region((0, 0), 0, (64, 64)))
    assert np.array_equal(region[..., :3], image)


def test_a_tiff_cut_before_its_first_image_is_described_in_words(tmp_path, write_tiled_rgb):
    whole = write_tiled_rgb(tmp_path / "whole.tif", 512, 512, 256)
    with tifffile.TiffFile(whole) as tiff:
        first_ifd = int(tiff.pages[0].offset)
    cut = tmp_path / "cut.svs"
    cut.write_bytes(whole.read_bytes()[: min(first_ifd, 4096) - 1])
    with pytest.raises(CorruptFileError) as caught:
        open_slide(cut)
    message = str(caught.value)
    assert "points to no readable image" in message and "cut.svs" in message
    assert "out of range" not in message and "index" not in message
