"""``medvl-train limit eval``: the LIMIT test split, read once, after training, and fresh cohorts.

For each run (one per seed of ``run.seeds``, else ``<run.out_dir>``) the model chosen on
validation (``best/``) is scored on the TEST split beside the baselines a reviewer would build
(:mod:`medvl_engine.tasks.limit.evaluation.suite`): the untuned text tower, mean pooling, and
no text at all (nearest centroid and a linear probe on mean- or random-pooled patch features,
fitted on the training split, the probe's C on validation). Slide level: organ-restricted
zero-shot, ``y = argmax_k cos(h_W(c_k), c_k)`` (Eq. 5), organ-mean balanced accuracy with a
95% interval bootstrapping DIAGNOSES (the independent unit: slides of one diagnosis share its
prompt), and the paired margin over the best baseline. Patch level: ``argmax_k cos(v_i, c_k)``
over labelled test patches, macro one-vs-rest AUROC with an interval resampling slides.

With ``task.fresh_cohorts = N`` (synthetic data) the same table is computed on N new cohorts
drawn from seeds never used before (:mod:`medvl_engine.tasks.limit.fresh`) and pooled: the
headline figure with its interval over diagnoses, the spread over cohort seeds, and the paired
margin. Each evaluation adds one to ``<run.out_dir>/test_reads.json``. Nothing here trains.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from medvl_engine.tasks.limit.evaluation import SlideExample
from medvl_engine.tasks.limit.evaluation.suite import (
    METHOD_ROW,
    EvalSettings,
    baseline_rows,
    same_prediction_per_unit,
    score_rows,
    zero_shot_rows,
)
from medvl_engine.tasks.limit.records import label_of
from medvl_engine.tasks.limit.training_task import LimitTask

if TYPE_CHECKING:
    from medvl_engine.data.manifest import SlideRecord
    from medvl_engine.models.limit import LimitModel
    from medvl_engine.tasks.limit.config import LimitTaskConfig
    from medvl_engine.training.config import RunConfig

__all__ = [
    "eval_action",
    "evaluate_fresh",
    "evaluate_on_test",
    "patch_auroc",
    "spread_over_seeds",
    "summarize_seeds",
]


def _test_patches(task: LimitTask) -> tuple[torch.Tensor, np.ndarray, np.ndarray] | None:
    """Labelled test patches: features ``[N, D]``, labels ``[N]``, slide index ``[N]``."""
    from medvl_engine.features.store_io import read_patch_labels

    features, labels, slides = [], [], []
    for index, record in enumerate(r for r in task.splits["test"] if r.label):
        if record.features.suffix == ".h5":
            continue
        # regular files inside the store only; a group where the labels should be is skipped
        patch_labels = read_patch_labels(record.features, refuse_group=False)
        if patch_labels is None:
            continue
        features.append(task.cache.get(record.features))
        labels.append(patch_labels)
        slides.append(np.full(len(labels[-1]), index))
    if not features:
        return None
    return torch.cat(features), np.concatenate(labels), np.concatenate(slides)


def patch_auroc(
    model: LimitModel,
    patches: tuple[torch.Tensor, np.ndarray, np.ndarray],
    class_prompts: list[str],
    n_resamples: int,
    seed: int,
) -> dict[str, float]:
    """Patch-level zero-shot macro AUROC with a slide-level bootstrap interval.

    scores ``[N, C] = cos(v_i, c_k)``; each resample draws as many slides as there are, with
    replacement, and scores all patches of the drawn slides.
    """
    from medvl_engine.evaluation.bootstrap import unit_bootstrap
    from medvl_engine.evaluation.metrics import macro_auroc

    features, labels, slide_of = patches
    with torch.no_grad():
        classes = torch.nn.functional.normalize(model.encode_texts(class_prompts).float(), dim=-1)
        scores = (torch.nn.functional.normalize(features.float(), dim=-1) @ classes.T).numpy()
    interval = unit_bootstrap(
        macro_auroc,
        labels,
        scores,
        units=slide_of,
        unit="slide",
        n_resamples=n_resamples,
        seed=seed,
    )
    return {
        "auroc": interval.value,
        "low": interval.low,
        "high": interval.high,
        "std": interval.std,
        "patches": float(len(labels)),
        "slides": float(interval.n_units),
    }


def _examples(task: LimitTask, records: list[SlideRecord]) -> list[SlideExample]:
    return [
        SlideExample(task.cache.get(r.features), r.organ, label_of(r), r.slide_id)
        for r in records
        if r.label
    ]


def _settings(task: LimitTask) -> EvalSettings:
    config = task.config
    return EvalSettings(
        template=config.eval_template,
        k=config.eval_topk,
        group_single_label=config.eval_group_single_label,
        report_organs=config.eval_report_organs,
        random_patches=config.eval_random_patches,
        bootstrap=config.eval_bootstrap,
        seed=task.seed,
    )


def _models(task: LimitTask, folder: Path) -> dict[str, LimitModel]:
    torch.manual_seed(task.seed)
    untuned = task.build_model().eval()
    tuned = task.load_saved(folder).eval()
    tuned.tau_attn = task.config.tau_attn
    return {"untuned": untuned, "tuned": tuned}


def _all_rows(
    task: LimitTask, models: dict[str, LimitModel], slides: list[SlideExample]
) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Prediction rows of the model, the zero-shot baselines and the no-text baselines."""
    classes = task._classes_by_organ()
    settings = _settings(task)
    with torch.no_grad():
        rows = zero_shot_rows(models, slides, classes, settings)
    train = _examples(task, task.splits["train"])
    val = _examples(task, task.splits["val"])
    probes, fitted = baseline_rows(train, val, slides, classes, settings)
    rows.update(probes)
    return rows, fitted


