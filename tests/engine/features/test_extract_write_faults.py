"""Feature extraction when the machine refuses writes: disk full, read-only folder or cache.

Each case gives one sentence naming the store and the problem, leaves no temporary file and
no store a later run would trust, and the rerun (with space back) gives the same features as
an uninterrupted run.
"""

from __future__ import annotations

import errno
import os
import sys
import textwrap

import numpy as np
import pytest

from medvl_engine.errors import MedVLError, StorageError
from medvl_engine.features import FeatureStore, extract_features, slide_features
from tests.support.write_faults import failing_writes, leftovers

BATCH = 8


@pytest.fixture(scope="module")
def grid(slide, regular_grid):
    return regular_grid(slide.dimensions, patch_size=64, stride=32)


@pytest.fixture(scope="module")
def reference(slide, encoder, grid, tmp_path_factory):
    """(features of an uninterrupted run, bytes that run wrote)."""
    folder = tmp_path_factory.mktemp("reference")
    with failing_writes(folder, after_bytes=2**40) as state:
        store = extract_features(slide, encoder, grid, folder / "ref.zarr", batch_size=BATCH)
    return store.features.copy(), state.written


def _assert_not_trusted(path):
    """A store left by a failed run is absent or reads as incomplete, never as complete."""
    if path.exists():
        with pytest.raises(MedVLError, match="incomplete|not a readable|damaged"):
            FeatureStore.open(path)


@pytest.mark.parametrize("share", [0.0, 0.01, 0.3, 0.8, 0.99])
def test_disk_full_during_extraction_is_one_sentence_and_the_rerun_completes(
    slide, encoder, grid, reference, tmp_path, share
):
    features, total_bytes = reference
    out = tmp_path / "run.zarr"
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=int(share * total_bytes)) as state:
        with pytest.raises(StorageError) as caught:
            extract_features(slide, encoder, grid, out, batch_size=BATCH)
    assert state.failures >= 1
    message = str(caught.value)
    assert message.startswith(f"could not write feature store {out}: the disk holding ")
    assert "is full (No space left on device); free space there" in message
    assert "\n" not in message
    assert leftovers(tmp_path) == []
    _assert_not_trusted(out)

    store = extract_features(slide, encoder, grid, out, batch_size=BATCH)  # space is back
    np.testing.assert_array_equal(store.features, features)
    np.testing.assert_array_equal(store.coords, grid.coords)
    assert leftovers(tmp_path) == []


def test_a_batch_that_failed_to_write_is_never_skipped(slide, encoder, grid, reference, tmp_path):
    """One chunk write fails and the next succeeds (space freed meanwhile): the store must not
    count the lost rows as done, or the rerun would trust zero rows."""
    features, total_bytes = reference
    out = tmp_path / "run.zarr"
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=total_bytes // 2, times=1) as state:
        with pytest.raises(StorageError, match="is full"):
            extract_features(slide, encoder, grid, out, batch_size=BATCH)
    assert state.failures == 1
    _assert_not_trusted(out)
    store = extract_features(slide, encoder, grid, out, batch_size=BATCH)
    np.testing.assert_array_equal(store.features, features)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_read_only_output_folder_is_one_sentence(slide, encoder, grid, tmp_path, code):
    out = tmp_path / "stores" / "run.zarr"
    with failing_writes(tmp_path, code) as state:
        with pytest.raises(StorageError) as caught:
            extract_features(slide, encoder, grid, out, batch_size=BATCH)
    assert state.failures >= 1
    message = str(caught.value)
    assert message.startswith(f"could not write feature store {out}: {tmp_path} is ")
    if code == errno.EROFS:
        assert "read-only file system (Read-only file system); choose a writable folder" in message
    else:
        assert "read-only for this user (Permission denied)" in message
    assert list(tmp_path.iterdir()) == []


