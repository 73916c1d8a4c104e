"""The TopKSigLIP task of the shared training loop: data, model, batches, losses, validation.

Loss (Eq. 7): ``L = L_align + lambda_dice L_dice`` where ``L_align`` is the Sup-sigmoid loss
(Eq. 5) against ``S = tabular_similarity(attributes)`` (or the identity, or a contrastive
objective for the Table 5 ablations) and ``L_dice`` the Soft Dice between the selection mask
(Eq. 6) on the ``G x G`` grid and the rasterised ROI boxes, over the samples that have ROIs.

Data come from a breast-level manifest (:mod:`medvl_engine.data.mammo_manifest`) or, for the
demo, from synthetic cohorts written once into ``synthetic_dir``
(:mod:`medvl_engine.tasks.topksiglip.cohorts`).

Protocol: three disjoint splits. Training reads ``train_split`` (or ``synthetic_train``
breasts); every evaluation during training reads only ``eval_split`` (``synthetic_eval``
breasts), which also selects ``best/``. The test split (``test_split`` / ``synthetic_test``)
is read only by ``medvl-train topksiglip eval``
(:mod:`medvl_engine.tasks.topksiglip.run_eval`), through :meth:`TopKSigLIPTask.test_records`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from medvl_engine.data.mammo_augment import MammoAugmentConfig
from medvl_engine.data.mammo_dataset import (
    MammoDataset,
    collate_breasts,
    disk_cached_loader,
    load_breast,
)
from medvl_engine.data.mammo_manifest import MammoRecord, read_mammo_manifest_contents
from medvl_engine.errors import ConfigError
from medvl_engine.losses import (
    clip_contrastive_loss,
    roi_pointing_loss,
    soft_dice_loss,
    soft_target_contrastive_loss,
    sup_sigmoid_loss,
    tabular_similarity,
)
from medvl_engine.models.topk import selection_mask
from medvl_engine.models.topksiglip import TopKSigLIP, build_topksiglip
from medvl_engine.models.topksiglip_folder import save_topksiglip
from medvl_engine.tasks.topksiglip.cohorts import (
    shuffle_sentences,
    stratified_subset,
    synthetic_records,
)
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.pretrain import pretrain_backbone, pretrain_scorer
from medvl_engine.training.config import RunConfig
from medvl_engine.training.distributed import gather_with_grad, shard_indices
from medvl_engine.training.task import unwrap_model

__all__ = ["TopKSigLIPTask", "alignment_loss", "selection_metrics"]


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
                self.lesion_pretrain_loss = pretrain_backbone(
                    model, self._training_set(), self.config, self.progress
                )
            if self.config.scorer_pretrain_steps > 0:
                pretrain_scorer(model, self._training_set(), self.config, self.progress)
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
        """Save a model folder; the final model also goes to the cache folder of ``install_as``.

        config.json records the task settings (``"recipe": {"task": ...}``, by sections), so
        that every user path reads the model at the K it was evaluated with
        (:func:`medvl_engine.mammography.evaluated_k` finds ``eval_k`` there)."""
        from medvl_engine.training.config import config_values

        extra = {"recipe": {"task": config_values(self.config)}}
        save_topksiglip(_topksiglip_of(model), directory, extra_config=extra)
        if self.config.install_as and Path(directory) == self.out_dir / "final":
            from medvl_engine.encoders.resolve import registered_model_dir

            save_topksiglip(
                _topksiglip_of(model),
                registered_model_dir(self.config.install_as),
                extra_config=extra,
            )


def selection_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics that weigh detection and localisation together, for ``run.select_metric``.

    ``cancer_pointing_mean = (auroc_cancer + pointing_game) / 2``, present when both are
    (a model chosen on the cancer AUROC alone may point at the wrong spot).
    """
    if "auroc_cancer" in metrics and "pointing_game" in metrics:
        return {"cancer_pointing_mean": (metrics["auroc_cancer"] + metrics["pointing_game"]) / 2}
    return {}


def _topksiglip_of(model: nn.Module) -> TopKSigLIP:
    """The TopKSigLIP inside ``model`` (unwrapped from DistributedDataParallel)."""
    inner = unwrap_model(model)
    if not isinstance(inner, TopKSigLIP):
        raise TypeError(
            f"the TopKSigLIP task trains a TopKSigLIP model, got {type(inner).__name__}"
        )
    return inner
