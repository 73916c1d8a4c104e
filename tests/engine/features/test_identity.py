"""Feature stores belong to one slide; TRIDENT/CLAM files go straight to --features; bitwise
resume and encoders that give the same bits from the first call."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from medvl_engine.cli.main import main
from medvl_engine.common.fingerprint import file_fingerprint, slide_fingerprint
from medvl_engine.encoders import load_encoder
from medvl_engine.errors import CancelledError, DataError, MedVLError
from medvl_engine.features import (
    FeatureStore,
    check_store_matches_slide,
    extract_features,
    open_features_for_slide,
    slide_features,
    store_path_for,
)
from medvl_engine.io.slide import open_slide
from medvl_engine.synthetic import make_synthetic_slide

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """Two different slides with the same file name, in two folders."""
    root = tmp_path_factory.mktemp("twins")
    paths = []
    for seed, folder in ((11, "site-a"), (12, "site-b")):
        (root / folder).mkdir()
        made = make_synthetic_slide(
            root / folder / "slide.tiff", seed=seed, size=(1024, 768), classes=("tumor", "adipose")
        )
        paths.append(made.path)
    return paths


@pytest.fixture(scope="module")
def clip(tmp_path_factory, make_tiny_clip):
    return load_encoder(make_tiny_clip(tmp_path_factory.mktemp("m") / "clip"))


@pytest.fixture(scope="module")
def demo_slide(tmp_path_factory, demo_encoder):
    demo_encoder()  # builds the demo model once, in the test cache
    folder = tmp_path_factory.mktemp("demo")
    made = make_synthetic_slide(
        folder / "case7.tiff", seed=7, size=(1344, 1344), classes=("tumor", "stroma", "adipose")
    )
    return made.path


# --- fingerprints ---------------------------------------------------------------------------


def test_fingerprint_follows_content_not_name_or_folder(twins, tmp_path):
    first, second = twins
    assert slide_fingerprint(first) != slide_fingerprint(second)
    copy = tmp_path / "renamed.tiff"
    shutil.copyfile(first, copy)
    assert slide_fingerprint(copy) == slide_fingerprint(first)
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte inside the pixel data
    copy.write_bytes(bytes(data))
    assert slide_fingerprint(copy) != slide_fingerprint(first)


def test_fingerprint_of_a_large_file_reads_a_few_blocks_not_the_file(tmp_path, monkeypatch):
    from medvl_engine.common import fingerprint as fingerprint_module

    big = tmp_path / "big.svs"
    with open(big, "wb") as handle:
        handle.write(os.urandom(2**20))
        handle.truncate(8 * 2**30)  # 8 GiB, sparse
        handle.seek(8 * 2**30 - 4096)
        handle.write(os.urandom(4096))
    read = []

    class CountingFile:
        def __init__(self, handle):
            self._handle = handle

        def read(self, size=-1):
            data = self._handle.read(size)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            self._handle.close()

    monkeypatch.setattr(
        fingerprint_module, "open", lambda *a, **k: CountingFile(open(*a, **k)), raising=False
    )
    fingerprint = slide_fingerprint(big)
    assert fingerprint.startswith(f"fp1:{8 * 2**30}:")
    assert sum(read) == 2**20 + 16 * 4096 + 64 * 2**10  # head, 16 samples, tail: 1.1 MiB of 8 GiB
    monkeypatch.undo()
    assert slide_fingerprint(big) == fingerprint


def test_dicom_fingerprint_covers_every_file_of_the_set(tmp_path):
    folder = tmp_path / "series"
    folder.mkdir()
    for name in ("level0.dcm", "level1.dcm"):
        (folder / name).write_bytes(b"\0" * 128 + b"DICM" + name.encode() * 50)
    whole = slide_fingerprint(folder)
    assert (
        slide_fingerprint(folder / "level0.dcm")
        == whole
        == slide_fingerprint(folder / "level1.dcm")
    )
    (folder / "level1.dcm").write_bytes(b"\0" * 128 + b"DICM" + b"another header" * 50)
    assert slide_fingerprint(folder / "level0.dcm") != whole


# --- stores belong to one slide ------------------------------------------------------------


def test_same_named_slides_never_share_cached_features(twins, clip, regular_grid):
    stores = []
    for path in twins:
        with open_slide(path) as slide:
            stores.append(slide_features(slide, clip, patch_size=64, min_tissue=0.1))
            grid = regular_grid(slide.dimensions, 64)
            assert store_path_for(slide, clip, grid).name.startswith("slide-")
    assert stores[0].path != stores[1].path
    with open_slide(twins[1]) as slide:
        coords = stores[1].coords
        patches = np.stack([slide.read_region(tuple(c), 0, (64, 64)) for c in coords])
    np.testing.assert_allclose(stores[1].features, clip.encode_patches(patches), atol=1e-5)
    assert not np.array_equal(stores[0].features, stores[1].features)


def test_store_records_the_slide_name_and_fingerprint_not_its_folder(
    twins, clip, tmp_path, regular_grid
):
    import zarr

    with open_slide(twins[0]) as slide:
        extract_features(slide, clip, regular_grid(slide.dimensions, 256), tmp_path / "s.zarr")
    attrs = dict(zarr.open_group(str(tmp_path / "s.zarr"), mode="r").attrs)
    assert attrs["slide"] == "slide.tiff"
    assert attrs["slide_fingerprint"] == slide_fingerprint(twins[0])
    assert "site-a" not in repr(attrs)


def test_a_store_of_another_slide_is_refused_or_rebuilt_in_the_cache(
    twins, clip, tmp_path, regular_grid
):
    out = tmp_path / "s.zarr"
    with open_slide(twins[0]) as slide:
        grid = regular_grid(slide.dimensions, 256)
        first = extract_features(slide, clip, grid, out)
    with open_slide(twins[1]) as slide:
        with pytest.raises(DataError, match="already holds features of another slide"):
            extract_features(slide, clip, grid, out)
        np.testing.assert_array_equal(FeatureStore.open(out).features, first.features)
        rebuilt = extract_features(slide, clip, grid, out, replace_mismatch=True)
    assert rebuilt.slide_fingerprint == slide_fingerprint(twins[1])
    assert not np.array_equal(rebuilt.features, first.features)


def test_a_store_without_a_fingerprint_is_refused_with_what_to_do(
    twins, clip, tmp_path, regular_grid
):
    import zarr

    out = tmp_path / "old.zarr"
    with open_slide(twins[0]) as slide:
        extract_features(slide, clip, regular_grid(slide.dimensions, 256), out)
        group = zarr.open_group(str(out), mode="r+")
        group.attrs["slide_fingerprint"] = None  # as written before fingerprints existed
        with pytest.raises(DataError, match="old.zarr does not record which slide.*extract"):
            check_store_matches_slide(FeatureStore.open(out), slide)
        with pytest.raises(DataError, match="older medvl.*extract again"):
            extract_features(slide, clip, regular_grid(slide.dimensions, 256), out)


def test_medvl_features_keeps_same_named_slides_apart_and_refuses_the_wrong_store(
    twins, tmp_path, capsys, demo_encoder
):
    demo_encoder()
    out = tmp_path / "stores"
    for shard in ("0/2", "1/2"):
        argv = ["features", *map(str, twins), "--out", str(out), "--shard", shard]
        assert main([*argv, "--min-tissue", "0.1"]) == 0
    stores = sorted(out.iterdir())
    assert len(stores) == 2 and all(p.name.startswith("slide-") for p in stores)
    by_slide = {FeatureStore.open(p).slide_fingerprint: p for p in stores}
    capsys.readouterr()
    wrong = by_slide[slide_fingerprint(twins[0])]
    argv = ["heatmap", str(twins[1]), "--features", str(wrong), "--prompt", "tumor"]
    assert main([*argv, "--out", str(tmp_path / "h.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"{wrong.name} was made from slide.tiff (another file with the same name)" in err[0]
    assert "their contents differ" in err[0] and not (tmp_path / "h.npz").exists()
    right = by_slide[slide_fingerprint(twins[1])]
    argv = ["classify", str(twins[1]), "--features", str(right), "--classes", "tumor", "fat"]
    assert main(argv) == 0


# --- TRIDENT / CLAM files straight to --features ------------------------------------------


def _write_trident_h5(path: Path, features: np.ndarray, coords: np.ndarray, **attrs) -> None:
    with h5py.File(path, "w") as handle:
        handle["features"] = features
        handle["features"].attrs["name"] = path.stem
        handle["coords"] = coords.astype(np.int64)
        for key, value in attrs.items():
            handle["coords"].attrs[key] = value


@pytest.fixture(scope="module")
def demo_reference(demo_slide, tmp_path_factory) -> FeatureStore:
    """The store `medvl features` writes for the demo slide (the tests only read it)."""
    folder = tmp_path_factory.mktemp("ref")
    assert main(["features", str(demo_slide), "--out", str(folder)]) == 0
    (store,) = folder.glob("*.zarr")
    return FeatureStore.open(store)


def test_heatmap_takes_a_trident_h5_and_imports_it_once(
    demo_slide, demo_reference, tmp_path, capsys
):
    from medvl_engine.common.cache import cache_dir

    reference = demo_reference
    h5_path = tmp_path / "trident" / "case7.h5"
    h5_path.parent.mkdir()
    _write_trident_h5(
        h5_path,
        reference.features,
        reference.coords,
        patch_size=224,
        patch_size_level0=reference.patch_size_level0,
        level0_magnification=20,
        target_magnification=20,
        overlap=0,
        name="case7",
    )
    outputs = {}
    for name, features in (("ref", reference.path), ("h5", h5_path), ("again", h5_path)):
        outputs[name] = tmp_path / f"{name}.npz"
        argv = ["heatmap", str(demo_slide), "--features", str(features), "--prompt", "tumor"]
        argv += ["--out", str(outputs[name]), "--out", str(tmp_path / f"{name}.png")]
        assert main([*argv, "--model", "medvl-demo"]) == 0, capsys.readouterr().err
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        if name == "h5":
            (imported,) = (cache_dir() / "features").glob("case7-*-h5-*.zarr")
            stamp = (imported / "zarr.json").stat().st_mtime_ns
    assert (imported / "zarr.json").stat().st_mtime_ns == stamp  # read back, not imported again
    with np.load(outputs["ref"]) as ref, np.load(outputs["h5"]) as got:
        np.testing.assert_array_equal(got["scores"], ref["scores"])
        np.testing.assert_array_equal(got["coords"], ref["coords"])
    stored = FeatureStore.open(imported)
    assert stored.imported_from == "case7.h5" and stored.mpp == (0.5, 0.5)
    assert stored.slide_fingerprint == slide_fingerprint(demo_slide)


def test_an_h5_without_patch_size_names_the_attribute_and_the_option(
    demo_slide, demo_reference, tmp_path, capsys
):
    reference = demo_reference
    h5_path = tmp_path / "bare.h5"
    _write_trident_h5(h5_path, reference.features, reference.coords)
    argv = ["classify", str(demo_slide), "--features", str(h5_path), "--classes", "tumor", "fat"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bare.h5 does not say its patch size (no 'patch_size_level0' attribute" in err
    assert "--patch-size-level0" in err
    assert main([*argv, "--patch-size-level0", str(reference.patch_size_level0), "--json"]) == 0


def test_clam_pt_with_coordinates_from_h5_files(demo_slide, demo_reference, tmp_path, capsys):
    reference = demo_reference
    (tmp_path / "clam" / "pt_files").mkdir(parents=True)
    (tmp_path / "clam" / "h5_files").mkdir()
    pt_path = tmp_path / "clam" / "pt_files" / "case7.pt"
    torch.save(torch.from_numpy(reference.features * 3.0), pt_path)
    _write_trident_h5(
        tmp_path / "clam" / "h5_files" / "case7.h5",
        reference.features,
        reference.coords,
        patch_size=224,
        patch_level=0,
        downsample=np.array([1.0, 1.0]),
    )
    with open_slide(demo_slide) as slide:
        store = open_features_for_slide(pt_path, slide)
    np.testing.assert_allclose(store.features, reference.features, atol=1e-6)
    np.testing.assert_array_equal(store.coords, reference.coords)
    assert store.patch_size_level0 == 224
    capsys.readouterr()
    argv = ["classify", str(demo_slide), "--features", str(pt_path), "--json", "--classes"]
    assert main([*argv, "tumor", "adipose tissue"]) == 0
    alone = tmp_path / "alone.pt"
    shutil.copyfile(pt_path, alone)
    assert main(["classify", str(demo_slide), "--features", str(alone), "--classes", "a", "b"]) == 2
    assert "alone.pt is a CLAM feature file without its coordinates" in capsys.readouterr().err


def test_pt_files_that_are_not_a_tensor_are_refused_unrun(demo_slide, tmp_path):
    import pickle

    coords_h5 = tmp_path / "c.h5"
    with h5py.File(coords_h5, "w") as handle:
        handle["coords"] = np.zeros((2, 2), np.int64)
        handle["coords"].attrs["patch_size_level0"] = 224
    as_dict = tmp_path / "dict.pt"
    torch.save({"features": torch.ones(2, 256)}, as_dict)
    code = tmp_path / "code.pt"
    torch.save(torch.ones(2, 256), code)
    marker = tmp_path / "ran"
    with open(code, "wb") as handle:  # a pickle that would run a command when loaded
        pickle.dump(_Runs(str(marker)), handle)
    with open_slide(demo_slide) as slide:
        with pytest.raises(MedVLError, match="dict.pt holds a dict, not CLAM patch features"):
            open_features_for_slide(as_dict, slide, coords_path=coords_h5)
        with pytest.raises(MedVLError, match="code.pt holds Python objects other than tensors"):
            open_features_for_slide(code, slide, coords_path=coords_h5)
    assert not marker.exists()


class _Runs:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_an_h5_of_another_slide_is_refused_naming_both(demo_slide, tmp_path):
    features = np.ones((2, 256), np.float32)
    outside = np.array([[0, 0], [5000, 5000]])
    h5_path = tmp_path / "big_case.h5"
    _write_trident_h5(h5_path, features, outside, patch_size_level0=224)
    with open_slide(demo_slide) as slide:
        with pytest.raises(DataError, match="big_case.h5 has patches up to .*outside case7.tiff"):
            open_features_for_slide(h5_path, slide)


def test_a_file_that_is_no_feature_format_is_named(demo_slide, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("not features")
    with open_slide(demo_slide) as slide:
        with pytest.raises(MedVLError, match="notes.txt is neither a medvl feature store"):
            open_features_for_slide(junk, slide)


# --- bitwise: first call, batch composition, threads, resume --------------------------------

_FIRST_CALL = textwrap.dedent(
    """
    import sys, numpy as np, torch
    torch.set_num_threads(int(sys.argv[1]))
    from medvl_engine.encoders import load_encoder
    from medvl_engine import synthetic
    encoder = load_encoder("medvl-demo")
    rng = np.random.default_rng(4)
    names = synthetic.TISSUE_CLASSES
    patches = np.stack([
        synthetic.render_tissue(names[i % len(names)], (224, 224), rng) for i in range(24)
    ])
    first = encoder.encode_patches(patches)
    encoder.encode_patches(patches[::-1].copy())
    again = encoder.encode_patches(patches)
    alone = torch.cat([encoder.encode_patches(patches[i : i + 1]) for i in range(24)])
    np.save(sys.argv[2], np.stack([first.numpy(), again.numpy(), alone.numpy()]))
    """
)


def _start(code: str, *args: str) -> subprocess.Popen:
    """A fresh Python process running ``code`` with ``args`` (stdout dropped, stderr kept)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finished(process: subprocess.Popen) -> int:
    """Wait for ``process`` (at most 300 s); its exit status."""
    try:
        _, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    assert process.returncode in (0, 3), stderr[-2000:]
    return process.returncode


