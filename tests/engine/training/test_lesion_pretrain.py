"""ROI-supervised patch pretraining of the TopKSigLIP backbone and the backbone's lr scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from medvl_engine.data.mammo_dataset import MammoDataset
from medvl_engine.data.mammo_manifest import MammoRecord
from medvl_engine.data.patch_geometry import PatchGeometry
from medvl_engine.errors import DataError
from medvl_engine.models import convnext as _convnext
from medvl_engine.models.topksiglip import TopKSigLIP
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.pretrain import (
    LesionPatches,
    lesion_patches,
    malignancy_rated,
    pretrain_on_lesion_patches,
    pretrain_scorer_on_roi_cells,
)
from medvl_engine.tasks.topksiglip.task import build_task
from medvl_engine.training import RunConfig, train

torch.set_num_threads(1)
SIZE = 128
PATCH = 32


def _record(
    index: int, findings: list[str], boxes: list[list[float]], cancer: bool | None = False
) -> MammoRecord:
    return MammoRecord(
        exam_id=f"e{index}",
        laterality="L",
        cc_path=f"cc{index}.dcm",
        mlo_path=f"mlo{index}.dcm",
        birads=4 if findings else 1,
        density="B",
        cancer=cancer,
        findings=findings,
        report="",
        roi_boxes={"CC": boxes} if boxes else {},
        split="train",
    )


def _toy_dataset(
    breasts: int, seed: int = 0, malignant_squares: bool = False
) -> tuple[MammoDataset, dict[str, np.ndarray]]:
    """Breasts of tissue-level noise; every other one has a bright 6 px square 'lesion'.

    Every breast also holds bright 2 x 18 px bars ('vessels'), as many bright pixels as a
    lesion, so total brightness does not tell the two kinds of patch apart. With
    ``malignant_squares`` every second lesion is a 12 px square and its breast has cancer.
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
        cancer = malignant_squares and i % 4 == 3
        if i % 2:
            x0, y0 = (int(v) for v in rng.integers(20, SIZE - 26, 2))
            if cancer:
                image[y0 : y0 + 12, x0 : x0 + 12] = 1.0
                boxes = [[x0, y0, x0 + 12, y0 + 12]]
            else:
                image[y0 : y0 + 6, x0 : x0 + 6] = 1.0
                boxes = [[x0, y0, x0 + 6, y0 + 6]]
        records.append(_record(i, ["mass"] if boxes else [], boxes, cancer))
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


def test_each_roi_box_gives_crops_per_roi_patches_at_their_own_offsets():
    dataset, _ = _toy_dataset(8, malignant_squares=True)
    one = lesion_patches(dataset, PATCH, normals_per_breast=1, jitter=0.25, seed=4)
    again = lesion_patches(
        dataset, PATCH, normals_per_breast=1, jitter=0.25, seed=4, crops_per_roi=1
    )
    assert torch.equal(one.patches, again.patches)  # the default is one crop a box, as before
    three = lesion_patches(
        dataset, PATCH, normals_per_breast=1, jitter=0.25, seed=4, crops_per_roi=3
    )
    assert three.labels.tolist() == ([0.0] + [1.0] * 3) * 4
    assert three.cancer is not None
    # breasts 0..7: clean, 6 px, clean, 12 px (cancer), clean, 6 px, clean, 12 px (cancer)
    assert three.cancer.tolist() == ([0.0] * 4 + [0.0] + [1.0] * 3) * 2
    for first in range(1, 16, 4):  # the three crops of one box
        crops = three.patches[first : first + 3]
        assert not torch.equal(crops[0], crops[1]) or not torch.equal(crops[1], crops[2])
        # each still holds the whole lesion: a block of bright pixels at least 6 px a side
        assert all(bool((F.avg_pool2d(c, 6, stride=1) == 1.0).any()) for c in crops)
    with pytest.raises(DataError, match="crops per ROI box must be 1 or more"):
        lesion_patches(dataset, PATCH, crops_per_roi=0)


