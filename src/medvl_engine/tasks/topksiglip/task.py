"""TopKSigLIP as a task of the shared training loop (``medvl-train topksiglip``).

Loss (Eq. 7): ``L = L_align + lambda_dice L_dice`` where ``L_align`` is the Sup-sigmoid loss
(Eq. 5) against ``S = tabular_similarity(attributes)`` (or the identity, or a contrastive
objective for the Table 5 ablations) and ``L_dice`` the Soft Dice between the selection mask
(Eq. 6) on the ``G x G`` grid and the rasterised ROI boxes, over the samples that have ROIs.

Data come from a breast-level manifest (:mod:`medvl_engine.data.mammo_manifest`) or, for the
demo, from synthetic cohorts written once into ``synthetic_dir``.

Protocol: three disjoint splits. Training reads ``train_split`` (or ``synthetic_train``
breasts); every evaluation during training reads only ``eval_split`` (``synthetic_eval``
breasts), which also selects ``best/``. The test split (``test_split`` / ``synthetic_test``)
is read only by ``medvl-train topksiglip eval`` (:data:`ACTIONS`), which scores saved models
on it with bootstrap intervals, next to trivial baselines and the linear probe.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from torch import nn

from medvl_engine.common.config_ranges import Range, ranged
from medvl_engine.common.env import positive_int_setting
from medvl_engine.data.mammo_augment import MammoAugmentConfig
from medvl_engine.data.mammo_dataset import (
    MammoDataset,
    collate_breasts,
    disk_cached_loader,
    load_breast,
)
from medvl_engine.data.mammo_manifest import MammoRecord, read_mammo_manifest_contents
from medvl_engine.data.mammo_reports import normalise_findings, parsed_report
from medvl_engine.errors import ConfigError, ResourceLimitError
from medvl_engine.losses import (
    clip_contrastive_loss,
    roi_pointing_loss,
    soft_dice_loss,
    soft_target_contrastive_loss,
    sup_sigmoid_loss,
    tabular_similarity,
)
from medvl_engine.models.topk import selection_mask
from medvl_engine.models.topksiglip import TopKSigLIP, TopKSigLIPConfig, build_topksiglip
from medvl_engine.models.topksiglip_folder import save_topksiglip
from medvl_engine.models.topksiglip_ranges import TOPKSIGLIP_RANGES, check_topksiglip_values
from medvl_engine.training.config import (
    MAX_SEED,
    RunConfig,
    check_input_file,
    check_output_folder,
)
from medvl_engine.training.distributed import gather_with_grad, shard_indices
from medvl_engine.training.task import unwrap_model

__all__ = [
    "ACTIONS",
    "CONFIG_CLASS",
    "MAX_SYNTHETIC_PIXELS",
    "TopKSigLIPTask",
    "selection_metrics",
    "TopKSigLIPTaskConfig",
    "build_task",
    "report",
    "shuffle_sentences",
    "stratified_subset",
    "alignment_loss",
    "synthetic_pixel_budget",
    "synthetic_records",
]


MAX_SYNTHETIC_PIXELS = 2**32
"""Pixels of a synthetic cohort (all splits, both views): about 8.6 GB of DICOM on disk and
some 20 minutes of generation on one core; env MEDVL_MAX_SYNTHETIC_PIXELS overrides."""

_ENV_SYNTHETIC = "MEDVL_MAX_SYNTHETIC_PIXELS"
_SEED = Range(low=0, high=MAX_SEED, hint="give a seed from 0 to 4294967295")
_COUNT = Range(low=0, high=10_000_000, hint="give a number of breasts, e.g. 800")
_STEPS = Range(low=0, high=1_000_000_000, hint="0 for none")
_LR = Range(low=0, low_open=True, high=10, hint="e.g. 1e-3")
_WEIGHT = Range(low=0, high=1e6, hint="0 turns the term off")


def synthetic_pixel_budget() -> int:
    """Pixels a synthetic cohort may have (env MEDVL_MAX_SYNTHETIC_PIXELS overrides)."""
    return positive_int_setting(_ENV_SYNTHETIC, MAX_SYNTHETIC_PIXELS)


@dataclass
class TopKSigLIPTaskConfig(TopKSigLIPConfig):
    """Model fields (see :class:`TopKSigLIPConfig`) plus loss, data and evaluation settings."""

    # Loss (Eq. 7) and its Table 5 ablations: L = L_align + dice_weight * L_dice.
    objective: Literal["sigmoid", "contrastive"] = "sigmoid"  # Sup-sigmoid or softmax
    target: Literal["tabular", "identity"] = "tabular"  # soft target S, or I
    roi_supervision: bool = True  # Soft Dice on the breasts that have ROI boxes
    dice_weight: float = ranged(5.0, _WEIGHT)
    # Weight of the ROI pointing loss on the scorer's log w in training (0: none); see
    # medvl_engine.losses.roi_pointing_loss.
    pointing_weight: float = ranged(0.0, _WEIGHT)
    manifest: str | None = None  # breast-level CSV/JSONL; None with synthetic_train > 0
    train_split: str = "train"
    eval_split: str = "val"  # read by every evaluation during training; selects best/
    test_split: str = "test"  # read only by the eval action
    # breasts of a synthetic training cohort (when no manifest); the three counts together are
    # budgeted (see synthetic_pixel_budget)
    synthetic_train: int = ranged(0, _COUNT)
    synthetic_eval: int = ranged(
        0, _COUNT
    )  # synthetic validation breasts (seed synthetic_seed + 1)
    # synthetic test breasts (seed synthetic_seed + 2), eval action only
    synthetic_test: int = ranged(0, _COUNT)
    synthetic_dir: str | None = None  # where cohorts are written; default <run root>/synthetic
    synthetic_seed: int = ranged(0, _SEED)
    synthetic_size: list[int] = ranged(  # rows, cols
        [1024, 640],
        low=32,
        high=16_384,
        min_items=2,
        max_items=2,
        hint="rows and cols, e.g. [1024, 640]",
    )
    report_shuffle: bool = False  # shuffle the sentence order of each report in training
    batch_size: int = ranged(32, low=1, high=65_536, hint="e.g. task.batch_size=32")
    augment: bool = True
    # share of augmented view halves resampled (rotation, scale, sub-pixel shift); the rest
    # move by whole pixels only and keep fine calcifications sharp
    augment_resample_p: float = ranged(1.0, low=0, high=1, hint="e.g. 0.5")
    # each augmented breast's intensities are multiplied by a factor in [1 - i, 1 + i]
    augment_intensity: float = ranged(0.2, low=0, high=1, high_open=True, hint="e.g. 0.2")
    # patches at evaluation (default k)
    eval_k: int | None = ranged(None, low=1, high=65_536, hint="or none for task.k")
    # Zero-shot readouts repeated with these k in each evaluation (Tables 1-2: 15, 30, 45);
    # values above grid * grid are left out with a note. [] for none.
    eval_k_sweep: list[int] = ranged(
        [15, 30, 45], low=1, high=65_536, max_items=64, hint="e.g. [15, 30, 45]"
    )
    # Linear probe on frozen image embeddings, in the eval action only: fitted on train_split,
    # the iteration chosen on eval_split, reported on test_split (the paper's schedule below).
    linear_probe: bool = True
    probe_steps: int = ranged(20_000, _STEPS)
    probe_lr: float = ranged(4e-3, _LR)
    probe_weight_decay: float = ranged(0.01, low=0, high=10, hint="e.g. 0.01")
    probe_batch_size: int = ranged(32, low=1, high=65_536, hint="e.g. 32")
    probe_eval_every: int = ranged(500, low=1, high=1_000_000_000, hint="e.g. 500")
    # Share of the training rows used (pretraining-size ablation): a seeded subset stratified
    # by (cancer, BI-RADS); 1.0 keeps every row. The linear probe still fits on every row.
    train_fraction: float = ranged(1.0, low=0, low_open=True, high=1, hint="e.g. 0.33")
    # ROI-supervised patch pretraining of the backbone before training (0: none); see
    # medvl_engine.tasks.topksiglip.pretrain. For towers without pretrained weights.
    lesion_pretrain_steps: int = ranged(0, _STEPS)
    lesion_pretrain_lr: float = ranged(1e-3, _LR)
    # Weight of its second term: ROI patches of breasts with vs without cancer (0: lesion vs
    # normal only).
    lesion_pretrain_malignancy: float = ranged(0.0, _WEIGHT)
    # Only the ROIs of breasts with one kind of finding carry the outcome in that term (the
    # breast-level label does not say which of two findings is the cancer).
    lesion_pretrain_sole_finding_outcome: bool = False
    # The normal patches (breasts without findings) join that term as not malignant, so the
    # bright-spot hard negatives are taught as benign, not only as not lesions.
    lesion_pretrain_malignancy_normals: bool = False
    # Normal patches centred on the brightest spots of each breast without findings (hard
    # negatives), in addition to two random tissue patches per such breast.
    lesion_pretrain_bright_normals: int = ranged(0, low=0, high=1000, hint="e.g. 2")
    # Patches cut around each ROI box, each at its own random offset (1: one per box).
    lesion_pretrain_roi_crops: int = ranged(1, low=1, high=1000, hint="e.g. 1")
    # Steps of scorer pretraining after it (0: none): the candidate softmax of whole breast
    # images is pulled onto the ROI cells; the backbone trains at vision_lr_scale of its lr.
    scorer_pretrain_steps: int = ranged(0, _STEPS)
    scorer_pretrain_lr: float = ranged(1e-3, _LR)
    # the ConvNeXt backbone trains at run.lr * vision_lr_scale
    vision_lr_scale: float = ranged(1.0, low=0, high=1000, hint="e.g. 0.2")
    seed: int = ranged(0, _SEED)
    install_as: str | None = None  # registered name whose cache folder receives the final model
    # A saved model (folder or registered name, e.g. topksiglip-demo) to start from instead of a
    # new one (no lesion pretraining then); with run.epochs=0 it is evaluated as it is. The eval
    # action scores it on the test split instead of the run's best/ models.
    init_from: str | None = None
    # eval action: resamples of the test breasts per interval
    bootstrap_resamples: int = ranged(1000, low=1, high=1_000_000, hint="e.g. 1000")
    # eval action: "test" (the report) or "validation" (an analysis of the breasts best/ and the
    # recipe were chosen on; optimistic, no linear probe), written to its own file.
    report_split: str = "test"

    FIELD_RANGES: ClassVar[dict[str, Range]] = TOPKSIGLIP_RANGES
    """Ranges of the model fields inherited from :class:`TopKSigLIPConfig`."""

    def validate(self) -> None:
        """Checks across fields, run on load before any data are made: the model settings
        (:func:`check_topksiglip_values`), ``eval_k`` within the grid and the synthetic
        cohort's size within :func:`synthetic_pixel_budget`."""
        check_topksiglip_values(self)
        cells = self.grid * self.grid
        if self.eval_k is not None and self.eval_k > cells:
            raise ConfigError(
                f"task.eval_k={self.eval_k} exceeds the {self.grid}x{self.grid} grid: it must be "
                f"between 1 and {cells}, or none for task.k."
            )
        if self.manifest:
            check_input_file(
                self.manifest, "task.manifest", "the breast-level manifest (CSV/JSONL)"
            )
        else:
            if self.synthetic_dir:
                check_output_folder(self.synthetic_dir, "task.synthetic_dir")
            count = self.synthetic_train + self.synthetic_eval + self.synthetic_test
            rows, cols = (int(v) for v in self.synthetic_size)
            if rows < 128 or cols < 96:
                raise ConfigError(
                    f"task.synthetic_size={[rows, cols]} is smaller than the 128 x 96 px (rows, "
                    "cols) a synthetic mammogram needs; give e.g. task.synthetic_size=[192,128]."
                )
            pixels = count * rows * cols * 2  # two views per breast
            budget = synthetic_pixel_budget()
            if pixels > budget:
                raise ResourceLimitError(
                    f"task.synthetic_train/eval/test ask for {count:,} synthetic breasts of "
                    f"{rows}x{cols} px ({pixels / 1e9:.3g} billion px, about "
                    f"{pixels * 2 / 1e9:.3g} GB on disk), more than the {budget / 1e9:.3g} "
                    "billion px allowed "
                    f"({_ENV_SYNTHETIC}); use fewer or smaller breasts, or raise "
                    f"{_ENV_SYNTHETIC} if the disk and time are there."
                )

    def model_config(self) -> TopKSigLIPConfig:
        """The model's fields; the contrastive objectives have no logit bias (it would be a
        parameter without a gradient, which DistributedDataParallel refuses)."""
        names = [f.name for f in dataclasses.fields(TopKSigLIPConfig)]
        config = TopKSigLIPConfig(**{name: getattr(self, name) for name in names})
        if self.objective != "sigmoid":
            config = dataclasses.replace(config, logit_bias_init=None)
        return config


