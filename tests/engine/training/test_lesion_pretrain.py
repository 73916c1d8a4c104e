"""ROI-supervised patch pretraining of the TopKSigLIP backbone and the backbone's lr scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medvl_engine.data.mammo_dataset import MammoDataset
from medvl_engine.data.mammo_manifest import MammoRecord
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.errors import DataError
from medvl_engine.models import _convnext
from medvl_engine.training import RunConfig, train
from medvl_engine.training.lesion_pretrain import (
    LesionPatches,
    lesion_patches,
    pretrain_on_lesion_patches,
)
from medvl_engine.training.topksiglip_task import TopKSigLIPTaskConfig, build_task

torch.set_num_threads(1)
SIZE = 128
PATCH = 32


def _record(index: int, findings: list[str], boxes: list[list[float]]) -> MammoRecord:
    return MammoRecord(
        exam_id=f"e{index}",
        laterality="L",
        cc_path=f"cc{index}.dcm",
        mlo_path=f"mlo{index}.dcm",
        birads=4 if findings else 1,
        density="B",
        cancer=False,
        findings=findings,
        report="",
        roi_boxes={"CC": boxes} if boxes else {},
        split="train",
    )


def _toy_dataset(breasts: int, seed: int = 0) -> tuple[MammoDataset, dict[str, np.ndarray]]:
    """Breasts of tissue-level noise; every other one has a bright 6 px square 'lesion'.

    Every breast also holds bright 2 x 18 px bars ('vessels'), as many bright pixels as a
    lesion, so total brightness does not tell the two kinds of patch apart.
    """
    rng = np.random.default_rng(seed)
    records, images = [], {}
    for i in range(breasts):
        image = (0.4 + 0.05 * rng.standard_normal((SIZE, SIZE))).astype(np.float32)
        for _ in range(12):
            x0, y0 = (int(v) for v in rng.integers(0, SIZE - 18, 2))
            if rng.uniform() < 0.5:
                image[y0 : y0 + 2, x0 : x0 + 18] = 1.0
            else:
                image[y0 : y0 + 18, x0 : x0 + 2] = 1.0
        boxes: list[list[float]] = []
        if i % 2:
            x0, y0 = (int(v) for v in rng.integers(20, SIZE - 26, 2))
            image[y0 : y0 + 6, x0 : x0 + 6] = 1.0
            boxes = [[x0, y0, x0 + 6, y0 + 6]]
        records.append(_record(i, ["mass"] if boxes else [], boxes))
        images[f"e{i}"] = image

    def loader(record: MammoRecord, size: int) -> tuple[np.ndarray, np.ndarray]:
        boxes = np.asarray(record.roi_boxes.get("CC", []), dtype=np.float64).reshape(-1, 4)
        return images[record.exam_id], boxes

    geometry = PatchGeometry.from_image(SIZE, 8, 0.5)
    return MammoDataset(records, geometry, None, loader=loader), images


def test_lesion_patches_are_centred_on_roi_boxes_and_normals_come_from_clean_breasts():
    dataset, _ = _toy_dataset(10)
    data = lesion_patches(dataset, PATCH, normals_per_breast=3, jitter=0.0)
    assert data.patches.shape == (5 + 5 * 3, 1, PATCH, PATCH)
    assert data.labels.tolist() == [0.0] * 3 + [1.0] + [0.0] * 3 + [1.0] + [0.0] * 3 + [1.0] + [
        0.0
    ] * 3 + [1.0] + [0.0] * 3 + [1.0]
    lesions = data.patches[data.labels == 1]
    centre = lesions[:, 0, PATCH // 2 - 3 : PATCH // 2 + 3, PATCH // 2 - 3 : PATCH // 2 + 3]
    assert torch.all(centre == 1.0)  # with no jitter the 6 px lesion fills the patch centre
    normals = data.patches[data.labels == 0]
    assert not any(  # no normal patch holds a lesion's 6 x 6 block of bright pixels
        bool((torch.nn.functional.avg_pool2d(p, 6, stride=1) == 1.0).any()) for p in normals
    )


def test_lesion_patches_need_both_kinds():
    dataset, _ = _toy_dataset(1)  # one clean breast, no ROI
    with pytest.raises(DataError, match="lesion_pretrain_steps=0"):
        lesion_patches(dataset, PATCH)


def test_pretraining_fits_lesion_versus_normal_patches():
    train_data = lesion_patches(_toy_dataset(40, seed=1)[0], PATCH, jitter=0.2, seed=1)
    torch.manual_seed(0)
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64], layer_scale_init=0.1)
    before = [p.detach().clone() for p in backbone.parameters()]
    losses = pretrain_on_lesion_patches(backbone, train_data, steps=60, lr=3e-3, batch_size=16)
    assert len(losses) == 60
    assert np.mean(losses[:5]) > 0.6 and np.mean(losses[-10:]) < 0.3  # BCE from ~ln 2
    assert any(not torch.equal(a, b) for a, b in zip(before, backbone.parameters(), strict=True))


def test_pretraining_reports_divergence():
    data = LesionPatches(
        torch.full((4, 1, PATCH, PATCH), float("nan")), torch.tensor([0, 1, 0, 1.0])
    )
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64])
    with pytest.raises(FloatingPointError, match="lower its lr"):
        pretrain_on_lesion_patches(backbone, data, steps=2)


def test_task_pretrains_the_backbone_and_trains_it_at_the_scaled_lr(tmp_path, tiny_topk_values):
    task_config = TopKSigLIPTaskConfig(
        **tiny_topk_values(tau_anneal_steps=4),
        synthetic_train=6,
        synthetic_eval=2,
        synthetic_size=[192, 128],
        synthetic_dir=str(tmp_path.parent / "topk-synthetic"),
        batch_size=2,
        lesion_pretrain_steps=3,
        vision_lr_scale=0.25,
    )
    run = RunConfig(
        lr=1e-3, epochs=1, warmup_steps=0, out_dir=str(tmp_path / "run"), progress=False
    )
    task = build_task(task_config, run)
    messages: list[str] = []
    task.progress = messages.append
    model = task.build_model()
    assert task.lesion_pretrain_loss is not None and np.isfinite(task.lesion_pretrain_loss)
    assert any(m.startswith("lesion pretraining: 3 steps on ") for m in messages)
    assert any(" -> " in m and "BCE" in m for m in messages)
    groups = task.optimizer_groups(model)
    backbone_ids = {id(p) for p in model.backbone.parameters()}
    assert {id(p) for p in groups[1]["params"]} == backbone_ids
    assert not backbone_ids & {id(p) for p in groups[0]["params"]}
    assert groups[1]["lr_scale"] == 0.25

    from medvl_engine.training.loop import _optimizer_groups

    built = _optimizer_groups(task, model, 1e-3)
    assert [g["lr"] for g in built] == [1e-3, 2.5e-4]
    summary = train(build_task(task_config, run), run)
    assert summary["steps"] == 3 and all(np.isfinite(summary["losses"]))
