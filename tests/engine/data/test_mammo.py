"""Mammography data for TopKSigLIP: parsed reports, tabular vectors, manifests, augmentation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from medvl_engine.data.mammo_augment import MammoAugmentConfig, affine_half, augment_breast
from medvl_engine.data.mammo_dataset import MammoDataset, collate_breasts
from medvl_engine.data.mammo_manifest import read_mammo_manifest, write_mammo_manifest
from medvl_engine.data.mammo_prompts import ZERO_SHOT_PROMPTS
from medvl_engine.data.mammo_reports import parsed_report, tabular_attributes
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.errors import DataError
from medvl_engine.losses import tabular_similarity


def test_parsed_report_has_paper_sentences():
    report = parsed_report(["CALC", "mass"], "C", 4, True)
    assert report == (
        "there is a mass seen in the breast. there are calcifications seen in the breast. "
        "The breast is heterogeneously dense. BIRADS 4: S \u2013 Suspicious. "
        "Biopsy confirms the presence of cancer."
    )
    negative = parsed_report([], "A", 1, False)
    assert negative.startswith("No suspicious masses, calcifications or other abnormalities")
    assert "N \u2013 Negative." in negative
    assert negative.endswith("No evidence of cancer from neither screening nor biopsy.")


def test_tabular_vector_and_similarity():
    a = tabular_attributes(1, "B", False, [])
    b = tabular_attributes(1, "B", False, [])
    c = tabular_attributes(5, "D", True, ["mass", "asymmetry"])
    assert a.shape == (15,) and a.sum() == 3
    assert np.flatnonzero(c).tolist() == [4, 8, 10, 11, 14]
    sim = tabular_similarity(torch.from_numpy(np.stack([a, b, c])))
    assert sim[0, 1] == pytest.approx(1.0)
    assert sim[0, 2] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="unknown finding"):
        tabular_attributes(1, "A", False, ["tumour"])


def test_prompts_cover_the_paper_tables():
    assert len(ZERO_SHOT_PROMPTS["density"][1]) == 4
    assert len(ZERO_SHOT_PROMPTS["birads"][1]) == 5
    assert ZERO_SHOT_PROMPTS["cancer"][1][1] == "Biopsy confirms the presence of cancer."
    for finding in ("mass", "calcification", "architectural distortion", "asymmetry"):
        negative, positive = ZERO_SHOT_PROMPTS[finding][1]
        assert negative.startswith("No suspicious masses") and "seen in the breast" in positive


def _write_csv(path, rows):
    header = (
        "exam_id,laterality,cc_path,mlo_path,report,birads,density,cancer,findings,roi_boxes,split"
    )
    path.write_text(header + "\n" + "\n".join(rows) + "\n", encoding="utf-8")


def test_manifest_csv_and_jsonl(tmp_path):
    boxes = json.dumps({"CC": [[10, 20, 30, 40]]}).replace('"', '""')
    _write_csv(
        tmp_path / "m.csv",
        [
            f'e1,L,a/cc.dcm,a/mlo.dcm,,4,C,1,mass;calc,"{boxes}",train',
            "e1,R,b/cc.dcm,b/mlo.dcm,custom report,1,B,0,,,test",
        ],
    )
    records = read_mammo_manifest(tmp_path / "m.csv")
    assert [r.laterality for r in records] == ["L", "R"]
    first = records[0]
    assert first.cc_path == tmp_path / "a" / "cc.dcm"
    assert first.findings == ["mass", "calcification"] and first.cancer and first.has_roi
    assert first.roi_boxes == {"CC": [[10.0, 20.0, 30.0, 40.0]]}
    assert "there is a mass" in first.report
    assert records[1].report == "custom report" and not records[1].has_roi
    assert len(read_mammo_manifest(tmp_path / "m.csv", split="test")) == 1
    out = write_mammo_manifest(records, tmp_path / "copy.csv")
    again = read_mammo_manifest(out)
    assert [(r.exam_id, r.cc_path, r.findings, r.roi_boxes) for r in again] == [
        (r.exam_id, r.cc_path, r.findings, r.roi_boxes) for r in records
    ]
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text(
        json.dumps(
            {
                "exam_id": "x",
                "laterality": "R",
                "cc_path": "c.png",
                "mlo_path": "m.png",
                "birads": 2,
                "density": "A",
                "cancer": False,
                "findings": ["asymmetry"],
            }
        )
        + "\n"
    )
    assert read_mammo_manifest(jsonl)[0].findings == ["asymmetry"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("e1,X,a.dcm,b.dcm,,1,A,0,,,train", "laterality must be L or R"),
        ("e1,L,a.dcm,b.dcm,,7,A,0,,,train", "birads must be 0..6"),
        ("e1,L,a.dcm,b.dcm,,1,Z,0,,,train", "density must be one of A-D"),
        ("e1,L,,b.dcm,,1,A,0,,,train", "missing cc_path"),
    ],
)
def test_manifest_errors_name_row(tmp_path, row, message):
    _write_csv(tmp_path / "bad.csv", [row])
    with pytest.raises(DataError, match=f"bad.csv row 1: {message}"):
        read_mammo_manifest(tmp_path / "bad.csv")


def test_missing_manifest(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_mammo_manifest(tmp_path / "none.csv")


def _bright_square(size=128, box=(40, 20, 60, 44)):
    image = torch.zeros(1, size, size)
    x0, y0, x1, y1 = box
    image[:, y0:y1, x0:x1] = 1.0
    return image, torch.tensor([box], dtype=torch.float32)


def test_affine_moves_boxes_with_content():
    image, boxes = _bright_square()
    half = image[:, :64]
    warped, moved = affine_half(half, boxes, angle_deg=20.0, scale=1.1, shift_xy=(5.0, -3.0))
    x0, y0 = moved[0, :2].floor().int().tolist()
    x1, y1 = moved[0, 2:].ceil().int().tolist()
    inside = warped[0, max(y0 - 1, 0) : y1 + 1, max(x0 - 1, 0) : x1 + 1]
    # All the bright mass lands inside the mapped box (1 px of bilinear bleed allowed).
    assert inside.sum() == pytest.approx(warped.sum().item(), rel=1e-4)
    assert moved[0, 2] - moved[0, 0] > 1.1 * 20  # rotated and scaled box grows
    assert warped.sum() > 0.9 * 20 * 24


def test_augment_is_seeded_and_consistent():
    image, boxes = _bright_square()
    config = MammoAugmentConfig(roi_jitter=0.0, intensity=0.0)
    a = augment_breast(image, boxes, config, torch.Generator().manual_seed(3))
    b = augment_breast(image, boxes, config, torch.Generator().manual_seed(3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    x0, y0, x1, y1 = a[1][0].floor().int().tolist()
    assert a[0][0, y0 : y1 + 1, x0 : x1 + 1].sum() >= 0.99 * a[0].sum()
    # MLO half (rows 64..127) stays empty: content never crosses views.
    assert a[0][0, 64:].sum() == 0


def _specks() -> torch.Tensor:
    """A 128 px breast image of single-pixel specks at 0.8, one every 9 px in both halves."""
    image = torch.zeros(1, 128, 128)
    image[:, 4::9, 4::9] = 0.8
    return image


def test_whole_pixel_augmentation_keeps_specks_sharp():
    config = MammoAugmentConfig(roi_jitter=0.0, intensity=0.0, resample_p=0.0)
    image, boxes = _specks(), torch.tensor([[20.0, 10.0, 40.0, 30.0]])
    for seed in range(8):
        out, moved = augment_breast(image, boxes, config, torch.Generator().manual_seed(seed))
        # every pixel is an input pixel moved by whole pixels: specks keep their 0.8
        assert torch.isin(out, torch.tensor([0.0, 0.8])).all()
        assert int((out > 0.79).sum()) >= 0.8 * int((image > 0).sum())
        shift = moved[0] - boxes[0]
        assert torch.equal(shift, shift.round()) and shift[0] == shift[2]
        assert moved[0, 2] - moved[0, 0] == 20.0  # no rotation or scale


def test_resampling_share_of_view_halves():
    image, boxes = _specks(), torch.zeros(0, 4)
    default = MammoAugmentConfig(roi_jitter=0.0, intensity=0.0)
    specks = int((image > 0).sum())
    for seed in range(4):  # bilinear resampling spreads a speck over its neighbours
        smeared = augment_breast(image, boxes, default, torch.Generator().manual_seed(seed))[0]
        assert int((smeared > 0.79).sum()) < 0.2 * specks
    sharp_halves = 0
    config = MammoAugmentConfig(roi_jitter=0.0, intensity=0.0, resample_p=0.5)
    for seed in range(40):
        out = augment_breast(image, boxes, config, torch.Generator().manual_seed(seed))[0]
        sharp_halves += sum(
            int((out[0, top : top + 64] > 0.79).sum()) > 0.4 * specks for top in (0, 64)
        )
    assert 25 <= sharp_halves <= 55  # about half of the 80 halves


def test_resample_share_outside_zero_one_is_refused(tmp_path):
    from medvl_engine.errors import ConfigError
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask
    from medvl_engine.training.config import RunConfig

    config = TopKSigLIPTaskConfig(augment_resample_p=1.5, grid=4, k=2)
    with pytest.raises(ConfigError, match=r"augment_resample_p=1.5 is outside \[0, 1\]"):
        TopKSigLIPTask(config, RunConfig(out_dir=str(tmp_path)), read_train_val=False)


def test_intensity_range_of_the_task_reaches_its_training_breasts(tmp_path, tiny_topk_values):
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask
    from medvl_engine.training.config import RunConfig

    images = {}
    for intensity in (0.0, 0.2):
        config = TopKSigLIPTaskConfig(
            **tiny_topk_values(),
            synthetic_train=2,
            synthetic_eval=1,
            synthetic_size=[192, 128],
            synthetic_dir=str(tmp_path / "cohort"),
            augment_intensity=intensity,
        )
        task = TopKSigLIPTask(config, RunConfig(out_dir=str(tmp_path / "run"), progress=False))
        images[intensity] = [task.train_set.sample(i, epoch=3).image for i in range(2)]
    for flat, scaled in zip(images[0.0], images[0.2], strict=True):
        # the same geometric draws; only the default run multiplies the breast by one factor
        unclipped = (flat > 0.05) & (scaled < 0.999)
        ratio = scaled[unclipped] / flat[unclipped]
        assert 0.8 <= float(ratio.mean()) <= 1.2
        assert torch.allclose(ratio, ratio.mean(), rtol=1e-4)
        assert float(ratio.mean()) != pytest.approx(1.0, abs=1e-3)


def test_intensity_range_outside_zero_one_is_refused(tmp_path):
    from medvl_engine.errors import ConfigError
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask
    from medvl_engine.training.config import RunConfig

    config = TopKSigLIPTaskConfig(augment_intensity=1.0, grid=4, k=2)
    with pytest.raises(ConfigError, match=r"augment_intensity=1.0 is outside \[0, 1\)"):
        TopKSigLIPTask(config, RunConfig(out_dir=str(tmp_path)), read_train_val=False)


def test_dataset_with_custom_loader(tmp_path):
    _write_csv(
        tmp_path / "m.csv",
        [
            f"e{i},L,cc.dcm,mlo.dcm,,{1 + i % 5},A,{i % 2},{'mass' if i % 2 else ''},,train"
            for i in range(3)
        ],
    )
    records = read_mammo_manifest(tmp_path / "m.csv")
    geometry = PatchGeometry.from_image(256, 8, 0.5)

    def loader(record, size):
        image = np.zeros((size, size), np.float32)
        image[100:120, 30:60] = 1
        return image, np.array([[30.0, 100.0, 60.0, 120.0]])

    records[1].roi_boxes = {"CC": [[1, 1, 2, 2]]}
    dataset = MammoDataset(records, geometry, augment=None, loader=loader)
    batch = collate_breasts([dataset.sample(i) for i in range(3)])
    assert batch["images"].shape == (3, 1, 256, 256)
    assert batch["roi_mask"].shape == (3, 8, 8)
    assert batch["has_roi"].tolist() == [False, True, False]
    assert batch["attributes"].shape == (3, 15)
    mask = batch["roi_mask"][1]
    edges = geometry.cell_bounds()
    rows, cols = np.nonzero(mask.numpy())
    assert edges[rows.min()] <= 100 and edges[rows.max() + 1] >= 120
    assert edges[cols.min()] <= 30 and edges[cols.max() + 1] >= 60