CONFIG_CLASS = TopKSigLIPTaskConfig


def alignment_loss(
    config: TopKSigLIPTaskConfig,
    image_embeddings: torch.Tensor,
    text_embeddings: torch.Tensor,
    attributes: torch.Tensor,
    logit_scale: torch.Tensor,
    logit_bias: torch.Tensor | None,
) -> torch.Tensor:
    """``L_align`` of the configured objective over the global batch.

    Under DDP the embeddings and tabular vectors of every rank are gathered first
    (:func:`~medvl_engine.training.distributed.gather_with_grad`), so B per rank x W ranks
    scores (BW)^2 pairs against the (BW)^2 soft target, as one process with batch BW
    does; a run alone uses its batch as is.
    """
    images = gather_with_grad(image_embeddings)
    texts = gather_with_grad(text_embeddings)
    if config.target == "tabular":
        target = tabular_similarity(gather_with_grad(attributes))
    else:
        target = torch.eye(images.shape[0], device=images.device)
    if config.objective == "sigmoid":
        return sup_sigmoid_loss(images, texts, target, logit_scale, logit_bias)
    if config.target == "identity":
        return clip_contrastive_loss(images, texts, logit_scale)
    return soft_target_contrastive_loss(images, texts, target, logit_scale)


def synthetic_records(
    folder: Path, count: int, seed: int, split: str, size: tuple[int, int] = (1024, 640)
) -> list[MammoRecord]:
    """``count`` synthetic breasts (both views, DICOM) in ``folder``, written on first use.

    Case i uses seed ``seed * 100_003 + i`` and alternates laterality; labels, findings and ROI
    boxes come from :func:`medvl_engine.synthetic.make_mammogram_case` (views of ``size`` =
    (rows, cols)). Each case folder keeps a ``case.json`` so a later run reuses the files.
    """
    from medvl_engine.synthetic import make_mammogram_case

    records = []
    for i in range(count):
        case_dir = folder / f"case_{i:05d}"
        saved = case_dir / "case.json"
        if saved.is_file():
            values = json.loads(saved.read_text(encoding="utf-8"))
        else:
            case_dir.mkdir(parents=True, exist_ok=True)
            case = make_mammogram_case(
                case_dir, seed=seed * 100_003 + i, laterality="LR"[i % 2], size=(size[0], size[1])
            )
            values = {
                "exam_id": str(case.exam_id),
                "laterality": case.laterality,
                "cc_path": Path(case.cc_path).name,
                "mlo_path": Path(case.mlo_path).name,
                "birads": int(case.birads),
                "density": str(case.density),
                "cancer": bool(case.cancer),
                "findings": list(case.findings),
                "roi_boxes": {
                    v: [list(map(float, b)) for b in items]
                    for v, items in case.boxes.items()
                    if items
                },
            }
            saved.write_text(json.dumps(values), encoding="utf-8")
        findings = normalise_findings(values["findings"])
        records.append(
            MammoRecord(
                exam_id=values["exam_id"],
                laterality=values["laterality"],
                cc_path=case_dir / values["cc_path"],
                mlo_path=case_dir / values["mlo_path"],
                birads=values["birads"],
                density=values["density"],
                cancer=values["cancer"],
                findings=findings,
                report=parsed_report(
                    findings, values["density"], values["birads"], values["cancer"]
                ),
                roi_boxes=values["roi_boxes"],
                split=split,
            )
        )
    return records


