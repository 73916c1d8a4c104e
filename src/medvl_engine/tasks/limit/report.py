"""The validation report printed after ``medvl-train limit`` trains: zero-shot results of the
untuned and the tuned text tower on the VALIDATION split (the test split is read only by
``medvl-train limit eval``, :mod:`medvl_engine.tasks.limit.run_eval`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from medvl_engine.models.limit import LimitModel

if TYPE_CHECKING:
    from medvl_engine.tasks.limit.training_task import LimitTask

__all__ = ["report"]


def _labelled_patches(
    task: LimitTask, split: str = "val"
) -> tuple[torch.Tensor, Any, list[str]] | None:
    """Features ``[N, D]``, labels ``[N]`` and organs of ``split`` patches with "patch_labels"."""
    import numpy as np

    from medvl_engine.features.store_io import read_patch_labels

    features, labels, organs = [], [], []
    for record in task.splits[split]:
        if record.features.suffix == ".h5":
            continue
        patch_labels = read_patch_labels(record.features)  # regular files inside the store only
        if patch_labels is not None:
            features.append(task.cache.get(record.features))
            labels.append(patch_labels)
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
    results: dict[str, Any] = {"tuned_model": str(folder), "protocol": task.eval_protocol()}
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