def evaluate_on_test(
    task: LimitTask, folder: Path, models: dict[str, LimitModel] | None = None
) -> dict[str, Any]:
    """Test-split figures of the tuned model in ``folder`` and its baselines (module doc)."""
    from medvl_engine.tasks.limit.synthetic_bags import DIAGNOSTIC_CLASSES

    models = models or _models(task, folder)
    slides = _examples(task, task.splits["test"])
    rows, fitted = _all_rows(task, models, slides)
    scored = score_rows(rows, task._classes_by_organ(), _settings(task))
    result: dict[str, Any] = {
        "model": str(folder),
        "test_slides": len(slides),
        "slide_level": scored.pop("rows"),
        **scored,
        "baselines_fitted": fitted,
        "same_prediction_per_diagnosis": same_prediction_per_unit(rows[METHOD_ROW]),
        "patch_level": {},
    }
    patches = _test_patches(task)
    if patches is not None:
        prompts = list(DIAGNOSTIC_CLASSES)
        for tower in ("tuned", "untuned"):
            result["patch_level"][tower] = patch_auroc(
                models[tower], patches, prompts, task.config.eval_bootstrap, task.seed
            )
    return result


def evaluate_fresh(
    task: LimitTask,
    models: dict[str, LimitModel],
    cohorts: list[tuple[int, list[SlideRecord]]],
) -> dict[str, Any]:
    """Every fresh cohort's table and the pooled one (module doc).

    Returns ``{"seeds", "per_cohort": {seed: figures of every row}, "pooled": the table of
    all cohorts' slides together (intervals over diagnoses), "spread": {row: {"mean", "std",
    "min", "max"}} of each row's figure over the cohorts}``.
    """
    classes = task._classes_by_organ()
    settings = _settings(task)
    pooled_rows: dict[str, list[Any]] = {}
    per_cohort: dict[str, Any] = {}
    for seed, records in cohorts:
        rows, _ = _all_rows(task, models, _examples(task, records))
        scored = score_rows(rows, classes, settings)
        per_cohort[str(seed)] = {
            name: figure["balanced_accuracy"] for name, figure in scored["rows"].items()
        }
        per_cohort[str(seed)]["margin_over_best"] = scored["margin_over_best"]["difference"]
        for name, predictions in rows.items():
            tagged = [(f"{seed}:{r[0]}", *r[1:]) for r in predictions]
            pooled_rows.setdefault(name, []).extend(tagged)
    pooled = score_rows(pooled_rows, classes, settings)
    spread = spread_over_seeds(per_cohort, pooled["rows"])
    return {
        "seeds": [seed for seed, _ in cohorts],
        "per_cohort": per_cohort,
        "pooled": pooled,
        "spread": spread,
        "same_prediction_per_diagnosis": same_prediction_per_unit(pooled_rows[METHOD_ROW]),
    }


