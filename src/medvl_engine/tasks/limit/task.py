"""The LIMIT training task for the shared loop (``medvl-train limit``).

A training example is one bag: an anchor slide with its report plus N negative
slide-report pairs (same organ by default). The model pools every slide of the bag
against every report (report-guided attention, Eq. 1-2) and the loss is the
difficulty-weighted InfoNCE of Eq. 3-4 (or plain InfoNCE / SigLIT for the ablations).
Only the text tower (and its projection) is trained; patch features come from feature
stores and are never recomputed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

from medvl_engine.common.config_ranges import Range, ranged
from medvl_engine.data import (
    BagCache,
    OrganStratifiedSampler,
    SlideRecord,
    collate_bags,
    read_manifest,
)
from medvl_engine.data.bags import sample_patch_rows
from medvl_engine.errors import ConfigError, DataError
from medvl_engine.losses import siglit_loss, weighted_infonce
from medvl_engine.models.limit import LimitModel, load_limit_model, save_limit_text_tower
from medvl_engine.training.config import (
    MAX_SEED,
    RunConfig,
    check_input_file,
    check_output_folder,
)
from medvl_engine.training.distributed import shard_indices
from medvl_engine.training.task import unwrap_model

if TYPE_CHECKING:
    import zarr
    from transformers import PreTrainedTokenizerBase

    from medvl_engine.data.manifest import SlideRecord
    from medvl_engine.encoders import TextTower

__all__ = [
    "ACTIONS",
    "CONFIG_CLASS",
    "LimitTaskConfig",
    "LimitTask",
    "build_task",
    "load_trainable_text_tower",
    "report",
]


_SEED = Range(low=0, high=MAX_SEED, hint="give a seed from 0 to 4294967295")
_TAU = Range(low=0, low_open=True, high=100, hint="e.g. 0.07")


@dataclasses.dataclass
class LimitTaskConfig:
    """Settings of the LIMIT task (the ``task`` section of train/limit_*.yaml)."""

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


CONFIG_CLASS = LimitTaskConfig

_TOWER_FOLDER_TYPES = ("medvl-text-tower", "medvl-demo")


def _make_conch_text_loadable(folder: Path) -> None:
    """Register the CONCH text model with transformers when the folder's text tower is one
    (needs ``conch``, and says so at once when it is missing)."""
    from medvl_engine.encoders.conch import require_conch
    from medvl_engine.encoders.folder_checks import read_config

    config = read_config(folder)
    if (config.get("text_config") or {}).get("model_type") == "medvl-conch-text":
        from medvl_engine.encoders.conch_text import register_conch_text

        require_conch(f"The CONCH text tower in {folder}")
        register_conch_text()


def load_trainable_text_tower(spec: str, pooling: str = "mean", max_length: int = 128) -> TextTower:
    """A trainable :class:`medvl_engine.encoders.TextTower` from a name or a folder.

    spec: a registry name whose encoder has a text tower (``medvl-demo``, ``conch-v1``), a
    CONCH v1 checkpoint (``pytorch_model.bin`` or its folder), a "medvl-text-tower" /
    "medvl-demo" folder (e.g. a previous LIMIT run, CONCH-based ones included), or a
    transformers text model folder (BERT-like or CLIP; ``pooling`` applies to those).
    CONCH towers need the ``conch`` package and say so at once when it is missing.
    """
    from medvl_engine.encoders import TextTower, available_encoders, load_encoder
    from medvl_engine.encoders.conch import require_conch
    from medvl_engine.encoders.resolve import model_kind_on_disk

    folder = Path(spec).expanduser()
    registry = {entry.name: entry for entry in available_encoders()}
    if spec in registry:
        if registry[spec].model_type == "conch-v1":
            require_conch(f"task.text_model={spec}")
        tower: TextTower | None = getattr(load_encoder(spec), "text_tower", None)
        if tower is None:
            raise ConfigError(
                f"encoder {spec!r} has no trainable text tower in medvl; give a text model folder."
            )
        return tower.train()
    model_type = model_kind_on_disk(folder) if folder.exists() else None
    if model_type == "conch-v1" and not (folder / "config.json").is_file():
        require_conch(f"task.text_model={spec} (a CONCH checkpoint)")
        conch_tower: TextTower | None = getattr(
            load_encoder(folder, model_type="conch-v1"), "text_tower", None
        )
        if conch_tower is None:
            raise ConfigError(
                f"encoder {spec!r} has no trainable text tower in medvl; give a text model folder."
            )
        return conch_tower.train()
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"text model {spec!r} is neither a registered encoder nor a folder with config.json; "
            "set task.text_model to medvl-demo, conch-v1 or a model folder."
        )
    _make_conch_text_loadable(folder)
    if model_type in _TOWER_FOLDER_TYPES:
        return load_limit_model(folder).text_tower.train()
    from medvl_engine.common.hf_classes import AutoModel, AutoTokenizer, CLIPTextModel
    from medvl_engine.encoders.folder_checks import (
        WEIGHTS_NAME,
        check_model_folder,
        check_safetensors,
        folder_errors,
    )
    from medvl_engine.encoders.folder_checks import load_tokenizer as checked_tokenizer

    check_model_folder(folder, needs_tokenizer=True)  # no code, no pickles, a vocabulary
    check_safetensors(folder / WEIGHTS_NAME)
    tokenizer = checked_tokenizer(
        folder,
        lambda: AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        ),
    )
    with folder_errors(folder, "text model settings and weights"):
        if model_type == "clip":
            backbone = CLIPTextModel.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
            )
            pooling = "pooler"
        else:
            backbone = AutoModel.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
            )
    return TextTower(backbone, tokenizer, pooling=pooling, max_length=max_length).train()


def _projection_to(tower: TextTower, width: int, bridge: torch.Tensor | None = None) -> nn.Linear:
    """A linear map from the tower's pooled output to ``width`` (the vision dim).

    Without a projection: a new ``Linear(E, width)``. With one to a different width
    (e.g. CONCH v1 text 512 -> CONCH v1.5 patch features 768): a new ``Linear(512, width)``
    composed with it into one layer, ``W = W_new W_old``, ``b = W_new b_old``, so the
    initial tower equals "old projection, then new linear map". ``bridge`` ``[512, width]``
    (from :mod:`medvl_engine.tasks.limit.bridge`) sets ``W_new = bridge^T`` instead of a
    random init.
    """
    old = tower.projection
    source_dim = int(tower.text.config.hidden_size) if old is None else old.out_features
    extra = nn.Linear(source_dim, width, bias=False)
    if bridge is not None:
        if tuple(bridge.shape) != (source_dim, width):
            raise ConfigError(
                f"the bridge map has shape {tuple(bridge.shape)} but the text tower needs "
                f"({source_dim}, {width}); give stores of the tower's own embeddings "
                "(task.bridge_source_features) and of the training features "
                "(task.bridge_target_features)."
            )
        with torch.no_grad():
            extra.weight.copy_(bridge.T)
    if old is None:
        return extra
    merged = nn.Linear(old.in_features, width, bias=old.bias is not None)
    with torch.no_grad():
        merged.weight.copy_(extra.weight @ old.weight)
        if old.bias is not None:
            merged.bias.copy_(extra.weight @ old.bias)
    return merged


def _bridge_map(config: LimitTaskConfig) -> torch.Tensor | None:
    """The least-squares bridge ``task.bridge_init`` asks for, or None for a random map."""
    if config.bridge_init == "random":
        return None
    if config.bridge_init == "file":
        from medvl_engine.tasks.limit.bridge import read_bridge_file

        if not config.bridge_file:
            raise ConfigError(
                "task.bridge_init=file needs task.bridge_file, the map written by "
                "`medvl-train limit bridge`."
            )
        bridge, metadata = read_bridge_file(config.bridge_file)
        print(
            f"limit: bridge map from {config.bridge_file} ({metadata.get('patches', '?')} patches)",
            flush=True,
        )
        return bridge
    from medvl_engine.tasks.limit.bridge import bridge_from_stores

    return bridge_from_stores(
        config.bridge_source_features or [],
        config.bridge_target_features or [],
        config.bridge_ridge,
    )


def _report_filter(spec: str) -> Callable[[str], str] | None:
    """The filter ``task.report_filter`` names; prints one line saying what will run.

    ``rules`` (the rule-based filter), ``none``, ``path/to/file.py:function`` (a function of
    the user's own file, e.g. a local LLM wrapped by :func:`medvl_engine.data.llm_report_filter`)
    or an entry point of the group ``medvl.report_filters``; functions of Python itself
    (``os:system``) or of other modules are refused
    (see :mod:`medvl_engine.data.report_filter_loader`).
    """
    from medvl_engine.data.report_filter_loader import resolve_report_filter

    resolved = resolve_report_filter(spec)
    if resolved.function is not None and spec.strip() != "rules":
        print(f"limit: report filter: {resolved.description}", flush=True)
    return resolved.function


def _split_records(
    records: list[SlideRecord], val_fraction: float, seed: int
) -> dict[str, list[SlideRecord]]:
    splits = {name: [r for r in records if r.split == name] for name in ("train", "val", "test")}
    if not splits["val"] and val_fraction > 0 and len(splits["train"]) > 1:
        generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(splits["train"]), generator=generator).tolist()
        count = max(1, round(val_fraction * len(order)))
        held = set(order[:count])
        splits["val"] = [r for i, r in enumerate(splits["train"]) if i in held]
        splits["train"] = [r for i, r in enumerate(splits["train"]) if i not in held]
    if not splits["train"]:
        raise DataError("the manifest has no training slides (split = train); add some.")
    return splits


class LimitTask:
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
        report_filter = _report_filter(config.report_filter)
        if report_filter is not None:
            records = [dataclasses.replace(r, report=report_filter(r.report)) for r in records]
        empty = [r.slide_id for r in records if not r.report.strip()]
        if empty:
            raise DataError(
                f"reports of {empty[:5]} are empty after filtering; check them or set "
                "task.report_filter=none."
            )
        self.splits = _split_records(records, config.val_fraction, self.seed)
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
            tower.projection = _projection_to(tower, target, _bridge_map(config))
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
        _make_conch_text_loadable(folder)
        return load_limit_model(folder)

    def save_pretrained(self, model: nn.Module, directory: Path) -> None:
        from medvl_engine.encoders.lora import merged_copy

        save_limit_text_tower(_limit_model_of(merged_copy(unwrap_model(model)).cpu()), directory)

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
            inner = _limit_model_of(model)
            labels = torch.eye(len(similarity), dtype=torch.bool, device=similarity.device)
            loss = siglit_loss(similarity, labels, inner.logit_scale.exp(), inner.logit_bias)
        else:
            weighted = self.config.loss == "weighted_infonce"
            loss = weighted_infonce(similarity, reports, self.config.tau_nce, weighted)
        target = torch.arange(len(similarity), device=similarity.device)
        retrieval = (similarity.argmax(dim=1) == target).float().mean()
        return {"loss": loss, "retrieval_top1": retrieval}

    # -- evaluation ----------------------------------------------------------------------
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
        from medvl_engine.tasks.limit.evaluation import SlideExample

        labelled = [r for r in self.splits[split] if r.label]
        slides = [
            SlideExample(self.cache.get(r.features), r.organ, _label_of(r), r.slide_id)
            for r in labelled
        ]
        return slides, self._classes_by_organ()

    def _classes_by_organ(self) -> dict[str, list[str]]:
        """The classes of each organ over the labelled slides of all splits."""
        classes: dict[str, set[str]] = {}
        for record in (r for records in self.splits.values() for r in records if r.label):
            classes.setdefault(record.organ, set()).add(_label_of(record))
        return {organ: sorted(names) for organ, names in sorted(classes.items())}

    def _protocol(self) -> dict[str, Any]:
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
        from medvl_engine.tasks.limit.evaluation import zero_shot_slides

        slides, classes = self._zero_shot_inputs(split)
        if not slides:
            return {}
        settings = {
            "template": self.config.eval_template,
            "pooling": self.config.eval_pooling,
            "k": self.config.eval_topk,
            "trials": self.config.eval_bootstrap,
            **self._protocol(),
            **options,
        }
        return zero_shot_slides(
            slides, classes, lambda texts: model.encode_texts(texts), model.tau_attn, **settings
        )

    def robustness(self, model: LimitModel, split: str = "val") -> dict[str, Any]:
        """Zero-shot accuracy over every prompt template x cancer synonym pair (Fig. 3)."""
        from medvl_engine.data.limit_prompt_variants import CANCER_SYNONYMS, ROBUSTNESS_TEMPLATES
        from medvl_engine.tasks.limit.evaluation import template_synonym_robustness

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
        protocol = {key: v for key, v in self._protocol().items() if key != "random_trials"}
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
        limit = _limit_model_of(model)
        from medvl_engine.tasks.limit.evaluation import SlideExample, zero_shot_predictions

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
                _label_of(labelled[i]),
                labelled[i].slide_id,
            )
            for i in mine
        ]
        rows: list[tuple[int, list[tuple[Any, ...]]]] = []
        if slides:
            config = self.config
            protocol = self._protocol()
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
        from medvl_engine.tasks.limit.evaluation import score_zero_shot

        parts = [part for part in parts if part]
        bag_terms = sorted(term for part in parts for term in part["bags"])
        metrics: dict[str, float] = {}
        if bag_terms:
            metrics["val_loss"] = sum(loss for _, loss, _ in bag_terms) / len(bag_terms)
            metrics["val_retrieval_top1"] = sum(hit for _, _, hit in bag_terms) / len(bag_terms)
        slide_rows = sorted((row for part in parts for row in part["rows"]), key=lambda r: r[0])
        if slide_rows:
            protocol = self._protocol()
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


def build_task(config: LimitTaskConfig, run_config: RunConfig) -> LimitTask:
    """The registry entry point of ``medvl-train limit``."""
    return LimitTask(config, run_config)


def _eval_action(run_config: RunConfig, task_config: LimitTaskConfig) -> int:
    from medvl_engine.tasks.limit.run_eval import eval_action

    return eval_action(run_config, task_config, LimitTask)


def _bridge_action(run_config: RunConfig, task_config: LimitTaskConfig) -> int:
    """``medvl-train limit bridge``: fit the least-squares bridge from the paired stores of
    task.bridge_source_features / task.bridge_target_features and write it to
    task.bridge_file (default ``<run.out_dir>/bridge.safetensors``)."""
    from medvl_engine.tasks.limit.bridge import write_bridge_file

    target = task_config.bridge_file
    if not target:
        Path(run_config.out_dir).mkdir(parents=True, exist_ok=True)
        target = str(Path(run_config.out_dir) / "bridge.safetensors")
    path, bridge = write_bridge_file(
        target,
        task_config.bridge_source_features or [],
        task_config.bridge_target_features or [],
        task_config.bridge_ridge,
    )
    print(
        f"wrote the {bridge.shape[0]} -> {bridge.shape[1]} bridge map to {path}; train with "
        f"task.bridge_init=file task.bridge_file={path}",
        flush=True,
    )
    return 0


# ``medvl-train limit eval``: the test split, read once, for the model chosen on validation.
# ``medvl-train limit bridge``: the Conch-Z least-squares bridge, fitted once into a file.
ACTIONS: dict[str, Callable[[RunConfig, LimitTaskConfig], int]] = {
    "eval": _eval_action,
    "bridge": _bridge_action,
}


def _labelled_patches(
    task: LimitTask, split: str = "val"
) -> tuple[torch.Tensor, Any, list[str]] | None:
    """Features ``[N, D]``, labels ``[N]`` and organs of ``split`` patches with "patch_labels"."""
    import numpy as np

    from medvl_engine.guarded_files import check_zarr_array, open_zarr_group

    features, labels, organs = [], [], []
    for record in task.splits[split]:
        if record.features.suffix == ".h5":
            continue
        group = open_zarr_group(record.features)  # regular files inside the store only
        if "patch_labels" in group:
            features.append(task.cache.get(record.features))
            patch_labels = _zarr_array(group["patch_labels"])
            check_zarr_array(
                patch_labels, record.features, out_itemsize=8, require_all_chunks=False
            )
            labels.append(np.asarray(patch_labels[...]))
            organs.extend([record.organ] * len(labels[-1]))
    if not features:
        return None
    return torch.cat(features), np.concatenate(labels), organs


def _patch_zero_shot(task: LimitTask, model: LimitModel, split: str = "val") -> dict[str, float]:
    """Patch-level zero-shot on ``split`` stores that carry "patch_labels" (synthetic cohorts)."""
    from medvl_engine.tasks.limit.evaluation import zero_shot_patches
    from medvl_engine.tasks.limit.synthetic_bags import DIAGNOSTIC_CLASSES

    patches = _labelled_patches(task, split)
    if patches is None:
        return {}
    return zero_shot_patches(
        patches[0],
        patches[1],
        list(DIAGNOSTIC_CLASSES),
        lambda texts: model.encode_texts(texts),
        trials=task.config.eval_bootstrap,
        seed=task.seed,
    )


def _patch_robustness(task: LimitTask, model: LimitModel, split: str = "val") -> dict[str, Any]:
    """Patch-level template x synonym report (the paper's Fig. 3 is patch level)."""
    from medvl_engine.data.limit_prompt_variants import CANCER_SYNONYMS, ROBUSTNESS_TEMPLATES
    from medvl_engine.tasks.limit.evaluation import patch_template_synonym_robustness
    from medvl_engine.tasks.limit.synthetic_bags import DIAGNOSTIC_CLASSES

    patches = _labelled_patches(task, split)
    if patches is None:
        return {}
    return patch_template_synonym_robustness(
        *patches,
        list(DIAGNOSTIC_CLASSES),
        lambda texts: model.encode_texts(texts),
        templates=task.config.eval_robustness_templates or list(ROBUSTNESS_TEMPLATES),
        synonyms=task.config.eval_robustness_synonyms or list(CANCER_SYNONYMS),
    )


def _robustness_line(label: str, name: str, robust: dict[str, Any]) -> str:
    """One printed line of a template x synonym report."""
    terms = f"{len(robust['terms'])} cancer terms" if robust["terms"] else "no synonym"
    return (
        f"{label:<10} {name:<14} {robust['mean']:>6.3f} +- {robust['std']:.3f}"
        f"  over {len(robust['templates'])} templates x {terms} (median "
        f"{robust['median']:.3f}, range {robust['min']:.3f}-{robust['max']:.3f})"
    )


def _tuned_folder(out_dir: Path) -> Path | None:
    for name in ("best", "final"):
        if (out_dir / name / "config.json").is_file():
            return out_dir / name
    return None


@torch.no_grad()
def report(task: LimitTask, summary: dict[str, Any]) -> dict[str, Any]:
    """Print zero-shot results of the untuned and the tuned text tower on the VALIDATION split.

    The test split is not read here: ``medvl-train limit eval`` scores it once, after the
    choices made on validation (see :mod:`medvl_engine.tasks.limit.run_eval`).

    Slide level: balanced accuracy (overall = organ mean by default, pooled, per organ,
    +- bootstrap std) with every inference pooling method for the tuned tower (random
    pooling: mean +- std over seeded trials); the template x synonym robustness report;
    patch level when labels exist. Returns the numbers as a dict (also written to
    ``<out_dir>/validation_report.json``).
    """
    out_dir = Path(summary["out_dir"])
    folder = _tuned_folder(out_dir)
    if folder is None or not any(r.label for r in task.splits["val"]):
        print("limit: no tuned model or no labelled validation slides; no zero-shot report")
        return {}
    torch.manual_seed(task.seed)
    untuned = task.build_model().eval()
    tuned = task.load_saved(folder).eval()
    tuned.tau_attn = task.config.tau_attn
    config = task.config
    results: dict[str, Any] = {"tuned_model": str(folder), "protocol": task._protocol()}
    overall_name = "organ mean" if config.eval_overall == "organ_mean" else "pooled"
    count = sum(1 for r in task.splits["val"] if r.label)
    lines = [f"Zero-shot on {count} validation slides (test: `medvl-train limit eval`)"]
    lines.append(
        f"overall = {overall_name} balanced accuracy +- bootstrap std (random pooling: mean +- "
        f"std over {config.eval_random_trials} trials of {config.eval_random_patches} patches)"
    )
    lines.append(f"{'text tower':<10} {'pooling':<14} {'overall':>15}  {'pooled':>6}  per organ")
    runs = [("untuned", untuned, "report_guided", 10), ("tuned", tuned, "report_guided", 10)]
    runs += [("tuned", tuned, "mean", 10), ("tuned", tuned, "random", 10)]
    runs += [("tuned", tuned, "topk", 10), ("tuned", tuned, "topk", 100)]
    for label, model, pooling, k in runs:
        result = task.zero_shot(model, "val", pooling=pooling, k=k)
        name = pooling if pooling != "topk" else f"top-{k}"
        overall = result["overall"]
        table = result["organ_mean_summary"]["table"]
        organs = ", ".join(f"{row} {value:.2f}" for row, value in table.items())
        lines.append(
            f"{label:<10} {name:<14} {overall['balanced_accuracy']:>6.3f} +- {overall['std']:.3f}"
            f"  {result['pooled']['balanced_accuracy']:>6.3f}  {organs}"
        )
        results[f"{label}/{name}"] = {
            key: result[key]
            for key in ("overall", "per_organ", "organ_mean", "organ_mean_summary", "pooled")
        }
        results[f"{label}/{name}"]["categories"] = result["categories"]
    if config.eval_robustness:
        for label, model in (("untuned", untuned), ("tuned", tuned)):
            robust = task.robustness(model, "val")
            results[f"{label}/robustness"] = robust
            lines.append(_robustness_line(label, "prompts", robust))
    for label, model in (("untuned", untuned), ("tuned", tuned)):
        patch = _patch_zero_shot(task, model)
        if patch:
            results[f"{label}/patch"] = patch
            lines.append(
                f"{label:<10} patch level    {patch['balanced_accuracy']:>6.3f} +- "
                f"{patch['balanced_accuracy_std']:.3f}  AUROC {patch['auroc']:.3f} +- "
                f"{patch['auroc_std']:.3f}"
            )
        robust = _patch_robustness(task, model) if task.config.eval_robustness else {}
        if robust:
            results[f"{label}/patch_robustness"] = robust
            lines.append(_robustness_line(label, "patch prompts", robust))
    print("\n".join(lines))
    (out_dir / "validation_report.json").write_text(json.dumps(results, indent=2, default=str))
    return results


def _limit_model_of(model: nn.Module) -> LimitModel:
    """The LimitModel inside ``model`` (unwrapped from DistributedDataParallel)."""
    inner = unwrap_model(model)
    if not isinstance(inner, LimitModel):
        raise TypeError(f"the LIMIT task trains a LimitModel, got {type(inner).__name__}")
    return inner


def _label_of(record: SlideRecord) -> str:
    """The class label of a labelled slide record."""
    if record.label is None:
        raise DataError(f"slide {record.slide_id} has no label")
    return record.label


def _zarr_array(node: zarr.Array[Any] | zarr.Group) -> zarr.Array[Any]:
    """A zarr array member of a feature store (a group there means the store was altered)."""
    import zarr

    if not isinstance(node, zarr.Array):
        raise DataError("a feature store holds a group where an array should be; extract again")
    return node
