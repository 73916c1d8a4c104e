"""``medvl-train limit eval``: the LIMIT test split, read once, after training.

For each run (one per seed of ``run.seeds``, else ``<run.out_dir>``) the model chosen on
validation (``best/``) is scored on the TEST split next to the trivial baselines: the untuned
text tower (the model training started from) and mean pooling. Slide level: organ-restricted
zero-shot, ``y = argmax_k cos(h_W(c_k), c_k)`` (Eq. 5), balanced accuracy per organ and
overall (organ mean) with a 95% percentile bootstrap interval resampling slides within each
organ. Patch level: ``argmax_k cos(v_i, c_k)`` over the test patches that carry labels,
macro one-vs-rest AUROC with a 95% interval resampling slides (all patches of a drawn slide).
Then mean +- std of every figure over the seeds. Nothing here trains or reads val/train data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from medvl_engine.tasks.limit.training_task import LimitTask

if TYPE_CHECKING:
    from medvl_engine.models.limit import LimitModel
    from medvl_engine.tasks.limit.config import LimitTaskConfig
    from medvl_engine.training.config import RunConfig

__all__ = ["BASELINE_ROWS", "evaluate_on_test", "eval_action"]

# (text tower, pooling) rows of the report; the first is the method, the rest its baselines.
BASELINE_ROWS: tuple[tuple[str, str], ...] = (
    ("tuned", "report_guided"),
    ("untuned", "report_guided"),
    ("tuned", "mean"),
    ("untuned", "mean"),
)


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
    from medvl_engine.evaluation.metrics import bootstrap_interval, macro_auroc

    features, labels, slide_of = patches
    with torch.no_grad():
        classes = torch.nn.functional.normalize(model.encode_texts(class_prompts).float(), dim=-1)
        scores = (torch.nn.functional.normalize(features.float(), dim=-1) @ classes.T).numpy()
    slides = np.unique(slide_of)
    rows_of = {int(s): np.flatnonzero(slide_of == s) for s in slides}

    def auroc_of_slides(chosen: np.ndarray) -> float:
        rows = np.concatenate([rows_of[int(s)] for s in chosen])
        return macro_auroc(labels[rows], scores[rows])

    value, low, high, std = bootstrap_interval(
        auroc_of_slides, slides, n_resamples=n_resamples, seed=seed
    )
    return {"auroc": value, "low": low, "high": high, "std": std, "patches": float(len(labels))}


def evaluate_on_test(task: LimitTask, folder: Path) -> dict[str, Any]:
    """Test-split figures of the tuned model in ``folder`` and its baselines (module doc)."""
    from medvl_engine.tasks.limit.synthetic_bags import DIAGNOSTIC_CLASSES

    config = task.config
    torch.manual_seed(task.seed)
    models = {"untuned": task.build_model().eval()}
    tuned = task.load_saved(folder).eval()
    tuned.tau_attn = config.tau_attn
    models["tuned"] = tuned
    result: dict[str, Any] = {
        "model": str(folder),
        "test_slides": sum(1 for r in task.splits["test"] if r.label),
        "slide_level": {},
        "patch_level": {},
    }
    with torch.no_grad():
        for tower, pooling in BASELINE_ROWS:
            scored = task.zero_shot(
                models[tower], "test", pooling=pooling, trials=config.eval_bootstrap
            )
            overall = scored["organ_mean_summary"]
            result["slide_level"][f"{tower}/{pooling}"] = {
                "balanced_accuracy": overall["balanced_accuracy"],
                "low": overall["ci_low"],
                "high": overall["ci_high"],
                "std": overall["std"],
                "per_organ": {
                    organ: {"balanced_accuracy": row["balanced_accuracy"], "std": row["std"]}
                    for organ, row in scored["per_organ"].items()
                },
            }
    patches = _test_patches(task)
    if patches is not None:
        prompts = list(DIAGNOSTIC_CLASSES)
        for tower in ("tuned", "untuned"):
            result["patch_level"][tower] = patch_auroc(
                models[tower], patches, prompts, config.eval_bootstrap, task.seed
            )
    return result


def _flat(result: dict[str, Any]) -> dict[str, float]:
    """The figures averaged over seeds: slide-level overall BA per row, patch AUROC per tower."""
    flat = {f"slide {row}": v["balanced_accuracy"] for row, v in result["slide_level"].items()}
    for row, values in result["slide_level"].items():
        for organ, organ_values in values["per_organ"].items():
            flat[f"slide {row} {organ}"] = organ_values["balanced_accuracy"]
    flat.update({f"patch {t}": v["auroc"] for t, v in result["patch_level"].items()})
    return flat


def _seed_lines(seed: int | None, result: dict[str, Any]) -> list[str]:
    name = "" if seed is None else f"seed {seed}: "
    lines = [
        f"{name}{result['model']} (chosen on validation) on {result['test_slides']} test slides",
        f"  {'text tower':<8} {'pooling':<14} {'overall BA [95% CI]':<24} {'std':>5}  per organ",
    ]
    for row, values in result["slide_level"].items():
        tower, pooling = row.split("/")
        organs = ", ".join(
            f"{organ} {v['balanced_accuracy']:.3f}" for organ, v in values["per_organ"].items()
        )
        interval = f"{values['balanced_accuracy']:.3f} [{values['low']:.3f}, {values['high']:.3f}]"
        lines.append(f"  {tower:<8} {pooling:<14} {interval:<24} {values['std']:>5.3f}  {organs}")
    for tower, values in result["patch_level"].items():
        lines.append(
            f"  {tower:<8} {'patch level':<14} AUROC {values['auroc']:.3f} "
            f"[{values['low']:.3f}, {values['high']:.3f}] std {values['std']:.3f} "
            f"({values['patches']:.0f} patches)"
        )
    return lines


def summarize_seeds(results: list[tuple[int | None, dict[str, Any]]]) -> dict[str, Any]:
    """Mean +- std over seeds of every figure, and the quality check of the tuned tower:
    tuned report-guided overall BA above untuned by more than two bootstrap std (mean of the
    tuned and untuned bootstrap std over seeds), and patch AUROC of the tuned tower."""
    from medvl_engine.training.seeds import mean_std_over_seeds

    summary = mean_std_over_seeds([_flat(result) for _, result in results])
    tuned = [r["slide_level"]["tuned/report_guided"] for _, r in results]
    untuned = [r["slide_level"]["untuned/report_guided"] for _, r in results]
    pairs = zip(tuned, untuned, strict=True)
    gain = float(np.mean([t["balanced_accuracy"] - u["balanced_accuracy"] for t, u in pairs]))
    bootstrap_std = float(np.mean([t["std"] for t in tuned] + [u["std"] for u in untuned]))
    return {
        "mean_std": {key: {"mean": m, "std": s, "n": n} for key, (m, s, n) in summary.items()},
        "tuned_minus_untuned": gain,
        "bootstrap_std": bootstrap_std,
        "gain_above_two_bootstrap_std": gain > 2 * bootstrap_std,
    }


def eval_action(run_config: RunConfig, task_config: LimitTaskConfig) -> int:
    """``medvl-train limit eval``: print the test figures of every seed's selected model."""
    from medvl_engine.common.atomic import atomic_write
    from medvl_engine.training.seeds import seed_runs, selected_model_dirs

    runs = {run.seed: run for run in seed_runs(run_config, task_config)}
    results = []
    for seed, folder in selected_model_dirs(run_config):
        run = runs[seed]
        task = LimitTask(run.task_config, run.run_config)
        result = evaluate_on_test(task, folder)
        results.append((seed, result))
        print("\n".join(_seed_lines(seed, result)), flush=True)
    summary = summarize_seeds(results)
    lines = [f"mean +- std over {len(results)} run(s) (test split)"]
    for key, values in summary["mean_std"].items():
        if key.count(" ") <= 1:  # overall rows and patch AUROC; per-organ figures are in the JSON
            lines.append(f"  {key:<32} {values['mean']:.3f} +- {values['std']:.3f}")
    lines.append(
        f"  tuned - untuned (report-guided, overall): {summary['tuned_minus_untuned']:+.3f}; "
        f"two bootstrap std: {2 * summary['bootstrap_std']:.3f}"
    )
    print("\n".join(lines), flush=True)
    out = Path(run_config.out_dir) / "test_evaluation.json"
    payload = {"runs": [{"seed": s, **r} for s, r in results], "summary": summary}
    text = json.dumps(payload, indent=2, default=float) + "\n"
    atomic_write(out, lambda path: path.write_text(text), what="LIMIT test evaluation")
    print(f"wrote {out}", flush=True)
    return 0