def spread_over_seeds(
    per_seed: Mapping[str, Mapping[str, float]], names: Iterable[str]
) -> dict[str, dict[str, float]]:
    """``{name: {"mean", "std", "min", "max"}}`` of each name's figure over the seeds
    (``per_seed``: ``{seed: {name: figure}}``; std with ``ddof = 0``)."""
    from medvl_engine.training.seeds import seed_spread

    return {name: seed_spread([figures[name] for figures in per_seed.values()]) for name in names}


def _flat(result: dict[str, Any]) -> dict[str, float]:
    """The figures averaged over seeds: slide-level overall BA per row, patch AUROC per tower."""
    flat = {f"slide {row}": v["balanced_accuracy"] for row, v in result["slide_level"].items()}
    for row, values in result["slide_level"].items():
        for organ, organ_values in values["per_organ"].items():
            flat[f"slide {row} {organ}"] = organ_values["balanced_accuracy"]
    flat.update({f"patch {t}": v["auroc"] for t, v in result["patch_level"].items()})
    fresh = result.get("fresh")
    if fresh:
        for row, values in fresh["pooled"]["rows"].items():
            flat[f"fresh {row}"] = values["balanced_accuracy"]
    return flat


def summarize_seeds(results: list[tuple[int | None, dict[str, Any]]]) -> dict[str, Any]:
    """Mean +- std over seeds of every figure, and the quality check of the tuned tower:
    tuned report-guided overall BA above the untuned tower's by more than two bootstrap std,
    the std of the paired difference bootstrapping DIAGNOSES (mean over seeds); on the fresh
    cohorts when there are any, else on the test split."""
    from medvl_engine.training.seeds import mean_std_over_seeds

    summary = mean_std_over_seeds([_flat(result) for _, result in results])
    source = "fresh" if all(r.get("fresh") for _, r in results) else "test"
    gains = [
        (r["fresh"]["pooled"] if source == "fresh" else r)["gain_over_untuned"] for _, r in results
    ]
    gain = float(np.mean([g["difference"] for g in gains]))
    bootstrap_std = float(np.mean([g["std"] for g in gains]))
    return {
        "mean_std": {key: {"mean": m, "std": s, "n": n} for key, (m, s, n) in summary.items()},
        "tuned_minus_untuned": gain,
        "bootstrap_std": bootstrap_std,
        "bootstrap_unit": {"unit": gains[0]["unit"], "n_units": gains[0]["n_units"]},
        "gain_measured_on": source,
        "gain_above_two_bootstrap_std": gain > 2 * bootstrap_std,
    }


def eval_action(run_config: RunConfig, task_config: LimitTaskConfig) -> int:
    """``medvl-train limit eval``: print the test (and fresh-cohort) figures of every seed's
    selected model beside its baselines; write ``<run.out_dir>/test_evaluation.json``."""
    from medvl_engine.common.atomic import atomic_write
    from medvl_engine.evaluation.test_reads import count_test_read
    from medvl_engine.tasks.limit.eval_report import seed_lines, summary_lines
    from medvl_engine.tasks.limit.fresh import fresh_cohort, fresh_cohort_seeds
    from medvl_engine.training.seeds import seed_runs, selected_model_dirs

    root = Path(run_config.out_dir)
    seeds = fresh_cohort_seeds(task_config, run_config)  # refused before any work
    runs = {run.seed: run for run in seed_runs(run_config, task_config)}
    folders = selected_model_dirs(run_config)
    run_seeds = [s for s in runs if s is not None] + [run_config.seed]
    cohorts = [(s, fresh_cohort(root, s, task_config, run_seeds)) for s in seeds]
    reads = count_test_read(root, ", ".join(str(folder) for _, folder in folders))
    results = []
    for seed, folder in folders:
        run = runs[seed]
        task = LimitTask(run.task_config, run.run_config)
        models = _models(task, folder)
        result = evaluate_on_test(task, folder, models)
        if cohorts:
            result["fresh"] = evaluate_fresh(task, models, cohorts)
        results.append((seed, result))
        print("\n".join(seed_lines(seed, result)), flush=True)
    summary = summarize_seeds(results)
    summary["test_split_reads"] = reads
    print("\n".join(summary_lines(summary, results, root)), flush=True)
    out = root / "test_evaluation.json"
    payload = {"runs": [{"seed": s, **r} for s, r in results], "summary": summary}
    text = json.dumps(payload, indent=2, default=float) + "\n"
    atomic_write(out, lambda path: path.write_text(text), what="LIMIT test evaluation")
    print(f"wrote {out}", flush=True)
    return 0
