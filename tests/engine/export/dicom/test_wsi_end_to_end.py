"""A prompt heatmap of a DICOM WSI, from the slide to DICOM objects and back: the parametric
map holds each patch's score where the patch lies, the annotations the top patches."""

from __future__ import annotations

import numpy as np
import pytest

from medvl_engine.export.dicom import write_heatmap_parametric_map, write_top_patches_annotations
from medvl_engine.io.dicom_results import read_dicom_result
from medvl_engine.io.slide import open_slide
from medvl_engine.pathology import final, prompt_heatmap
from medvl_engine.synthetic import make_synthetic_slide
from tests.support.dicom_wsi import write_dicom_wsi

pytestmark = pytest.mark.slow


def test_demo_heatmap_of_a_dicom_slide_round_trips_through_dicom(tmp_path):
    make_synthetic_slide(tmp_path / "s.tiff", seed=1, size=(1024, 768))
    with open_slide(tmp_path / "s.tiff") as slide:
        rgb = np.asarray(slide.read_region((0, 0), 0, slide.dimensions))[..., :3]
    level0 = write_dicom_wsi(tmp_path / "wsi", rgb, mpp=0.5, tile=256, levels=2)[0]
    run = final(
        prompt_heatmap(
            level0, "tumor", "medvl-demo", partials=False, top_n=5, store_path=tmp_path / "f.zarr"
        )
    )
    out = tmp_path / "out"
    out.mkdir()
    pm = write_heatmap_parametric_map(out / "map.dcm", run.heatmap, level0)
    boxes, scores = run.top_patches
    ann = write_top_patches_annotations(
        out / "top.dcm", boxes, scores, level0, prompt="tumor", model=run.model
    )
    (image,) = read_dicom_result(pm, source=level0).images
    cell = run.heatmap.cell_size_level0
    assert image.pixel_size == (cell, cell)
    at_patches = [
        image.values[(y - int(image.origin[1])) // cell, (x - int(image.origin[0])) // cell]
        for x, y in run.coords
    ]
    np.testing.assert_array_equal(at_patches, run.scores)
    (shapes,) = read_dicom_result(ann, source=level0).shapes
    corners = np.array([[*s.min(0), *s.max(0)] for s in shapes.shapes])
    np.testing.assert_allclose(corners, boxes)
    assert shapes.labels[0] == f"#1 {scores[0]:.3g}"
