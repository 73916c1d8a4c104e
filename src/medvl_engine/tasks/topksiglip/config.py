"""Settings of ``medvl-train topksiglip``: the ``task`` section of a recipe, by sections.

The task config is one flat dataclass (``config.k``, ``config.dice_weight``) composed of one
small dataclass per section; a recipe may write the ``task`` mapping by these sections or flat
(see :mod:`medvl_engine.training.config`), and a run saves it by sections::

    task:
      model:    {image_size: 256, grid: 8, k: 4, ...}       # TopKSigLIPConfig
      loss:     {objective: sigmoid, dice_weight: 5.0}      # Eq. 7 and its Table 5 ablations
      data:     {synthetic_train: 800, ...}                 # manifest or synthetic cohorts, splits
      train:    {batch_size: 8, augment: true, seed: 0}     # batches, augmentation, start model
      pretrain: {lesion_pretrain_steps: 2000, ...}          # lesion and scorer pretraining
      eval:     {eval_k_sweep: [15, 30, 45], ...}           # readouts, bootstrap
      probe:    {linear_probe: true, probe_steps: 20000}    # linear probe (eval action)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal

from medvl_engine.common.config_ranges import Range, ranged
from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import ConfigError, ResourceLimitError
from medvl_engine.evaluation.fresh_seeds import FRESH_SEED_START
from medvl_engine.models.topksiglip import TopKSigLIPConfig
from medvl_engine.models.topksiglip_ranges import TOPKSIGLIP_RANGES, check_topksiglip_values
from medvl_engine.training.config import (
    MAX_SEED,
    Sections,
    check_input_file,
    check_output_folder,
)

__all__ = [
    "CONFIG_SECTIONS",
    "MAX_SYNTHETIC_PIXELS",
    "TopKDataSettings",
    "TopKEvalSettings",
    "TopKLossSettings",
    "TopKPretrainSettings",
    "TopKProbeSettings",
    "TopKSigLIPTaskConfig",
    "TopKTrainSettings",
    "synthetic_pixel_budget",
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
class TopKLossSettings:
    """``loss``: Eq. 7, ``L = L_align + dice_weight * L_dice``, and its Table 5 ablations."""

    objective: Literal["sigmoid", "contrastive"] = "sigmoid"  # Sup-sigmoid or softmax
    target: Literal["tabular", "identity"] = "tabular"  # soft target S, or I
    roi_supervision: bool = True  # Soft Dice on the breasts that have ROI boxes
    dice_weight: float = ranged(5.0, _WEIGHT)
    # Weight of the ROI pointing loss on the scorer's log w in training (0: none); see
    # medvl_engine.losses.roi_pointing_loss.
    pointing_weight: float = ranged(0.0, _WEIGHT)


@dataclass
class TopKDataSettings:
    """``data``: a breast-level manifest or synthetic cohorts, and the three disjoint splits."""

    manifest: str | None = None  # breast-level CSV/JSONL; None with synthetic_train > 0
    train_split: str = "train"
    eval_split: str = "val"  # read by every evaluation during training; selects best/
    test_split: str = "test"  # read only by the eval action
    # breasts of a synthetic training cohort (when no manifest); the three counts together are
    # budgeted (see synthetic_pixel_budget)
    synthetic_train: int = ranged(0, _COUNT)
    # synthetic validation breasts (seed synthetic_seed + 1)
    synthetic_eval: int = ranged(0, _COUNT)
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
    # Share of the training rows used (pretraining-size ablation): a seeded subset stratified
    # by (cancer, BI-RADS); 1.0 keeps every row. The linear probe still fits on every row.
    train_fraction: float = ranged(1.0, low=0, low_open=True, high=1, hint="e.g. 0.33")


@dataclass
class TopKTrainSettings:
    """``train``: batches, augmentation, learning-rate share, the model to start from."""

    batch_size: int = ranged(32, low=1, high=65_536, hint="e.g. task.batch_size=32")
    report_shuffle: bool = False  # shuffle the sentence order of each report in training
    augment: bool = True
    # share of augmented view halves resampled (rotation, scale, sub-pixel shift); the rest
    # move by whole pixels only and keep fine calcifications sharp
    augment_resample_p: float = ranged(1.0, low=0, high=1, hint="e.g. 0.5")
    # each augmented breast's intensities are multiplied by a factor in [1 - i, 1 + i]
    augment_intensity: float = ranged(0.2, low=0, high=1, high_open=True, hint="e.g. 0.2")
    # the ConvNeXt backbone trains at run.lr * vision_lr_scale
    vision_lr_scale: float = ranged(1.0, low=0, high=1000, hint="e.g. 0.2")
    seed: int = ranged(0, _SEED)
    install_as: str | None = None  # registered name whose cache folder receives the final model
    # A saved model (folder or registered name, e.g. topksiglip-demo) to start from instead of a
    # new one (no lesion pretraining then); with run.epochs=0 it is evaluated as it is. The eval
    # action scores it on the test split instead of the run's best/ models.
    init_from: str | None = None


@dataclass
class TopKPretrainSettings:
    """``pretrain``: lesion patch pretraining of the backbone, then scorer pretraining."""

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


@dataclass
class TopKEvalSettings:
    """``eval``: readouts during training and in the eval action."""

    # patches at evaluation (default k)
    eval_k: int | None = ranged(None, low=1, high=65_536, hint="or none for task.k")
    # Zero-shot readouts repeated with these k in each evaluation (Tables 1-2: 15, 30, 45);
    # values above grid * grid are left out with a note. [] for none.
    eval_k_sweep: list[int] = ranged(
        [15, 30, 45], low=1, high=65_536, max_items=64, hint="e.g. [15, 30, 45]"
    )
    # eval action: resamples of the test breasts per interval
    bootstrap_resamples: int = ranged(1000, low=1, high=1_000_000, hint="e.g. 1000")
    # eval action: "test" (the report), "validation" (an analysis of the breasts best/ and the
    # recipe were chosen on; optimistic, no linear probe) or "fresh" (only the fresh cohorts
    # below; the test split stays unread), each written to its own file.
    report_split: str = "test"
    # eval action: new synthetic cohorts scored and pooled as the headline (0: none); cohort j
    # has seed fresh_cohort_seed + j, refused when a seed was used for any choice
    # (medvl_engine.evaluation.fresh_seeds). Synthetic runs only.
    fresh_cohorts: int = ranged(0, low=0, high=1000, hint="e.g. 8")
    fresh_cohort_size: int = ranged(400, low=2, high=100_000, hint="breasts per cohort, e.g. 400")
    fresh_cohort_seed: int = ranged(FRESH_SEED_START, _SEED)
    # eval action: fit the logistic-regression baseline on the training split (C chosen on
    # validation); reads the training and validation breasts.
    shallow_baseline: bool = True


@dataclass
class TopKProbeSettings:
    """``probe``: the linear probe on frozen image embeddings, in the eval action only: fitted
    on train_split, the iteration chosen on eval_split, reported on test_split (the paper's
    schedule below)."""

    linear_probe: bool = True
    probe_steps: int = ranged(20_000, _STEPS)
    probe_lr: float = ranged(4e-3, _LR)
    probe_weight_decay: float = ranged(0.01, low=0, high=10, hint="e.g. 0.01")
    probe_batch_size: int = ranged(32, low=1, high=65_536, hint="e.g. 32")
    probe_eval_every: int = ranged(500, low=1, high=1_000_000_000, hint="e.g. 500")


CONFIG_SECTIONS: Sections = {
    "model": TopKSigLIPConfig,
    "loss": TopKLossSettings,
    "data": TopKDataSettings,
    "train": TopKTrainSettings,
    "pretrain": TopKPretrainSettings,
    "eval": TopKEvalSettings,
    "probe": TopKProbeSettings,
}
"""The sections of :class:`TopKSigLIPTaskConfig`, each the fields of one dataclass."""


@dataclass
class TopKSigLIPTaskConfig(
    TopKProbeSettings,
    TopKEvalSettings,
    TopKPretrainSettings,
    TopKTrainSettings,
    TopKDataSettings,
    TopKLossSettings,
    TopKSigLIPConfig,
):
    """Model fields (see :class:`TopKSigLIPConfig`) plus loss, data, training, pretraining,
    evaluation and probe settings, one flat dataclass grouped by :data:`CONFIG_SECTIONS`."""

    SECTIONS: ClassVar[Sections] = CONFIG_SECTIONS
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
            self._check_synthetic_cohort()

    def _check_synthetic_cohort(self) -> None:
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
