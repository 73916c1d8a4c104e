"""TopKSigLIP evaluation protocol: disjoint splits, `medvl-train topksiglip eval` over seeds,
evaluating a saved model (task.init_from, run.epochs=0), sharded validation on 2 gloo ranks,
and the contrastive ablation under DDP."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from medvl_engine.cli.train import main as train_main
from medvl_engine.models.topksiglip_folder import load_topksiglip, save_topksiglip
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.task import build_task
from medvl_engine.training import RunConfig, train
from tests.support.gloo import join_group, leave

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def task_values(tiny_topk_values):
    """``task_values(tmp_path, **overrides)`` -> TopKSigLIP task settings of the tiny model."""

    def _task_values(tmp_path: Path, **overrides) -> dict:
        values = dict(
            tiny_topk_values(tau_anneal_steps=4),
            synthetic_train=4,
            synthetic_eval=4,
            synthetic_test=6,
            synthetic_size=[192, 128],
            synthetic_dir=str(tmp_path.parent / "topk-synthetic"),
            batch_size=2,
            eval_k_sweep=[],
            probe_steps=20,
            probe_eval_every=10,
            bootstrap_resamples=30,
        )
        values.update(overrides)
        return values

    return _task_values


@pytest.fixture(scope="session")
def write_recipe(task_values):
    """``write_recipe(tmp_path, **task_overrides)`` -> path of a YAML recipe of the tiny task."""

    def _recipe(tmp_path: Path, **task_overrides) -> Path:
        values = task_values(tmp_path, **task_overrides)
        recipe = {
            "run": {
                "lr": 1e-3,
                "epochs": 1,
                "out_dir": str(tmp_path / "runs"),
                "progress": False,
                "device": "cpu",
                "select_metric": "roi_cases",
            },
            "task": values,
        }
        path = tmp_path / "recipe.yaml"
        path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
        return path

    return _recipe


def test_the_three_synthetic_splits_are_disjoint_and_test_is_built_only_on_request(
    tmp_path, task_values
):
    run = RunConfig(out_dir=str(tmp_path / "run"), progress=False)
    task = build_task(TopKSigLIPTaskConfig(**task_values(tmp_path, synthetic_test=0)), run)
    with pytest.raises(Exception, match="task.synthetic_test is 0"):
        task.test_records()
    task = build_task(TopKSigLIPTaskConfig(**task_values(tmp_path)), run)
    test = task.test_records()
    ids = [
        {(r.exam_id, r.laterality) for r in records}
        for records in (task.train_set.records, task.eval_set.records, test)
    ]
    assert [len(x) for x in ids] == [4, 4, 6]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert {r.split for r in test} == {"test"}
    assert all("/test/" in str(r.cc_path) for r in test)


def test_seeds_train_then_eval_prints_intervals_mean_std_and_baselines(
    tmp_path, capsys, write_recipe
):
    recipe = write_recipe(tmp_path)
    assert train_main(["topksiglip", "--config", str(recipe), "run.seeds=[0,1]"]) == 0
    runs = tmp_path / "runs"
    assert (runs / "seed-0" / "best" / "config.json").is_file()
    assert (runs / "seed-1" / "best" / "config.json").is_file()
    capsys.readouterr()

    assert train_main(["topksiglip", "eval", "--config", str(recipe), "run.seeds=[0,1]"]) == 0
    out = capsys.readouterr().out
    assert "TopKSigLIP test split: 6 breasts, never read in training" in out
    assert re.search(r"mean \+- std \(2\)\s+baseline \(no training\)", out)
    saved = json.loads((runs / "test_evaluation.json").read_text())
    assert saved["test_breasts"] == 6 and saved["bootstrap_resamples"] == 30
    assert [m["seed"] for m in saved["models"]] == [0, 1]
    assert [m["model"] for m in saved["models"]] == [
        str(runs / "seed-0" / "best"),
        str(runs / "seed-1" / "best"),
    ]
    pointing = [m["metrics"]["pointing_game"]["value"] for m in saved["models"]]
    summary = saved["mean_std_over_seeds"]["pointing_game"]
    assert summary["mean"] == pytest.approx(np.mean(pointing))
    assert summary["std"] == pytest.approx(np.std(pointing)) and summary["seeds"] == 2
    for model in saved["models"]:
        cancer = model["metrics"]["auroc_cancer"]
        assert cancer["low"] <= cancer["value"] <= cancer["high"]
        assert "probe_auroc_cancer" in model["metrics"]
    baseline = saved["baseline"]
    assert "auroc_cancer" in baseline["metrics"] and "pointing_game" in baseline["metrics"]
    assert re.fullmatch(r"-?(image_max|tissue_mean|p99_9)", baseline["reads"]["auroc_cancer"])
    # the printed table shows the values the JSON holds
    line = re.search(r"auroc_cancer\s+(\d\.\d{3}) \[", out)
    assert line is not None
    assert float(line.group(1)) == pytest.approx(
        saved["models"][0]["metrics"]["auroc_cancer"]["value"], abs=5e-4
    )
    # cancer AUROC by finding: its own block and section, never among the card's metrics
    assert "cancer AUROC by finding" in out
    breasts = saved["cancer_by_finding_breasts"]
    assert set(breasts) >= {"auroc_cancer:with_mass", "auroc_cancer:vs_normal"}
    for model in saved["models"]:
        assert not any(":" in key for key in model["metrics"])
        assert set(model["cancer_by_finding"]) <= set(breasts)


def test_a_validation_report_reads_the_validation_breasts_and_never_the_test_split(
    tmp_path, capsys, write_recipe
):
    from medvl_engine.data.mammo_reports import FINDING_TYPES

    recipe = write_recipe(tmp_path, synthetic_dir=str(tmp_path / "cohort"), synthetic_eval=8)
    assert train_main(["topksiglip", "--config", str(recipe)]) == 0
    cohort = next((tmp_path / "cohort").iterdir())
    assert not (cohort / "test").exists()
    capsys.readouterr()

    args = ["topksiglip", "eval", "--config", str(recipe), "task.report_split=validation"]
    assert train_main(args) == 0
    out = capsys.readouterr().out
    assert "TopKSigLIP validation split: 8 breasts, the ones best/ and the recipe were" in out
    runs = tmp_path / "runs"
    assert not (cohort / "test").exists() and not (runs / "test_evaluation.json").exists()
    saved = json.loads((runs / "validation_evaluation.json").read_text())
    assert saved["split"] == "synthetic_eval" and saved["validation_breasts"] == 8
    (model,) = saved["models"]
    assert not any(key.startswith("probe_") for key in model["metrics"])  # it would choose on them
    # the breasts of each column are the validation records' own labels
    task = build_task(
        TopKSigLIPTaskConfig(**yaml.safe_load(recipe.read_text())["task"]),
        RunConfig(out_dir=str(runs), progress=False),
    )
    records = task.eval_set.records
    for kind in FINDING_TYPES:
        name = kind.replace(" ", "_")
        cancers = sum(bool(r.cancer) and kind in r.findings for r in records)
        without = sum(not r.cancer for r in records)
        assert saved["cancer_by_finding_breasts"][f"auroc_cancer:with_{name}"] == {
            "cancers": cancers,
            "without_cancer": without,
        }


def test_an_unknown_report_split_stops_with_one_sentence(tmp_path, capsys, write_recipe):
    recipe = write_recipe(tmp_path)
    args = ["topksiglip", "eval", "--config", str(recipe), "task.report_split=train"]
    assert train_main(args) != 0
    err = capsys.readouterr().err
    assert "task.report_split='train' is not one of ['test', 'validation', 'fresh']" in err
    assert "Traceback" not in err


def test_a_saved_model_is_evaluated_with_zero_epochs_and_by_the_eval_action(
    tmp_path, capsys, task_values
):
    values = task_values(tmp_path)
    config = TopKSigLIPTaskConfig(**values)
    run = RunConfig(lr=1e-3, epochs=1, out_dir=str(tmp_path / "trained"), progress=False)
    task = build_task(config, run)
    train(task, run)
    saved = tmp_path / "trained" / "final"
    reference = task.evaluate(load_topksiglip(saved))

    zero = RunConfig(epochs=0, out_dir=str(tmp_path / "zero"), progress=False)
    from_saved = dataclasses.replace(config, init_from=str(saved))
    summary = train(build_task(from_saved, zero), zero)
    assert summary["steps"] == 0 and summary["losses"] == []
    (evaluation,) = summary["evaluations"]
    for key, value in reference.items():
        assert evaluation[key] == pytest.approx(value, abs=1e-9)
    before, after = (
        load_file(str(saved / "model.safetensors")),
        load_file(str(tmp_path / "zero" / "final" / "model.safetensors")),
    )
    assert all(torch.equal(before[key], after[key]) for key in before)

    from medvl_engine.tasks.topksiglip.task import ACTIONS

    capsys.readouterr()
    # without the probe and the fitted baseline, eval reads (here: writes) the test cohort and
    # nothing else
    fresh = dataclasses.replace(
        from_saved,
        linear_probe=False,
        shallow_baseline=False,
        synthetic_dir=str(tmp_path / "fresh"),
    )
    assert ACTIONS["eval"](zero, fresh) == 0
    (cohort,) = (tmp_path / "fresh").iterdir()
    assert sorted(path.name for path in cohort.iterdir()) == ["breasts", "test"]
    out = capsys.readouterr().out
    assert f"model: {saved}" in out
    result = json.loads((tmp_path / "zero" / "test_evaluation.json").read_text())
    assert result["models"][0]["seed"] is None
    assert not any(key.startswith("probe_") for key in result["models"][0]["metrics"])


def test_a_model_of_another_geometry_is_refused_in_one_sentence(
    tmp_path, capsys, tiny_topk_model, write_recipe
):

    folder = tmp_path / "grid4"
    save_topksiglip(tiny_topk_model(tmp_path, grid=4, k=2), folder)
    recipe = write_recipe(tmp_path, init_from=str(folder))
    assert train_main(["topksiglip", "eval", "--config", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "reads a 256 px image on a 4x4 grid, the config a 256 px image on a 8x8 grid" in err
    assert "Traceback" not in err


def test_eval_without_saved_models_names_the_folders(tmp_path, capsys, write_recipe):
    recipe = write_recipe(tmp_path)
    assert train_main(["topksiglip", "eval", "--config", str(recipe)]) == 2
    assert f"no saved model in {tmp_path / 'runs' / 'best'}" in capsys.readouterr().err


def test_contrastive_objectives_build_no_logit_bias(tiny_topk_values):
    config = TopKSigLIPTaskConfig(
        **tiny_topk_values(), objective="contrastive", logit_bias_init=0.0
    )
    assert config.model_config().logit_bias_init is None
    sigmoid = TopKSigLIPTaskConfig(**tiny_topk_values(), objective="sigmoid", logit_bias_init=0.0)
    assert sigmoid.model_config().logit_bias_init == 0.0


def _ddp_worker(rank: int, port: int, values: dict, out_dir: str, result_dir: str) -> None:
    join_group(rank, port)
    run = RunConfig(
        lr=1e-3,
        epochs=1,
        out_dir=out_dir,
        progress=False,
        device="cpu",
        dist_timeout_minutes=5,
        ddp_find_unused_parameters=False,
    )
    task = build_task(TopKSigLIPTaskConfig(**values), run)
    summary = train(task, run)
    leave(
        Path(result_dir, f"rank{rank}.json"),
        {"metrics": task.last_metrics, "steps": summary["steps"], "losses": summary["losses"]},
    )


def test_two_ranks_train_the_contrastive_ablation_and_evaluate_as_one_process(
    tmp_path, spawn_ranks, free_port, task_values
):
    # logit_bias_init 0.0 as in the demo recipe: the contrastive loss never reads a bias, so
    # none is built (an unused parameter would stop DDP without find_unused_parameters)
    values = task_values(
        tmp_path, objective="contrastive", logit_bias_init=0.0, synthetic_eval=5, eval_k_sweep=[2]
    )
    build_task(  # write the cohorts once, before the ranks read them
        TopKSigLIPTaskConfig(**values), RunConfig(out_dir=str(tmp_path / "prep"), progress=False)
    )
    results = tmp_path / "results"
    results.mkdir()
    out_dir = tmp_path / "ddp"
    spawn_ranks(_ddp_worker, (free_port(), values, str(out_dir), str(results)))
    ranks = [json.loads((results / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["steps"] == 1 and np.isfinite(ranks[0]["losses"]).all()
    assert ranks[0]["metrics"] == ranks[1]["metrics"]  # both ranks merged every shard
    model = load_topksiglip(out_dir / "final")
    assert model.logit_bias is None
    task = build_task(
        TopKSigLIPTaskConfig(**values), RunConfig(out_dir=str(tmp_path / "one"), progress=False)
    )
    single = task.evaluate(model)
    assert single["roi_cases"] == ranks[0]["metrics"]["roi_cases"]
    assert single.keys() == ranks[0]["metrics"].keys()
    for key, value in single.items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, abs=1e-6), key
