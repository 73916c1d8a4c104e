"""open_slide on real sample files and on slides written here with known pixels."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest
import tifffile
from PIL import Image

from medvl_engine.errors import CorruptFileError, MedVLError, UnsupportedFormatError
from medvl_engine.io import open_slide

GOOD_SLIDES = {
    # file: (level dimensions (w, h), mpp, vendor, objective power, associated images)
    "slides/CMU-1-Small-Region.svs": (
        [(2220, 2967)],
        (0.499, 0.499),
        "aperio",
        20.0,
        {"thumbnail", "label", "macro"},
    ),
    "slides/small.svs": ([(16, 16)], (0.499, 0.499), "aperio", 20.0, {"thumbnail"}),
    "slides/boxes.tiff": (
        [(300, 250), (150, 125), (75, 62), (37, 31)],
        None,
        "generic-tiff",
        None,
        set(),
    ),
    "slides/test3-DAPI-2.ndpi": (
        [(3968, 4864), (1984, 2432), (992, 1216), (496, 608)],
        (0.2281750559028887, 0.2281750559028887),
        "hamamatsu",
        40.0,
        {"macro", "map"},
    ),
}


@pytest.mark.parametrize("relative", sorted(GOOD_SLIDES))
def test_sample_slide_metadata(sample_file, relative):
    dims, mpp, vendor, power, associated = GOOD_SLIDES[relative]
    with open_slide(sample_file(relative)) as slide:
        assert slide.level_dimensions == dims
        assert slide.dimensions == dims[0]
        assert [tuple(level.shape) for level in slide.levels] == [(h, w, 3) for w, h in dims]
        assert all(level.dtype == np.uint8 for level in slide.levels)
        if mpp is None:
            assert slide.mpp is None
        else:
            assert slide.mpp == pytest.approx(mpp)
        assert slide.vendor == vendor
        assert slide.objective_power == power
        assert set(slide.associated_images) == associated
        for name in associated:
            image = slide.associated_images[name]
            assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8


@pytest.mark.parametrize("relative", sorted(GOOD_SLIDES))
def test_sample_slide_pixels_match_tifffile(sample_file, relative):
    path = sample_file(relative)
    with open_slide(path) as slide, tifffile.TiffFile(path) as tif:
        for index, level in enumerate(tif.series[0].levels[:3]):
            expected = level.asarray()
            assert np.array_equal(slide.levels[index].compute(), expected), f"level {index}"


def test_svs_properties_hold_no_patient_or_operator_fields(sample_file):
    with open_slide(sample_file("slides/CMU-1-Small-Region.svs")) as slide:
        text = repr(slide.properties).lower()
        assert "filename" not in text and "user" not in text
        assert slide.private_properties["aperio.Filename"] == "CMU-1"
        assert slide.properties["aperio.AppMag"] == 20


def test_ndpi_strips_are_rechunked_to_whole_strip_groups(sample_file):
    with open_slide(sample_file("slides/test3-DAPI-2.ndpi")) as slide:
        rows, cols, _ = slide.levels[0].chunks
        assert cols == (3968,)
        assert all(size % 8 == 0 for size in rows[:-1]) and min(rows[:-1]) >= 512


def test_generic_pyramid_pixels_and_tile_aligned_chunks(
    tmp_path, coordinate_image, pyramid, write_pyramid_tiff
):
    image = coordinate_image(1000, 1300)
    levels = pyramid(image, 3)
    path = write_pyramid_tiff(tmp_path / "pyramid.tif", levels, tile=128, mpp=0.5)
    with open_slide(path) as slide:
        assert slide.level_dimensions == [(1300, 1000), (650, 500), (325, 250)]
        assert slide.level_downsamples == pytest.approx([1.0, 2.0, 4.0])
        assert slide.mpp == pytest.approx((0.5, 0.5))
        for index, expected in enumerate(levels):
            assert np.array_equal(np.asarray(slide.levels[index]), expected)
            for sizes in slide.levels[index].chunks[:2]:
                assert all(size % 128 == 0 for size in sizes[:-1])
        window = np.asarray(slide.levels[0][130:390:3, 1000:1299])
        assert np.array_equal(window, image[130:390:3, 1000:1299])


@pytest.mark.parametrize("level", [0, 1, 2])
def test_read_region_every_level_and_edges(
    tmp_path, level, coordinate_image, pyramid, write_pyramid_tiff
):
    image = coordinate_image(1000, 1300)
    levels = pyramid(image, 3)
    path = write_pyramid_tiff(tmp_path / "pyramid.tif", levels, tile=128)
    factor = 2**level
    reference = levels[level]
    height, width = reference.shape[:2]
    with open_slide(path) as slide:
        # inside: top-left given in level-0 px
        region = slide.read_region((200 * factor, 100 * factor), level, (90, 60))
        assert np.array_equal(region, reference[100:160, 200:290])
        # across the bottom-right corner: white beyond the slide
        x0, y0 = width - 30, height - 20
        region = slide.read_region((x0 * factor, y0 * factor), level, (50, 40))
        assert np.array_equal(region[:20, :30], reference[y0:, x0:])
        assert (region[20:] == 255).all() and (region[:, 30:] == 255).all()
        # before the top-left corner
        region = slide.read_region((-10 * factor, -5 * factor), level, (20, 10))
        assert (region[:5] == 255).all() and (region[:, :10] == 255).all()
        assert np.array_equal(region[5:, 10:], reference[:5, :10])
        # entirely outside
        assert (slide.read_region((10**6, 10**6), level, (8, 8)) == 255).all()


def test_read_region_rejects_missing_level(tmp_path, write_pyramid_tiff, pyramid, coordinate_image):
    path = write_pyramid_tiff(tmp_path / "p.tif", pyramid(coordinate_image(300, 300), 2))
    with open_slide(path) as slide, pytest.raises(MedVLError, match="level 5 does not exist"):
        slide.read_region((0, 0), 5, (10, 10))


def test_best_level_and_thumbnail(tmp_path, pyramid, coordinate_image, write_pyramid_tiff):
    levels = pyramid(coordinate_image(1000, 1300), 3)
    with open_slide(write_pyramid_tiff(tmp_path / "p.tif", levels)) as slide:
        assert [slide.get_best_level_for_downsample(d) for d in (0.5, 1, 1.9, 2, 3.9, 4, 64)] == [
            0, 0, 0, 1, 1, 2, 2,
        ]  # fmt: skip
        thumb = slide.thumbnail(200)
        assert thumb.shape == (154, 200, 3)
        # the coordinate pattern survives: red channel (row % 251) grows down the first rows
        assert thumb[5, 100, 2] == 7 and thumb[30, 100, 0] > thumb[5, 100, 0]


def test_ome_tiff_rgb_reads_with_physical_size(
    tmp_path, pyramid, write_pyramid_tiff, coordinate_image
):
    levels = pyramid(coordinate_image(600, 700), 2)
    path = write_pyramid_tiff(tmp_path / "s.ome.tif", levels, ome=True, mpp=0.25)
    with open_slide(path) as slide:
        assert slide.vendor == "ome-tiff"
        assert slide.mpp == pytest.approx((0.25, 0.25))
        assert slide.level_dimensions == [(700, 600), (350, 300)]
        assert np.array_equal(np.asarray(slide.levels[1]), levels[1])


@pytest.mark.parametrize(
    ("data", "axes", "photometric"),
    [
        (np.zeros((5, 300, 400), np.uint8), "CYX", "minisblack"),
        (np.zeros((3, 300, 400, 3), np.uint8), "ZYXS", "rgb"),
        (np.zeros((300, 400, 3), np.uint16), "YXS", "rgb"),
    ],
)
def test_other_ome_layouts_are_unsupported(tmp_path, data, axes, photometric):
    path = tmp_path / "multi.ome.tif"
    tifffile.imwrite(path, data, tile=(128, 128), photometric=photometric, metadata={"axes": axes})
    with pytest.raises(UnsupportedFormatError, match="multi.ome.tif"):
        open_slide(path)


@pytest.mark.parametrize("compression", ["jpeg", "jpeg2000"])
def test_svs_jpeg_and_jpeg2000_tiles(tmp_path, compression, coordinate_image, write_svs):
    image = coordinate_image(700, 900)
    path = write_svs(tmp_path / f"{compression}.svs", image, compression=compression, tile=240)
    with open_slide(path) as slide, tifffile.TiffFile(path) as tif:
        assert slide.vendor == "aperio"
        assert slide.mpp == pytest.approx((0.25, 0.25))
        assert slide.objective_power == 40.0
        assert "Filename" not in repr(slide.properties)
        expected = tif.pages[0].asarray()
        assert np.array_equal(np.asarray(slide.levels[0]), expected)
        assert np.array_equal(
            slide.read_region((250, 470), 0, (300, 200)), expected[470:670, 250:550]
        )
        # lossy codecs still keep the coordinate pattern
        assert np.abs(expected.astype(int) - image).mean() < 6


def test_plain_png_gets_a_lazy_pyramid_and_rgba_becomes_rgb(tmp_path, coordinate_image):
    rgb = coordinate_image(1100, 1500)
    alpha = np.full((1100, 1500, 1), 255, np.uint8)
    alpha[:10, :10] = 0  # fully transparent corner -> white
    path = tmp_path / "photo.png"
    Image.fromarray(np.concatenate([rgb, alpha], axis=2), "RGBA").save(path)
    with open_slide(path) as slide:
        assert slide.vendor == "plain-image" and slide.mpp is None
        assert slide.level_dimensions == [(1500, 1100), (750, 550), (375, 275)]
        level0 = np.asarray(slide.levels[0])
        assert (level0[:10, :10] == 255).all()
        assert np.array_equal(level0[10:, 10:], rgb[10:, 10:])
        level1 = np.asarray(slide.levels[1]).astype(int)
        block = rgb[100:102, 300:302].astype(int)
        assert np.abs(level1[50, 150] - block.mean(axis=(0, 1))).max() <= 1


def test_plain_jpeg_and_strip_tiff(tmp_path, coordinate_image):
    image = coordinate_image(300, 400)
    Image.fromarray(image).save(tmp_path / "a.jpg", quality=95)
    tifffile.imwrite(tmp_path / "b.tif", image, photometric="rgb")  # strips, not tiles
    with open_slide(tmp_path / "a.jpg") as slide:
        assert slide.dimensions == (400, 300)
        assert np.abs(np.asarray(slide.levels[0]).astype(int) - image).mean() < 4
    with open_slide(tmp_path / "b.tif") as slide:
        assert slide.dimensions == (400, 300)
        assert np.array_equal(slide.read_region((5, 6), 0, (50, 40)), image[6:46, 5:55])


@pytest.mark.parametrize(
    ("relative", "error", "words"),
    [
        ("bad/broken.svs", CorruptFileError, "does not start with a TIFF header"),
        ("bad/unopenable.tiff", UnsupportedFormatError, "compression 52479"),
    ],
)
def test_bad_sample_files_fail_at_open_with_their_sentence(sample_file, relative, error, words):
    path = sample_file(relative)
    with pytest.raises(error, match=words) as caught:
        open_slide(path)
    assert str(caught.value).startswith(path.name)
    assert caught.value.path == path


def test_unreadable_svs_fails_when_its_tiles_are_decoded(sample_file):
    path = sample_file("bad/unreadable.svs")
    with open_slide(path) as slide:
        assert slide.dimensions == (16, 16)
        with pytest.raises(CorruptFileError, match=r"^unreadable\.svs: .*Bogus marker length"):
            slide.read_region((0, 0), 0, (16, 16))
        with pytest.raises(CorruptFileError, match="unreadable.svs"):
            slide.levels[0].compute()


def test_missing_empty_and_unknown_files(tmp_path):
    with pytest.raises(MedVLError, match="no such file"):
        open_slide(tmp_path / "nothere.svs")
    (tmp_path / "empty.svs").write_bytes(b"")
    with pytest.raises(CorruptFileError, match="empty"):
        open_slide(tmp_path / "empty.svs")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UnsupportedFormatError, match="notes.txt: not a slide format"):
        open_slide(tmp_path / "notes.txt")
    with pytest.raises(UnsupportedFormatError, match="holds no DICOM files"):
        open_slide(tmp_path)


def _assembled_frames(path):
    dataset = pydicom.dcmread(path)
    frames = dataset.pixel_array.reshape(-1, dataset.Rows, dataset.Columns, 3)
    across = -(-dataset.TotalPixelMatrixColumns // dataset.Columns)
    down = -(-dataset.TotalPixelMatrixRows // dataset.Rows)
    grid = frames[: across * down].reshape(down, across, dataset.Rows, dataset.Columns, 3)
    whole = grid.transpose(0, 2, 1, 3, 4).reshape(down * dataset.Rows, across * dataset.Columns, 3)
    return whole[: dataset.TotalPixelMatrixRows, : dataset.TotalPixelMatrixColumns]


@pytest.mark.parametrize(
    ("relative", "dims", "power", "tolerance"),
    [("dicom/sm_image.dcm", (50, 50), None, 0), ("dicom/boxes_0.dcm", (16, 16), 20.0, 2)],
)
def test_sample_dicom_wsi(sample_file, relative, dims, power, tolerance):
    path = sample_file(relative)
    with open_slide(path) as slide:
        assert slide.vendor == "dicom"
        assert slide.level_dimensions == [dims]
        assert slide.mpp == pytest.approx((0.499, 0.499))
        assert slide.objective_power == power
        pixels = np.asarray(slide.levels[0]).astype(int)
        # pydicom (pylibjpeg) and imagecodecs may round JPEG colours one step apart
        assert np.abs(pixels - _assembled_frames(path)).max() <= tolerance
        assert "Patient" not in repr(slide.properties)


def test_sample_dicom_wsi_thumbnail_instance_of_the_series(sample_file):
    with open_slide(sample_file("dicom/boxes_0.dcm")) as slide:
        assert set(slide.associated_images) == {"thumbnail"}  # from boxes_1.dcm beside it
        assert slide.associated_images["thumbnail"].shape == (16, 16, 3)


def test_dicom_wsi_folder_with_levels_sparse_tiles_and_label(
    tmp_path, coordinate_image, write_sm_dicom
):
    from pydicom.uid import generate_uid

    image = coordinate_image(300, 420)
    series = generate_uid()
    write_sm_dicom(tmp_path / "l0.dcm", image, tile=64, series_uid=series)
    write_sm_dicom(tmp_path / "l1.dcm", image[::2, ::2], tile=64, series_uid=series, sparse=True)
    write_sm_dicom(
        tmp_path / "lab.dcm", image[:40, :60], tile=64, series_uid=series, flavour="LABEL"
    )
    with open_slide(tmp_path) as slide:
        assert slide.level_dimensions == [(420, 300), (210, 150)]
        assert slide.mpp == pytest.approx((0.25, 0.25))
        assert slide.objective_power == 40.0
        assert np.array_equal(np.asarray(slide.levels[0]), image)
        assert np.array_equal(np.asarray(slide.levels[1]), image[::2, ::2])
        assert np.array_equal(
            slide.read_region((100, 60), 1, (30, 20)), image[::2, ::2][30:50, 50:80]
        )
        assert np.array_equal(slide.associated_images["label"], image[:40, :60])
        assert slide.private_properties["dicom.PatientName"] == "Roe^Richard"
        assert "Roe" not in repr(slide.properties) and "SLIDE-77" not in repr(slide.properties)
    with open_slide(tmp_path / "l1.dcm") as slide:  # one file finds the rest of its series
        assert slide.level_dimensions == [(420, 300), (210, 150)]


def test_dicom_that_is_not_a_slide(sample_file):
    with pytest.raises(UnsupportedFormatError, match=r"^dx_image\.dcm: is a DICOM DX image"):
        open_slide(sample_file("dicom/dx_image.dcm"))


def test_opening_reads_metadata_only(tmp_path, monkeypatch, write_svs, coordinate_image):
    from medvl_engine.io.slide import _tiff

    decoded = []
    original = _tiff._TiledPageSource._tile
    monkeypatch.setattr(
        _tiff._TiledPageSource,
        "_tile",
        lambda self, row, col: decoded.append((row, col)) or original(self, row, col),
    )
    path = write_svs(tmp_path / "lazy.svs", coordinate_image(960, 960), tile=240)
    with open_slide(path) as slide:
        assert slide.levels[0].shape == (960, 960, 3) and slide.thumbnail is not None
        assert decoded == []
        slide.read_region((250, 10), 0, (200, 200))  # x 250..449, y 10..209: one tile
        assert sorted(decoded) == [(0, 1)]
        np.asarray(slide.levels[0][500:520, 0:960])
        assert sorted(decoded)[1:] == [(2, 0), (2, 1), (2, 2), (2, 3)]


def test_reading_after_close_says_so(tmp_path, write_pyramid_tiff, pyramid, coordinate_image):
    path = write_pyramid_tiff(tmp_path / "c.tif", pyramid(coordinate_image(300, 300), 2))
    with open_slide(path) as slide:
        level = slide.levels[0]
    with pytest.raises(MedVLError, match=r"^c\.tif: the slide was closed"):
        level[:10, :10].compute()


def _read_corner(path, queue):
    with open_slide(path) as slide:
        queue.put(slide.read_region((0, 0), 0, (300, 300)).sum())


def test_reading_in_a_forked_worker_after_the_parent_read(
    tmp_path, write_pyramid_tiff, pyramid, coordinate_image
):
    import multiprocessing

    path = write_pyramid_tiff(tmp_path / "f.tif", pyramid(coordinate_image(600, 600), 1), tile=64)
    with open_slide(path) as slide:
        expected = slide.read_region((0, 0), 0, (300, 300)).sum()  # starts the decode pool
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    worker = context.Process(target=_read_corner, args=(path, queue))
    worker.start()
    worker.join(timeout=60)  # a hang guard, not a speed claim
    alive = worker.is_alive()
    if alive:
        worker.kill()
    assert not alive, "the forked reader hung"
    assert queue.get(timeout=60) == expected


def test_rgba_and_grayscale_tiled_tiffs_become_rgb(tmp_path, coordinate_image):
    rgb = coordinate_image(200, 260)
    alpha = np.full((200, 260, 1), 255, np.uint8)
    alpha[:, :50] = 0  # transparent strip -> white
    rgba_path = tmp_path / "rgba.tif"
    tifffile.imwrite(
        rgba_path,
        np.concatenate([rgb, alpha], axis=2),
        tile=(64, 64),
        photometric="rgb",
        extrasamples=["unassalpha"],
    )
    with open_slide(rgba_path) as slide:
        pixels = np.asarray(slide.levels[0])
        assert pixels.shape == (200, 260, 3)
        assert (pixels[:, :50] == 255).all()
        assert np.array_equal(pixels[:, 50:], rgb[:, 50:])
    gray = rgb[..., 0]
    tifffile.imwrite(tmp_path / "gray.tif", gray, tile=(64, 64), photometric="minisblack")
    with open_slide(tmp_path / "gray.tif") as slide:
        assert np.array_equal(np.asarray(slide.levels[0]), np.repeat(gray[..., None], 3, axis=2))


def test_reads_without_pread(tmp_path, monkeypatch, coordinate_image, write_pyramid_tiff, pyramid):
    import os

    monkeypatch.delattr(os, "pread")  # as on Windows
    image = coordinate_image(400, 500)
    path = write_pyramid_tiff(tmp_path / "w.tif", pyramid(image, 2), tile=64)
    with open_slide(path) as slide:
        assert np.array_equal(np.asarray(slide.levels[0]), image)
        assert np.array_equal(
            slide.read_region((64, 32), 1, (60, 50)), image[::2, ::2][16:66, 32:92]
        )
