"""``medvl-train topksiglip eval``: saved TopKSigLIP models scored once on the test split.

Models: each seed's ``<run.out_dir>/seed-<s>/best`` with ``run.seeds`` (the model each run
chose on validation), else ``<run.out_dir>/best``, or the one model ``task.init_from`` names
(a folder or a registered name such as ``topksiglip-demo``).

On the test breasts (``task.test_split`` / ``task.synthetic_test``), for each model: the
zero-shot AUROCs (cancer, BI-RADS, findings, density; at ``eval_k`` and the k sweep), the
Pointing Game and pixel AP, and the linear probe (fitted on the whole training split, its step
chosen on validation), each with a 95% percentile-bootstrap interval over test breasts; then
mean +- std over seeds; and beside them the trivial baselines on the same breasts
(:mod:`medvl_engine.tasks.topksiglip.baselines`: best signed intensity statistic per label,
max-intensity map); the cancer AUROC is also given by finding type
(:mod:`medvl_engine.tasks.topksiglip.subgroups`). Everything is printed and written to
``<run.out_dir>/test_evaluation.json`` (atomically). Training never reads the test split; this
is the only reader.

With ``task.report_split=validation`` the same report is made on the validation breasts (the
ones ``best/`` and the recipe were chosen on, so the figures are optimistic), without the
linear probe (it chooses its step on them), and written to ``validation_evaluation.json``: an
analysis that leaves the test split unread.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from medvl_engine.common.atomic import atomic_write
from medvl_engine.errors import ConfigError
from medvl_engine.tasks.topksiglip.subgroups import CANCER_KEY, SUBGROUP_SEPARATOR
from medvl_engine.training.config import RunConfig

if TYPE_CHECKING:
    import numpy as np

    from medvl_engine.models.topksiglip import TopKSigLIP
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.evaluation import MammoEvalOutputs
    from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask

__all__ = ["evaluate_test_split", "LEVEL", "REPORT_SPLITS", "RESULT_NAME", "VALIDATION_RESULT_NAME"]

LEVEL = 0.95
RESULT_NAME = "test_evaluation.json"
VALIDATION_RESULT_NAME = "validation_evaluation.json"
REPORT_SPLITS = ("test", "validation")
# Shown first, in this order; the other metrics follow sorted by name.
_HEADLINE = (
    "auroc_cancer",
    "auroc_birads_avg",
    "auroc_findings_avg",
    "auroc_density_avg",
    "pointing_game",
    "pixel_ap",
)


def _progress(message: str) -> None:
    print(f"  .. {message}", flush=True)


def _models(run_config: RunConfig, task_config: TopKSigLIPTaskConfig) -> list[tuple[Any, str]]:
    """``(seed or None, model folder or name)`` of each model to score."""
    from medvl_engine.training.seeds import selected_model_dirs

    if task_config.init_from:
        return [(None, task_config.init_from)]
    return [(seed, str(folder)) for seed, folder in selected_model_dirs(run_config)]


def _device(requested: str) -> torch.device:
    """``run.device``; ``auto`` = the first CUDA device when there is one, else the CPU."""
    if requested != "auto":
        return torch.device(requested)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _probe_columns(
    task: TopKSigLIPTask, model: TopKSigLIP, test_outputs: MammoEvalOutputs
) -> tuple[
    dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, list[str]]
]:
    """Linear-probe score columns on the test breasts (train fits, validation chooses)."""
    from medvl_engine.tasks.topksiglip.evaluation import collect_outputs, probe_readouts

    config = task.config
    _progress(f"linear probe: embedding {len(task.probe_train_records)} training breasts")
    train = collect_outputs(model, task.dataset(task.probe_train_records), k=config.eval_k)
    val = collect_outputs(model, task.eval_set, k=config.eval_k) if task.eval_set else None
    _progress(f"linear probe: {config.probe_steps} steps per task")
    return probe_readouts(
        train,
        val,
        test_outputs,
        steps=config.probe_steps,
        lr=config.probe_lr,
        weight_decay=config.probe_weight_decay,
        batch_size=config.probe_batch_size,
        eval_every=config.probe_eval_every,
        seed=config.seed,
    )


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _interval_record(values: tuple[float, float, float, float]) -> dict[str, float | None]:
    point, low, high, std = values
    return {
        "value": _finite(point),
        "low": _finite(low),
        "high": _finite(high),
        "std": _finite(std),
    }


def _ordered(keys: set[str]) -> list[str]:
    first = [key for key in _HEADLINE if key in keys]
    return first + sorted(keys - set(first))


def _shown(values: tuple[float, float, float, float] | None, key: str) -> str:
    if values is None:
        return "-"
    point, low, high, _ = values
    if key == "roi_cases":
        return f"{point:.0f}"
    if not math.isfinite(low):
        return f"{point:.3f}"
    return f"{point:.3f} [{low:.3f}, {high:.3f}]"


def _mean_std(summary: tuple[float, float, int] | None, models: int) -> str:
    if summary is None:
        return "-"
    mean, std, count = summary
    return f"{mean:.3f} +- {std:.3f}" + (f" (n={count})" if count < models else "")


def _print_report(
    per_model: list[dict[str, Any]],
    over_seeds: dict[str, tuple[float, float, int]],
    baseline: dict[str, tuple[float, float, float, float]],
    chosen: dict[str, str],
    split_line: str,
    counts: dict[str, tuple[int, int]],
) -> None:
    headers = ["model" if entry["seed"] is None else f"seed {entry['seed']}" for entry in per_model]
    print(
        f"TopKSigLIP {split_line}; value [{LEVEL:.0%} bootstrap interval over breasts]; "
        "AUROC chance = 0.5"
    )
    for header, entry in zip(headers, per_model, strict=True):
        print(f"  {header}: {entry['model']}")
    several = len(per_model) > 1  # the mean +- std column only over several seeds
    spread = [f"mean +- std ({len(per_model)})"] if several else []
    columns = [*headers, *spread, "baseline (no training)"]
    width = 24
    keys = set(baseline)
    for entry in per_model:
        keys |= set(entry["metrics"])
    name_width = max(len(key) for key in keys) + 2
    print(
        f"  {'metric':<{name_width}}" + "".join(f"{c:<{width}}" for c in columns) + "baseline reads"
    )
    subgroups = [key for key in counts if key in keys]
    for key in _ordered(keys - set(subgroups)) + subgroups:
        if subgroups and key == subgroups[0]:
            print(
                f"  cancer AUROC by finding: the cancer score over a subset of the breasts "
                f"({CANCER_KEY}{SUBGROUP_SEPARATOR}with_<finding>: those cancers vs every "
                "breast without cancer; vs_benign_<finding>: every cancer vs the breasts "
                "without cancer showing it)"
            )
        cells = [_shown(entry["metrics"].get(key), key) for entry in per_model]
        if several:
            cells.append(_mean_std(over_seeds.get(key), len(per_model)))
        cells.append(_shown(baseline.get(key), key))
        if key.startswith(("pointing", "pixel")):
            reads = "max-intensity map"
        elif key.endswith("_avg") and key in baseline:
            reads = "mean of each class's best"
        else:
            reads = chosen.get(key.split(SUBGROUP_SEPARATOR)[0], "")
        if key in counts:
            reads = f"{reads} ({counts[key][0]} cancers / {counts[key][1]} without)".lstrip()
        print(f"  {key:<{name_width}}" + "".join(f"{c:<{width}}" for c in cells) + reads)


def _report_breasts(task: TopKSigLIPTask, on_validation: bool) -> tuple[Any, str, str]:
    """``(dataset, split name, report header)`` of the breasts the eval action reports on."""
    config = task.config
    if not on_validation:
        breasts = task.dataset(task.test_records())
        name = config.test_split if config.manifest else "synthetic_test"
        return breasts, name, f"test split: {len(breasts)} breasts, never read in training"
    if task.eval_set is None:
        raise ConfigError(
            "task.report_split=validation, but the task has no validation breasts; set "
            "task.synthetic_eval or give the manifest rows of task.eval_split."
        )
    name = config.eval_split if config.manifest else "synthetic_eval"
    header = (
        f"validation split: {len(task.eval_set)} breasts, the ones best/ and the recipe were "
        "chosen on (optimistic; the test report is task.report_split=test)"
    )
    return task.eval_set, name, header


def evaluate_test_split(
    run_config: RunConfig,
    task_config: TopKSigLIPTaskConfig,
    task_class: type[TopKSigLIPTask],
) -> int:
    """Score the saved model(s) on the test split (or, with ``task.report_split=validation``,
    on the validation breasts); print and write the report; exit status.

    ``task_class`` is :class:`~medvl_engine.tasks.topksiglip.training_task.TopKSigLIPTask` (passed
    in by that module's ``eval`` action, so this module does not import the task).

    Runs in one process, on ``run.device`` (auto: the GPU when there is one); started under
    torchrun, ranks other than 0 return at once.
    """
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    from medvl_engine.tasks.topksiglip.baselines import baseline_readouts
    from medvl_engine.tasks.topksiglip.evaluation import bootstrap_readouts, model_readouts
    from medvl_engine.tasks.topksiglip.subgroups import subgroup_counts, with_cancer_subgroups
    from medvl_engine.training.seeds import mean_std_over_seeds

    split = task_config.report_split
    if split not in REPORT_SPLITS:
        raise ConfigError(
            f"task.report_split={split!r} is not one of {list(REPORT_SPLITS)}; use test for the "
            "report, validation for an analysis of the breasts best/ was chosen on."
        )
    on_validation = split == "validation"
    models = _models(run_config, task_config)
    device = _device(run_config.device)
    probe = task_config.linear_probe and not on_validation
    # The training and validation splits are read only for the linear probe or a validation
    # report.
    task = task_class(task_config, run_config, read_train_val=probe or on_validation)
    task.progress = _progress
    breasts, split_name, split_line = _report_breasts(task, on_validation)
    resamples, seed = task_config.bootstrap_resamples, task_config.seed
    _progress(f"trivial baselines on {len(breasts)} {split} breasts")
    baseline_table, chosen = baseline_readouts(breasts, task.geometry)
    baseline_table = with_cancer_subgroups(baseline_table)
    baseline = bootstrap_readouts(baseline_table, resamples, seed, LEVEL)
    per_model = []
    for model_seed, source in models:
        _progress(f"scoring {source}")
        model = task.load_saved(source, device)
        table, outputs = model_readouts(
            model, breasts, k=task_config.eval_k, k_sweep=task._k_sweep()
        )
        if probe:
            table = table.with_scores(*_probe_columns(task, model, outputs))
        table = with_cancer_subgroups(table)
        per_model.append(
            {
                "seed": model_seed,
                "model": source,
                "metrics": bootstrap_readouts(table, resamples, seed, LEVEL),
            }
        )
    over_seeds = mean_std_over_seeds(
        [{key: values[0] for key, values in entry["metrics"].items()} for entry in per_model]
    )
    counts = subgroup_counts(baseline_table)
    _print_report(per_model, over_seeds, baseline, chosen, split_line, counts)

    def records(
        metrics: dict[str, tuple[float, float, float, float]], subgroups: bool
    ) -> dict[str, dict[str, float | None]]:
        return {
            key: _interval_record(values)
            for key, values in metrics.items()
            if (SUBGROUP_SEPARATOR in key) == subgroups
        }

    result = {
        "split": split_name,
        f"{'validation' if on_validation else 'test'}_breasts": len(breasts),
        "level": LEVEL,
        "bootstrap_resamples": resamples,
        "bootstrap_seed": seed,
        "models": [
            {
                "seed": entry["seed"],
                "model": entry["model"],
                "metrics": records(entry["metrics"], subgroups=False),
                "cancer_by_finding": records(entry["metrics"], subgroups=True),
            }
            for entry in per_model
        ],
        "mean_std_over_seeds": {
            key: {"mean": mean, "std": std, "seeds": count}
            for key, (mean, std, count) in over_seeds.items()
        },
        "baseline": {
            "metrics": records(baseline, subgroups=False),
            "cancer_by_finding": records(baseline, subgroups=True),
            "reads": chosen,
        },
        "cancer_by_finding_breasts": {
            key: {"cancers": cancers, "without_cancer": others}
            for key, (cancers, others) in counts.items()
        },
    }
    out_dir = Path(run_config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = atomic_write(
        out_dir / (VALIDATION_RESULT_NAME if on_validation else RESULT_NAME),
        lambda temporary: temporary.write_text(json.dumps(result, indent=2), encoding="utf-8"),
        what=f"{split} evaluation",
    )
    print(f"written: {path}")
    return 0
