"""medvl-demo's patch-level test beside the baselines a reviewer builds, and on fresh cohorts.

The model card's zero-shot figure (:func:`~medvl_engine.tasks.limit.demo_recipe.
evaluate_demo_encoder`: prediction = argmax_k cos(v, t_k) over one prompt per tissue class) is
compared with classifiers that use the same patches and NO text:

- nearest centroid on the 64 raw handcrafted descriptors ``f(x)``: ``y = argmin_k ||f - mu_k||``
  with ``mu_k`` the mean of the fit's patches of class k (seed 0, the patches the model was
  fitted on);
- nearest centroid on the model's own patch embedding ``v`` (same rule, 256-d);
- a linear probe (standardised ``f``, multinomial logistic regression) fitted on the fit's
  patches, its C chosen on validation patches rendered from :data:`VAL_SEED`.

Each is scored on the card's test patches (seed :data:`TEST_SEED`) and on
:data:`FRESH_COHORTS` fresh cohorts (seeds from the registry
:mod:`medvl_engine.evaluation.fresh_seeds`, never used for a choice), pooled. A prompt stands
for a whole tissue class, so the independent unit is the CLASS: the pooled interval and the
paired margin over the best baseline bootstrap the 6 classes (each with all its patches;
balanced accuracy as a class-weighted mean, :func:`~.evaluation.units.weighted_accuracy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from medvl_engine.encoders.demo import DemoEncoder, fixed_order_matmul
from medvl_engine.evaluation.bootstrap import paired_bootstrap, unit_bootstrap
from medvl_engine.tasks.limit.evaluation.baselines import C_GRID
from medvl_engine.tasks.limit.evaluation.units import weighted_accuracy

__all__ = [
    "FRESH_COHORTS",
    "VAL_SEED",
    "baseline_lines",
    "card_section",
    "demo_baselines",
    "limit_demo_figures",
    "render_labelled",
]

TEST_SEED = 10_000  # the card's held-out test patches (demo_recipe.TEST_SEED)
VAL_SEED = 10_001  # validation patches: the linear probe's C
FRESH_COHORTS = 5
PER_CLASS = 30  # patches per class of the test, validation and fresh cohorts
_FIT_SEED = 0
_FIT_PER_CLASS = 40  # demo_recipe's patches per class of the fit
UNIT = "tissue class"


def render_labelled(seed: int, classes: list[str], per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw descriptors ``[N, 64]`` float64 and labels ``[N]`` (indices into ``classes``) of
    ``per_class`` patches per class rendered, class by class, from ``default_rng(seed)``."""
    from medvl_engine import synthetic
    from medvl_engine.encoders.demo import PATCH_SIZE
    from medvl_engine.encoders.handcrafted import handcrafted_features

    rng = np.random.default_rng(seed)
    patches, labels = [], []
    for class_id, name in enumerate(classes):
        for _ in range(per_class):
            patches.append(synthetic.render_tissue(name, (PATCH_SIZE, PATCH_SIZE), rng))
            labels.append(class_id)
    with torch.inference_mode():
        raw = handcrafted_features(torch.from_numpy(np.stack(patches)))
    return raw.double().numpy(), np.asarray(labels)


def _fit_set(classes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The fit's own patches (demo_recipe.fit_demo_model renders the tissue classes in
    ``synthetic.TISSUE_CLASSES`` order from ``default_rng(0)`` first), labelled by ``classes``."""
    from medvl_engine import synthetic

    order = list(synthetic.TISSUE_CLASSES)
    raw, labels = render_labelled(_FIT_SEED, order, _FIT_PER_CLASS)
    return raw, np.asarray([classes.index(order[i]) for i in labels])


def _embed(encoder: DemoEncoder, raw: np.ndarray) -> np.ndarray:
    """The model's patch embedding from raw descriptors: ``normalize(((f - mu) / sigma) Q)``."""
    standardised = (torch.from_numpy(raw).float() - encoder.mean) / encoder.std
    embedded = fixed_order_matmul(standardised, encoder.projection).double()
    return torch.nn.functional.normalize(embedded, dim=-1).numpy()


def _centroid_predict(x_fit: np.ndarray, y_fit: np.ndarray, x: np.ndarray) -> np.ndarray:
    centroids = np.stack([x_fit[y_fit == k].mean(0) for k in range(int(y_fit.max()) + 1)])
    distance: np.ndarray = np.linalg.norm(x[:, None, :] - centroids[None], axis=-1)
    return np.asarray(distance.argmin(1))


