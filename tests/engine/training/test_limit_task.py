"""The LIMIT task end to end on tiny data: one-step training, ablation switches, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from medvl_engine.cli.train import main as train_main
from medvl_engine.errors import ConfigError
from medvl_engine.models.limit import load_limit_model
from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig
from medvl_engine.training import RunConfig, train
from tests.support.limit_cohort import write_limit_manifest

REPORTS = {
    "tumor": "Accession: S22-12345\nSections show invasive carcinoma.",
    "fat": "Dr. Smith, MD\nAdipose tissue is present. No tumor.",
    "stroma": "Fibrous stroma is seen.",
}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory, tiny_tower, write_feature_store):
    root = tmp_path_factory.mktemp("limit")
    tiny_tower(root / "bert", out_dim=None)
    tiny_tower(root / "bert").tokenizer.save_pretrained(root / "bert")
    manifest = write_limit_manifest(
        root, write_feature_store, REPORTS, 14, ("test", 11), seed=0, noise=0.3, patches=(5, 30)
    )
    return root, manifest


def _task(cohort, **overrides) -> tuple[LimitTask, RunConfig]:
    root, manifest = cohort
    values = dict(manifest=str(manifest), text_model=str(root / "bert"), num_negatives=2)
    values.update(overrides)
    run = RunConfig(lr=1e-3, epochs=1, max_steps=2, out_dir=str(root / "run"), progress=False)
    return LimitTask(LimitTaskConfig(**values), run), run


def _config(tmp_path: Path, cohort, run: str, task: str = "") -> Path:
    """``tmp_path/limit.yaml``: a run section of the ``run`` lines, a task section on the
    cohort's manifest and tower followed by the ``task`` lines (each "  key: value\\n")."""
    root, manifest = cohort
    config = tmp_path / "limit.yaml"
    config.write_text(
        f"run:\n{run}task:\n  manifest: {manifest}\n  text_model: {root / 'bert'}\n{task}"
    )
    return config


def test_one_training_step_saves_a_loadable_text_tower(cohort, tmp_path):
    task, run = _task(cohort)
    run.out_dir = str(tmp_path / "run")
    assert len(task.splits["val"]) == 1 and len(task.splits["train"]) == 10  # 1% rounds up to 1
    assert "S22" not in task.splits["train"][0].report  # reports are filtered
    model = task.build_model()
    batch = next(iter(task.train_batches(0, 0, 1)))
    assert batch["features"].shape[0] == 3 and batch["features"].shape[2] == 16  # K = N + 1
    assert batch["mask"].sum(1).min() >= 5  # padded, nothing truncated
    terms = task.compute_losses(model, batch)
    assert terms["loss"].ndim == 0 and torch.isfinite(terms["loss"])
    summary = train(task, run)
    assert summary["steps"] == 2 and all(np.isfinite(summary["losses"]))
    assert {"val_loss", "val_retrieval_top1", "val_balanced_accuracy"} <= set(
        summary["evaluations"][-1]
    )
    assert not any(key.startswith("test") for key in summary["evaluations"][-1])
    tuned = load_limit_model(tmp_path / "run" / "final")
    assert tuned.embed_dim == 16 and tuned.tau_attn == pytest.approx(0.05)
    before = model.encode_texts(["invasive carcinoma"])
    assert not torch.allclose(tuned.encode_texts(["invasive carcinoma"]), before)


def test_siglit_trains_its_scale_and_plain_infonce_runs(cohort, tmp_path):
    task, run = _task(cohort, loss="siglit")
    model = task.build_model()
    assert model.logit_scale.requires_grad
    task.compute_losses(model, next(iter(task.train_batches(0, 0, 1))))["loss"].backward()
    assert model.logit_scale.grad is not None and model.logit_scale.grad != 0
    plain, _ = _task(cohort, loss="infonce")
    plain_model = plain.build_model()
    assert not plain_model.logit_scale.requires_grad
    batch = next(iter(plain.train_batches(0, 0, 1)))
    weighted, _ = _task(cohort)
    torch.manual_seed(0)
    weighted_model = weighted.build_model()
    torch.manual_seed(0)
    plain_model = plain.build_model()
    weighted_model.eval(), plain_model.eval()
    # w_ij <= 1 only shrinks the negatives: the weighted loss is never above the plain one
    assert (
        weighted.compute_losses(weighted_model, batch)["loss"]
        <= plain.compute_losses(plain_model, batch)["loss"] + 1e-6
    )


