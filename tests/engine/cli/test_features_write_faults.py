"""`medvl features` when the machine refuses writes, and when --out is not a folder.

Each case: exit status 2, one line on stderr naming the path and the problem, no traceback,
no temporary file left, and the rerun completes with the features of an uninterrupted run.
"""

from __future__ import annotations

import errno
import shutil
import sys
import textwrap

import numpy as np
import pytest

from medvl_engine.cli.main import main
from medvl_engine.features import FeatureStore
from tests.support.write_faults import failing_writes, leftovers

SMALL = ["--patch-size", "64", "--mpp", "0.25", "--min-tissue", "0.1", "--batch-size", "16"]


@pytest.fixture(scope="module")
def slide_path(tmp_path_factory, demo_encoder):
    from medvl_engine.synthetic import make_synthetic_slide

    demo_encoder()  # the demo model, built once into the test cache
    folder = tmp_path_factory.mktemp("slide")
    return make_synthetic_slide(folder / "case.tiff", seed=3, size=(512, 512)).path


@pytest.fixture(scope="module")
def reference(slide_path, tmp_path_factory):
    """Features of an uninterrupted run, and the bytes it wrote."""
    out = tmp_path_factory.mktemp("reference")
    with failing_writes(out, after_bytes=2**40) as state:
        assert main(["features", str(slide_path), "--out", str(out), *SMALL]) == 0
    (store_path,) = out.iterdir()
    return FeatureStore.open(store_path).features, state.written