def test_demo_encoder_gives_the_same_bits_from_its_first_call(tmp_path, demo_encoder):
    demo_encoder()
    outputs = [tmp_path / f"t{threads}.npy" for threads in (1, 2)]
    # the two processes (1 and 2 threads) run at the same time
    processes = [
        _start(_FIRST_CALL, str(t), str(out)) for t, out in zip((1, 2), outputs, strict=True)
    ]
    assert [_finished(process) for process in processes] == [0, 0]
    results = [np.load(out) for out in outputs]
    first, again, alone = results[1]
    np.testing.assert_array_equal(first, again)  # first call in a process == later calls
    np.testing.assert_array_equal(first, alone)  # alone == in a batch
    np.testing.assert_array_equal(results[0], results[1])  # 1 thread == 2 threads


_RESUME = textwrap.dedent(
    """
    import sys, threading
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError
    from medvl_engine.features import slide_features
    from medvl_engine.io.slide import open_slide
    mode, slide_path, out = sys.argv[1:4]
    stop = threading.Event()
    def progress(done, total):
        if mode == "half" and done >= total // 2:
            stop.set()
    with open_slide(slide_path) as slide:
        try:
            slide_features(
                slide, load_encoder("medvl-demo"), out, batch_size=8,
                progress=progress, cancel=stop,
            )
        except CancelledError:
            sys.exit(3)
    """
)


