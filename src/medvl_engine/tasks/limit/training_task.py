"""The LIMIT training task for the shared loop (``medvl-train limit``).

A training example is one bag: an anchor slide with its report plus N negative
slide-report pairs (same organ by default). The model pools every slide of the bag
against every report (report-guided attention, Eq. 1-2) and the loss is the
difficulty-weighted InfoNCE of Eq. 3-4 (or plain InfoNCE / SigLIT for the ablations).
Only the text tower (and its projection) is trained; patch features come from feature
stores and are never recomputed.

The validation half of the task (zero-shot and validation metrics) is
:class:`~medvl_engine.tasks.limit.validation.LimitValidation`, which :class:`LimitTask` extends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from medvl_engine.data import OrganStratifiedSampler, read_manifest
from medvl_engine.errors import ConfigError, DataError
from medvl_engine.features.bags import BagCache, collate_bags, sample_patch_rows
from medvl_engine.losses import siglit_loss, weighted_infonce
from medvl_engine.models.limit import LimitModel, load_limit_model, save_limit_text_tower
from medvl_engine.tasks.limit.config import LimitTaskConfig
from medvl_engine.tasks.limit.records import report_filter, split_records
from medvl_engine.tasks.limit.tower import (
    bridge_map,
    load_trainable_text_tower,
    make_conch_text_loadable,
    projection_to,
)
from medvl_engine.tasks.limit.validation import LimitValidation, limit_model_of
from medvl_engine.training.config import RunConfig
from medvl_engine.training.distributed import shard_indices
from medvl_engine.training.task import unwrap_model

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from medvl_engine.data.manifest import SlideRecord

__all__ = ["LimitTask"]


class LimitTask(LimitValidation):
    """LIMIT as a :class:`medvl_engine.training.Task` (see the module docstring)."""

    name = "limit"

    def __init__(self, config: LimitTaskConfig, run_config: RunConfig | None = None) -> None:
        self.config = config
        self.seed = run_config.seed if run_config is not None else 0
        if config.tau_attn <= 0 or config.tau_nce <= 0:
            raise ConfigError("task.tau_attn and task.tau_nce must be positive.")
        if config.eval_random_trials < 1 or config.eval_random_patches < 1:
            raise ConfigError(
                "task.eval_random_trials and task.eval_random_patches must be at least 1."
            )
        if config.max_patches is not None and config.max_patches < 1:
            raise ConfigError("task.max_patches must be at least 1, or null for every patch.")
        if config.eval_report_organs is not None and config.eval_report_organs < 0:
            raise ConfigError("task.eval_report_organs must be 0 or more, or null for all organs.")
        manifest = self._manifest_path()
        records = read_manifest(manifest)
        clean = report_filter(config.report_filter)
        if clean is not None:
            records = [dataclasses.replace(r, report=clean(r.report)) for r in records]
        empty = [r.slide_id for r in records if not r.report.strip()]
        if empty:
            raise DataError(
                f"reports of {empty[:5]} are empty after filtering; check them or set "
                "task.report_filter=none."
            )
        self.splits = split_records(records, config.val_fraction, self.seed)
        self.cache = BagCache(config.feature_cache)
        self.feature_dim = self.cache.shape(self.splits["train"][0].features)[1]
        self.sampler = OrganStratifiedSampler(
            [r.organ for r in self.splits["train"]],
            config.num_negatives,
            config.negatives,
            self.seed,
        )
        self.tokenizer: PreTrainedTokenizerBase | None = None

    def _manifest_path(self) -> Path:
        if self.config.data == "synthetic":
            from medvl_engine.tasks.limit.synthetic_bags import make_synthetic_bags

            return make_synthetic_bags(
                self.config.synthetic_dir,
                n_slides=self.config.synthetic_slides,
                seed=self.config.synthetic_seed,
                encoder_name=self.config.vision_encoder,
            )
        if not self.config.manifest:
            raise ConfigError("task.manifest is empty; give the slide manifest (CSV or JSONL).")
        return Path(self.config.manifest)

    # -- model ---------------------------------------------------------------------------
    def build_model(self) -> LimitModel:
        config = self.config
        tower = load_trainable_text_tower(
            config.text_model, config.text_pooling, config.max_text_length
        )
        target = config.projection_dim or self.feature_dim
        if target != self.feature_dim:
            raise ConfigError(
                f"task.projection_dim={target} differs from the feature width {self.feature_dim}; "
                "the projection must map text to the vision dim."
            )
        if tower.output_dim != target:
            tower.projection = projection_to(tower, target, bridge_map(config))
        elif config.bridge_init != "random":
            raise ConfigError(
                f"task.bridge_init={config.bridge_init} maps the text tower to the features, "
                f"but both are already {target} wide; set task.bridge_init=random."
            )
        if tower.pooling != "pooler" and hasattr(tower.text, "pooler") and tower.text.pooler:
            tower.text.pooler.requires_grad_(False)  # unused by mean/cls pooling
        model = LimitModel(tower, config.tau_attn, True, config.vision_encoder)
        if config.loss != "siglit":
            model.logit_scale.requires_grad_(False)
            model.logit_bias.requires_grad_(False)
        if config.finetune == "lora":
            from medvl_engine.encoders.lora import add_lora

            add_lora(tower, config.lora_rank, config.lora_alpha, config.lora_dropout)
        self.tokenizer = tower.tokenizer
        return model

    def load_saved(self, folder: Path) -> LimitModel:
        """The LIMIT model saved in ``folder`` (a CONCH text tower inside needs ``conch``)."""
        make_conch_text_loadable(folder)
        return load_limit_model(folder)

    def save_pretrained(self, model: nn.Module, directory: Path) -> None:
        from medvl_engine.encoders.lora import merged_copy

        save_limit_text_tower(limit_model_of(merged_copy(unwrap_model(model)).cpu()), directory)

    # -- data ----------------------------------------------------------------------------
    def _my_bags(self, epoch: int, rank: int, world_size: int) -> list[list[int]]:
        bags = self.sampler.bags(epoch)
        return [bags[i] for i in shard_indices(len(bags), rank, world_size)]

    def num_batches(self, epoch: int, rank: int, world_size: int) -> int:
        return -(-len(self.sampler) // world_size)

    def _sampled_patches(self, records: list[SlideRecord], patch_seed: int) -> list[torch.Tensor]:
        """``task.max_patches`` rows of each slide ``[S_k, D]`` (increasing row order), drawn by
        one generator seeded with ``patch_seed`` through the slides in bag order."""
        generator = torch.Generator().manual_seed(patch_seed)
        sample = int(self.config.max_patches or 0)
        bags = []
        for record in records:
            count = self.cache.shape(record.features)[0]
            rows = sample_patch_rows(count, sample, generator)
            bags.append(self.cache.rows(record.features, rows))
        return bags

    def patch_seed(self, epoch: int, bag_index: int) -> int:
        """The seed of the patch sample of bag ``bag_index`` (of all ranks) in ``epoch``."""
        return (self.seed * 1_000_003 + epoch) * 1_000_003 + bag_index

    def make_batch(
        self, records: list[SlideRecord], patch_seed: int | None = None
    ) -> dict[str, torch.Tensor]:
        """One bag: features ``[K, M, D]``, mask ``[K, M]``, report tokens ``[K, L]``.

        With ``patch_seed`` and ``task.max_patches`` each slide keeps a random sample of its
        patches (:meth:`_sampled_patches`); otherwise every patch.
        """
        if self.tokenizer is None:
            raise RuntimeError("build_model() must run before batches are made")
        if patch_seed is not None and self.config.max_patches is not None:
            bags = self._sampled_patches(records, patch_seed)
        else:
            bags = [self.cache.get(r.features) for r in records]
        features, mask = collate_bags(bags)
        tokens = self.tokenizer(
            [r.report for r in records],
            padding=True,
            truncation=True,
            max_length=self.config.max_text_length,
            return_tensors="pt",
        )
        return {
            "features": features,
            "mask": mask,
            "input_ids": tokens["input_ids"],
            "attention_mask": tokens["attention_mask"],
        }

    def train_batches(
        self, epoch: int, rank: int, world_size: int, start: int = 0
    ) -> Iterator[dict[str, torch.Tensor]]:
        for index in range(start, len(self._my_bags(epoch, rank, world_size))):
            yield self.batch_at(epoch, rank, world_size, index)

    def batch_at(
        self, epoch: int, rank: int, world_size: int, index: int
    ) -> dict[str, torch.Tensor]:
        """Bag ``index`` of ``rank`` in ``epoch`` as :meth:`make_batch` builds it: a pure function
        of its arguments and the data, so DataLoader workers can call it in any order."""
        key = (epoch, rank, world_size)
        memo = getattr(self, "_bags_memo", None)  # the epoch's bags, drawn once per epoch
        if memo is None or memo[0] != key:
            memo = self._bags_memo = (key, self._my_bags(epoch, rank, world_size))
        train = self.splits["train"]
        bag_index = shard_indices(len(self.sampler), rank, world_size)[index]  # one per slide
        return self.make_batch(
            [train[i] for i in memo[1][index]], patch_seed=self.patch_seed(epoch, bag_index)
        )

    # -- loss ----------------------------------------------------------------------------
    def compute_losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Weighted InfoNCE (or SigLIT) over one bag; deliberately not gathered under DDP.

        The paper's batch is one bag (batch size 1: an anchor slide and N same-organ
        negatives), and its loss is normalised within the bag. Pairs across ranks are not
        part of that objective: another rank's bags hold other organs (no longer hard
        negatives), and scoring slide i against report j needs slide i's patch features
        pooled by report j (report-guided attention), which would mean shipping whole bags
        of patch features between ranks. So each rank scores its own bags and DDP's mean of
        gradients over ranks equals the paper's loss averaged over W bags, exactly as one
        process with ``run.grad_accum = W`` computes it.
        """
        similarity, reports = model(
            batch["features"], batch["mask"], batch["input_ids"], batch["attention_mask"]
        )
        if self.config.loss == "siglit":
            inner = limit_model_of(model)
            labels = torch.eye(len(similarity), dtype=torch.bool, device=similarity.device)
            loss = siglit_loss(similarity, labels, inner.logit_scale.exp(), inner.logit_bias)
        else:
            weighted = self.config.loss == "weighted_infonce"
            loss = weighted_infonce(similarity, reports, self.config.tau_nce, weighted)
        target = torch.arange(len(similarity), device=similarity.device)
        retrieval = (similarity.argmax(dim=1) == target).float().mean()
        return {"loss": loss, "retrieval_top1": retrieval}