def _balanced(labels: np.ndarray, predictions: np.ndarray) -> float:
    from medvl_engine.evaluation.metrics import balanced_accuracy

    return balanced_accuracy(labels, predictions)


def _probe(
    x_fit: np.ndarray, y_fit: np.ndarray, x_val: np.ndarray, y_val: np.ndarray
) -> tuple[Any, float]:
    """Standardised logistic regression fitted on the fit set, C chosen on validation."""
    from sklearn.linear_model import LogisticRegression  # type: ignore[import-untyped]
    from sklearn.pipeline import make_pipeline  # type: ignore[import-untyped]
    from sklearn.preprocessing import StandardScaler  # type: ignore[import-untyped]
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    best, chosen, model = -1.0, 1.0, None
    for c in sorted(C_GRID):
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000))
        with threadpool_limits(1):  # tiny problems: BLAS threads only contend on busy cores
            probe.fit(x_fit, y_fit)
        value = _balanced(y_val, probe.predict(x_val))
        if value > best:
            best, chosen, model = value, float(c), probe
    return model, chosen


def _interval(labels: np.ndarray, predictions: np.ndarray, seed: int) -> dict[str, Any]:
    weight = 1.0 / np.bincount(labels)[labels]
    correct = (labels == predictions).astype(float)
    result = unit_bootstrap(
        weighted_accuracy, correct, weight, units=labels, unit=UNIT, n_resamples=1000, seed=seed
    )
    return result.as_dict()


def demo_baselines(
    encoder: DemoEncoder, fresh: list[int], prompts: Mapping[str, str]
) -> dict[str, Any]:
    """The card's reviewer checks (module doc) on the test patches and the ``fresh`` seeds;
    ``prompts``: the zero-shot prompt of each tissue class (``demo_recipe.TEST_PROMPTS``).

    Returns ``{"classes", "test": {row: balanced accuracy}, "fresh": {"seeds", "patches",
    "pooled": {row: interval over classes}, "per_seed": {seed: {row: BA}}, "spread": {row:
    {"mean", "std", "min", "max"}}, "best_baseline", "margin": paired difference}, "probe_C"}``.
    """
    from medvl_engine.evaluation.fresh_seeds import check_fresh
    from medvl_engine.tasks.limit.run_eval import spread_over_seeds

    check_fresh("limit", fresh)
    classes = list(prompts)
    with torch.inference_mode():
        text = torch.nn.functional.normalize(
            encoder.encode_text([prompts[c] for c in classes]).double(), dim=-1
        ).numpy()
    fit_raw, fit_y = _fit_set(classes)
    fit_emb = _embed(encoder, fit_raw)
    val_raw, val_y = render_labelled(VAL_SEED, classes, PER_CLASS)
    probe, c = _probe(fit_raw, fit_y, val_raw, val_y)

    def predict(raw: np.ndarray) -> dict[str, np.ndarray]:
        embedded = _embed(encoder, raw)
        return {
            "zero-shot (text prompts)": (embedded @ text.T).argmax(1),
            "nearest centroid, raw 64 descriptors": _centroid_predict(fit_raw, fit_y, raw),
            "nearest centroid, 256-d embedding": _centroid_predict(fit_emb, fit_y, embedded),
            f"linear probe, raw 64 descriptors (C={c:g})": probe.predict(raw),
        }

    test_raw, test_y = render_labelled(TEST_SEED, classes, PER_CLASS)
    test = {name: _balanced(test_y, p) for name, p in predict(test_raw).items()}
    labels: list[np.ndarray] = []
    pooled: dict[str, list[np.ndarray]] = {}
    per_seed: dict[str, dict[str, float]] = {}
    for seed in fresh:
        raw, y = render_labelled(seed, classes, PER_CLASS)
        predictions = predict(raw)
        per_seed[str(seed)] = {name: _balanced(y, p) for name, p in predictions.items()}
        labels.append(y)
        for name, p in predictions.items():
            pooled.setdefault(name, []).append(p)
    y_all = np.concatenate(labels)
    joined = {name: np.concatenate(parts) for name, parts in pooled.items()}
    intervals = {name: _interval(y_all, p, seed=0) for name, p in joined.items()}
    model = "zero-shot (text prompts)"
    best = max((n for n in intervals if n != model), key=lambda n: (intervals[n]["value"], n))
    weight = 1.0 / np.bincount(y_all)[y_all]
    margin = paired_bootstrap(
        weighted_accuracy,
        ((y_all == joined[model]).astype(float), weight),
        ((y_all == joined[best]).astype(float), weight),
        units=y_all,
        unit=UNIT,
        n_resamples=1000,
        seed=0,
    )
    spread = spread_over_seeds(per_seed, intervals)
    return {
        "classes": classes,
        "test": test,
        "test_seed": TEST_SEED,
        "validation_seed": VAL_SEED,
        "probe_C": c,
        "fresh": {
            "seeds": list(fresh),
            "patches": int(len(y_all)),
            "pooled": intervals,
            "per_seed": per_seed,
            "spread": spread,
            "best_baseline": best,
            "margin": margin.as_dict(),
        },
    }


