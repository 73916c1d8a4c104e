"""LIMIT validation split over ranks: each rank scores its share of the validation bags and
slides, and the merged parts give the metrics of one process (2 gloo ranks)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig
from medvl_engine.training import RunConfig
from tests.support.gloo import WORLD, join_group, leave
from tests.support.limit_cohort import write_limit_manifest

REPORTS = {
    "tumor": "Sections show invasive carcinoma.",
    "fat": "Adipose tissue is present. No tumor.",
    "stroma": "Fibrous stroma is seen.",
}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory, tiny_tower, write_feature_store) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("limit-shards")
    tiny_tower(root / "bert", out_dim=None)
    tiny_tower(root / "bert").tokenizer.save_pretrained(root / "bert")
    manifest = write_limit_manifest(
        root, write_feature_store, REPORTS, 21, ("val", 14), seed=1, noise=0.8, patches=(6, 40)
    )  # 7 validation slides
    return root, manifest


def _task(root: Path, manifest: Path, **overrides) -> LimitTask:
    values = dict(manifest=str(manifest), text_model=str(root / "bert"), num_negatives=2)
    values.update(overrides)
    run = RunConfig(out_dir=str(root / "run"), progress=False, seed=5)
    return LimitTask(LimitTaskConfig(**values), run)


def _model(task: LimitTask):
    torch.manual_seed(0)  # the projection from the tower (32) to the features (16) is new
    return task.build_model().eval()


@pytest.mark.parametrize("pooling", ["report_guided", "random"])
def test_merged_shards_equal_one_process_and_cover_every_slide_once(cohort, pooling):
    task = _task(*cohort, eval_pooling=pooling)
    model = _model(task)
    with torch.no_grad():
        single = task.evaluate(model)
        parts = [task.evaluate_shard(model, rank, 3) for rank in range(3)]
    assert set(single) == {"val_loss", "val_retrieval_top1", "val_balanced_accuracy"}
    assert [len(part["rows"]) for part in parts] == [3, 2, 2]  # 7 slides, rank::3
    slides = sorted(index for part in parts for index, _ in part["rows"])
    assert slides == list(range(7))
    bags = sorted(index for part in parts for index, _, _ in part["bags"])
    assert bags == list(range(7))
    merged = task.merge_evaluation(list(reversed(parts)))  # the order of parts does not matter
    assert merged.keys() == single.keys()
    for key, value in single.items():
        assert merged[key] == pytest.approx(value, abs=1e-6), key
    if pooling == "random":
        trials = parts[0]["rows"][0][1]
        assert len(trials) == task.config.eval_random_trials  # every trial's prediction


def test_one_process_evaluation_keeps_the_zero_shot_figure_of_the_report(cohort):
    task = _task(*cohort)
    model = _model(task)
    with torch.no_grad():
        metrics = task.evaluate(model)
        reference = task.zero_shot(model, "val", trials=0)
    assert metrics["val_balanced_accuracy"] == pytest.approx(
        reference["overall"]["balanced_accuracy"], abs=1e-12
    )
    assert 0.0 <= metrics["val_retrieval_top1"] <= 1.0 and np.isfinite(metrics["val_loss"])


def _worker(rank: int, port: int, root: str, manifest: str, out_dir: str, result_dir: str):
    """One of 2 gloo ranks: first the validation shards of the untrained model, gathered and
    merged; then a 2-step training run in the same group, which evaluates as it trains."""
    from medvl_engine.training import train
    from medvl_engine.training.distributed import gather_objects

    join_group(rank, port)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD)
    task = _task(Path(root), Path(manifest))
    model = _model(task)
    with torch.no_grad():
        part = task.evaluate_shard(model, rank, WORLD)
    merged = task.merge_evaluation(gather_objects(part))
    shards = {"metrics": merged, "slides": [index for index, _ in part["rows"]]}

    task = _task(Path(root), Path(manifest))
    run = RunConfig(
        lr=1e-3,
        epochs=1,
        max_steps=2,
        out_dir=out_dir,
        progress=False,
        seed=5,
        device="cpu",
        dist_timeout_minutes=5,
    )
    summary = train(task, run)  # joins the group above, which it leaves in place
    trained = {"evaluations": summary["evaluations"], "metrics": task.last_metrics}
    leave(Path(result_dir, f"rank{rank}.json"), {"shards": shards, "trained": trained})


@pytest.fixture(scope="module")
def two_ranks(cohort, tmp_path_factory, spawn_ranks, free_port) -> tuple[list[dict], Path]:
    """What each of 2 gloo ranks reported (the shards of the untrained model, then its own
    training run), and the folder the run saved its model to."""
    root, manifest = cohort
    folder = tmp_path_factory.mktemp("two-ranks")
    results, out_dir = folder / "results", folder / "ddp"
    results.mkdir()
    spawn_ranks(_worker, (free_port(), str(root), str(manifest), str(out_dir), str(results)))
    ranks = [json.loads((results / f"rank{r}.json").read_text()) for r in range(WORLD)]
    return ranks, out_dir


def test_two_gloo_ranks_give_the_metrics_of_one_process(cohort, two_ranks):
    root, manifest = cohort
    ranks = [rank["shards"] for rank in two_ranks[0]]
    assert ranks[0]["slides"] == [0, 2, 4, 6] and ranks[1]["slides"] == [1, 3, 5]
    assert ranks[0]["metrics"] == ranks[1]["metrics"]  # every rank merged every part
    task = _task(root, manifest)
    with torch.no_grad():
        single = task.evaluate(_model(task))
    assert ranks[0]["metrics"].keys() == single.keys()
    for key, value in single.items():
        assert ranks[0]["metrics"][key] == pytest.approx(value, abs=1e-6), key


def test_two_ranks_train_and_evaluate_the_saved_model_as_one_process(cohort, two_ranks):
    from medvl_engine.models.limit import load_limit_model

    root, manifest = cohort
    ranks, out_dir = [rank["trained"] for rank in two_ranks[0]], two_ranks[1]
    assert ranks[0]["metrics"] == ranks[1]["metrics"]  # both ranks evaluated and merged
    assert ranks[1]["evaluations"] == [] and len(ranks[0]["evaluations"]) == 1
    task = _task(root, manifest)
    task.build_model()  # the tokenizer for the validation bags
    model = load_limit_model(out_dir / "final").eval()
    model.tau_attn = task.config.tau_attn
    with torch.no_grad():
        single = task.evaluate(model)
    for key, value in single.items():
        assert ranks[0]["evaluations"][0][key] == pytest.approx(value, abs=1e-6), key
