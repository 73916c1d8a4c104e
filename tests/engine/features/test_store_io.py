"""Store parts read and written outside an extraction: whole stores from memory, patch labels."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from medvl_engine.errors import DataError
from medvl_engine.features.bags import read_bag_features
from medvl_engine.features.store_io import read_patch_labels, write_store


def test_a_store_written_from_memory_reads_back_with_its_patch_labels(tmp_path):
    features = np.arange(12, dtype=np.float64).reshape(4, 3)
    coords = np.array([[0, 0], [8, 0], [0, 8], [8, 8]])
    labels = np.array([0, 2, 1, 2], dtype=np.int32)
    path = tmp_path / "s.zarr"
    write_store(path, features, coords, {"slide": "s", "encoder": "e"}, patch_labels=labels)
    group = zarr.open_group(str(path), mode="r")
    assert dict(group.attrs) == {"slide": "s", "encoder": "e"}
    assert group["coords"].dtype == np.int64 and group["patch_labels"].dtype == np.int64
    np.testing.assert_array_equal(read_bag_features(path).numpy(), features.astype(np.float32))
    np.testing.assert_array_equal(read_patch_labels(path), labels)


def test_patch_labels_absent_give_none_and_a_group_in_their_place_is_refused_or_skipped(tmp_path):
    path = tmp_path / "s.zarr"
    write_store(path, np.ones((2, 3)), np.zeros((2, 2)), {})
    assert read_patch_labels(path) is None
    zarr.open_group(str(path), mode="r+").create_group("patch_labels")
    assert read_patch_labels(path, refuse_group=False) is None
    with pytest.raises(DataError, match="a group where an array should be"):
        read_patch_labels(path)