def stratified_subset(records: list[MammoRecord], fraction: float, seed: int) -> list[MammoRecord]:
    """A seeded share ``fraction`` of ``records``, stratified by (cancer, BI-RADS).

    ``max(1, round(fraction * n))`` rows are kept in all; each stratum (a missing label forms its
    own) gets ``floor(fraction * n_s)`` of its ``n_s`` rows and the rest go one each to the
    strata with the largest remainders. Rows are drawn with ``random.Random(seed)`` and stay in
    manifest order.
    """
    strata: dict[tuple[Any, Any], list[int]] = {}
    for index, record in enumerate(records):
        strata.setdefault((record.cancer, record.birads), []).append(index)
    keys = sorted(strata, key=repr)
    quotas = {key: math.floor(fraction * len(strata[key])) for key in keys}
    remaining = max(1, round(fraction * len(records))) - sum(quotas.values())
    by_remainder = sorted(
        keys, key=lambda key: fraction * len(strata[key]) - quotas[key], reverse=True
    )
    for key in by_remainder[: max(remaining, 0)]:
        quotas[key] += 1
    rng = random.Random(seed)
    kept: list[int] = []
    for key in keys:
        kept.extend(rng.sample(strata[key], quotas[key]))
    return [records[i] for i in sorted(kept)]


