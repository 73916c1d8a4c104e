"""Zero-shot and validation metrics of the LIMIT task: the evaluation half of
:class:`~medvl_engine.tasks.limit.training_task.LimitTask`.

Validation bags (each val slide with N negatives from the training slides) give the loss and
retrieval top-1; the labelled val slides give the organ-restricted zero-shot balanced accuracy
(Eq. 5, :mod:`medvl_engine.tasks.limit.evaluation`). Under DDP each rank scores its share
(:meth:`LimitValidation.evaluate_shard`) and :meth:`LimitValidation.merge_evaluation` joins
the parts into what one process computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from medvl_engine.errors import ConfigError
from medvl_engine.models.limit import LimitModel
from medvl_engine.tasks.limit.evaluation import (
    SlideExample,
    score_zero_shot,
    template_synonym_robustness,
    zero_shot_predictions,
    zero_shot_slides,
)
from medvl_engine.tasks.limit.records import label_of
from medvl_engine.training.task import unwrap_model

if TYPE_CHECKING:
    from medvl_engine.data.manifest import SlideRecord
    from medvl_engine.features.bags import BagCache
    from medvl_engine.tasks.limit.config import LimitTaskConfig

__all__ = ["LimitValidation", "limit_model_of"]


def limit_model_of(model: nn.Module) -> LimitModel:
    """The LimitModel inside ``model`` (unwrapped from DistributedDataParallel)."""
    inner = unwrap_model(model)
    if not isinstance(inner, LimitModel):
        raise TypeError(f"the LIMIT task trains a LimitModel, got {type(inner).__name__}")
    return inner


class LimitValidation:
    """Validation and zero-shot scoring over the splits of a LIMIT task.

    A base of :class:`~medvl_engine.tasks.limit.training_task.LimitTask`, which sets the
    attributes below and defines :meth:`make_batch` and :meth:`compute_losses`.
    """

    config: LimitTaskConfig
    seed: int
    splits: dict[str, list[SlideRecord]]
    cache: BagCache

    def make_batch(
        self, records: list[SlideRecord], patch_seed: int | None = None
    ) -> dict[str, torch.Tensor]:
        """One bag as tensors (defined by the task)."""
        raise NotImplementedError

    def compute_losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The loss terms of one bag (defined by the task)."""
        raise NotImplementedError

    def _validation_bags(self) -> list[list[SlideRecord]]:
        """Each val slide with N negatives from the training slides (fixed by the seed)."""
        train = self.splits["train"]
        bags = []
        generator = torch.Generator().manual_seed(self.seed + 1)
        for anchor in self.splits["val"]:
            same = [r for r in train if r.organ == anchor.organ]
            if self.config.negatives == "random" or len(same) < self.config.num_negatives:
                same = train
            order = torch.randperm(len(same), generator=generator)[: self.config.num_negatives]
            bags.append([anchor, *(same[int(i)] for i in order)])
        return bags

    def _zero_shot_inputs(self, split: str) -> tuple[list[Any], dict[str, list[str]]]:
        """The labelled slides of ``split`` and the classes of each organ (all splits)."""
        labelled = [r for r in self.splits[split] if r.label]
        slides = [
            SlideExample(self.cache.get(r.features), r.organ, label_of(r), r.slide_id)
            for r in labelled
        ]
        return slides, self._classes_by_organ()

    def _classes_by_organ(self) -> dict[str, list[str]]:
        """The classes of each organ over the labelled slides of all splits."""
        classes: dict[str, set[str]] = {}
        for record in (r for records in self.splits.values() for r in records if r.label):
            classes.setdefault(record.organ, set()).add(label_of(record))
        return {organ: sorted(names) for organ, names in sorted(classes.items())}

    def eval_protocol(self) -> dict[str, Any]:
        """The paper's evaluation protocol as the task config sets it (Sec. 4.3-4.5, App. A.2):
        overall figure, grouping of single-label organs, table rows, random-pooling trials
        and patches, and the seed; passed on to :func:`zero_shot_slides`."""
        config = self.config
        return {
            "overall": config.eval_overall,
            "group_single_label": config.eval_group_single_label,
            "report_organs": config.eval_report_organs,
            "random_trials": config.eval_random_trials,
            "random_patches": config.eval_random_patches,
            "seed": self.seed,
        }

    def zero_shot(self, model: LimitModel, split: str = "val", **options: Any) -> dict[str, Any]:
        """Organ-restricted zero-shot slide classification of labelled slides of ``split``."""
        slides, classes = self._zero_shot_inputs(split)
        if not slides:
            return {}
        settings = {
            "template": self.config.eval_template,
            "pooling": self.config.eval_pooling,
            "k": self.config.eval_topk,
            "trials": self.config.eval_bootstrap,
            **self.eval_protocol(),
            **options,
        }
        return zero_shot_slides(
            slides, classes, lambda texts: model.encode_texts(texts), model.tau_attn, **settings
        )

    def robustness(self, model: LimitModel, split: str = "val") -> dict[str, Any]:
        """Zero-shot accuracy over every prompt template x cancer synonym pair (Fig. 3)."""
        from medvl_engine.data.limit_prompt_variants import CANCER_SYNONYMS, ROBUSTNESS_TEMPLATES

        slides, classes = self._zero_shot_inputs(split)
        if not slides:
            return {}
        config = self.config
        templates = config.eval_robustness_templates or list(ROBUSTNESS_TEMPLATES)
        synonyms = config.eval_robustness_synonyms or list(CANCER_SYNONYMS)
        for template in templates:
            try:
                template.format(**{"tissue": "breast", "class": "tumor"})
            except (KeyError, IndexError, ValueError):
                raise ConfigError(
                    f"task.eval_robustness_templates has {template!r}, which is not a prompt "
                    "pattern; use only the fields {tissue} and {class}."
                ) from None
        protocol = {key: v for key, v in self.eval_protocol().items() if key != "random_trials"}
        return template_synonym_robustness(
            slides,
            classes,
            lambda texts: model.encode_texts(texts),
            model.tau_attn,
            templates=templates,
            synonyms=synonyms,
            pooling="report_guided",
            **protocol,
        )

    def evaluate_shard(self, model: nn.Module, rank: int, world_size: int) -> dict[str, Any]:
        """This rank's share (``rank::world_size``) of the validation set, as small plain data.

        ``{"bags": [(bag index, loss, retrieval top-1)], "rows": [(slide index, [prediction
        row per trial])]}``: the loss terms of the validation bags (:meth:`_validation_bags`)
        and the zero-shot prediction rows of the labelled validation slides
        (:func:`~medvl_engine.tasks.limit.evaluation.zero_shot_predictions`, random patches
        seeded per slide), so :meth:`merge_evaluation` of all ranks' parts equals one process.
        The test split is read only by ``medvl-train limit eval``.
        """
        limit = limit_model_of(model)
        model = unwrap_model(model)
        device = next(model.parameters()).device
        bags = self._validation_bags()
        bag_terms = []
        for index in range(rank, len(bags), world_size):
            batch = {k: v.to(device) for k, v in self.make_batch(bags[index]).items()}
            terms = self.compute_losses(model, batch)
            bag_terms.append((index, float(terms["loss"]), float(terms["retrieval_top1"])))
        labelled = [r for r in self.splits["val"] if r.label]
        mine = list(range(rank, len(labelled), world_size))
        slides = [
            SlideExample(
                self.cache.get(labelled[i].features),
                labelled[i].organ,
                label_of(labelled[i]),
                labelled[i].slide_id,
            )
            for i in mine
        ]
        rows: list[tuple[int, list[tuple[Any, ...]]]] = []
        if slides:
            config = self.config
            protocol = self.eval_protocol()
            trial_rows = zero_shot_predictions(
                slides,
                self._classes_by_organ(),
                lambda texts: limit.encode_texts(texts),
                limit.tau_attn,
                template=config.eval_template,
                pooling=config.eval_pooling,
                k=config.eval_topk,
                seed=protocol["seed"],
                group_single_label=protocol["group_single_label"],
                random_trials=protocol["random_trials"],
                random_patches=protocol["random_patches"],
                slide_seeds=mine,
            )
            rows = [
                (index, [trial[position] for trial in trial_rows])
                for position, index in enumerate(mine)
            ]
        return {"bags": bag_terms, "rows": rows}

    def merge_evaluation(self, parts: list[Any]) -> dict[str, float]:
        """Validation metrics over every rank's part (:meth:`evaluate_shard`): mean loss and
        retrieval top-1 over the validation bags, and the zero-shot overall balanced accuracy
        (no bootstrap) over all labelled validation slides."""
        parts = [part for part in parts if part]
        bag_terms = sorted(term for part in parts for term in part["bags"])
        metrics: dict[str, float] = {}
        if bag_terms:
            metrics["val_loss"] = sum(loss for _, loss, _ in bag_terms) / len(bag_terms)
            metrics["val_retrieval_top1"] = sum(hit for _, _, hit in bag_terms) / len(bag_terms)
        slide_rows = sorted((row for part in parts for row in part["rows"]), key=lambda r: r[0])
        if slide_rows:
            protocol = self.eval_protocol()
            trials = len(slide_rows[0][1])
            trial_rows = [[rows[trial] for _, rows in slide_rows] for trial in range(trials)]
            result = score_zero_shot(
                trial_rows,
                self._classes_by_organ(),
                trials=0,
                seed=protocol["seed"],
                overall=protocol["overall"],
                group_single_label=protocol["group_single_label"],
                report_organs=protocol["report_organs"],
            )
            metrics["val_balanced_accuracy"] = result["overall"]["balanced_accuracy"]
        self.last_metrics = metrics
        return metrics

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation metrics in one process (:meth:`evaluate_shard` of the whole set)."""
        return self.merge_evaluation([self.evaluate_shard(model, 0, 1)])