def test_bright_normals_are_centred_on_the_brightest_spots_of_clean_breasts():
    dataset, images = _toy_dataset(4)
    clean = images["e0"].copy()
    clean[:] = 0.4
    clean[100:103, 20:23] = 1.0  # a 'calcified vessel' spot: the brightest place
    clean[40:43, 90:93] = 0.9  # the second brightest, far from the first
    images["e0"][:] = clean
    data = lesion_patches(dataset, PATCH, normals_per_breast=0, bright_normals_per_breast=2)
    # breast e0 (clean): two bright normals; e1: its ROI; e2: two bright normals; e3: its ROI
    assert data.labels.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    first, second = data.patches[0, 0], data.patches[1, 0]
    half = PATCH // 2
    assert torch.all(first[half - 1 : half + 2, half - 1 : half + 2] == 1.0)
    assert torch.all(second[half - 1 : half + 2, half - 1 : half + 2] == 0.9)


def test_lesion_patches_carry_the_breast_outcome():
    dataset, _ = _toy_dataset(8, malignant_squares=True)
    data = lesion_patches(dataset, PATCH, normals_per_breast=1, jitter=0.0)
    assert data.cancer is not None
    # breasts 0..7: clean, 6 px, clean, 12 px (cancer), clean, 6 px, clean, 12 px (cancer)
    assert data.labels.tolist() == [0.0, 1.0] * 4
    assert data.cancer.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_only_breasts_with_one_kind_of_finding_rate_their_rois_with_sole_finding_outcome():
    dataset, _ = _toy_dataset(8, malignant_squares=True)
    # breast 7 (cancer) also shows calcifications, breast 5 (no cancer) a second mass box
    dataset.records[7].findings = ["mass", "calcification"]
    dataset.records[5].findings = ["mass", "mass"]
    every = lesion_patches(dataset, PATCH, normals_per_breast=1, jitter=0.0)
    sole = lesion_patches(
        dataset, PATCH, normals_per_breast=1, jitter=0.0, sole_finding_outcome=True
    )
    assert every.cancer.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert sole.cancer[:7].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert torch.isnan(sole.cancer[7])  # which of its two findings is the cancer is unknown
    assert torch.equal(sole.patches, every.patches) and torch.equal(sole.labels, every.labels)


def test_pretraining_with_the_malignancy_term_tells_cancer_rois_apart():
    train_data = lesion_patches(
        _toy_dataset(128, seed=2, malignant_squares=True)[0], PATCH, jitter=0.1, seed=2
    )
    torch.manual_seed(0)
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64], layer_scale_init=0.1)
    losses = pretrain_on_lesion_patches(
        backbone, train_data, steps=150, lr=2e-3, batch_size=16, malignancy_weight=1.0
    )
    # two BCE terms (lesion + malignancy on the ROI patches) start near 2 ln 2 * share of ROIs
    assert np.mean(losses[:5]) > 0.8 and np.mean(losses[-10:]) < 0.3
    held_out = lesion_patches(
        _toy_dataset(24, seed=3, malignant_squares=True)[0], PATCH, jitter=0.0, seed=3
    )
    backbone.eval()
    with torch.no_grad():
        features = _convnext.pooled_features(
            backbone, _convnext.grayscale_to_input(held_out.patches)
        )
    roi = held_out.labels > 0
    assert held_out.cancer is not None
    outcome = held_out.cancer[roi]
    # a ridge read-out of the pooled features, fitted on the training ROIs, separates the
    # held-out cancer ROIs from the others
    train_features = _convnext.pooled_features(
        backbone, _convnext.grayscale_to_input(train_data.patches)
    ).detach()
    assert train_data.cancer is not None
    train_roi = train_data.labels > 0
    design = torch.cat([train_features[train_roi], torch.ones(int(train_roi.sum()), 1)], 1)
    target = 2 * train_data.cancer[train_roi] - 1
    weights = torch.linalg.solve(
        design.T @ design + 1e-2 * torch.eye(design.shape[1]), design.T @ target
    )
    scores = torch.cat([features[roi], torch.ones(int(roi.sum()), 1)], 1) @ weights
    accuracy = ((scores > 0).float() == outcome).float().mean()
    assert accuracy >= 0.9


def test_malignancy_term_needs_both_outcomes():
    data = lesion_patches(_toy_dataset(10)[0], PATCH)  # no breast has cancer
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64])
    with pytest.raises(DataError, match="lesion_pretrain_malignancy=0"):
        pretrain_on_lesion_patches(backbone, data, steps=1, malignancy_weight=1.0)