def limit_demo_figures(evaluation: dict[str, Any], command: str) -> dict[str, Any]:
    """The LIMIT tuning demo's figures for the card, from ``medvl-train limit eval``'s
    ``test_evaluation.json`` (its first run): fresh-cohort pooled figures with intervals over
    diagnoses, seed spread, the best baseline and the paired margin, and the test split's."""
    run = evaluation["runs"][0]
    fresh = run["fresh"]
    pooled = fresh["pooled"]
    best = pooled["best_baseline"]
    keep = ("balanced_accuracy", "low", "high")
    return {
        "command": command,
        "fresh_seeds": fresh["seeds"],
        "fresh_slides": pooled["slides"],
        "unit": pooled["unit"],
        "units": pooled["units"],
        "rows": {name: {k: row[k] for k in keep} for name, row in pooled["rows"].items()},
        "spread": fresh["spread"],
        "best_baseline": best,
        "margin_over_best": pooled["margin_over_best"],
        "gain_over_untuned": pooled["gain_over_untuned"],
        "test": {
            "slides": run["test_slides"],
            "rows": {name: {k: row[k] for k in keep} for name, row in run["slide_level"].items()},
            "best_baseline": run["best_baseline"],
            "margin_over_best": run["margin_over_best"],
        },
        "test_split_reads": evaluation["summary"]["test_split_reads"],
        "same_prediction_per_diagnosis": fresh["same_prediction_per_diagnosis"],
    }


def baseline_lines(checks: dict[str, Any]) -> list[str]:
    """The printed table of :func:`demo_baselines` (``demo_recipe baselines``)."""
    fresh = checks["fresh"]
    n = len(checks["classes"])
    lines = [
        f"no-text baselines (fitted on the fit's patches) and {len(fresh['seeds'])} fresh "
        f"cohorts (seeds {fresh['seeds'][0]}-{fresh['seeds'][-1]}, {fresh['patches']} patches)",
        f"{'classifier':<44} test   fresh pooled [95% interval over {n} classes]  seed spread",
    ]
    for name, pooled in fresh["pooled"].items():
        s = fresh["spread"][name]
        lines.append(
            f"{name:<44} {checks['test'][name]:.3f}  {pooled['value']:.3f} [{pooled['low']:.3f}, "
            f"{pooled['high']:.3f}]   {s['mean']:.3f} +- {s['std']:.3f}"
        )
    m = fresh["margin"]
    lines.append(
        f"margin over {fresh['best_baseline']}: {m['difference']:+.3f} [{m['low']:+.3f}, "
        f"{m['high']:+.3f}] (paired bootstrap over {m['n_units']} classes)"
    )
    return lines


def _verdict(margin: dict[str, Any]) -> str:
    """What a paired margin's 95% interval supports, in words."""
    if margin["low"] > 0:
        return "beats the best baseline"
    if margin["high"] < 0:
        return "is below the best baseline"
    return "cannot be told apart from the best baseline (the interval holds 0)"


def _ci(value: float, low: float, high: float, sign: str = "") -> str:
    return f"{value:{sign}.3f} (95% interval {low:{sign}.3f} to {high:{sign}.3f})"


