"""``medvl-train topksiglip eval``: saved TopKSigLIP models scored on the test split, beside the
baselines a reviewer would build, and on fresh synthetic cohorts (the headline).

Models: each seed's ``<run.out_dir>/seed-<s>/best`` with ``run.seeds`` (the model each run
chose on validation), else ``<run.out_dir>/best``, or the one model ``task.init_from`` names
(a folder or a registered name such as ``topksiglip-demo``).

On the test breasts (``task.test_split`` of a manifest / ``task.synthetic_test``), for each
model: the zero-shot AUROCs (cancer, BI-RADS, findings, density; at ``eval_k`` and the k
sweep), the Pointing Game and pixel AP, and the linear probe (fitted on the whole training
split, its step chosen on validation), each with a 95% percentile-bootstrap interval over test
breasts; then mean +- std over seeds; the intensity-statistics baseline beside every readout;
the cancer AUROC by finding type (:mod:`medvl_engine.tasks.topksiglip.subgroups`). Then the
baseline block (:mod:`medvl_engine.tasks.topksiglip.baseline_report`): every baseline of
:mod:`medvl_engine.tasks.topksiglip.baselines` (intensity statistics, speck counter, top-hat
energy, and the logistic regression on 20 hand-made features fitted on the training split with
``task.shallow_baseline``) on the headline metrics, and the model's margin over the best of them
by a paired bootstrap over the independent unit (a breast; an exam when two breasts share one),
named in the output. Each test-split report adds one to the run folder's count of test-split
reads (``test_reads.json``), printed and saved.

With ``task.fresh_cohorts`` = N > 0, N new synthetic cohorts of ``task.fresh_cohort_size``
breasts (:mod:`medvl_engine.tasks.topksiglip.fresh`; seeds no choice has used, others refused)
are scored by the models and every baseline and pooled
(:mod:`medvl_engine.tasks.topksiglip.fresh_report`): pooled figures with intervals, the seed
spread, and the paired margins. Everything is printed and written to
``<run.out_dir>/test_evaluation.json`` (atomically).

``task.report_split=validation`` makes the split report on the validation breasts (the ones
``best/`` and the recipe were chosen on, so the figures are optimistic), without the linear
probe, into ``validation_evaluation.json``; ``task.report_split=fresh`` scores only the fresh
cohorts, into ``fresh_evaluation.json``. Neither reads the test split.
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
    from medvl_engine.tasks.topksiglip.baselines import BreastInputs
    from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
    from medvl_engine.tasks.topksiglip.evaluation import MammoEvalOutputs
    from medvl_engine.tasks.topksiglip.training_task import TopKSigLIPTask

__all__ = [
    "FRESH_RESULT_NAME",
    "LEVEL",
    "REPORT_SPLITS",
    "RESULT_NAME",
    "VALIDATION_RESULT_NAME",
    "evaluate_test_split",
]

LEVEL = 0.95
RESULT_NAME = "test_evaluation.json"
VALIDATION_RESULT_NAME = "validation_evaluation.json"
FRESH_RESULT_NAME = "fresh_evaluation.json"
REPORT_SPLITS = ("test", "validation", "fresh")
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


def _fitted_inputs(
    task: TopKSigLIPTask, enabled: bool
) -> tuple[BreastInputs, BreastInputs | None] | None:
    """The training and validation inputs of the logistic baseline (None when disabled)."""
    from medvl_engine.tasks.topksiglip.baselines import breast_inputs

    if not enabled:
        return None
    records = task.probe_train_records
    _progress(f"logistic baseline: features of {len(records)} training breasts")
    train = breast_inputs(task.dataset(records), task.geometry)
    validation = breast_inputs(task.eval_set, task.geometry) if task.eval_set else None
    return train, validation


def _write(out_dir: Path, name: str, result: dict[str, Any], what: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = atomic_write(
        out_dir / name,
        lambda temporary: temporary.write_text(json.dumps(result, indent=2), encoding="utf-8"),
        what=what,
    )
    print(f"written: {path}")


def _split_report(
    task: TopKSigLIPTask,
    loaded: list[tuple[Any, str, TopKSigLIP]],
    fitted: tuple[BreastInputs, BreastInputs | None] | None,
    on_validation: bool,
    probe: bool,
) -> dict[str, Any]:
    """Score the models and every baseline on the test (or validation) breasts; print the
    report and return its JSON-ready dict."""
    from medvl_engine.tasks.topksiglip.baseline_report import (
        baseline_block,
        print_baseline_block,
        score_baselines,
    )
    from medvl_engine.tasks.topksiglip.baselines import breast_inputs
    from medvl_engine.tasks.topksiglip.evaluation import bootstrap_readouts, model_readouts
    from medvl_engine.tasks.topksiglip.subgroups import subgroup_counts, with_cancer_subgroups
    from medvl_engine.training.seeds import mean_std_over_seeds

    config = task.config
    split = "validation" if on_validation else "test"
    breasts, split_name, split_line = _report_breasts(task, on_validation)
    resamples, seed = config.bootstrap_resamples, config.seed
    _progress(f"baselines on {len(breasts)} {split} breasts")
    inputs = breast_inputs(breasts, task.geometry)
    scored = score_baselines(inputs, task.geometry, *(fitted or (None, None)))
    baseline_table, chosen = scored.tables["intensity"], scored.chosen["intensity"]
    baseline_table = with_cancer_subgroups(baseline_table)
    baseline = bootstrap_readouts(baseline_table, resamples, seed, LEVEL)
    per_model, headline_tables = [], []
    for model_seed, source, model in loaded:
        _progress(f"scoring {source}")
        table, outputs = model_readouts(model, breasts, k=config.eval_k, k_sweep=task._k_sweep())
        headline_tables.append((source, table))
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
    block = baseline_block(headline_tables, scored, resamples, seed, LEVEL)
    print_baseline_block(block, f"Baselines on the {split} split")

    def records(
        metrics: dict[str, tuple[float, float, float, float]], subgroups: bool
    ) -> dict[str, dict[str, float | None]]:
        return {
            key: _interval_record(values)
            for key, values in metrics.items()
            if (SUBGROUP_SEPARATOR in key) == subgroups
        }

    return {
        "split": split_name,
        f"{split}_breasts": len(breasts),
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
        "baselines": block,
        "cancer_by_finding_breasts": {
            key: {"cancers": cancers, "without_cancer": others}
            for key, (cancers, others) in counts.items()
        },
    }


def evaluate_test_split(
    run_config: RunConfig,
    task_config: TopKSigLIPTaskConfig,
    task_class: type[TopKSigLIPTask],
) -> int:
    """Score the saved model(s) on the test split (``task.report_split=validation``: on the
    validation breasts; ``fresh``: on the fresh cohorts only) beside every baseline, and on
    ``task.fresh_cohorts`` fresh cohorts, pooled; print and write the report; exit status.

    ``task_class`` is :class:`~medvl_engine.tasks.topksiglip.training_task.TopKSigLIPTask` (passed
    in by that module's ``eval`` action, so this module does not import the task).

    Runs in one process, on ``run.device`` (auto: the GPU when there is one); started under
    torchrun, ranks other than 0 return at once. Each report of the test split adds one to the
    run folder's count of test-split reads (:mod:`medvl_engine.evaluation.test_reads`), printed.
    """
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    from medvl_engine.evaluation.test_reads import TEST_READS_FILE, count_test_read, read_count
    from medvl_engine.tasks.topksiglip.fresh import fresh_cohort_seeds
    from medvl_engine.tasks.topksiglip.fresh_report import (
        evaluate_fresh_cohorts,
        print_fresh_report,
    )

    split = task_config.report_split
    if split not in REPORT_SPLITS:
        raise ConfigError(
            f"task.report_split={split!r} is not one of {list(REPORT_SPLITS)}; use test for the "
            "report, validation for an analysis of the breasts best/ was chosen on, fresh for "
            "the fresh cohorts alone."
        )
    seeds = fresh_cohort_seeds(task_config)  # refused before anything is read
    if split == "fresh" and not seeds:
        raise ConfigError(
            "task.report_split=fresh needs fresh cohorts; set e.g. task.fresh_cohorts=8."
        )
    on_validation = split == "validation"
    models = _models(run_config, task_config)
    device = _device(run_config.device)
    probe = task_config.linear_probe and split == "test"
    shallow = task_config.shallow_baseline
    # The training and validation splits are read only for the linear probe, the logistic
    # baseline or a validation report.
    task = task_class(task_config, run_config, read_train_val=probe or on_validation or shallow)
    task.progress = _progress
    loaded = [(s, source, task.load_saved(source, device)) for s, source in models]
    fitted = _fitted_inputs(task, shallow)
    out_dir = Path(run_config.out_dir)
    result: dict[str, Any] = {}
    if split != "fresh":
        result = _split_report(task, loaded, fitted, on_validation, probe)
    if split == "test":
        reads = count_test_read(out_dir, ", ".join(source for _, source, _ in loaded))
        print(
            f"test split read {reads} time(s) from this run folder ({out_dir / TEST_READS_FILE}); "
            "a figure from a split read several times is partly chosen on it"
        )
    else:
        reads = read_count(out_dir)
    result["test_split_reads"] = reads
    if seeds:
        fresh = evaluate_fresh_cohorts(
            [(source, model) for _, source, model in loaded],
            seeds,
            task_config,
            run_config,
            fitted,
            LEVEL,
            _progress,
        )
        print_fresh_report(fresh)
        result["fresh_cohorts"] = fresh
    if split == "fresh":
        result.update(level=LEVEL, bootstrap_resamples=task_config.bootstrap_resamples)
        result["models"] = [{"seed": s, "model": source} for s, source, _ in loaded]
    name = {"test": RESULT_NAME, "validation": VALIDATION_RESULT_NAME}.get(split, FRESH_RESULT_NAME)
    _write(out_dir, name, result, f"{split} evaluation")
    return 0