def test_malignancy_term_rates_normal_patches_as_benign_with_malignancy_on_normals():
    dataset, _ = _toy_dataset(8, malignant_squares=True)
    data = lesion_patches(dataset, PATCH, normals_per_breast=1, jitter=0.0)
    assert data.cancer is not None
    # patches: normal, 6 px ROI, normal, 12 px ROI (cancer), ... (see the test above)
    rois_only = malignancy_rated(data.labels, data.cancer)
    with_normals = malignancy_rated(data.labels, data.cancer, on_normals=True)
    assert rois_only.tolist() == [False, True] * 4
    assert with_normals.tolist() == [True] * 8
    assert data.cancer[with_normals & (data.labels == 0)].tolist() == [0.0] * 4
    data.cancer[1] = float("nan")  # an ROI whose outcome is unknown stays unrated
    assert not malignancy_rated(data.labels, data.cancer, on_normals=True)[1]


def test_malignancy_on_normals_trains_when_every_roi_is_a_cancer():
    dataset, _ = _toy_dataset(8, malignant_squares=True)
    for record in dataset.records:
        record.cancer = bool(record.findings)  # no benign finding: the ROIs are all cancers
    data = lesion_patches(dataset, PATCH, normals_per_breast=1, jitter=0.0)
    torch.manual_seed(0)
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64])
    with pytest.raises(DataError, match="patches of breasts with and without cancer"):
        pretrain_on_lesion_patches(backbone, data, steps=1, malignancy_weight=1.0)
    losses = pretrain_on_lesion_patches(
        backbone, data, steps=3, malignancy_weight=1.0, malignancy_on_normals=True
    )
    assert len(losses) == 3 and all(np.isfinite(losses))


def test_lesion_patches_need_both_kinds():
    dataset, _ = _toy_dataset(1)  # one clean breast, no ROI
    with pytest.raises(DataError, match="lesion_pretrain_steps=0"):
        lesion_patches(dataset, PATCH)


@pytest.mark.parametrize("backbone_input", ["gray", "gray_tophat"])
def test_pretraining_fits_lesion_versus_normal_patches(backbone_input):
    train_data = lesion_patches(_toy_dataset(40, seed=1)[0], PATCH, jitter=0.2, seed=1)
    torch.manual_seed(0)
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64], layer_scale_init=0.1)
    before = [p.detach().clone() for p in backbone.parameters()]
    losses = pretrain_on_lesion_patches(
        backbone, train_data, steps=60, lr=3e-3, batch_size=16, backbone_input=backbone_input
    )
    assert len(losses) == 60
    assert np.mean(losses[:5]) > 0.6 and np.mean(losses[-10:]) < 0.3  # BCE from ~ln 2
    assert any(not torch.equal(a, b) for a, b in zip(before, backbone.parameters(), strict=True))


def test_every_backbone_pass_of_a_tophat_run_reads_the_tophat_input(
    tmp_path, tiny_topk_values, monkeypatch
):
    kinds: list[str] = []
    real = _convnext.backbone_input

    def recording(images: torch.Tensor, kind: str = "gray") -> torch.Tensor:
        kinds.append(kind)
        return real(images, kind)  # type: ignore[arg-type]

    monkeypatch.setattr(_convnext, "backbone_input", recording)
    task_config, run = _tiny_task_configs(
        tmp_path,
        tiny_topk_values(tau_anneal_steps=4, vision_input="gray_tophat"),
        lesion_pretrain_steps=2,
        scorer_pretrain_steps=2,
    )
    summary = train(build_task(task_config, run), run)
    assert summary["steps"] == 3
    # lesion pretraining (2), scorer pretraining (2), training and evaluation passes
    assert len(kinds) > 8 and set(kinds) == {"gray_tophat"}


def test_pretraining_reports_divergence():
    data = LesionPatches(
        torch.full((4, 1, PATCH, PATCH), float("nan")), torch.tensor([0, 1, 0, 1.0])
    )
    backbone = _convnext.build_convnext([1, 1, 1, 1], [8, 16, 32, 64])
    with pytest.raises(FloatingPointError, match="lower its lr"):
        pretrain_on_lesion_patches(backbone, data, steps=2)