def card_section(checks: dict[str, Any], limit: dict[str, Any] | None) -> str:
    """The model card's "Baselines and fresh cohorts" section (module doc)."""
    fresh = checks["fresh"]
    seeds = fresh["seeds"]
    lines = [
        "## Baselines without text and fresh cohorts",
        f"The same patch-level test with classifiers that use no text, fitted on the fit's own "
        f"patches (linear probe C chosen on validation patches of seed "
        f"{checks['validation_seed']}), then {len(seeds)} fresh cohorts of "
        f"{fresh['patches'] // len(seeds)} patches (seeds {seeds[0]}-{seeds[-1]}, never used "
        "for a fit, a test or a choice), pooled. A prompt stands for a whole tissue class, so "
        f"intervals bootstrap the {len(checks['classes'])} classes, not the patches.",
        "",
        f"| classifier | test (seed {checks['test_seed']}) | fresh pooled [95% interval over "
        "classes] | seed spread mean +- std (min-max) |",
        "|---|---|---|---|",
    ]
    for name, pooled in fresh["pooled"].items():
        s = fresh["spread"][name]
        lines.append(
            f"| {name} | {checks['test'][name]:.3f} | {pooled['value']:.3f} "
            f"[{pooled['low']:.3f}, {pooled['high']:.3f}] | {s['mean']:.3f} +- {s['std']:.3f} "
            f"({s['min']:.3f}-{s['max']:.3f}) |"
        )
    margin = fresh["margin"]
    lines += [
        "",
        f"Margin of the zero-shot model over the best baseline ({fresh['best_baseline']}), "
        f"paired bootstrap over {margin['n_units']} classes: "
        f"{_ci(margin['difference'], margin['low'], margin['high'], '+')}: the zero-shot model "
        f"{_verdict(margin)}. The text side names the six classes, but the features separate "
        "them without any text as well.",
        "",
        "Printed by `python -m medvl_engine.tasks.limit.demo_recipe baselines` (stored under "
        "`baseline_metrics` in config.json).",
    ]
    if limit:
        lines += ["", *_limit_lines(limit)]
    return "\n".join(lines) + "\n"


def _limit_lines(limit: dict[str, Any]) -> list[str]:
    from medvl_engine.tasks.limit.eval_report import row_label

    unit = f"{limit['units']} diagnoses"
    seeds = limit["fresh_seeds"]
    lines = [
        "## LIMIT tuning demo of this model's text tower",
        f"`{limit['command']}` tunes the text tower on a synthetic cohort (recipe "
        "`tasks/limit/recipes/limit_demo.yaml`), then scores the model chosen on validation on "
        f"{len(seeds)} fresh cohorts ({limit['fresh_slides']} slides, seeds {seeds[0]}-"
        f"{seeds[-1]}). Slides of one diagnosis share its prompt (all slides of a diagnosis get "
        f"one prediction for {limit['same_prediction_per_diagnosis']:.0%} of diagnoses), so "
        f"intervals bootstrap the {unit}, not the slides.",
        "",
        "| classifier | text | pooling | fresh pooled BA [95% interval over "
        f"{unit}] | seed spread mean +- std (min-max) |",
        "|---|---|---|---|---|",
    ]
    for name, row in limit["rows"].items():
        label = [part.strip() for part in row_label(name).split("  ") if part.strip()]
        s = limit["spread"][name]
        lines.append(
            f"| {' | '.join(label)} | {row['balanced_accuracy']:.3f} [{row['low']:.3f}, "
            f"{row['high']:.3f}] | {s['mean']:.3f} +- {s['std']:.3f} ({s['min']:.3f}-"
            f"{s['max']:.3f}) |"
        )
    margin, gain, test = limit["margin_over_best"], limit["gain_over_untuned"], limit["test"]
    test_row, test_margin = test["rows"]["tuned/report_guided"], test["margin_over_best"]
    lines += [
        "",
        f"- Margin over the best baseline ({limit['best_baseline']}), paired bootstrap over "
        f"{unit}: {_ci(margin['difference'], margin['low'], margin['high'], '+')}: the tuned "
        f"model {_verdict(margin)}.",
        f"- Gain over the untuned tower: "
        f"{_ci(gain['difference'], gain['low'], gain['high'], '+')}.",
        f"- Test split ({test['slides']} slides, read {limit['test_split_reads']} time(s)): "
        f"LIMIT zero-shot {_ci(test_row['balanced_accuracy'], test_row['low'], test_row['high'])}"
        f"; margin over {test['best_baseline']} "
        f"{_ci(test_margin['difference'], test_margin['low'], test_margin['high'], '+')}.",
    ]
    return lines