def test_lora_trains_adapters_only_and_saves_merged_weights(cohort, tmp_path):
    task, run = _task(cohort, finetune="lora", lora_rank=4)
    run.out_dir = str(tmp_path / "lora")
    model = task.build_model()
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(
        "lora_" in n or n.startswith("text_tower.projection") for n in trainable
    )
    train(task, run)
    state_file = tmp_path / "lora" / "final" / "model.safetensors"
    from safetensors.torch import load_file

    assert not any("lora" in key for key in load_file(state_file))
    assert load_limit_model(tmp_path / "lora" / "final").embed_dim == 16


def test_random_negatives_cross_organs(cohort):
    task, _ = _task(cohort, negatives="random", num_negatives=4)
    organs = [r.organ for r in task.splits["train"]]
    bags = task.sampler.bags(0)
    assert any(len({organs[i] for i in bag}) == 2 for bag in bags)
    same, _ = _task(cohort, num_negatives=4)
    assert all(len({organs[i] for i in bag}) == 1 for bag in same.sampler.bags(0))


def test_cli_runs_with_overrides_and_reports_bad_ones(cohort, tmp_path, capsys):
    config = _config(tmp_path, cohort, "  epochs: 1\n  progress: false\n", "  num_negatives: 2\n")
    out = tmp_path / "cli"
    status = train_main(
        [
            "limit",
            "--config",
            str(config),
            f"run.out_dir={out}",
            "run.max_steps=1",
            "eval_bootstrap=10",
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "untuned" in printed and "top-100" in printed and '"steps": 1' in printed
    assert "over 3 templates x 5 cancer terms" in printed  # the cohort has a "tumor" class
    assert "validation slides" in printed  # the report after training reads val only
    saved = json.loads((out / "validation_report.json").read_text())
    overall = saved["tuned/report_guided"]["overall"]
    assert overall["definition"] == "organ_mean"
    per_organ = saved["tuned/report_guided"]["per_organ"]
    mean = sum(v["balanced_accuracy"] for v in per_organ.values()) / len(per_organ)
    assert overall["balanced_accuracy"] == pytest.approx(mean)
    random = saved["tuned/random"]["overall"]
    assert len(random["trials"]) == 10
    assert random["balanced_accuracy"] == pytest.approx(np.mean(random["trials"]))
    robust = saved["tuned/robustness"]
    assert len(robust["pairs"]) == 15
    assert robust["mean"] == pytest.approx(
        np.mean([p["balanced_accuracy"] for p in robust["pairs"]])
    )
    assert train_main(["limit", "--config", str(config), "task.num_negatives=many"]) == 2
    assert "task.num_negatives must be int" in capsys.readouterr().err


def test_projection_to_a_wider_vision_space_composes_with_an_existing_one(tmp_path, tiny_tower):
    from medvl_engine.tasks.limit.tower import projection_to

    tower = tiny_tower(tmp_path / "bert", out_dim=8)  # like CONCH v1 text -> 512
    tokens = tower.tokenize(["invasive carcinoma", "fat"])
    with torch.no_grad():
        narrow = tower(tokens["input_ids"], tokens["attention_mask"])  # [2, 8]
        old = tower.projection
        merged = projection_to(tower, 16)
        extra_free = merged.weight @ torch.linalg.pinv(old.weight)  # recover W_new
        tower.projection = merged
        wide = tower(tokens["input_ids"], tokens["attention_mask"])
    assert wide.shape == (2, 16) and tower.output_dim == 16
    torch.testing.assert_close(wide, narrow @ extra_free.T, rtol=1e-4, atol=1e-5)


def test_report_filter_can_be_a_python_callable(cohort):
    task, _ = _task(cohort, report_filter="medvl_engine.data.reports:filter_report")
    assert "S22" not in task.splits["train"][0].report
    raw, _ = _task(cohort, report_filter="none")
    assert any("S22" in r.report for r in raw.splits["train"])
    with pytest.raises(ConfigError, match="cannot be imported"):
        _task(cohort, report_filter="medvl_engine.data.reports:nope")
    with pytest.raises(ConfigError, match="rules, none or"):
        _task(cohort, report_filter="llm")


def test_protocol_options_reach_the_evaluation_and_bad_ones_are_refused(cohort):
    task, _ = _task(cohort, eval_overall="pooled", eval_random_trials=3, eval_random_patches=2)
    model = task.build_model().eval()
    result = task.zero_shot(model, "test", trials=0)
    assert result["overall"]["definition"] == "pooled"
    assert result["overall"]["balanced_accuracy"] == result["pooled"]["balanced_accuracy"]
    random = task.zero_shot(model, "test", trials=0, pooling="random")
    assert len(random["overall"]["trials"]) == 3
    custom, _ = _task(
        cohort,
        eval_robustness_templates=["{class} in {tissue}", "{tissue}: {class}"],
        eval_robustness_synonyms=["tumor", "neoplasm"],
    )
    robust = custom.robustness(model, "test")
    assert [(p["template"], p["term"]) for p in robust["pairs"]] == [
        ("{class} in {tissue}", "tumor"),
        ("{class} in {tissue}", "neoplasm"),
        ("{tissue}: {class}", "tumor"),
        ("{tissue}: {class}", "neoplasm"),
    ]
    with pytest.raises(ConfigError, match="must be at least 1"):
        _task(cohort, eval_random_trials=0)
    with pytest.raises(ConfigError, match="eval_report_organs must be 0 or more"):
        _task(cohort, eval_report_organs=-1)
    bad, _ = _task(cohort, eval_robustness_templates=["{organ} {class}"])
    with pytest.raises(ConfigError, match="use only the fields"):
        bad.robustness(model, "test")


def test_training_never_reads_the_test_split_and_eval_reads_it_once(cohort, tmp_path, capsys):
    from medvl_engine.features.bags import BagCache

    root, _ = cohort
    config = _config(
        tmp_path,
        cohort,
        "  epochs: 1\n  progress: false\n  select_metric: val_balanced_accuracy\n",
        "  num_negatives: 2\n  eval_bootstrap: 20\n  eval_robustness: false\n",
    )
    test_stores = {root / f"s{i}.zarr" for i in (11, 12, 13)}
    read: list = []
    original = BagCache.get

    def recording_get(self, path):
        read.append(Path(path))
        return original(self, path)

    out = tmp_path / "run"
    overrides = [f"run.out_dir={out}", "run.max_steps=2", "run.seeds=[0,1]"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BagCache, "get", recording_get)
        assert train_main(["limit", "--config", str(config), *overrides]) == 0
        assert read and not test_stores & set(read)  # training and its reports: no test slide
        read.clear()
        capsys.readouterr()
        assert train_main(["limit", "eval", "--config", str(config), *overrides]) == 0
        assert test_stores <= set(read)
    printed = capsys.readouterr().out
    assert "seed 0:" in printed and "seed 1:" in printed and "mean +- std over 2 run(s)" in printed
    saved = json.loads((out / "test_evaluation.json").read_text())
    assert [run["seed"] for run in saved["runs"]] == [0, 1]
    first = saved["runs"][0]
    assert first["test_slides"] == 3 and first["model"].endswith("seed-0/best")
    rows = first["slide_level"]
    assert set(rows) == {
        "tuned/report_guided",
        "untuned/report_guided",
        "tuned/mean",
        "untuned/mean",
        "nearest_centroid/mean",
        "nearest_centroid/random",
        "linear_probe/mean",
        "linear_probe/random",
    }
    for row in rows.values():
        assert row["low"] <= row["balanced_accuracy"] <= row["high"]
    # a manifest of real-style stores prints the same table: baselines beside the model, the
    # interval named by its unit (3 test diagnoses, not 3 slides), the paired margin
    assert first["unit"] == "diagnosis" and first["units"] == 3
    assert first["baselines_fitted"]["fitted_on"] == "10 training slides"
    best = first["best_baseline"]
    margin = first["margin_over_best"]
    assert margin["difference"] == pytest.approx(
        rows["tuned/report_guided"]["balanced_accuracy"] - rows[best]["balanced_accuracy"]
    )
    assert margin["n_units"] == 3 and margin["low"] <= margin["difference"] <= margin["high"]
    for label in ("nearest centroid", "linear probe C=", "no text  mean", "no text  random"):
        assert label in printed
    assert "bootstrap over 3 diagnoses" in printed and "margin over the best baseline" in printed
    assert "has been read 1 time" in printed
    assert json.loads((out / "test_reads.json").read_text())["test_split_reads"] == 1
    tuned = [
        run["slide_level"]["tuned/report_guided"]["balanced_accuracy"] for run in saved["runs"]
    ]
    mean = saved["summary"]["mean_std"]["slide tuned/report_guided"]
    assert mean["mean"] == pytest.approx(np.mean(tuned)) and mean["n"] == 2
    assert mean["std"] == pytest.approx(np.std(tuned))


@pytest.mark.parametrize(
    ("task_lines", "words"),
    [
        ("", ["train first"]),  # says what to run
        ("  fresh_cohorts: 2\n", ["task.fresh_cohorts", "task.data=synthetic"]),
    ],
    ids=["without-a-trained-model", "fresh-cohorts-of-a-manifest"],
)
def test_eval_refusals_are_one_sentence(cohort, tmp_path, capsys, task_lines, words):
    config = _config(tmp_path, cohort, f"  out_dir: {tmp_path / 'none'}\n", task_lines)
    assert train_main(["limit", "eval", "--config", str(config)]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert all(word in error for word in words), error
