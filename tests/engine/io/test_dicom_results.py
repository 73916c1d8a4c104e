"""DICOM result objects made by other tools (built here directly with highdicom) read back
as shapes and grids on their source image, and described in words."""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest
from pydicom.sr.codedict import codes

from medvl_engine.errors import CorruptFileError, UnsupportedFormatError
from medvl_engine.io.dicom_results import describe_dicom_result, is_dicom_result, read_dicom_result
from medvl_engine.io.dicom_results.geometry import SlideGeometry
from tests.support.dicom_wsi import write_dicom_wsi
from tests.support.highdicom_results import (
    ALGORITHM,
    annotation_group,
    bulk_annotations,
    segmentation,
)


@pytest.fixture(scope="module")
def slide(tmp_path_factory) -> tuple[Path, pydicom.Dataset]:
    image = np.random.default_rng(2).integers(0, 255, (300, 400, 3), dtype=np.uint8)
    level0 = write_dicom_wsi(tmp_path_factory.mktemp("wsi"), image, mpp=0.5, tile=64, levels=1)[0]
    return level0, pydicom.dcmread(level0)


@pytest.fixture(scope="module")
def whole_seg(slide, tmp_path_factory) -> Path:
    """A binary segmentation that covers the whole slide (300 x 400 px), saved."""
    _, source = slide
    path = tmp_path_factory.mktemp("seg") / "whole.dcm"
    segmentation(source, np.ones((300, 400), bool), "all").save_as(path)
    return path


def test_binary_seg_on_the_full_grid_comes_back_pixel_for_pixel(slide, tmp_path):
    level0, source = slide
    mask = np.zeros((300, 400), bool)
    mask[10:50, 20:80] = True
    segmentation(source, mask, "tumour").save_as(tmp_path / "seg.dcm")
    result = read_dicom_result(tmp_path / "seg.dcm", source=level0)
    (image,) = result.images
    assert (image.kind, image.name, image.origin, image.pixel_size) == (
        "mask",
        "tumour",
        (0, 0),
        (1, 1),
    )
    np.testing.assert_array_equal(image.values.astype(bool), mask)
    assert result.algorithm == [ALGORITHM]
    assert result.placed_on == source.SOPInstanceUID


def test_fractional_seg_at_a_coarser_spacing_is_scaled_onto_level0(slide, tmp_path):
    level0, source = slide
    coarse = np.zeros((75, 100), np.float32)
    coarse[5:10, 20:30] = 0.75
    spacing = 4 * 0.0005
    origin = source.TotalPixelMatrixOriginSequence[0]
    seg = segmentation(
        source,
        coarse,
        "stroma",
        "FRACTIONAL",
        pixel_measures=hd.PixelMeasuresSequence(
            pixel_spacing=(spacing, spacing), slice_thickness=0.001
        ),
        plane_orientation=hd.PlaneOrientationSequence("SLIDE", list(source.ImageOrientationSlide)),
        plane_positions=[
            hd.PlanePositionSequence(
                "SLIDE",
                (
                    float(origin.XOffsetInSlideCoordinateSystem),
                    float(origin.YOffsetInSlideCoordinateSystem),
                    0.0,
                ),
                (1, 1),
            )
        ],
    )
    seg.save_as(tmp_path / "fractional.dcm")
    (image,) = read_dicom_result(tmp_path / "fractional.dcm", source=level0).images
    assert image.pixel_size == pytest.approx((4, 4))
    assert image.origin == pytest.approx((0, 0), abs=1e-6)
    np.testing.assert_allclose(image.values, coarse, atol=1 / 255)
    lines = describe_dicom_result(tmp_path / "fractional.dcm")
    assert any("segment 'stroma': 100 x 75 pixels" in line for line in lines)


def test_ann_in_slide_coordinates_lands_on_level0_pixels(slide, tmp_path):
    level0, source = slide
    geometry = SlideGeometry.from_dataset(source)
    polygon = np.array([[30.0, 40.0], [90.0, 40.0], [60.0, 100.0]])
    point = np.array([[200.0, 150.0]])
    groups = [
        annotation_group(1, "nuclei", "POLYGON", [geometry.to_slide(polygon)]),
        annotation_group(2, "mitoses", "POINT", [geometry.to_slide(point)]),
    ]
    bulk_annotations(source, groups).save_as(tmp_path / "ann.dcm")
    shapes = {s.name: s for s in read_dicom_result(tmp_path / "ann.dcm", source=level0).shapes}
    assert shapes["nuclei"].shape_type == "polygon"
    np.testing.assert_allclose(shapes["nuclei"].shapes[0], polygon, atol=1e-6)
    assert shapes["mitoses"].shape_type == "point"
    np.testing.assert_allclose(shapes["mitoses"].shapes[0], point, atol=1e-6)


def test_ann_in_slide_coordinates_without_its_source_says_so(slide, tmp_path):
    _, source = slide
    geometry = SlideGeometry.from_dataset(source)
    triangle = geometry.to_slide(np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]]))
    group = annotation_group(1, "region", "POLYGON", [triangle])
    bulk_annotations(source, [group]).save_as(tmp_path / "alone.dcm")
    result = read_dicom_result(tmp_path / "alone.dcm")
    assert result.units == "um" and result.placed_on == ""
    assert any(
        "source image was not found" in line
        for line in describe_dicom_result(tmp_path / "alone.dcm")
    )


