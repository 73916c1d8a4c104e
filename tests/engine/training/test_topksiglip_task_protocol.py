"""TopKSigLIP evaluation protocol: missing labels, BI-RADS 0/6 rows, k sweep, linear probe,
train_fraction."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from medvl_engine.data.mammo_dataset import record_attributes
from medvl_engine.data.mammo_manifest import read_mammo_manifest, read_mammo_manifest_contents
from medvl_engine.data.mammo_reports import CANCER_SENTENCES
from medvl_engine.errors import ConfigError
from medvl_engine.losses import tabular_similarity
from medvl_engine.tasks.topksiglip.cohorts import stratified_subset
from medvl_engine.tasks.topksiglip.config import TopKSigLIPTaskConfig
from medvl_engine.tasks.topksiglip.evaluation import (
    MammoEvalOutputs,
    fit_linear_probe,
    linear_probe_auroc,
    linear_probe_metrics,
    probe_readouts,
)
from medvl_engine.tasks.topksiglip.task import build_task, report
from medvl_engine.training import RunConfig, train

torch.set_num_threads(1)

HEADER = "exam_id,laterality,cc_path,mlo_path,report,birads,density,cancer,findings,roi_boxes,split"


def _naive_masked_cosine(a: np.ndarray) -> np.ndarray:
    count = len(a)
    out = np.zeros((count, count))
    for i in range(count):
        for j in range(count):
            if i == j:
                out[i, j] = 1.0
                continue
            both = ~np.isnan(a[i]) & ~np.isnan(a[j])
            x, y = a[i][both], a[j][both]
            norm = math.sqrt(float(x @ x)) * math.sqrt(float(y @ y))
            out[i, j] = float(x @ y) / norm if norm > 0 else 0.0
    return out


def test_tabular_similarity_over_shared_fields_matches_a_loop():
    rng = np.random.default_rng(0)
    a = (rng.random((9, 15)) < 0.4).astype(np.float64)
    a[1, 5:9] = np.nan  # density missing
    a[2, 9:11] = np.nan  # cancer missing
    a[3, 11:] = np.nan  # findings missing
    a[4, :5] = np.nan
    a[4, 9:] = np.nan  # only density known
    a[5, :] = np.nan  # nothing known
    got = tabular_similarity(torch.from_numpy(a)).numpy()
    np.testing.assert_allclose(got, _naive_masked_cosine(a), atol=1e-6)
    full = torch.from_numpy((rng.random((6, 15)) < 0.5).astype(np.float32) + 0.01)
    unit = torch.nn.functional.normalize(full, dim=-1)
    torch.testing.assert_close(tabular_similarity(full), unit @ unit.T)  # no NaN: plain cosine


def test_missing_labels_read_as_none_and_nan_attributes(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(
        "\n".join(
            [
                HEADER,
                "e1,L,a.dcm,b.dcm,,,,1,NA,,train",  # RSNA style: cancer only
                "e2,R,a.dcm,b.dcm,,3,B,,mass,,train",  # VinDr style: no cancer
                "e3,L,a.dcm,b.dcm,,2,A,0,,,train",  # complete; empty findings = none
            ]
        )
        + "\n"
    )
    rsna, vindr, full = read_mammo_manifest(path)
    assert (rsna.birads, rsna.density, rsna.cancer, rsna.findings) == (None, None, True, None)
    assert rsna.report == CANCER_SENTENCES[True]  # built from the one label present
    assert "BIRADS" not in rsna.report
    assert (vindr.cancer, vindr.findings) == (None, ["mass"])
    assert full.findings == []
    vector = record_attributes(rsna)
    assert np.isnan(vector[:9]).all() and np.isnan(vector[11:]).all()
    assert list(vector[9:11]) == [0.0, 1.0]
    assert not np.isnan(record_attributes(full)).any()


def test_birads_0_and_6_rows_are_skipped_and_counted(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(
        "\n".join(
            [
                HEADER,
                "e1,L,a.dcm,b.dcm,,0,A,0,,,train",
                "e2,L,a.dcm,b.dcm,,6,A,1,,,test",
                "e3,L,a.dcm,b.dcm,,6.0,B,1,,,train",
                "e4,L,a.dcm,b.dcm,,4,C,1,,,train",
            ]
        )
        + "\n"
    )
    contents = read_mammo_manifest_contents(path)
    assert [r.exam_id for r in contents.records] == ["e4"]
    assert contents.skipped_birads_0_6 == 3
    assert read_mammo_manifest_contents(path, split="train").skipped_birads_0_6 == 2


def _outputs(embeddings, cancer, cancer_known, density):
    count = len(cancer)
    return MammoEvalOutputs(
        embeddings=embeddings,
        importance=None,
        birads=np.zeros(count, int),  # all missing
        density=density,
        cancer=cancer,
        findings=np.zeros((count, 4), bool),
        boxes=[np.zeros((0, 4))] * count,
        cancer_known=cancer_known,
        findings_known=np.zeros(count, bool),
    )


def _separable(count, seed, flip_unknown):
    gen = torch.Generator().manual_seed(seed)
    cancer = (torch.arange(count) % 2).numpy().astype(bool)
    x = torch.randn(count, 6, generator=gen) * 0.2
    x[:, 0] += torch.from_numpy(cancer.astype(np.float32)) * 2 - 1
    known = np.arange(count) % 5 != 0
    if flip_unknown:  # rows without a label carry the opposite signal: must not matter
        x[~torch.from_numpy(known), 0] *= -1
    density = np.where(np.arange(count) % 3 == 0, -1, np.arange(count) % 2)
    x[:, 1] += torch.from_numpy((density == 1).astype(np.float32)) * 2
    return _outputs(x, cancer, known, density)


def test_linear_probe_metrics_mask_missing_labels():
    train_set, val, test = _separable(60, 0, True), _separable(30, 1, True), _separable(40, 2, True)
    metrics = linear_probe_metrics(train_set, val, test, steps=300, eval_every=50)
    assert metrics["probe_auroc_cancer"] > 0.95
    assert metrics["probe_auroc_density"] > 0.95  # density -1 rows left out, 2 classes left
    assert not any("birads" in key or "mass" in key for key in metrics)  # no labels: left out
    known = test.known("cancer")
    assert known.sum() == 32
    # The AUROC is over the labelled test rows only: equal to the probe on that subset.
    subset = linear_probe_auroc(
        train_set.embeddings[torch.from_numpy(train_set.known("cancer"))],
        train_set.cancer[train_set.known("cancer")].astype(int),
        test.embeddings[torch.from_numpy(known)],
        test.cancer[known].astype(int),
        2,
        steps=300,
        val_x=val.embeddings[torch.from_numpy(val.known("cancer"))],
        val_y=val.cancer[val.known("cancer")].astype(int),
        eval_every=50,
    )
    assert metrics["probe_auroc_cancer"] == pytest.approx(subset)


def test_linear_probe_keeps_the_best_validation_check():
    gen = torch.Generator().manual_seed(0)
    labels = (torch.arange(80) % 2).numpy()
    x = torch.randn(80, 4, generator=gen)
    x[:, 0] += torch.from_numpy(labels * 3.0 - 1.5)
    # The validation set rewards the opposite direction: the first check (small weights,
    # nearly random) beats every later one, so the kept layer scores low on the test set.
    val_x, val_y = x[40:].clone(), 1 - labels[40:]
    selected = linear_probe_auroc(
        x[:40],
        labels[:40],
        x[40:],
        labels[40:],
        2,
        steps=200,
        val_x=val_x,
        val_y=val_y,
        eval_every=1,
    )
    last = linear_probe_auroc(x[:40], labels[:40], x[40:], labels[40:], 2, steps=200)
    assert last > 0.95 and selected < last


def test_every_probe_setting_reaches_the_one_fit():
    train_set, val, test = (
        _separable(40, 0, False),
        _separable(20, 1, False),
        _separable(30, 2, False),
    )
    settings = {
        "steps": 20,
        "lr": 1e-2,
        "weight_decay": 0.1,
        "batch_size": 8,
        "eval_every": 5,
        "seed": 3,
    }
    train_known, val_known = train_set.known("cancer"), val.known("cancer")
    probs = fit_linear_probe(
        train_set.embeddings[torch.from_numpy(train_known)],
        train_set.cancer[train_known].astype(int),
        test.embeddings,
        2,
        val_x=val.embeddings[torch.from_numpy(val_known)],
        val_y=val.cancer[val_known].astype(int),
        **settings,
    )
    column = probe_readouts(train_set, val, test, **settings)[0]["probe_auroc_cancer"]
    np.testing.assert_array_equal(column, probs[:, 1])  # the same fit, to the bit
    # each setting changes the fit, so none is dropped on its way to it (without a validation
    # set the last step is kept; with one, the check it keeps moves with eval_every)
    last = probe_readouts(train_set, None, test, **settings)[0]["probe_auroc_cancer"]
    for name, other in (
        ("steps", 21),
        ("lr", 2e-2),
        ("weight_decay", 0.5),
        ("batch_size", 9),
        ("seed", 4),
    ):
        changed = probe_readouts(train_set, None, test, **{**settings, name: other})[0]
        assert not np.array_equal(changed["probe_auroc_cancer"], last), name
    checked = probe_readouts(train_set, val, test, **{**settings, "eval_every": 1})[0]
    assert not np.array_equal(checked["probe_auroc_cancer"], column)


def test_stratified_subset_is_seeded_and_keeps_each_stratum(tmp_path):
    from medvl_engine.data.mammo_manifest import MammoRecord

    records = [
        MammoRecord(
            exam_id=str(i),
            laterality="L",
            cc_path=tmp_path / "a",
            mlo_path=tmp_path / "b",
            birads=1 + i % 5,
            density="A",
            cancer=i % 10 == 0,
            findings=[],
            report="r",
        )
        for i in range(100)
    ]
    half = stratified_subset(records, 0.5, seed=0)
    assert len(half) == 50  # strata: BI-RADS 1 with / without cancer (10 each), 2-5 (20 each)
    again = stratified_subset(records, 0.5, seed=0)
    other = stratified_subset(records, 0.5, seed=1)
    assert [r.exam_id for r in half] == [r.exam_id for r in again]
    assert [r.exam_id for r in half] != [r.exam_id for r in other]
    for birads in range(1, 6):
        for cancer in (False, True):
            full = [r for r in records if (r.birads, r.cancer) == (birads, cancer)]
            kept = [r for r in half if (r.birads, r.cancer) == (birads, cancer)]
            assert len(kept) == len(full) // 2


def _cohort_manifest(tmp_path):
    from medvl_engine.synthetic import make_mammogram_cohort

    make_mammogram_cohort(tmp_path / "cohort", 14, seed=5, size=(192, 128))
    source = tmp_path / "cohort" / "manifest.csv"
    with source.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    splits = ["train"] * 6 + ["val"] * 4 + ["test"] * 4
    for i, row in enumerate(rows):
        row.update(split=splits[i], cancer=str(i % 2), density="AB"[(i // 2) % 2], report="")
        row["birads"] = str(1 + i % 5)
    rows[0]["birads"] = "0"  # skipped and counted
    rows[1]["density"] = "NA"  # missing labels are kept
    rows[3]["cancer"] = ""
    manifest = tmp_path / "cohort" / "edited.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return manifest


def test_training_evaluates_val_only_and_eval_action_runs_k_sweep_and_probe_on_test(
    tmp_path, capsys, monkeypatch, tiny_topk_values
):
    manifest = _cohort_manifest(tmp_path)
    task_config = TopKSigLIPTaskConfig(
        **tiny_topk_values(),
        manifest=str(manifest),
        batch_size=2,
        eval_k_sweep=[2, 5, 100],
        probe_steps=40,
        probe_eval_every=10,
        augment=False,
        bootstrap_resamples=20,
    )
    run = RunConfig(
        lr=1e-3, epochs=1, out_dir=str(tmp_path / "run"), progress=False, select_metric="roi_cases"
    )
    task = build_task(task_config, run)
    assert "1 rows with BI-RADS 0 or 6 skipped" in capsys.readouterr().out
    assert len(task.train_set) == 5 and len(task.eval_set) == 4
    assert {r.split for r in task.train_set.records} == {"train"}
    assert {r.split for r in task.eval_set.records} == {"val"}  # the task holds no test row
    # training reads no manifest again: the test split is never asked for
    import medvl_engine.tasks.topksiglip.training_task as task_module

    asked = []
    reader = task_module.read_mammo_manifest_contents
    monkeypatch.setattr(
        task_module,
        "read_mammo_manifest_contents",
        lambda *a, **k: asked.append(k.get("split")) or reader(*a, **k),
    )
    summary = train(task, run)
    assert asked == []
    assert np.isfinite(summary["losses"]).all()  # rows with missing labels train
    metrics = summary["evaluations"][-1]
    assert "auroc_cancer@k2" in metrics and "auroc_cancer@k5" in metrics
    assert not any(key.endswith("@k100") for key in metrics)  # above the 8x8 grid
    assert not any(key.startswith("probe_") for key in metrics)  # the probe reads test: eval only
    report(task, summary)
    assert summary["skipped_birads_0_6"] == 1
    assert (summary["train_rows"], summary["train_rows_total"]) == (5, 5)

    from medvl_engine.tasks.topksiglip.task import ACTIONS

    assert ACTIONS["eval"](run, task_config) == 0
    assert asked[-1] == "test"
    saved = json.loads((tmp_path / "run" / "test_evaluation.json").read_text())
    assert saved["test_breasts"] == 4 and saved["split"] == "test"
    (model,) = saved["models"]
    assert model["model"] == str(tmp_path / "run" / "best")
    probe = model["metrics"]["probe_auroc_cancer"]
    assert 0.0 <= probe["value"] <= 1.0
    assert "auroc_cancer@k2" in model["metrics"]
    assert "probe_auroc_cancer" in capsys.readouterr().out


def test_train_fraction_keeps_a_stratified_share(tmp_path, tiny_topk_values):
    manifest = _cohort_manifest(tmp_path)
    values = dict(tiny_topk_values(), manifest=str(manifest), batch_size=2)
    run = RunConfig(out_dir=str(tmp_path / "run"), progress=False)
    task = build_task(TopKSigLIPTaskConfig(**values, train_fraction=0.5), run)
    full = build_task(TopKSigLIPTaskConfig(**values), run)
    assert task.train_rows_total == len(full.train_set) == 5
    kept = {r.exam_id + r.laterality for r in task.train_set.records}
    assert len(kept) == 2  # round(0.5 * 5)
    assert len(task.probe_train_records) == 5  # the probe fits on the whole training split
    assert kept < {r.exam_id + r.laterality for r in full.train_set.records}
    with pytest.raises(ConfigError, match="train_fraction=0.0 is outside"):
        build_task(TopKSigLIPTaskConfig(**values, train_fraction=0.0), run)