def test_a_features_run_cancelled_and_resumed_in_new_processes_is_bitwise_equal(
    demo_slide, tmp_path, demo_encoder
):
    def start(mode: str, out: Path) -> subprocess.Popen:
        return _start(_RESUME, mode, str(demo_slide), str(out))

    half = start("half", tmp_path / "run.zarr")
    # meanwhile the uninterrupted run, here, with the same settings
    with open_slide(demo_slide) as slide:
        slide_features(slide, demo_encoder(), tmp_path / "full.zarr", batch_size=8)
    assert _finished(half) == 3
    with pytest.raises(DataError, match="incomplete"):
        FeatureStore.open(tmp_path / "run.zarr")
    assert _finished(start("full", tmp_path / "run.zarr")) == 0
    full = FeatureStore.open(tmp_path / "full.zarr")
    resumed = FeatureStore.open(tmp_path / "run.zarr")
    assert full.n_patches >= 16  # the resumed run starts after two batches of 8
    np.testing.assert_array_equal(resumed.features, full.features)
    np.testing.assert_array_equal(resumed.coords, full.coords)


def test_h5_import_fingerprint_changes_with_the_file(tmp_path):
    path = tmp_path / "f.h5"
    _write_trident_h5(path, np.ones((2, 4), np.float32), np.zeros((2, 2)), patch_size_level0=8)
    before = file_fingerprint(path)
    _write_trident_h5(path, np.full((2, 4), 2, np.float32), np.zeros((2, 2)), patch_size_level0=8)
    assert file_fingerprint(path) != before


