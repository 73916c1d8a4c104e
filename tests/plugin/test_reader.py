"""The napari reader on real sample files and synthetic files: layers, shapes, world frame."""

from __future__ import annotations

import npe2
import numpy as np
import pytest
from napari.components import ViewerModel
from napari.layers import Layer
from napari.utils.notifications import notification_manager

from napari_medvl._reader import get_reader, read_paths

PLUGIN = "napari-medvl"


@pytest.fixture(autouse=True, scope="module")
def _discover_plugins():
    npe2.PluginManager.instance().discover()


def _open(paths):
    viewer = ViewerModel()
    layers = viewer.open(paths, plugin=PLUGIN)
    return viewer, layers


def test_reader_declines_files_it_does_not_handle(tmp_path):
    assert get_reader(str(tmp_path / "notes.txt")) is None
    assert get_reader([str(tmp_path / "a.svs"), str(tmp_path / "b.csv")]) is None
    assert get_reader(str(tmp_path / "a.svs")) is not None


def test_svs_opens_as_one_multiscale_rgb_layer_in_micrometres(sample_file):
    path = sample_file("slides/CMU-1-Small-Region.svs")
    _, layers = _open(str(path))
    assert len(layers) == 1
    layer = layers[0]
    assert layer.multiscale and layer.rgb
    assert layer.data[0].shape == (2967, 2220, 3)
    np.testing.assert_allclose(layer.scale, [0.499, 0.499])
    np.testing.assert_allclose(layer.translate, [0.2495, 0.2495])
    assert layer.metadata["slide"].dimensions == (2220, 2967)
    assert layer.metadata["mpp"] == pytest.approx((0.499, 0.499))
    # the slide's top-left pixel edge is the world origin; its far edge is size x mpp in um
    np.testing.assert_allclose(layer.data_to_world([-0.5, -0.5]), [0.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(
        layer.data_to_world([2967 - 0.5, 2220 - 0.5]), [2967 * 0.499, 2220 * 0.499], rtol=1e-9
    )


def test_pyramid_without_mpp_stays_in_level0_pixels(sample_file):
    _, layers = _open(str(sample_file("slides/boxes.tiff")))
    layer = layers[0]
    assert [level.shape[:2] for level in layer.data] == [(250, 300), (125, 150), (62, 75), (31, 37)]
    np.testing.assert_allclose(layer.scale, [1.0, 1.0])


def test_ndpi_levels_are_lazy(sample_file):
    _, layers = _open(str(sample_file("slides/test3-DAPI-2.ndpi")))
    layer = layers[0]
    assert len(layer.data) == 4
    # dask levels, or (with a Qt application) progressive levels over them: nothing decoded yet
    assert not any(isinstance(level, np.ndarray) for level in layer.data)
    assert all(
        type(level).__module__.startswith("dask") for level in layer.metadata["slide"].levels
    )
    np.testing.assert_allclose(layer.scale, [0.22817505] * 2, rtol=1e-6)


@pytest.mark.parametrize(
    "relative", ["bad/broken.svs", "bad/unopenable.tiff", "bad/unreadable.svs"]
)
def test_bad_file_gives_one_sentence_notification_not_an_exception(sample_file, relative):
    path = sample_file(relative)
    before = len(notification_manager.records)
    viewer, layers = _open(str(path))
    assert layers == []
    assert len(viewer.layers) == 0
    new = notification_manager.records[before:]
    assert len(new) == 1
    message = new[0].message
    assert path.name in message
    assert "\n" not in message and "Traceback" not in message


def test_one_bad_file_does_not_stop_the_others(sample_file):
    good = sample_file("slides/boxes.tiff")
    bad = sample_file("bad/broken.svs")
    _, layers = _open([str(bad), str(good)])
    assert [layer.name for layer in layers] == ["boxes.tiff"]


def test_dicom_wsi_opens_as_a_slide(sample_file):
    _, layers = _open(str(sample_file("dicom/sm_image.dcm")))
    assert len(layers) == 1
    assert layers[0].metadata["medvl_kind"] == "slide"
    assert layers[0].rgb


def test_mammograms_read_together_sit_side_by_side_with_display_windowing(sample_file):
    dx = sample_file("dicom/dx_image.dcm")
    layers = [Layer.create(*data) for data in read_paths([str(dx), str(dx)])]
    assert len(layers) == 2
    first, second = layers
    assert first.data.dtype == np.float32
    assert first.data.shape == (211, 169) or first.data.shape == (169, 211)
    assert 0.0 <= float(first.data.min()) and float(first.data.max()) <= 1.0
    assert tuple(first.contrast_limits) == (0.0, 1.0)
    assert first.colormap.name == "gray"
    assert first.name.startswith("L")
    width = first.data.shape[1]
    assert second.translate[1] - first.translate[1] == pytest.approx(width + 64)
    assert first.name != second.name


def test_synthetic_slide_and_mammograms_open_through_the_reader(tmp_path):
    from medvl_engine.synthetic import make_mammogram_case, make_synthetic_slide

    made = make_synthetic_slide(tmp_path / "s.tiff", seed=1, size=(1024, 768), mpp=0.5)
    _, layers = _open(str(made.path))
    assert layers[0].data[0].shape == (768, 1024, 3)
    np.testing.assert_allclose(layers[0].scale, [0.5, 0.5])

    (tmp_path / "mammo").mkdir()
    case = make_mammogram_case(tmp_path / "mammo", seed=1, laterality="R")
    _, layers = _open([str(case.cc_path), str(case.mlo_path)])
    assert sorted(layer.name for layer in layers) == ["R CC", "R MLO"]


def test_film_mammogram_in_jpeg2000_opens_as_a_named_view(sample_file):
    _, layers = _open(str(sample_file("dicom/MG1_J2KI.dcm")))
    assert [layer.name for layer in layers] == ["L MLO"]
    assert layers[0].data.shape == (4664, 3064)
    assert layers[0].metadata["medvl_kind"] == "mammogram"


def test_png_is_a_mammogram_when_grayscale_and_a_slide_when_colour(tmp_path):
    from PIL import Image

    gray = np.tile(np.linspace(0, 65535, 96, dtype=np.uint16), (128, 1))
    Image.fromarray(gray).save(tmp_path / "7_R_CC.png")
    colour = np.zeros((64, 80, 3), dtype=np.uint8)
    colour[..., 0] = 200
    Image.fromarray(colour).save(tmp_path / "tile.png")
    _, layers = _open(str(tmp_path / "7_R_CC.png"))
    assert layers[0].name == "R CC" and layers[0].data.shape == (128, 96)
    _, layers = _open(str(tmp_path / "tile.png"))
    assert layers[0].rgb and layers[0].metadata["medvl_kind"] == "slide"
    assert layers[0].data[0].shape == (64, 80, 3)


def test_a_folder_of_dicom_wsi_files_opens_as_one_slide(sample_file, tmp_path):
    import shutil

    for name in ("boxes_0.dcm", "boxes_1.dcm"):
        shutil.copy(sample_file(f"dicom/{name}"), tmp_path / name)
    assert get_reader(str(tmp_path)) is not None
    _, layers = _open(str(tmp_path))
    assert len(layers) == 1
    assert layers[0].metadata["medvl_kind"] == "slide"
    np.testing.assert_allclose(layers[0].scale, [0.499, 0.499])


def test_a_folder_without_dicom_is_declined(tmp_path):
    (tmp_path / "notes.txt").write_text("no images here")
    assert get_reader(str(tmp_path)) is None