def test_read_only_folder_of_a_store_being_resumed(slide, encoder, grid, reference, tmp_path):
    """A half-made store whose folder turned read-only: a sentence, and the store is kept."""
    features, total_bytes = reference
    out = tmp_path / "run.zarr"
    with failing_writes(tmp_path, errno.ENOSPC, after_bytes=total_bytes // 2):
        with pytest.raises(StorageError):
            extract_features(slide, encoder, grid, out, batch_size=BATCH)
    with failing_writes(tmp_path, errno.EROFS):
        with pytest.raises(StorageError, match="read-only file system"):
            extract_features(slide, encoder, grid, out, batch_size=BATCH)
    _assert_not_trusted(out)
    store = extract_features(slide, encoder, grid, out, batch_size=BATCH)
    np.testing.assert_array_equal(store.features, features)


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_cache_that_cannot_be_written_says_to_move_the_cache(
    slide, encoder, tmp_path, monkeypatch, code
):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MEDVL_CACHE", str(cache))
    with failing_writes(tmp_path, code):
        with pytest.raises(StorageError) as caught:
            slide_features(slide, encoder, patch_size=64, target_mpp=0.25, batch_size=BATCH)
    message = str(caught.value)
    assert message.startswith(f"could not write feature store {cache / 'features'}")
    assert "MEDVL_CACHE to a " in message
    assert leftovers(tmp_path) == []


def test_cache_folder_that_cannot_be_made_is_one_sentence(tmp_path, monkeypatch):
    from medvl_engine.common.cache import cache_dir

    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    with failing_writes(tmp_path, errno.EROFS):
        with pytest.raises(StorageError, match=r"read-only file system .*set MEDVL_CACHE to a"):
            cache_dir("samples", create=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_real_read_only_folder(slide, encoder, grid, tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(StorageError, match="read-only for this user"):
            extract_features(slide, encoder, grid, folder / "run.zarr", batch_size=BATCH)
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_disk_full_while_importing_an_h5_then_the_rerun_completes(tmp_path, share):
    import h5py

    from medvl_engine.features import import_h5_features

    rng = np.random.default_rng(0)
    features = rng.normal(size=(300, 32)).astype(np.float32)
    coords = np.stack(np.meshgrid(np.arange(20), np.arange(15)), -1).reshape(-1, 2) * 256
    source = tmp_path / "slide.h5"
    with h5py.File(source, "w") as handle:
        handle["features"] = features
        handle["coords"] = coords.astype(np.int64)
        handle["coords"].attrs["patch_size_level0"] = 256
    out = tmp_path / "stores" / "slide.zarr"
    out.parent.mkdir()
    with failing_writes(out.parent, after_bytes=2**40) as counting:
        expected = import_h5_features(source, tmp_path / "stores" / "ref.zarr").features
    with failing_writes(out.parent, errno.ENOSPC, after_bytes=int(share * counting.written)):
        with pytest.raises(StorageError, match=r"could not write feature store .*slide\.zarr: the"):
            import_h5_features(source, out)
    _assert_not_trusted(out)
    assert leftovers(tmp_path) == []
    import_h5_features(source, out)
    np.testing.assert_array_equal(FeatureStore.open(out).features, expected)


class MeanColourEncoder:
    """A patch encoder without model files: mean colour of an 8 x 8 grid of cells (192 values),
    so a child process needs only torch and numpy to extract features with it."""

    name = "mean-colour-8x8"
    embed_dim = 192
    patch_size = 64
    target_mpp = 0.25

    def __init__(self) -> None:
        import torch

        self.device = torch.device("cpu")

    def encode_patches(self, patches, normalize=True):
        import torch

        pixels = torch.from_numpy(np.ascontiguousarray(patches)).float()
        count, side = pixels.shape[0], pixels.shape[1]
        cells = pixels.reshape(count, 8, side // 8, 8, side // 8, 3).mean(dim=(2, 4))
        rows = cells.reshape(count, -1)
        return torch.nn.functional.normalize(rows, dim=1) if normalize else rows


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_real_file_size_limit_from_the_kernel(slide, grid, tmp_path, run_limited):
    """The kernel itself refuses (EFBIG under `ulimit -f`, as a full disk would, from a real
    write): one sentence, exit 2, no temporary file; the rerun completes with the features of
    an uninterrupted run."""
    encoder = MeanColourEncoder()
    expected = extract_features(slide, encoder, grid, tmp_path / "ref.zarr", batch_size=16)
    out = tmp_path / "run.zarr"
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from medvl_engine.errors import MedVLError
        from medvl_engine.features import extract_features
        from medvl_engine.io.slide import open_slide
        from tests.engine.features.test_extract_write_faults import MeanColourEncoder
        import numpy as np

        class Grid:
            coords = np.array({grid.coords.tolist()!r})
            patch_size = patch_size_level0 = 64
            level, target_mpp = 0, 0.5

        resource.setrlimit(resource.RLIMIT_FSIZE, (8_000, 8_000))  # a chunk is 12 KB
        try:
            with open_slide({str(slide.path)!r}) as slide:
                extract_features(slide, MeanColourEncoder(), Grid(), {str(out)!r}, batch_size=16)
        except MedVLError as error:
            print(error)
            sys.exit(2)
        """
    )
    returncode, stdout, stderr, _ = run_limited(code, timeout_s=60, address_space_mb=8192)
    assert returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    assert stdout.startswith(f"could not write feature store {out}: the file grew larger than")
    assert "(File too large); choose a folder on another file system or raise" in stdout
    assert leftovers(tmp_path) == []
    _assert_not_trusted(out)
    store = extract_features(slide, encoder, grid, out, batch_size=16)
    np.testing.assert_array_equal(store.features, expected.features)
