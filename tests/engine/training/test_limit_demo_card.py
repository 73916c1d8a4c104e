"""The medvl-demo card states its no-text baselines, fresh cohorts and the LIMIT tuning demo as
config.json stores them, and `medvl-train limit eval` scores fresh cohorts end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from medvl_engine.errors import ConfigError

SHIPPED = Path(__file__).resolve().parents[3] / "src/medvl_engine/demo_models/medvl-demo"


def _config() -> dict:
    return json.loads((SHIPPED / "config.json").read_text())


def test_card_is_the_card_its_config_rebuilds():
    from medvl_engine.tasks.limit.demo_recipe import model_card

    card = (SHIPPED / "MODEL_CARD.md").read_text()
    commit = re.search(r"- Source commit: (.*)\n", card).group(1)
    config = _config()
    assert model_card(config, config["test_metrics"], commit) == card


def test_card_gives_every_baseline_and_the_margin_at_the_class_level():
    config = _config()
    checks = config["baseline_metrics"]
    card = (SHIPPED / "MODEL_CARD.md").read_text()
    fresh = checks["fresh"]
    assert len(fresh["seeds"]) == 5 and min(fresh["seeds"]) >= 900_000
    assert any(name.startswith("nearest centroid, raw 64") for name in fresh["pooled"])
    for name, pooled in fresh["pooled"].items():
        assert pooled["n_units"] == 6 and pooled["unit"] == "tissue class"
        row = f"| {name} | {checks['test'][name]:.3f} | {pooled['value']:.3f} "
        assert row in card
    margin = fresh["margin"]
    assert f"paired bootstrap over 6 classes: {margin['difference']:+.3f}" in card
    assert "python -m medvl_engine.tasks.limit.demo_recipe baselines" in card


def test_card_gives_the_limit_demo_at_the_diagnosis_level():
    limit = _config()["limit_demo_evaluation"]
    card = (SHIPPED / "MODEL_CARD.md").read_text()
    assert limit["units"] == 12 and limit["unit"] == "diagnosis"
    assert "medvl-train limit eval --config train/limit_demo.yaml" in card
    method = limit["rows"]["tuned/report_guided"]
    assert f"{method['balanced_accuracy']:.3f} [{method['low']:.3f}, {method['high']:.3f}]" in card
    margin = limit["margin_over_best"]
    assert f"({limit['best_baseline']}), paired bootstrap over 12 diagnoses" in card
    assert f"{margin['difference']:+.3f} (95% interval {margin['low']:+.3f}" in card


def test_card_checks_refuse_a_seed_spent_on_a_choice():
    from medvl_engine.tasks.limit.demo_baselines import VAL_SEED, demo_baselines

    with pytest.raises(ConfigError, match="cannot give a fresh limit cohort"):
        demo_baselines(None, [VAL_SEED], {})  # type: ignore[arg-type]  # refused before any work


@pytest.mark.slow
def test_shipped_baselines_and_fresh_cohorts_come_back():
    from medvl_engine.encoders.demo import load_shipped_demo
    from medvl_engine.tasks.limit.demo_baselines import demo_baselines
    from medvl_engine.tasks.limit.demo_recipe import TEST_PROMPTS

    stated = _config()["baseline_metrics"]
    checks = demo_baselines(load_shipped_demo(), stated["fresh"]["seeds"], TEST_PROMPTS)
    assert checks["test"] == pytest.approx(stated["test"], abs=1e-9)
    for name, pooled in stated["fresh"]["pooled"].items():
        assert checks["fresh"]["pooled"][name]["value"] == pytest.approx(pooled["value"], abs=1e-9)
    assert checks["fresh"]["margin"]["difference"] == pytest.approx(
        stated["fresh"]["margin"]["difference"], abs=1e-9
    )


@pytest.mark.slow
def test_eval_scores_a_fresh_cohort_and_refuses_a_used_seed(tmp_path, capsys):
    from medvl_engine.cli.train import main as train_main

    config = Path(__file__).resolve().parents[3] / "train/limit_demo.yaml"
    common = [
        f"run.out_dir={tmp_path / 'run'}",
        f"task.synthetic_dir={tmp_path / 'data'}",
        "task.synthetic_slides=48",
        "task.eval_robustness=false",
        "task.eval_bootstrap=200",
        "task.fresh_cohorts=1",
        "task.fresh_cohort_size=24",
    ]
    assert train_main(["limit", "--config", str(config), *common, "run.max_steps=3"]) == 0
    capsys.readouterr()
    bad = [*common, "task.fresh_cohort_seed=0"]
    assert train_main(["limit", "eval", "--config", str(config), *bad]) == 2
    assert "seed 0 cannot give a fresh limit cohort" in capsys.readouterr().err
    assert train_main(["limit", "eval", "--config", str(config), *common]) == 0
    printed = capsys.readouterr().out
    assert "FRESH cohorts: 1 new synthetic cohort (seeds 900000-900000" in printed
    assert "HEADLINE (fresh cohorts)" in printed and "over 12 diagnoses" in printed
    saved = json.loads((tmp_path / "run" / "test_evaluation.json").read_text())
    fresh = saved["runs"][0]["fresh"]
    assert fresh["seeds"] == [900000] and fresh["pooled"]["slides"] == 24
    assert set(fresh["pooled"]["rows"]) == set(saved["runs"][0]["slide_level"])
    method = fresh["pooled"]["rows"]["tuned/report_guided"]["balanced_accuracy"]
    assert fresh["per_cohort"]["900000"]["tuned/report_guided"] == pytest.approx(method)
    assert saved["summary"]["gain_measured_on"] == "fresh"
    assert saved["summary"]["test_split_reads"] == 1  # the refused call read nothing


SAMPLE_SLIDE = Path("/work/shared/sample-data/slides/CMU-1-Small-Region.svs")


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLE_SLIDE.is_file(), reason="the sample slide is not on this machine")
def test_eval_runs_unchanged_on_a_manifest_of_real_slide_features(tmp_path, capsys):
    """Patch features of a real H&E slide (medvl features), cut into 16 regions listed in a
    TCGA-style manifest: training and eval print the same table as on synthetic cohorts."""
    from medvl_engine.cli.main import main as medvl_main
    from medvl_engine.cli.train import main as train_main
    from medvl_engine.features.store import FeatureStore
    from medvl_engine.features.store_io import write_store

    assert (
        medvl_main(
            [
                "features",
                str(SAMPLE_SLIDE),
                "--out",
                str(tmp_path / "f"),
                "--encoder",
                "medvl-demo",
                "--patch-size",
                "64",
            ]
        )
        == 0
    )
    store = FeatureStore.open(next((tmp_path / "f").glob("*.zarr")))
    order = np.argsort(store.coords[:, 0] * 100_000 + store.coords[:, 1])
    classes = {
        "breast": ["ductal carcinoma", "lobular carcinoma"],
        "lung": ["adenocarcinoma", "squamous cell carcinoma"],
    }
    rows = []
    for i, part in enumerate(np.array_split(order, 16)):
        organ = "breast" if i % 2 else "lung"
        label = classes[organ][(i // 2) % 2]
        attrs = {
            "patch_size_level0": store.patch_size_level0,
            "patch_size": store.patch_size,
            "target_mpp": store.target_mpp,
            "encoder": store.encoder,
            "slide": f"r{i}",
        }
        write_store(tmp_path / f"r{i}.zarr", store.features[part], store.coords[part], attrs)
        split = "test" if i < 4 else "val" if i < 8 else "train"  # 4 diagnoses in each
        rows.append(
            {
                "slide_id": f"r{i}",
                "organ": organ,
                "report": f"{organ}: {label}.",
                "features": f"r{i}.zarr",
                "split": split,
                "label": label,
            }
        )
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("\n".join(json.dumps(row) for row in rows))
    config = Path(__file__).resolve().parents[3] / "train/limit_demo.yaml"
    overrides = [
        "task.data=manifest",
        f"task.manifest={manifest}",
        "task.fresh_cohorts=0",
        f"run.out_dir={tmp_path / 'run'}",
        "run.max_steps=3",
        "task.eval_robustness=false",
        "task.eval_bootstrap=100",
    ]
    assert train_main(["limit", "--config", str(config), *overrides]) == 0
    capsys.readouterr()
    assert train_main(["limit", "eval", "--config", str(config), *overrides]) == 0
    printed = capsys.readouterr().out
    assert "on the TEST split: 4 slides of 4 diagnoses" in printed
    for label in ("LIMIT zero-shot", "nearest centroid", "linear probe", "margin over the best"):
        assert label in printed
    saved = json.loads((tmp_path / "run" / "test_evaluation.json").read_text())
    assert saved["runs"][0]["baselines_fitted"]["fitted_on"] == "8 training slides"
