"""The settings of the LIMIT task: the ``task`` section of ``train/limit_*.yaml``.

One flat dataclass (``config.tau_nce``) whose fields are grouped in four sections
(:data:`LimitTaskConfig.SECTIONS`), so the ``task`` mapping may be written flat, as before::

    task: {manifest: cohort.jsonl, tau_nce: 0.07, eval_topk: 10}

or by sections (or mixed; a setting given twice is refused)::

    task:
      data: {manifest: cohort.jsonl}
      loss: {tau_nce: 0.07}
      eval: {eval_topk: 10}

``data`` and ``loss`` are also settings: a mapping under them is the section, a plain value
the setting (``loss: infonce``). Overrides may name the section: ``task.loss.tau_nce=0.1``.
Every field is checked against its type and range on load (:mod:`medvl_engine.training.config`);
:meth:`LimitTaskConfig.validate` adds the checks that need the file system or the user's consent.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from medvl_engine.common.config_ranges import Range, ranged
from medvl_engine.evaluation.fresh_seeds import FRESH_SEED_START
from medvl_engine.training.config import (
    MAX_SEED,
    Sections,
    check_input_file,
    check_output_folder,
)

__all__ = ["LimitTaskConfig"]

_SEED = Range(low=0, high=MAX_SEED, hint="give a seed from 0 to 4294967295")
_TAU = Range(low=0, low_open=True, high=100, hint="e.g. 0.07")


@dataclasses.dataclass
class LimitTaskConfig:
    """Settings of the LIMIT task (the ``task`` section of train/limit_*.yaml)."""

    # The YAML sections of ``task`` (see the module docstring); each field is in one.
    SECTIONS: ClassVar[Sections] = {
        # the slide-report pairs: cohort, report filter, splits, bags and their patches, and the
        # fresh synthetic cohorts `medvl-train limit eval` scores
        "data": (
            "data",
            "manifest",
            "synthetic_dir",
            "synthetic_slides",
            "synthetic_seed",
            "report_filter",
            "val_fraction",
            "num_negatives",
            "negatives",
            "feature_cache",
            "max_patches",
            "fresh_cohorts",
            "fresh_cohort_size",
            "fresh_cohort_seed",
        ),
        # the text tower, its projection to the frozen features, attention and fine-tuning
        "model": (
            "text_model",
            "text_pooling",
            "max_text_length",
            "vision_encoder",
            "projection_dim",
            "bridge_init",
            "bridge_file",
            "bridge_source_features",
            "bridge_target_features",
            "bridge_ridge",
            "tau_attn",
            "finetune",
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
        ),
        # the objective (Eq. 3-4 or the ablations) and its temperature
        "loss": ("loss", "tau_nce"),
        # the zero-shot protocol of validation and `medvl-train limit eval`
        "eval": (
            "eval_pooling",
            "eval_topk",
            "eval_template",
            "eval_bootstrap",
            "eval_overall",
            "eval_group_single_label",
            "eval_report_organs",
            "eval_random_trials",
            "eval_random_patches",
            "eval_robustness",
            "eval_robustness_templates",
            "eval_robustness_synonyms",
        ),
    }

    data: Literal["manifest", "synthetic"] = "manifest"
    manifest: str = ""
    synthetic_dir: str = "runs/limit-demo/data"
    synthetic_slides: int = ranged(120, low=1, high=20_000, hint="e.g. task.synthetic_slides=120")
    synthetic_seed: int = ranged(0, _SEED)
    text_model: str = "medvl-demo"  # registry name, text-tower folder, or transformers folder
    text_pooling: Literal["mean", "cls", "pooler"] = "mean"  # for transformers folders
    max_text_length: int = ranged(128, low=1, high=8192, hint="e.g. task.max_text_length=128")
    vision_encoder: str = "medvl-demo"  # the frozen encoder that made the features
    # None: add a projection only if widths differ
    projection_dim: int | None = ranged(None, low=1, high=65_536, hint="or none")
    # Initial map of a new projection: random, or least squares from stores of the same
    # patches embedded in the tower's space (source) and the features' space (target).
    # "file": the map `medvl-train limit bridge` wrote to task.bridge_file.
    bridge_init: Literal["random", "least_squares", "file"] = "random"
    bridge_file: str | None = (
        None  # default for the bridge action: <run.out_dir>/bridge.safetensors
    )
    bridge_source_features: list[str] | None = None  # e.g. CONCH v1 image embeddings [N, 512]
    bridge_target_features: list[str] | None = None  # e.g. CONCH v1.5 features [N, 768]
    bridge_ridge: float = ranged(1e-4, low=0, high=1e6, hint="e.g. task.bridge_ridge=1e-4")
    tau_attn: float = ranged(0.05, _TAU)
    tau_nce: float = ranged(0.07, _TAU)
    loss: Literal["weighted_infonce", "infonce", "siglit"] = "weighted_infonce"
    num_negatives: int = ranged(4, low=1, high=4096, hint="e.g. task.num_negatives=4")
    negatives: Literal["same_organ", "random"] = "same_organ"
    finetune: Literal["full", "lora"] = "full"
    lora_rank: int = ranged(8, low=1, high=4096, hint="e.g. task.lora_rank=8")
    lora_alpha: float = ranged(16.0, low=0, low_open=True, high=1e6, hint="e.g. 16")
    lora_dropout: float = ranged(0.0, low=0, high=1, high_open=True, hint="e.g. 0.1")
    report_filter: str = "rules"  # rules | none | "path/to/file.py:function" | entry point name
    # held out of train when the manifest has no val rows
    val_fraction: float = ranged(0.01, low=0, high=1, high_open=True, hint="e.g. 0.01")
    eval_pooling: Literal["report_guided", "mean", "random", "topk"] = "report_guided"
    eval_topk: int = ranged(10, low=1, high=1_000_000, hint="e.g. task.eval_topk=10")
    eval_template: str = "{tissue} {class}"
    eval_bootstrap: int = ranged(1000, low=0, high=1_000_000, hint="e.g. 1000")
    # The LIMIT paper's evaluation protocol (Sec. 4.3-4.5, App. A.2); defaults are the paper's.
    eval_overall: Literal["organ_mean", "pooled"] = "organ_mean"  # mean of per-organ accuracy
    eval_group_single_label: bool = True  # organs with one class form one category
    # largest organs as rows, the rest as "other"; None: all
    eval_report_organs: int | None = ranged(7, low=0, high=1_000_000, hint="or none for all")
    # random pooling: mean (and std) over seeded trials
    eval_random_trials: int = ranged(10, low=1, high=100_000, hint="e.g. 10")
    # patches per random draw (the paper does not state it)
    eval_random_patches: int = ranged(10, low=1, high=1_000_000, hint="e.g. 10")
    eval_robustness: bool = True  # every template x cancer synonym pair (Fig. 3)
    eval_robustness_templates: list[str] | None = None  # None: data/limit_prompt_variants.py
    eval_robustness_synonyms: list[str] | None = None  # None: the paper's five cancer terms
    # `medvl-train limit eval` also scores this many new synthetic cohorts (seeds from
    # fresh_cohort_seed on, never used for training, validation, test or a choice) and pools them
    fresh_cohorts: int = ranged(0, low=0, high=1000, hint="e.g. task.fresh_cohorts=5")
    fresh_cohort_size: int = ranged(120, low=2, high=20_000, hint="slides per fresh cohort")
    fresh_cohort_seed: int = ranged(FRESH_SEED_START, _SEED)
    feature_cache: int = ranged(256, low=1, high=1_000_000, hint="bags kept in memory, e.g. 256")
    # Patches per slide of a training bag: None keeps every patch; N draws N patches per slide
    # and step, uniformly without replacement (seeded by run.seed, epoch and bag), and reads
    # only those rows of a .h5 bag. Validation and zero-shot always use every patch.
    max_patches: int | None = ranged(
        None, low=1, high=1_000_000_000, hint="or null for every patch"
    )

    def validate(self) -> None:
        """Checks run on load, before any data are made: the report filter may run code only
        with the user's consent (``medvl-train --allow-code``); a synthetic cohort's folder
        must be one that can be created, a manifest a regular file that exists."""
        from medvl_engine.data.report_filter_loader import check_report_filter_consent

        check_report_filter_consent(self.report_filter)
        if self.data == "synthetic":
            check_output_folder(self.synthetic_dir, "task.synthetic_dir")
        elif self.manifest:
            check_input_file(self.manifest, "task.manifest", "the slide-level manifest (CSV/JSONL)")
