"""The printed tables of ``medvl-train limit eval`` (:mod:`medvl_engine.tasks.limit.run_eval`):
every row beside the model, intervals named by their unit, the margin over the best baseline,
and the fresh cohorts' pooled figure with its spread over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["row_label", "seed_lines", "summary_lines"]

_NAMES = {
    "tuned": ("LIMIT zero-shot", "tuned"),
    "untuned": ("zero-shot", "untuned"),
    "nearest_centroid": ("nearest centroid", "no text"),
    "linear_probe": ("linear probe", "no text"),
}


def row_label(row: str, fitted: dict[str, Any] | None = None) -> str:
    """``"linear probe (C=0.1)  no text  random"``-style label of a row name."""
    head, pooling = row.split("/")
    name, text = _NAMES.get(head, (head, ""))
    if head == "tuned" and pooling != "report_guided":
        name = "zero-shot"
    if head == "linear_probe" and fitted and pooling in fitted.get("C", {}):
        name = f"{name} C={fitted['C'][pooling]:g}"
    return f"{name:<22} {text:<8} {pooling:<14}"


def _interval(values: dict[str, float]) -> str:
    return f"{values['balanced_accuracy']:.3f} [{values['low']:.3f}, {values['high']:.3f}]"


def _margin(name: str, margin: dict[str, Any]) -> str:
    return (
        f"{margin['difference']:+.3f} [{margin['low']:+.3f}, {margin['high']:+.3f}] "
        f"(paired bootstrap over {margin['n_units']} {_units(margin['unit'], margin['n_units'])}"
        f"; {name})"
    )


def _units(unit: str, count: int) -> str:
    if count == 1:
        return unit
    return unit[:-2] + "es" if unit.endswith("is") else unit + "s"


def _table(
    figures: dict[str, dict[str, Any]],
    scored: dict[str, Any],
    fitted: dict[str, Any] | None,
    spread: dict[str, dict[str, float]] | None = None,
) -> list[str]:
    unit = f"{scored['units']} {_units(scored['unit'], scored['units'])}"
    extra = "seed spread mean +- std (min-max)" if spread else "per organ"
    lines = [
        f"  organ-mean balanced accuracy [95% interval, bootstrap over {unit}] "
        f"on {scored['slides']} slides",
        f"  {'classifier':<22} {'text':<8} {'pooling':<14} {'BA [95% CI]':<22} {extra}",
    ]
    for row, values in figures.items():
        if spread:
            s = spread[row]
            tail = f"{s['mean']:.3f} +- {s['std']:.3f} ({s['min']:.3f}-{s['max']:.3f})"
        else:
            tail = ", ".join(
                f"{organ} {v['balanced_accuracy']:.3f}" for organ, v in values["per_organ"].items()
            )
        lines.append(f"  {row_label(row, fitted)} {_interval(values):<22} {tail}")
    best = scored["best_baseline"]
    best_name = " ".join(row_label(best, fitted).split())
    lines.append(
        f"  margin over the best baseline: {_margin(best_name, scored['margin_over_best'])}"
    )
    gain = _margin("tuned - untuned", scored["gain_over_untuned"])
    lines.append(f"  gain over the untuned tower:   {gain}")
    return lines


def seed_lines(seed: int | None, result: dict[str, Any]) -> list[str]:
    """The test-split table of one run (and its fresh cohorts' pooled table)."""
    name = "" if seed is None else f"seed {seed}: "
    fitted = result.get("baselines_fitted")
    lines = [
        f"{name}{result['model']} (chosen on validation) on the TEST split: "
        f"{result['test_slides']} slides of {result['units']} "
        f"{_units(result['unit'], result['units'])}",
        *_table(result["slide_level"], result, fitted),
    ]
    if fitted and "skipped" in fitted:
        lines.append(f"  no-text baselines skipped: {fitted['skipped']}")
    elif fitted:
        lines.append(
            f"  no-text baselines fitted on {fitted['fitted_on']}, probe C chosen on "
            f"{fitted['C_chosen_on']}"
        )
    share = result["same_prediction_per_diagnosis"]
    lines.append(
        f"  all slides of a diagnosis get one prediction for {share:.0%} of diagnoses "
        "(why the interval bootstraps diagnoses, not slides)"
    )
    for tower, values in result["patch_level"].items():
        lines.append(
            f"  {tower:<8} patch level AUROC {values['auroc']:.3f} "
            f"[{values['low']:.3f}, {values['high']:.3f}] ({values['patches']:.0f} patches, "
            f"bootstrap over {values['slides']:.0f} slides)"
        )
    fresh = result.get("fresh")
    if fresh:
        seeds = fresh["seeds"]
        pooled = fresh["pooled"]
        lines.append(
            f"{name}FRESH cohorts: {len(seeds)} new synthetic cohort{'s' * (len(seeds) > 1)} "
            f"(seeds {seeds[0]}-"
            f"{seeds[-1]}, never used for training, validation, test or a choice), pooled"
        )
        lines.extend(_table(pooled["rows"], pooled, fitted, fresh["spread"]))
    return lines


def summary_lines(
    summary: dict[str, Any], results: list[tuple[int | None, dict[str, Any]]], root: Path
) -> list[str]:
    """Mean +- std over the runs, the gain check and the headline (fresh cohorts if any)."""
    lines = [f"mean +- std over {len(results)} run(s)"]
    for key, values in summary["mean_std"].items():
        if key.count(" ") <= 1:  # overall rows and patch AUROC; per-organ figures are in the JSON
            lines.append(f"  {key:<36} {values['mean']:.3f} +- {values['std']:.3f}")
    unit = summary["bootstrap_unit"]
    lines.append(
        f"  tuned - untuned (report-guided, {summary['gain_measured_on']}): "
        f"{summary['tuned_minus_untuned']:+.3f}; two bootstrap std (paired bootstrap over "
        f"{unit['n_units']} {_units(unit['unit'], unit['n_units'])}): "
        f"{2 * summary['bootstrap_std']:.3f}; "
        f"{'above' if summary['gain_above_two_bootstrap_std'] else 'NOT above'}"
    )
    reads = summary["test_split_reads"]
    lines.append(
        f"  the test split of {root} has been read {reads} time{'s' if reads != 1 else ''} "
        "(test_reads.json)"
    )
    fresh = [r["fresh"] for _, r in results if r.get("fresh")]
    if fresh:
        first = fresh[0]["pooled"]
        method = first["rows"]["tuned/report_guided"]
        margin = first["margin_over_best"]
        run = "" if results[0][0] is None else f", seed {results[0][0]}"
        lines.append(
            f"HEADLINE (fresh cohorts{run}): LIMIT zero-shot {_interval(method)} over "
            f"{first['units']} {_units(first['unit'], first['units'])}; margin over "
            f"{first['best_baseline']} {margin['difference']:+.3f} "
            f"[{margin['low']:+.3f}, {margin['high']:+.3f}]"
        )
    return lines
