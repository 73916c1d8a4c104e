"""Training bags that sample patches read only the sampled rows of a .h5 (never the whole
array, never cached whole), and the rows equal slicing the full array."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from medvl_engine.errors import ConfigError, DataError
from medvl_engine.features import bags as bags_module
from medvl_engine.features.bags import (
    BagCache,
    bag_shape,
    read_bag_features,
    read_bag_rows,
    sample_patch_rows,
)
from medvl_engine.tasks.limit.task import LimitTask, LimitTaskConfig
from medvl_engine.training import RunConfig, train

REPORTS = {
    "tumor": "Sections show invasive carcinoma.",
    "fat": "Adipose tissue is present. No tumor.",
    "stroma": "Fibrous stroma is seen.",
}


def _write_h5(path: Path, features: np.ndarray, layout: str = "row_chunks") -> Path:
    """A patch-feature .h5: "row_chunks" as TRIDENT/CLAM write it (one row per chunk,
    resizable), "contiguous", or "trident_3d" ([1, N, D])."""
    with h5py.File(path, "w") as handle:
        data = features.astype(np.float32)
        if layout == "row_chunks":
            handle.create_dataset(
                "features", data=data, chunks=(1, data.shape[1]), maxshape=(None, data.shape[1])
            )
        elif layout == "trident_3d":
            handle.create_dataset("features", data=data[None])
        else:
            handle.create_dataset("features", data=data)
        handle.create_dataset("coords", data=np.zeros((len(data), 2), dtype=np.int64))
    return path


@pytest.mark.parametrize("layout", ["row_chunks", "contiguous", "trident_3d", "zarr"])
def test_rows_equal_slicing_the_full_array(tmp_path, layout, write_feature_store):
    rng = np.random.default_rng(0)
    full = rng.normal(size=(300, 24)).astype(np.float32)
    if layout == "zarr":
        path = write_feature_store(tmp_path / "bag.zarr", full)
    else:
        path = _write_h5(tmp_path / "bag.h5", full, layout)
    assert bag_shape(path) == (300, 24)
    rows = np.array([299, 5, 6, 7, 100, 5, 0, 150, 151])  # unsorted, a duplicate, runs
    np.testing.assert_array_equal(read_bag_rows(path, rows).numpy(), full[rows])
    sampled = sample_patch_rows(300, 64, torch.Generator().manual_seed(3))
    assert len(sampled) == 64 and np.all(np.diff(sampled) > 0)
    np.testing.assert_array_equal(read_bag_rows(path, sampled).numpy(), full[sampled])
    np.testing.assert_array_equal(
        read_bag_rows(path, sampled).numpy(), read_bag_features(path).numpy()[sampled]
    )


def test_a_row_outside_the_bag_and_a_missing_file_are_one_sentence(tmp_path):
    path = _write_h5(tmp_path / "bag.h5", np.ones((10, 4)))
    with pytest.raises(DataError, match="rows 3..10 asked of .*bag.h5, which has 10 patches"):
        read_bag_rows(path, [3, 10])
    with pytest.raises(DataError, match="does not exist"):
        read_bag_rows(tmp_path / "missing.h5", [0])


def test_sampling_keeps_every_patch_of_a_small_bag():
    rows = sample_patch_rows(7, 50, torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(rows, np.arange(7))


@pytest.fixture(scope="module")
def h5_cohort(tmp_path_factory, tiny_tower) -> tuple[Path, Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("limit-h5")
    tiny_tower(root / "bert", out_dim=16)
    tiny_tower(root / "bert").tokenizer.save_pretrained(root / "bert")
    rng = np.random.default_rng(2)
    arrays, rows = {}, []
    for index in range(8):
        label = list(REPORTS)[index % 3]
        arrays[f"s{index}.h5"] = rng.normal(size=(int(rng.integers(40, 90)), 16))
        _write_h5(root / f"s{index}.h5", arrays[f"s{index}.h5"])
        organ = "breast" if index % 2 else "lung"
        row = dict(slide_id=f"s{index}", organ=organ, report=REPORTS[label], label=label)
        rows.append({**row, "features": f"s{index}.h5", "split": "train"})
    manifest = root / "manifest.jsonl"
    manifest.write_text("\n".join(json.dumps(row) for row in rows))
    return root, manifest, {name: a.astype(np.float32) for name, a in arrays.items()}


def _task(h5_cohort, **overrides) -> LimitTask:
    root, manifest, _ = h5_cohort
    values = dict(manifest=str(manifest), text_model=str(root / "bert"), num_negatives=2)
    values.update(overrides)
    run = RunConfig(out_dir=str(root / "run"), progress=False, seed=4, lr=1e-3, epochs=1)
    task = LimitTask(LimitTaskConfig(**values), run)
    task.build_model()
    return task


def test_sampled_bags_read_only_their_rows_and_equal_slicing_the_full_array(h5_cohort, monkeypatch):
    task = _task(h5_cohort, max_patches=12, val_fraction=0.0)

    def whole_read(path):
        raise AssertionError(f"{path} was read whole")

    monkeypatch.setattr(bags_module, "_read_h5", whole_read)
    batch = task.batch_at(0, 0, 1, 3)
    again = task.batch_at(0, 0, 1, 3)
    assert len(task.cache._items) == 0  # no bag is held whole
    assert batch["features"].shape == (3, 12, 16) and bool(batch["mask"].all())
    torch.testing.assert_close(batch["features"], again["features"], rtol=0, atol=0)

    arrays = h5_cohort[2]
    records = [task.splits["train"][i] for i in task.sampler.bags(0)[3]]
    generator = torch.Generator().manual_seed(task.patch_seed(0, 3))
    for position, record in enumerate(records):
        full = arrays[record.features.name]
        rows = sample_patch_rows(len(full), 12, generator)
        np.testing.assert_array_equal(batch["features"][position].numpy(), full[rows])
    later = task.batch_at(1, 0, 1, 3)["features"]
    assert not torch.equal(later, batch["features"])  # another epoch, another sample


def test_rank_shards_sample_the_patches_one_process_samples(h5_cohort):
    task = _task(h5_cohort, max_patches=9, val_fraction=0.0)
    one = [task.batch_at(0, 0, 1, i)["features"] for i in range(8)]
    two = [task.batch_at(0, r, 2, i)["features"] for i in range(4) for r in range(2)]
    for single, shard in zip(one, two, strict=True):
        torch.testing.assert_close(single, shard, rtol=0, atol=0)


def test_without_max_patches_every_patch_is_kept(h5_cohort):
    task = _task(h5_cohort, val_fraction=0.0)
    batch = task.batch_at(0, 0, 1, 0)
    records = [task.splits["train"][i] for i in task.sampler.bags(0)[0]]
    lengths = [len(h5_cohort[2][r.features.name]) for r in records]
    assert batch["mask"].sum(1).tolist() == lengths


def test_a_training_step_with_sampled_patches_runs_and_bad_counts_are_refused(h5_cohort, tmp_path):
    task = _task(h5_cohort, max_patches=16, val_fraction=0.0)  # validation reads whole bags
    run = RunConfig(out_dir=str(tmp_path / "run"), progress=False, lr=1e-3, epochs=1, max_steps=2)
    summary = train(task, run)
    assert summary["steps"] == 2 and np.isfinite(summary["losses"]).all()
    assert len(task.cache._items) == 0  # training held no bag whole
    with pytest.raises(ConfigError, match="task.max_patches must be at least 1"):
        _task(h5_cohort, max_patches=0)


def test_the_cache_reads_shapes_from_metadata(h5_cohort):
    root, _, arrays = h5_cohort
    cache = BagCache(4)
    assert cache.shape(root / "s0.h5") == arrays["s0.h5"].shape
    assert len(cache._items) == 0


def test_cache_rows_of_a_zarr_store_come_from_the_cached_bag(tmp_path, write_feature_store):
    full = np.random.default_rng(5).normal(size=(50, 8)).astype(np.float32)
    path = write_feature_store(tmp_path / "bag.zarr", full)
    cache = BagCache(4)
    rows = np.array([3, 4, 40])
    np.testing.assert_array_equal(cache.rows(path, rows).numpy(), full[rows])
    assert list(cache._items) == [path] and cache.shape(path) == (50, 8)
