"""`medvl-train topksiglip eval` beyond the test split: fresh synthetic cohorts (pooled, with the
seed spread), the refusal of a used seed, the count of test-split reads, and a manifest of real
image files evaluated unchanged."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from medvl_engine.cli.train import main as train_main
from medvl_engine.errors import ConfigError
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.fresh import fresh_cohort_dataset, fresh_cohort_seeds
from medvl_engine.training import RunConfig

torch.set_num_threads(1)
SAMPLE_DICOM = Path("/work/shared/sample-data/dicom")


def _recipe(tmp_path: Path, tiny_topk_values, model: Path, **task) -> Path:
    values = dict(
        tiny_topk_values(tau_anneal_steps=4),
        synthetic_train=6,
        synthetic_eval=6,
        synthetic_test=6,
        synthetic_size=[192, 128],
        synthetic_dir=str(tmp_path / "cohorts"),
        eval_k_sweep=[],
        linear_probe=False,
        bootstrap_resamples=20,
        init_from=str(model),
    )
    values.update(task)
    recipe = {
        "run": {"epochs": 0, "out_dir": str(tmp_path / "runs"), "progress": False, "device": "cpu"},
        "task": values,
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def test_a_seed_used_for_a_choice_is_refused_as_fresh(
    tmp_path, capsys, tiny_topk_values, tiny_topk
):
    config = TopKSigLIPTaskConfig(fresh_cohorts=3)
    assert fresh_cohort_seeds(config) == [900_000, 900_001, 900_002]
    # the demo's test split is cohort seed 2 (synthetic_seed 0 + 2)
    with pytest.raises(ConfigError, match=r"^seed 2 cannot give a fresh topksiglip cohort"):
        fresh_cohort_seeds(TopKSigLIPTaskConfig(fresh_cohorts=3, fresh_cohort_seed=2))
    # this run's own validation split (synthetic_seed 40 + 1)
    own = TopKSigLIPTaskConfig(synthetic_seed=40, fresh_cohorts=1, fresh_cohort_seed=41)
    with pytest.raises(ConfigError, match="this run's training, data or split seed"):
        fresh_cohort_seeds(own)
    run = RunConfig(out_dir=str(tmp_path / "run"), progress=False)
    with pytest.raises(ConfigError, match="seed 1 cannot give"):
        fresh_cohort_dataset(TopKSigLIPTaskConfig(), run, 1, own.geometry())
    assert not (tmp_path / "run").exists()  # refused before anything is written
    manifest = tmp_path / "m.csv"
    manifest.write_text("exam_id\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="task.fresh_cohorts=0 for a manifest"):
        fresh_cohort_seeds(TopKSigLIPTaskConfig(manifest=str(manifest), fresh_cohorts=1))
    # from the command line: one sentence, exit 2, nothing read
    recipe = _recipe(tmp_path, tiny_topk_values, tiny_topk)
    args = ["topksiglip", "eval", "--config", str(recipe), "task.fresh_cohorts=2"]
    assert train_main([*args, "task.fresh_cohort_seed=1"]) == 2
    err = capsys.readouterr().err
    assert "seed 1 cannot give a fresh topksiglip cohort" in err and "Traceback" not in err
    assert not (tmp_path / "cohorts").exists()


@pytest.mark.slow
def test_fresh_cohorts_are_pooled_and_the_test_split_reads_are_counted(
    tmp_path, capsys, tiny_topk_values, tiny_topk
):
    recipe = _recipe(tmp_path, tiny_topk_values, tiny_topk, fresh_cohorts=2, fresh_cohort_size=8)
    base = ["topksiglip", "eval", "--config", str(recipe)]
    assert train_main([*base, "task.report_split=fresh"]) == 0
    out = capsys.readouterr().out
    assert "fresh cohorts (the headline): 2 cohorts x 8 breasts, cohort seeds 900000-900001" in out
    assert re.search(r"margin auroc_cancer: model - best baseline \(\w+\) = [+-]\d\.\d{3}", out)
    assert "(paired bootstrap over 16 breasts)" in out
    assert "seed spread of" in out
    cohorts = sorted(p.name for p in (tmp_path / "cohorts").iterdir())
    assert not any((tmp_path / "cohorts" / name / "test").exists() for name in cohorts)
    assert any("_fresh900000_" in name for name in cohorts)
    runs = tmp_path / "runs"
    saved = json.loads((runs / "fresh_evaluation.json").read_text())
    fresh = saved["fresh_cohorts"]
    assert fresh["seeds"] == [900_000, 900_001] and saved["test_split_reads"] == 0
    label = str(tiny_topk)
    per_cohort = fresh["per_cohort"][label]["pointing_game"]
    assert len(per_cohort) == 2
    pooled = fresh["pooled"]
    assert pooled["unit"] == "breast" and pooled["units"] == 16
    assert set(pooled["readers"]) == {"intensity", "speck_counter", "tophat_energy", "logistic"}
    spread = fresh["seed_spread"][label]["pointing_game"]
    assert spread["min"] == min(per_cohort) and spread["max"] == max(per_cohort)
    assert spread["std"] == pytest.approx(np.std(per_cohort))
    margin = pooled["models"][0]["margins"]["auroc_cancer"]
    best = pooled["readers"][margin["best_baseline"]]["metrics"]["auroc_cancer"]["value"]
    assert margin["baseline"] == pytest.approx(best)
    assert margin["difference"] == pytest.approx(margin["model"] - best)
    assert margin["model"] == pooled["models"][0]["metrics"]["auroc_cancer"]["value"]
    assert not (runs / "test_evaluation.json").exists()

    for count in (1, 2):
        assert train_main([*base, "task.fresh_cohorts=0"]) == 0
        out = capsys.readouterr().out
        assert f"test split read {count} time(s) from this run folder" in out
        assert "Baselines on the test split" in out
    saved = json.loads((runs / "test_evaluation.json").read_text())
    assert saved["test_split_reads"] == 2
    assert json.loads((runs / "test_reads.json").read_text())["test_split_reads"] == 2


def _write_views(folder: Path, count: int, rng: np.random.Generator) -> list[tuple[Path, Path]]:
    from PIL import Image

    views = []
    for i in range(count):
        pair = []
        for view in ("CC", "MLO"):
            image = (rng.random((160, 112)) * 60 + 40).astype(np.uint8)
            image[40:60, 30:50] = 220  # a bright "lesion" in every breast
            path = folder / f"{i}_L_{view}.png"
            Image.fromarray(image).save(path)
            pair.append(path)
        views.append((pair[0], pair[1]))
    return views


def _manifest(tmp_path: Path, views: list[tuple[Path, Path]]) -> Path:
    rows = []
    for i, (cc, mlo) in enumerate(views):
        cancer = i % 2
        rows.append(
            {
                "exam_id": f"exam{i}",
                "laterality": "L",
                "cc_path": str(cc),
                "mlo_path": str(mlo),
                "birads": 5 if cancer else 1 + i % 3,
                "density": "ABCD"[i % 4],
                "cancer": cancer,
                "findings": "mass" if cancer else ("calcification" if i % 4 == 2 else ""),
                "split": ("train", "train", "val", "test")[i % 4] if i < 24 else "test",
                "roi_boxes": json.dumps({"CC": [[30, 40, 50, 60]]}) if cancer else "",
            }
        )
    path = tmp_path / "manifest.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _dicom_views(folder: Path, count: int) -> list[tuple[Path, Path]]:
    """Both views of breast i: two copies of one real DICOM sample file (one patient), their
    ViewPosition set to CC and MLO: the 14-megapixel JPEG 2000 mammogram for two test breasts
    (one with cancer, one without), the small DX image for the others."""
    import pydicom

    pairs = []
    for name in ("MG1_J2KI.dcm", "dx_image.dcm"):
        views = []
        for view in ("CC", "MLO"):
            dataset = pydicom.dcmread(SAMPLE_DICOM / name)
            dataset.ViewPosition = view
            views.append(folder / f"{view}_{name}")
            dataset.save_as(views[-1])
        pairs.append((views[0], views[1]))
    return [pairs[0] if i in (3, 24) else pairs[1] for i in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["png", "dicom"])
def test_eval_runs_unchanged_on_a_manifest_of_image_files(
    tmp_path, capsys, tiny_topk_values, tiny_topk, source
):
    if source == "dicom":
        if not all((SAMPLE_DICOM / n).is_file() for n in ("MG1_J2KI.dcm", "dx_image.dcm")):
            pytest.skip("the DICOM sample files are not on this machine")
        (tmp_path / "dicom").mkdir()
        views = _dicom_views(tmp_path / "dicom", 32)
    else:
        (tmp_path / "png").mkdir()
        views = _write_views(tmp_path / "png", 32, np.random.default_rng(0))
    manifest = _manifest(tmp_path, views)
    recipe = _recipe(tmp_path, tiny_topk_values, tiny_topk, manifest=str(manifest))
    assert train_main(["topksiglip", "eval", "--config", str(recipe)]) == 0
    out = capsys.readouterr().out
    assert "TopKSigLIP test split: 14 breasts, never read in training" in out
    assert "Baselines on the test split; value [95% bootstrap interval over 14 breasts]" in out
    assert re.search(r"margin auroc_cancer: model - best baseline \(\w+\)", out)
    assert "test split read 1 time(s) from this run folder" in out
    saved = json.loads((tmp_path / "runs" / "test_evaluation.json").read_text())
    assert saved["split"] == "test" and saved["test_breasts"] == 14
    readers = saved["baselines"]["readers"]
    assert "auroc_cancer" in readers["logistic"]["metrics"]  # fitted on the 12 training rows
    assert readers["speck_counter"]["metrics"]["auroc_cancer"]["value"] is not None
    # a manifest run never draws synthetic cohorts, fresh or otherwise
    assert not (tmp_path / "cohorts").exists()