def test_tid1500_planar_rois_come_back_with_their_measurements(slide, tmp_path):
    level0, source = slide
    outline = np.array([[10.0, 20.0], [50.0, 20.0], [50.0, 60.0], [10.0, 60.0], [10.0, 20.0]])
    groups = []
    for identifier, graphic_type, data, area in (
        ("lesion 1", hd.sr.GraphicTypeValues.POLYLINE, outline, 12.5),
        ("lesion 2", hd.sr.GraphicTypeValues.POINT, np.array([[120.0, 80.0]]), 3.0),
    ):
        region = hd.sr.ImageRegion(
            graphic_type=graphic_type,
            graphic_data=data,
            source_image=hd.sr.SourceImageForRegion.from_source_image(source),
        )
        groups.append(
            hd.sr.PlanarROIMeasurementsAndQualitativeEvaluations(
                tracking_identifier=hd.sr.TrackingIdentifier(identifier=identifier, uid=hd.UID()),
                referenced_region=region,
                finding_type=codes.SCT.Neoplasm,
                measurements=[
                    hd.sr.Measurement(
                        name=codes.SCT.Area, value=area, unit=codes.UCUM.SquareMillimeter
                    )
                ],
            )
        )
    context = hd.sr.ObservationContext(
        observer_device_context=hd.sr.ObserverContext(
            observer_type=codes.DCM.Device,
            observer_identifying_attributes=hd.sr.DeviceObserverIdentifyingAttributes(
                uid=hd.UID(), name="cad"
            ),
        )
    )
    report = hd.sr.MeasurementReport(
        observation_context=context,
        procedure_reported=codes.LN.CTUnspecifiedBodyRegion,
        imaging_measurements=groups,
    )
    hd.sr.Comprehensive3DSR([source], report, hd.UID(), 4, hd.UID(), 1).save_as(tmp_path / "sr.dcm")
    result = read_dicom_result(tmp_path / "sr.dcm", source=level0)
    by_type = {s.shape_type: s for s in result.shapes}
    assert {s.name for s in result.shapes} == {"Neoplasm"}  # grouped by finding
    np.testing.assert_allclose(by_type["rectangle"].shapes[0], outline[:4])
    assert by_type["rectangle"].labels == ["lesion 1 12.5"]
    np.testing.assert_allclose(by_type["point"].shapes[0], [[120.0, 80.0]])
    np.testing.assert_allclose(by_type["point"].values["Area [mm2]"], [3.0])
    assert by_type["rectangle"].source_uid == source.SOPInstanceUID


def test_gsps_graphics_and_text_of_a_mammogram(write_dicom, tmp_path):
    image = write_dicom(
        tmp_path / "mg.dcm",
        np.zeros((80, 60), np.uint16),
        StudyInstanceUID=hd.UID(),
        SeriesInstanceUID=hd.UID(),
        PatientSex="F",
        StudyDate="20260101",
        StudyTime="1200",
        ReferringPhysicianName="",
        StudyID="1",
        AccessionNumber="1",
        SeriesNumber=1,
        InstanceNumber=1,
        Manufacturer="m",
    )
    mammogram = pydicom.dcmread(image)
    layer = hd.pr.GraphicLayer(layer_name="BOXES", order=1)
    box = np.array([[5.0, 10.0], [25.0, 10.0], [25.0, 30.0], [5.0, 30.0], [5.0, 10.0]])
    annotation = hd.pr.GraphicAnnotation(
        referenced_images=[mammogram],
        graphic_layer=layer,
        graphic_objects=[
            hd.pr.GraphicObject(
                graphic_type=hd.pr.GraphicTypeValues.POLYLINE,
                graphic_data=box,
                units=hd.pr.AnnotationUnitsValues.PIXEL,
            )
        ],
        text_objects=[
            hd.pr.TextObject(
                text_value="#1 0.93",
                units=hd.pr.AnnotationUnitsValues.PIXEL,
                anchor_point=(5.0, 8.0),
            )
        ],
    )
    gsps = hd.pr.GrayscaleSoftcopyPresentationState(
        referenced_images=[mammogram],
        series_instance_uid=hd.UID(),
        series_number=5,
        sop_instance_uid=hd.UID(),
        instance_number=1,
        manufacturer="Other",
        manufacturer_model_name="tool",
        software_versions="1",
        device_serial_number="1",
        content_label="CAD",
        graphic_layers=[layer],
        graphic_annotations=[annotation],
    )
    gsps.save_as(tmp_path / "gsps.dcm")
    result = read_dicom_result(tmp_path / "gsps.dcm")
    shapes = {s.name: s for s in result.shapes}
    assert shapes["BOXES"].shape_type == "rectangle"
    np.testing.assert_allclose(shapes["BOXES"].shapes[0], box[:4])
    assert shapes["BOXES text"].labels == ["#1 0.93"]
    assert result.placed_on == mammogram.SOPInstanceUID  # found beside it


def test_an_image_is_not_a_result_and_says_so(slide):
    level0, _ = slide
    assert not is_dicom_result(level0)
    with pytest.raises(UnsupportedFormatError, match="holds no result"):
        read_dicom_result(level0)


def test_a_damaged_result_is_one_sentence(tmp_path, slide, whole_seg):
    level0, _ = slide
    damaged = tmp_path / "bad.dcm"
    damaged.write_bytes(whole_seg.read_bytes()[:-4000])  # frames cut short
    with pytest.raises(CorruptFileError, match="^bad.dcm: ") as caught:
        read_dicom_result(damaged, source=level0)
    assert "\n" not in str(caught.value)


def test_a_map_too_large_to_decode_is_refused_before_its_pixels_are_read(
    slide, whole_seg, monkeypatch
):
    level0, _ = slide
    monkeypatch.setenv("MEDVL_MAX_DECODE_PIXELS", "1000")
    from medvl_engine.errors import ResourceLimitError

    with pytest.raises(ResourceLimitError, match="400 x 300 px"):
        read_dicom_result(whole_seg, source=level0)