def _error_line(stderr: str) -> str:
    """The one error line of a run's stderr (progress lines, rewritten with \\r, aside)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith("[")]
    assert len(errors) == 1 and errors[0].startswith("medvl: error: "), stderr
    return errors[0]


def _one_line(capsys) -> str:
    return _error_line(capsys.readouterr().err)


def test_out_an_existing_file_is_one_sentence(slide_path, tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    assert main(["features", str(slide_path), "--out", str(target), *SMALL]) == 2
    line = _one_line(capsys)
    assert f"{target} is " in line and "file, not a folder; give a folder" in line
    assert target.read_text() == "keep me"


def test_out_below_a_file_is_one_sentence(slide_path, tmp_path, capsys):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("keep me")
    assert main(["features", str(slide_path), "--out", str(blocker / "stores"), *SMALL]) == 2
    line = _one_line(capsys)
    assert f"could not write --out folder {blocker / 'stores'}: " in line
    assert "is in the way: it is a file, not a folder" in line
    assert blocker.read_text() == "keep me"


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EROFS, "is on a read-only file system (Read-only file system)"),
        (errno.EACCES, "is read-only for this user (Permission denied)"),
    ],
)
def test_out_folder_that_cannot_be_made_is_one_sentence(slide_path, tmp_path, capsys, code, words):
    out = tmp_path / "new" / "stores"
    with failing_writes(tmp_path, code):
        assert main(["features", str(slide_path), "--out", str(out), *SMALL]) == 2
    line = _one_line(capsys)
    assert f"could not write --out folder {out}: {tmp_path} {words}" in line
    assert list(tmp_path.iterdir()) == []


def test_disk_full_during_features_then_the_rerun_completes(
    slide_path, reference, tmp_path, capsys
):
    features, total_bytes = reference
    out = tmp_path / "stores"
    out.mkdir()
    with failing_writes(out, errno.ENOSPC, after_bytes=total_bytes // 2) as state:
        assert main(["features", str(slide_path), "--out", str(out), *SMALL]) == 2
    assert state.failures >= 1
    line = _one_line(capsys)
    assert "could not write feature store" in line and "case-" in line
    assert "is full (No space left on device); free space there" in line
    assert leftovers(out) == []
    (store_path,) = out.iterdir()
    with pytest.raises(Exception, match="incomplete"):
        FeatureStore.open(store_path)

    assert main(["features", str(slide_path), "--out", str(out), *SMALL]) == 0
    np.testing.assert_array_equal(FeatureStore.open(store_path).features, features)
    assert leftovers(out) == []


@pytest.mark.slow  # ~40 s: a child process that loads the demo model; the fast variant is in
# tests/engine/features/test_extract_write_faults.py::test_a_real_file_size_limit_from_the_kernel
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_real_file_size_limit_from_the_kernel(slide_path, reference, tmp_path, run_limited):
    """The kernel itself refuses (EFBIG under `ulimit -f`): the child prints one sentence and
    exits 2; the rerun without the limit completes with the same features."""
    features, _ = reference
    out = tmp_path / "stores"
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8_000, 8_000))  # a chunk is 16 KB
        from medvl_engine.cli.main import main
        sys.exit(main(["features", {str(slide_path)!r}, "--out", {str(out)!r}, *{SMALL!r}]))
        """
    )
    returncode, _, stderr, _ = run_limited(code, timeout_s=120, max_mb=2048, address_space_mb=8192)
    assert returncode == 2, stderr
    line = _error_line(stderr)
    assert "could not write feature store" in line
    assert "(File too large); choose a folder on another file system or raise" in line
    assert leftovers(out) == []

    assert main(["features", str(slide_path), "--out", str(out), *SMALL]) == 0
    (store_path,) = out.iterdir()
    np.testing.assert_array_equal(FeatureStore.open(store_path).features, features)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EROFS, "read-only file system (Read-only file system); set MEDVL_CACHE to a"),
        (errno.ENOSPC, "is full (No space left on device); free space there or set MEDVL_CACHE"),
    ],
)
def test_heatmap_with_a_cache_that_cannot_be_written(slide_path, tmp_path, capsys, code, words):
    """The feature cache under $MEDVL_CACHE refuses writes (the model folder there is read)."""
    from medvl_engine.common.cache import cache_dir

    features_cache = cache_dir("features")
    features_cache.mkdir(parents=True, exist_ok=True)
    for cached in features_cache.glob(f"{slide_path.stem}-*.zarr"):
        shutil.rmtree(cached)  # this slide's features are not cached yet
    before = sorted(features_cache.iterdir())
    out = tmp_path / "h.png"
    argv = ["heatmap", str(slide_path), "--prompt", "tumor", "--out", str(out)]
    with failing_writes(features_cache, code):
        assert main(argv) == 2
    line = _one_line(capsys)
    assert f"could not write feature store {features_cache}" in line and words in line
    assert not out.exists() and leftovers(features_cache) == []
    for store in set(features_cache.iterdir()) - set(before):  # made, not finished: not trusted
        with pytest.raises(Exception, match="incomplete|not a readable|damaged"):
            FeatureStore.open(store)
    assert main(argv) == 0 and out.is_file()  # the disk is writable again


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--patch-size", "1"], "patch_size 1 px is below the smallest patch of 8 px"),
        (
            ["--mpp", "1e-6"],
            "target_mpp 1e-06 um/px is 5e+05 times finer than slide case.tiff (0.5 um/px)",
        ),
        (["--patch-size", "100000"], "patch_size 100,000 px is above the largest patch of 8,192"),
    ],
)
def test_features_with_a_grid_that_makes_no_sense_is_one_sentence(
    slide_path, tmp_path, capsys, options, words
):
    out = tmp_path / "stores"
    assert main(["features", str(slide_path), "--out", str(out), *options]) == 2
    assert words in _one_line(capsys)
    assert list(out.iterdir()) == []


def test_features_above_the_patch_budget_is_one_sentence(slide_path, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEDVL_MAX_PATCHES", "50")
    out = tmp_path / "stores"
    assert main(["features", str(slide_path), "--out", str(out), *SMALL]) == 2
    line = _one_line(capsys)
    assert "would lay 256 patches over slide case.tiff (512 x 512 px)" in line
    assert "more than the 50 one grid may hold (MEDVL_MAX_PATCHES)" in line
    assert list(out.iterdir()) == []
