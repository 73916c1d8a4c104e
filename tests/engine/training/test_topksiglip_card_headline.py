"""The fresh-cohort headline of the TopKSigLIP model card, from an evaluation JSON."""

from __future__ import annotations

from medvl_engine.tasks.topksiglip.card_sections import headline_section, with_headline


def _interval(value: float, low: float, high: float) -> dict:
    return {"value": value, "low": low, "high": high, "std": 0.01}


def _evaluation() -> dict:
    margin = {
        "model": 0.9,
        "baseline": 0.8,
        "difference": 0.1,
        "low": 0.07,
        "high": 0.13,
        "best_baseline": "logistic",
    }
    return {
        "test_split_reads": 3,
        "fresh_cohorts": {
            "seeds": [900000, 900001],
            "cohort_size": 400,
            "pooled": {
                "unit": "breast",
                "units": 800,
                "level": 0.95,
                "bootstrap_resamples": 1000,
                "readers": {
                    "speck_counter": {
                        "reads": "top-hat peaks",
                        "metrics": {"auroc_cancer": _interval(0.78, 0.75, 0.81)},
                    },
                    "logistic": {
                        "reads": "logistic regression",
                        "metrics": {"auroc_cancer": _interval(0.8, 0.77, 0.83)},
                    },
                },
                "models": [
                    {
                        "model": "topksiglip-demo",
                        "metrics": {"auroc_cancer": _interval(0.9, 0.88, 0.92)},
                        "margins": {"auroc_cancer": margin},
                    }
                ],
            },
            "per_cohort": {"topksiglip-demo": {"auroc_cancer": [0.88, 0.92]}},
            "seed_spread": {
                "topksiglip-demo": {
                    "auroc_cancer": {"mean": 0.9, "std": 0.02, "min": 0.88, "max": 0.92}
                }
            },
            "margin_by_cohort": {"topksiglip-demo": {"auroc_cancer": [0.06, 0.14]}},
        },
    }


def test_headline_names_pooled_values_spread_baselines_margin_and_test_reads():
    text = headline_section(_evaluation(), "medvl-train topksiglip eval ...")
    assert "`medvl-train topksiglip eval ...`: 2 new cohorts of 400 breasts" in text
    assert "cohort seeds 900000-900001" in text
    row = "| auroc_cancer | 0.900 [0.880, 0.920] | 0.880 / 0.920 / 0.020 | 0.780 [0.750, 0.810] "
    assert row in text
    assert (
        "- auroc_cancer: model - logistic = +0.100 [+0.070, +0.130] (paired bootstrap over "
        "800 breasts; per cohort +0.060 to +0.140): the model is better"
    ) in text
    assert "read 3 time(s)" in text


def test_with_headline_goes_after_the_notice_and_needs_fresh_cohorts():
    card = "# title\n\n**Demo, not for diagnosis.**\n\nA small model.\n\n## How it was built\n"
    placed = with_headline(card, _evaluation(), "cmd")
    assert (
        placed.index("not for diagnosis")
        < placed.index("## Headline")
        < placed.index("A small model")
    )
    assert with_headline(card, {"models": []}, "cmd") == card