def test_cancelled_extraction_message_names_the_slide_not_its_folder(
    twins, clip, tmp_path, regular_grid
):
    stop = threading.Event()
    stop.set()
    with open_slide(twins[0]) as slide:
        with pytest.raises(CancelledError) as caught:
            extract_features(
                slide, clip, regular_grid(slide.dimensions, 128), tmp_path / "c.zarr", cancel=stop
            )
    assert "for slide.tiff was cancelled" in str(caught.value)


def _finish(job):
    """Run a generator job to its return value."""
    while True:
        try:
            next(job)
        except StopIteration as stop:
            return stop.value


def test_plugin_heatmap_job_takes_an_h5_and_refuses_another_slides_store(
    demo_slide, demo_reference, twins, tmp_path, demo_encoder
):
    from napari_medvl._heatmap_job import FeatureCache, HeatmapRequest, heatmap_job

    reference = demo_reference
    h5_path = tmp_path / "case7.h5"
    _write_trident_h5(
        h5_path, reference.features, reference.coords, patch_size_level0=224, patch_size=224
    )
    cache = FeatureCache(root=tmp_path / "plugin-cache")
    with open_slide(demo_slide) as slide:
        request = HeatmapRequest(slide, "medvl-demo", ("tumor",), top_n=0, features=h5_path)
        outcome = _finish(heatmap_job(request, cache))
        text = demo_encoder().encode_text(["tumor"])
        expected = reference.features @ text[0].numpy()
        np.testing.assert_allclose(outcome.heatmap.scores, expected, atol=1e-6)
        assert not outcome.extracted
    with open_slide(twins[0]) as other:
        wrong = HeatmapRequest(other, "medvl-demo", ("tumor",), features=reference.path)
        with pytest.raises(DataError, match="was made from case7.tiff, not from slide.tiff"):
            _finish(heatmap_job(wrong, cache))