def _tiny_task_configs(tmp_path, model_values, run_values=None, **task_values):
    """(task config, run config) of a TopKSigLIP run on six synthetic training breasts (one
    epoch, batches of two), with ``task_values`` over the tiny model's ``model_values``."""
    task_config = TopKSigLIPTaskConfig(
        **model_values,
        synthetic_train=6,
        synthetic_eval=2,
        synthetic_size=[192, 128],
        synthetic_dir=str(tmp_path.parent / "topk-synthetic"),
        batch_size=2,
        **task_values,
    )
    run = RunConfig(
        lr=1e-3, epochs=1, out_dir=str(tmp_path / "run"), progress=False, **(run_values or {})
    )
    return task_config, run


def test_task_pretrains_the_backbone_and_trains_it_at_the_scaled_lr(tmp_path, tiny_topk_values):
    task_config, run = _tiny_task_configs(
        tmp_path,
        tiny_topk_values(tau_anneal_steps=4),
        {"warmup_steps": 0},
        lesion_pretrain_steps=3,
        vision_lr_scale=0.25,
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

    assert not any(m.startswith("scorer pretraining") for m in messages)
    built = _optimizer_groups(task, model, 1e-3)
    assert [g["lr"] for g in built] == [1e-3, 2.5e-4]
    summary = train(build_task(task_config, run), run)
    assert summary["steps"] == 3 and all(np.isfinite(summary["losses"]))


def _points_at_roi(model: TopKSigLIP, dataset: MammoDataset) -> float:
    """Pointing Game of the model's scorer over the breasts of ``dataset`` with an ROI."""
    hits = []
    model.eval()
    with torch.no_grad():
        for index in range(len(dataset)):
            sample = dataset.sample(index)
            if sample.has_roi:
                scores = model.importance_logits(sample.image[None])[0]
                hits.append(bool(sample.roi_mask.flatten()[int(scores.argmax())]))
    return float(np.mean(hits))


def test_scorer_pretraining_points_the_candidate_softmax_at_the_roi_cells(
    tmp_path, tiny_topk_model
):
    torch.manual_seed(0)
    model = tiny_topk_model(
        tmp_path, image_size=SIZE, low_res_factor=1, vision_layer_scale_init=0.1
    )
    train_set, _ = _toy_dataset(80, seed=1, malignant_squares=True)
    held_out, _ = _toy_dataset(40, seed=2, malignant_squares=True)
    assert _points_at_roi(model, held_out) == 0.0  # a zero head: every score ties, cell 0 wins
    frozen = [p.detach().clone() for p in model.vision_projection.parameters()]
    losses = pretrain_scorer_on_roi_cells(model, train_set, steps=100, lr=1e-3, batch_size=8)
    assert len(losses) == 100
    assert np.mean(losses[:5]) > 2.5 and np.mean(losses[-10:]) < 0.5  # from ~ln(64 / 3)
    # Held-out breasts: far above chance (an ROI covers about 3 of the 64 cells), though the
    # bright bars ('vessels') hold as many bright pixels as a lesion.
    assert _points_at_roi(model, held_out) >= 0.25
    assert all(  # only the scorer (backbone and head) trains
        torch.equal(a, b) for a, b in zip(frozen, model.vision_projection.parameters(), strict=True)
    )


def test_scorer_pretraining_needs_roi_boxes(tmp_path, tiny_topk_model):
    model = tiny_topk_model(tmp_path, image_size=SIZE, low_res_factor=1)
    dataset, _ = _toy_dataset(6)
    clean = MammoDataset(
        [r for r in dataset.records if not r.has_roi], dataset.geometry, None, loader=dataset.loader
    )
    with pytest.raises(DataError, match="scorer_pretrain_steps=0"):
        pretrain_scorer_on_roi_cells(model, clean, steps=1)


def test_task_pretrains_the_scorer_after_the_backbone(tmp_path, tiny_topk_values):
    task_config, run = _tiny_task_configs(
        tmp_path, tiny_topk_values(), lesion_pretrain_steps=2, scorer_pretrain_steps=3
    )
    task = build_task(task_config, run)
    messages: list[str] = []
    task.progress = messages.append
    model = task.build_model()
    assert bool(model.scorer_head.weight.abs().sum() > 0)  # the head starts at zero
    lesion = next(i for i, m in enumerate(messages) if m.startswith("lesion pretraining: 2 "))
    scorer = next(i for i, m in enumerate(messages) if m.startswith("scorer pretraining: 3 "))
    assert lesion < scorer and "ROI cross entropy" in messages[scorer]
