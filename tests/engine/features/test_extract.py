"""Feature extraction into zarr stores: resume after cancel, refusal to overwrite, h5 import."""

from __future__ import annotations

import threading

import h5py
import numpy as np
import pytest

from medvl_engine.errors import CancelledError, DataError
from medvl_engine.features import FeatureStore, extract_features, import_h5_features


def test_extraction_writes_the_documented_layout(slide, encoder, tmp_path, regular_grid):
    import zarr

    grid = regular_grid(slide.dimensions, patch_size=64, stride=32)
    seen = []
    store = extract_features(
        slide,
        encoder,
        grid,
        tmp_path / "f.zarr",
        batch_size=16,
        progress=lambda done, total: seen.append((done, total)),
    )
    n = len(grid.coords)
    assert store.features.shape == (n, 16) and store.features.dtype == np.float32
    assert store.features.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(store.features, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(store.coords, grid.coords)
    assert seen[0] == (0, n) and seen[-1] == (n, n)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    group = zarr.open_group(str(tmp_path / "f.zarr"), mode="r")
    assert group.attrs["patch_size_level0"] == 64 and group.attrs["slide_mpp"] == [0.25, 0.25]
    assert group.attrs["n_done"] == n and group.attrs["encoder"] == encoder.name
    patch = slide.read_region(tuple(grid.coords[7]), 0, (64, 64))[None]
    np.testing.assert_allclose(store.features[7], encoder.encode_patches(patch)[0], atol=1e-5)
    assert store.mpp == (0.25, 0.25) and store.stride_level0 == 32


def test_cancelled_run_resumes_to_the_same_store(slide, encoder, tmp_path, regular_grid):
    grid = regular_grid(slide.dimensions, patch_size=64, stride=32)
    reference = extract_features(slide, encoder, grid, tmp_path / "ref.zarr", batch_size=8)

    stop = threading.Event()

    def progress(done: int, total: int) -> None:
        if done >= 16:
            stop.set()

    with pytest.raises(CancelledError, match="16 of .* patches.*resume"):
        extract_features(
            slide,
            encoder,
            grid,
            tmp_path / "run.zarr",
            batch_size=8,
            progress=progress,
            cancel=stop,
        )
    with pytest.raises(DataError, match="incomplete \\(16 of"):
        FeatureStore.open(tmp_path / "run.zarr")
    resumed_from = []
    resumed = extract_features(
        slide,
        encoder,
        grid,
        tmp_path / "run.zarr",
        batch_size=8,
        progress=lambda done, total: resumed_from.append(done),
    )
    assert resumed_from[0] == 16
    np.testing.assert_array_equal(resumed.features, reference.features)
    np.testing.assert_array_equal(resumed.coords, reference.coords)


def test_existing_store_of_another_grid_is_not_overwritten(slide, encoder, tmp_path, regular_grid):
    extract_features(slide, encoder, regular_grid(slide.dimensions, 64), tmp_path / "f.zarr")
    with pytest.raises(DataError, match="another encoder or patch grid"):
        extract_features(slide, encoder, regular_grid(slide.dimensions, 128), tmp_path / "f.zarr")


def test_trident_h5_imports_without_reencoding(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.standard_normal((5, 12)).astype(np.float32)
    coords = np.array([[0, 0], [512, 0], [0, 512], [512, 512], [1024, 0]])
    path = tmp_path / "slide.h5"
    with h5py.File(path, "w") as handle:
        handle["features"] = features
        handle["coords"] = coords
        handle["coords"].attrs["patch_size_level0"] = 512
    store = import_h5_features(path, tmp_path / "slide.zarr", slide_mpp=(0.5, 0.5), encoder="uni")
    expected = features / np.linalg.norm(features, axis=1, keepdims=True)
    np.testing.assert_allclose(store.features, expected, atol=1e-6)
    np.testing.assert_array_equal(store.coords, coords)
    reopened = FeatureStore.open(tmp_path / "slide.zarr")
    np.testing.assert_allclose(reopened.features, expected, atol=1e-6)
    assert (reopened.patch_size_level0, reopened.mpp, reopened.encoder) == (512, (0.5, 0.5), "uni")


def test_clam_h5_with_batch_axis_and_downsample(tmp_path):
    path = tmp_path / "clam.h5"
    with h5py.File(path, "w") as handle:
        handle["features"] = np.ones((1, 3, 4), np.float32)
        handle["coords"] = np.array([[0, 0], [512, 0], [1024, 0]])
        handle["coords"].attrs["patch_size"] = 256
        handle["coords"].attrs["downsample"] = np.array([2.0, 2.0])
    store = import_h5_features(path)
    assert store.features.shape == (3, 4) and store.patch_size_level0 == 512


def test_h5_without_patch_size_is_explained(tmp_path):
    path = tmp_path / "bare.h5"
    with h5py.File(path, "w") as handle:
        handle["features"] = np.ones((2, 4), np.float32)
        handle["coords"] = np.zeros((2, 2))
    with pytest.raises(DataError, match="bare.h5 does not say its patch size"):
        import_h5_features(path)


def test_opening_something_that_is_not_a_store(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        FeatureStore.open(tmp_path / "missing.zarr")


def test_row_reads_equal_one_read_region_per_patch(tmp_path):
    from medvl_engine.features import read_patches
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide

    truth = make_synthetic_slide(tmp_path / "big.tiff", seed=2, size=(1536, 1024))
    sparse = np.array([[0, 0], [40, 0], [90, 0], [301, 7], [37, 201], [77, 201], [1450, 990]])
    dense = np.array([[x, y] for y in (301, 349, 397) for x in (101, 149, 197, 245)])
    with open_slide(truth.path) as big:
        assert big.level_count >= 2
        for coords in (sparse, dense[::-1]):
            for level in (0, 1):
                got = read_patches(big, coords, level, 48)
                for index, (x, y) in enumerate(coords):
                    expected = big.read_region((int(x), int(y)), level, (48, 48))
                    np.testing.assert_array_equal(got[index], expected)


def test_tiling_grid_at_coarser_mpp_is_read_and_resized_like_the_grid_does(tmp_path, encoder):
    from medvl_engine.io.slide import open_slide
    from medvl_engine.synthetic import make_synthetic_slide
    from medvl_engine.tiling import patch_grid

    truth = make_synthetic_slide(tmp_path / "fine.tiff", seed=8, size=(1024, 768), mpp=0.25)
    with open_slide(truth.path) as fine:
        grid = patch_grid(fine, patch_size=48, target_mpp=0.5, min_tissue=0.3)
        assert grid.patch_size_level0 == 96 and len(grid.coords) > 4
        store = extract_features(fine, encoder, grid, tmp_path / "f.zarr", batch_size=4)
        expected = encoder.encode_patches(grid.read_patches(fine, np.arange(len(grid.coords))))
    np.testing.assert_allclose(store.features, expected.numpy(), atol=1e-5)
    assert store.patch_size_level0 == 96 and store.target_mpp == 0.5


def test_an_unrelated_folder_is_never_overwritten(slide, encoder, tmp_path, regular_grid):
    folder = tmp_path / "my-results"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    grid = regular_grid(slide.dimensions, 128)
    with pytest.raises(DataError, match="not a medvl feature store"):
        extract_features(slide, encoder, grid, folder)
    assert (folder / "notes.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert extract_features(slide, encoder, grid, empty).n_patches == len(grid.coords)


def test_a_progress_callback_that_raises_stops_and_leaves_a_resumable_store(
    slide, encoder, tmp_path, regular_grid
):
    grid = regular_grid(slide.dimensions, patch_size=64, stride=32)

    def stop_after_three_batches(done: int, total: int) -> None:
        if done >= 24:
            raise CancelledError("stopped by the user")

    with pytest.raises(CancelledError, match="stopped by the user"):
        extract_features(
            slide,
            encoder,
            grid,
            tmp_path / "s.zarr",
            batch_size=8,
            progress=stop_after_three_batches,
        )
    store = extract_features(slide, encoder, grid, tmp_path / "s.zarr", batch_size=8)
    assert store.n_patches == len(grid.coords)
    np.testing.assert_allclose(np.linalg.norm(store.features, axis=1), 1.0, atol=1e-5)


def test_reads_spanning_many_batches_give_every_patch_its_own_pixels(
    slide, encoder, tmp_path, regular_grid
):
    from medvl_engine.features.extract import _read_blocks

    grid = regular_grid(slide.dimensions, patch_size=32, stride=16)
    n = len(grid.coords)
    blocks = list(_read_blocks(0, n, 8, 3 * 32 * 32))
    assert n > 300 and blocks[0] == (0, 8) and max(b - a for a, b in blocks) == 256
    assert [a for a, _ in blocks[1:]] == [b for _, b in blocks[:-1]] and blocks[-1][1] == n
    store = extract_features(slide, encoder, grid, tmp_path / "f.zarr", batch_size=8)
    patches = np.stack([slide.read_region(tuple(c), 0, (32, 32)) for c in grid.coords])
    np.testing.assert_allclose(store.features, encoder.encode_patches(patches), atol=1e-5)


def test_torch_threads_apply_to_the_run_only(slide, encoder, tmp_path, regular_grid):
    import torch

    before = torch.get_num_threads()
    seen = []
    grid = regular_grid(slide.dimensions, patch_size=128)
    extract_features(
        slide,
        encoder,
        grid,
        tmp_path / "f.zarr",
        torch_threads=1,
        progress=lambda done, total: seen.append(torch.get_num_threads()),
    )
    assert seen[-1] == 1 and torch.get_num_threads() == before