def shuffle_sentences(report: str, rng: random.Random) -> str:
    """The report with its sentences (split after '.') in a random order."""
    sentences = [part.strip() for part in report.replace(". ", ".\n").splitlines() if part.strip()]
    rng.shuffle(sentences)
    return " ".join(sentences)


class TopKSigLIPTask:
    """The TopKSigLIP task: batches of breasts + reports, Sup-sigmoid + Soft Dice losses."""

    name = "topksiglip"

    def __init__(
        self, config: TopKSigLIPTaskConfig, run_config: RunConfig, read_train_val: bool = True
    ) -> None:
        """read_train_val=False: no training or validation data are read or written (the
        test evaluation of a model without the linear probe needs neither); ``train_set`` and
        ``eval_set`` are then None."""
        if config.k > config.grid * config.grid:
            raise ConfigError(f"task.k={config.k} exceeds the {config.grid}x{config.grid} grid.")
        if not 0.0 < config.train_fraction <= 1.0:
            raise ConfigError(
                f"task.train_fraction={config.train_fraction} is outside (0, 1]; give the share "
                "of training rows to keep, e.g. 0.33."
            )
        if not 0.0 <= config.augment_resample_p <= 1.0:
            raise ConfigError(
                f"task.augment_resample_p={config.augment_resample_p} is outside [0, 1]; give "
                "the share of augmented view halves to resample, e.g. 0.5."
            )
        if not 0.0 <= config.augment_intensity < 1.0:
            raise ConfigError(
                f"task.augment_intensity={config.augment_intensity} is outside [0, 1); give "
                "the largest relative change of an augmented breast's intensities, e.g. 0.2."
            )
        self.config = config
        self.out_dir = Path(run_config.out_dir)
        self.geometry = config.geometry()
        # Progress sink set before the data are read, so the skipped-row count is shown.
        self.progress: Callable[[str], None] | None = None
        self.skipped_birads_0_6 = 0  # manifest rows skipped (BI-RADS 0 or 6), all splits read
        train_records, eval_records = self._records() if read_train_val else ([], [])
        self.train_rows_total = len(train_records)
        # The linear probe fits on the whole training split, whatever share pretraining uses.
        self.probe_train_records = train_records
        if config.train_fraction < 1.0:
            train_records = stratified_subset(train_records, config.train_fraction, config.seed)
        augment = (
            MammoAugmentConfig(
                resample_p=config.augment_resample_p, intensity=config.augment_intensity
            )
            if config.augment
            else None
        )
        loader: Callable[[MammoRecord, int], tuple[np.ndarray, np.ndarray]] = load_breast
        if not config.manifest:  # synthetic: keep decoded breasts beside the cohort
            loader = disk_cached_loader(self._synthetic_folder() / "breasts", load_breast)
        # A synthetic cohort is small enough to keep decoded in memory; a manifest may list
        # hundreds of thousands of breasts, which are decoded again at each use.
        in_memory = not config.manifest
        self.train_set = (
            MammoDataset(
                train_records,
                self.geometry,
                augment,
                seed=config.seed,
                cache=in_memory,
                loader=loader,
            )
            if read_train_val
            else None
        )
        self.eval_set = (
            MammoDataset(
                eval_records, self.geometry, None, seed=config.seed, cache=in_memory, loader=loader
            )
            if eval_records
            else None
        )
        self._loader, self._in_memory = loader, in_memory
        self._tokenizer = None
        self.lesion_pretrain_loss: float | None = None  # mean of its last 20 steps
        self.last_metrics: dict[str, float] = {}

    def _records(self) -> tuple[list[MammoRecord], list[MammoRecord]]:
        config = self.config
        if config.manifest:
            contents = read_mammo_manifest_contents(config.manifest)
            self.skipped_birads_0_6 = contents.skipped_birads_0_6
            if contents.skipped_birads_0_6 and os.environ.get("RANK", "0") == "0":
                print(
                    f"manifest {config.manifest}: {contents.skipped_birads_0_6} rows with BI-RADS "
                    "0 or 6 skipped (excluded as in the paper)."
                )
            train = [r for r in contents.records if r.split == config.train_split]
            evaluation = [r for r in contents.records if r.split == config.eval_split]
            return train, evaluation
        if config.synthetic_train <= 0:
            raise ConfigError(
                "task.manifest is not set and task.synthetic_train is 0; give a manifest or a "
                "number of synthetic breasts."
            )
        folder = self._synthetic_folder()
        size = (int(config.synthetic_size[0]), int(config.synthetic_size[1]))
        train = synthetic_records(
            folder / "train", config.synthetic_train, config.synthetic_seed, "train", size
        )
        evaluation = synthetic_records(
            folder / "eval", config.synthetic_eval, config.synthetic_seed + 1, "val", size
        )
        return train, evaluation

    def test_records(self) -> list[MammoRecord]:
        """Rows of the test split (``test_split`` of the manifest, or ``synthetic_test``
        breasts of seed ``synthetic_seed + 2``); read only by the eval action."""
        config = self.config
        if config.manifest:
            records = read_mammo_manifest_contents(config.manifest, split=config.test_split).records
            if not records:
                raise ConfigError(
                    f"manifest {config.manifest} has no rows of split {config.test_split!r}; "
                    "give the test rows that split, or set task.test_split."
                )
            return records
        if config.synthetic_test <= 0:
            raise ConfigError(
                "task.synthetic_test is 0, so there is no test split to evaluate; set e.g. "
                "task.synthetic_test=96 (breasts never used in training or validation)."
            )
        size = (int(config.synthetic_size[0]), int(config.synthetic_size[1]))
        return synthetic_records(
            self._synthetic_folder() / "test",
            config.synthetic_test,
            config.synthetic_seed + 2,
            "test",
            size,
        )

    def dataset(self, records: list[MammoRecord]) -> MammoDataset:
        """An unaugmented dataset of ``records`` read like the training data."""
        return MammoDataset(
            records,
            self.geometry,
            None,
            seed=self.config.seed,
            cache=self._in_memory,
            loader=self._loader,
        )

    def _synthetic_folder(self) -> Path:
        """Cohort folder; its name carries the view size, seed and generator version. The
        default root is shared by the runs of a seed sweep (``<run root>/synthetic``)."""
        from medvl_engine.synthetic import MAMMO_GENERATOR_VERSION
        from medvl_engine.training.seeds import run_root

        rows, cols = (int(v) for v in self.config.synthetic_size)
        root = Path(self.config.synthetic_dir or run_root(self.out_dir) / "synthetic")
        return root / f"{rows}x{cols}_seed{self.config.synthetic_seed}_g{MAMMO_GENERATOR_VERSION}"

    # -- task contract ----------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """A new model (then lesion pretraining when set), or the saved ``init_from`` model."""
        if self.config.init_from:
            model = self.load_saved(self.config.init_from)
            model.train()
            if self.progress is not None:
                self.progress(f"starting from {self.config.init_from} (no lesion pretraining)")
        else:
            model = build_topksiglip(
                self.config.model_config(), work_dir=self.out_dir / "tokenizer"
            )
            if self.config.lesion_pretrain_steps > 0:
                self._pretrain_backbone(model)
            if self.config.scorer_pretrain_steps > 0:
                self._pretrain_scorer(model)
        self._tokenizer = model.tokenizer
        return model

    def load_saved(self, source: str | Path, device: str | torch.device = "cpu") -> TopKSigLIP:
        """A saved model (folder or registered name) whose patch geometry is this task's."""
        from medvl_engine.models.topksiglip_folder import load_topksiglip

        model = load_topksiglip(source, device=device)
        if model.geometry != self.geometry:
            raise ConfigError(
                f"model {source} reads a {model.config.image_size} px image on a "
                f"{model.config.grid}x{model.config.grid} grid, the config a "
                f"{self.config.image_size} px image on a {self.config.grid}x{self.config.grid} "
                "grid; evaluate it with the config it was trained with."
            )
        return model

    def _pretrain_backbone(self, model: TopKSigLIP) -> None:
        """Lesion-vs-normal patch pretraining of the backbone (ROI boxes of the train split)."""
        from medvl_engine.tasks.topksiglip.pretrain import (
            lesion_patches,
            pretrain_on_lesion_patches,
        )

        config = self.config
        patches = lesion_patches(
            self._training_set(),
            self.geometry.patch_size,
            seed=config.seed,
            bright_normals_per_breast=config.lesion_pretrain_bright_normals,
            sole_finding_outcome=config.lesion_pretrain_sole_finding_outcome,
            crops_per_roi=config.lesion_pretrain_roi_crops,
        )
        if self.progress is not None:
            positives = int(patches.labels.sum())
            self.progress(
                f"lesion pretraining: {config.lesion_pretrain_steps} steps on {positives} ROI "
                f"and {len(patches.labels) - positives} normal patches"
            )
        losses = pretrain_on_lesion_patches(
            model.backbone,
            patches,
            config.lesion_pretrain_steps,
            lr=config.lesion_pretrain_lr,
            seed=config.seed,
            malignancy_weight=config.lesion_pretrain_malignancy,
            malignancy_on_normals=config.lesion_pretrain_malignancy_normals,
            backbone_input=config.vision_input,
        )
        tail = losses[-min(len(losses), 20) :]
        self.lesion_pretrain_loss = sum(tail) / len(tail)
        if self.progress is not None:
            self.progress(
                f"lesion pretraining: BCE {sum(losses[:20]) / len(losses[:20]):.3f} -> "
                f"{self.lesion_pretrain_loss:.3f} (mean of the first / last 20 steps)"
            )

    def _pretrain_scorer(self, model: TopKSigLIP) -> None:
        """Scorer pretraining on the ROI cells of the train split's breasts."""
        from medvl_engine.tasks.topksiglip.pretrain import pretrain_scorer_on_roi_cells

        config = self.config
        losses = pretrain_scorer_on_roi_cells(
            model,
            self._training_set(),
            config.scorer_pretrain_steps,
            lr=config.scorer_pretrain_lr,
            backbone_lr_scale=config.vision_lr_scale,
            batch_size=config.batch_size,
            seed=config.seed,
        )
        if self.progress is not None and losses:
            head, tail = losses[:20], losses[-min(len(losses), 20) :]
            self.progress(
                f"scorer pretraining: {config.scorer_pretrain_steps} steps, ROI cross entropy "
                f"{sum(head) / len(head):.3f} -> {sum(tail) / len(tail):.3f} "
                "(mean of the first / last 20 steps)"
            )

    def optimizer_groups(self, model: nn.Module) -> list[dict[str, Any]]:
        """The backbone at ``vision_lr_scale`` times the run's lr, everything else at 1x."""
        inner = _topksiglip_of(model)
        backbone = {id(p) for p in inner.backbone.parameters()}
        rest = [p for p in inner.parameters() if id(p) not in backbone]
        return [
            {"params": rest, "lr_scale": 1.0},
            {"params": list(inner.backbone.parameters()), "lr_scale": self.config.vision_lr_scale},
        ]

    def _training_set(self) -> MammoDataset:
        if self.train_set is None:
            raise ConfigError(
                "this TopKSigLIP task was built without its training split; build it with "
                "read_train_val=True to train."
            )
        return self.train_set

    def _order(self, epoch: int, rank: int, world_size: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.config.seed * 1_000_003 + epoch)
        permutation = torch.randperm(len(self._training_set()), generator=generator).tolist()
        return [permutation[i] for i in shard_indices(len(permutation), rank, world_size)]

    def num_batches(self, epoch: int, rank: int, world_size: int) -> int:
        count = len(self._order(epoch, rank, world_size))
        return max(count // self.config.batch_size, 1)

    def train_batches(
        self, epoch: int, rank: int, world_size: int, start: int = 0
    ) -> Iterator[dict[str, Any]]:
        count = self.num_batches(epoch, rank, world_size)
        for index in range(start, count):
            if self.progress is not None and index % 10 == 0:
                self.progress(f"training: epoch {epoch + 1}, batch {index + 1}/{count}")
            yield self.batch_at(epoch, rank, world_size, index)

    def batch_at(self, epoch: int, rank: int, world_size: int, index: int) -> dict[str, Any]:
        """Micro-batch ``index`` of ``rank`` in ``epoch`` (decode, augment, tokenise): a pure
        function of its arguments and the data, so DataLoader workers can call it in any order.
        Images ``[B, 1, S, S]``, roi_mask ``[B, G, G]``, has_roi ``[B]``, attributes ``[B, 15]``,
        input_ids / attention_mask ``[B, L]``."""
        key = (epoch, rank, world_size)
        memo = getattr(self, "_order_memo", None)  # the epoch's order, computed once per epoch
        if memo is None or memo[0] != key:
            memo = self._order_memo = (key, self._order(epoch, rank, world_size))
        order = memo[1]
        size = min(self.config.batch_size, len(order))
        chosen = order[index * size : (index + 1) * size]
        train_set = self._training_set()
        batch = collate_breasts([train_set.sample(i, epoch) for i in chosen])
        reports = batch.pop("reports")
        if self.config.report_shuffle:
            rng = random.Random((self.config.seed * 1_000_003 + epoch) * 1_000_003 + index)
            reports = [shuffle_sentences(r, rng) for r in reports]
        tokens = self._tokenize(reports)
        batch.pop("boxes")
        batch.update(tokens)
        return batch

    def _tokenize(self, reports: list[str]) -> dict[str, torch.Tensor]:
        if self._tokenizer is None:
            raise RuntimeError("build_model() must run before batches are drawn")
        encoded = self._tokenizer(
            reports,
            padding="longest",
            truncation=True,
            max_length=self.config.context_length,
            return_tensors="pt",
        )
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def compute_losses(self, model: nn.Module, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        inner = _topksiglip_of(model)
        config = self.config
        vision, text = model(batch["images"], batch["input_ids"], batch["attention_mask"])
        align = alignment_loss(
            config, vision.embedding, text, batch["attributes"], inner.logit_scale, inner.logit_bias
        )
        dice = align.new_zeros(())
        has_roi = batch["has_roi"].bool()
        if config.roi_supervision and vision.e is not None and bool(has_roi.any()):
            grid = self.geometry.grid
            predicted = selection_mask(vision.e[has_roi]).view(-1, grid, grid)
            dice = soft_dice_loss(predicted, batch["roi_mask"][has_roi])
        pointing = align.new_zeros(())
        if config.pointing_weight > 0 and vision.log_weights is not None and bool(has_roi.any()):
            pointing = roi_pointing_loss(
                vision.log_weights[has_roi], batch["roi_mask"][has_roi].flatten(1)
            )
        loss = align + config.dice_weight * dice + config.pointing_weight * pointing
        terms = {"pointing": pointing.detach()} if config.pointing_weight > 0 else {}
        return {
            "loss": loss,
            "sup_sigmoid" if config.objective == "sigmoid" else "contrastive": align.detach(),
            "dice": dice.detach(),
            **terms,
            "tau": torch.tensor(inner.tau()),
            "logit_scale": inner.logit_scale.detach(),
        }

    def _k_sweep(self) -> list[int]:
        """The k of ``eval_k_sweep`` that fit the grid (the others are left out with a note)."""
        cells = self.config.grid * self.config.grid
        sweep = [int(k) for k in self.config.eval_k_sweep if int(k) <= cells]
        left_out = [int(k) for k in self.config.eval_k_sweep if int(k) > cells]
        if left_out and self.progress is not None:
            self.progress(f"k sweep: k={left_out} left out (the grid has {cells} cells)")
        return sweep

    def evaluate_shard(self, model: nn.Module, rank: int, world_size: int) -> Any:
        """This rank's share of the validation breasts (``rank::world_size``) as a
        :class:`~medvl_engine.tasks.topksiglip.evaluation.ReadoutTable` (zero-shot at ``eval_k``
        and each k of the sweep, localisation); None without validation breasts."""
        if self.eval_set is None:
            return None
        from medvl_engine.tasks.topksiglip.evaluation import model_readouts

        indices = range(rank, len(self.eval_set), world_size)
        table, _ = model_readouts(
            _topksiglip_of(model),
            self.eval_set,
            indices,
            k=self.config.eval_k,
            k_sweep=self._k_sweep(),
        )
        return table

    def merge_evaluation(self, parts: list[Any]) -> dict[str, float]:
        """Validation metrics over every rank's breasts: zero-shot AUROCs, k sweep
        (``<metric>@k<k>``), localisation and :func:`selection_metrics`. Never reads the
        test split."""
        from medvl_engine.tasks.topksiglip.evaluation import ReadoutTable, readout_metrics

        tables = [part for part in parts if part is not None and len(part)]
        metrics = readout_metrics(ReadoutTable.concat(tables)) if tables else {}
        metrics.update(selection_metrics(metrics))
        self.last_metrics = metrics
        if self.progress is not None and metrics:
            shown = ("auroc_cancer", "auroc_findings_avg", "pointing_game")
            values = ", ".join(f"{key} {metrics.get(key, float('nan')):.2f}" for key in shown)
            self.progress(f"validation: {values}")
        return metrics

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics in one process (:meth:`evaluate_shard` of all breasts)."""
        return self.merge_evaluation([self.evaluate_shard(model, 0, 1)])

    def save_pretrained(self, model: nn.Module, directory: Path) -> None:
        """Save a model folder; the final model also goes to the cache folder of ``install_as``."""
        save_topksiglip(_topksiglip_of(model), directory)
        if self.config.install_as and Path(directory) == self.out_dir / "final":
            from medvl_engine.encoders.resolve import registered_model_dir

            save_topksiglip(_topksiglip_of(model), registered_model_dir(self.config.install_as))


def selection_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics that weigh detection and localisation together, for ``run.select_metric``.

    ``cancer_pointing_mean = (auroc_cancer + pointing_game) / 2``, present when both are
    (a model chosen on the cancer AUROC alone may point at the wrong spot).
    """
    if "auroc_cancer" in metrics and "pointing_game" in metrics:
        return {"cancer_pointing_mean": (metrics["auroc_cancer"] + metrics["pointing_game"]) / 2}
    return {}


def build_task(task_config: TopKSigLIPTaskConfig, run_config: RunConfig) -> TopKSigLIPTask:
    """The task for ``medvl-train topksiglip``; an unusable ``install_as`` name (the shipped
    demo's, or a path) stops here, before any data is made or any step is trained."""
    if task_config.install_as:
        from medvl_engine.encoders.resolve import registered_model_dir

        registered_model_dir(task_config.install_as)
    return TopKSigLIPTask(task_config, run_config)


def report(task: TopKSigLIPTask, summary: dict[str, Any]) -> None:
    """Store the skipped-row and training-row counts in ``summary``; print the last
    validation metrics (zero-shot, k sweep, localisation) as a table."""
    summary["skipped_birads_0_6"] = task.skipped_birads_0_6
    summary["train_rows"] = len(task._training_set())
    summary["train_rows_total"] = task.train_rows_total
    metrics = task.last_metrics
    if not metrics:
        return
    print(
        "TopKSigLIP validation (last evaluation; AUROC chance = 0.5; *_chance = a random map's "
        "value; test metrics: medvl-train topksiglip eval)"
    )
    for key in sorted(metrics):
        value = metrics[key]
        shown = f"{value:.0f}" if key == "roi_cases" else f"{value:.3f}"
        print(f"  {key:<40} {shown}")
    if math.isfinite(summary.get("steps", float("nan"))):
        print(f"  {'trained steps':<40} {summary['steps']}")


def evaluate_test_split(run_config: RunConfig, task_config: TopKSigLIPTaskConfig) -> int:
    """``medvl-train topksiglip eval``: see :mod:`medvl_engine.tasks.topksiglip.run_eval`."""
    from medvl_engine.tasks.topksiglip.run_eval import evaluate_test_split as run

    return run(run_config, task_config, TopKSigLIPTask)


ACTIONS: dict[str, Callable[[RunConfig, TopKSigLIPTaskConfig], int]] = {"eval": evaluate_test_split}


def _topksiglip_of(model: nn.Module) -> TopKSigLIP:
    """The TopKSigLIP inside ``model`` (unwrapped from DistributedDataParallel)."""
    inner = unwrap_model(model)
    if not isinstance(inner, TopKSigLIP):
        raise TypeError(
            f"the TopKSigLIP task trains a TopKSigLIP model, got {type(inner).__name__}"
        )
    return inner
