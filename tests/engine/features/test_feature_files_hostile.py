"""Hostile and careless feature files: TRIDENT/CLAM .h5, CLAM .pt, .npz and zarr stores.

Each case must end in one sentence (a MedVLError naming the file) within a small memory
budget, never a hang, a traceback or features that silently mean nothing. Cases that
could block or allocate run in a child process (``run_limited``: address-space limit and
timeout).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import textwrap
import time
import zipfile
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr

from medvl_engine.errors import DataError, MedVLError, ResourceLimitError, UnsupportedFormatError
from medvl_engine.export import load_heatmap_npz
from medvl_engine.features import FeatureStore, check_store_matches_slide, import_h5_features
from medvl_engine.features.h5_import import read_clam_pt, read_h5_coords, read_h5_features
from medvl_engine.features.store import write_imported_store

COORDS = np.array([[0, 0], [256, 0], [0, 256], [256, 256]], dtype=np.int64)


def _features(rows: int = 4, dim: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def _write_h5(path: Path, *, features=None, coords=COORDS, patch_size_level0=256) -> Path:
    """An .h5 of "features" and "coords" (with its patch size attribute unless None);
    ``features`` may be an array, an h5py link, or ``features(handle)`` that writes it."""
    with h5py.File(path, "w") as handle:
        if callable(features):
            features(handle)
        else:
            handle["features"] = _features() if features is None else features
        handle["coords"] = coords
        if patch_size_level0 is not None:
            handle["coords"].attrs["patch_size_level0"] = patch_size_level0
    return path


def _write_store(path: Path, rows: int = 4) -> Path:
    coords = np.array([[256 * i, 0] for i in range(rows)], dtype=np.int64)
    store = FeatureStore(
        features=_features(rows), coords=coords, patch_size_level0=256, patch_size=256
    )
    store.imported_from = "x.h5"
    write_imported_store(path, store, source_fingerprint="test")
    return path


def _chunk_files(store: Path, array: str) -> list[Path]:
    return sorted(p for p in (store / array).rglob("*") if p.is_file() and p.name != "zarr.json")


class _Slide:
    """The little a feature check needs of a slide: its path, size and mpp."""

    def __init__(self, path: Path, dimensions: tuple[int, int]) -> None:
        self.path, self.dimensions, self.mpp = path, dimensions, None


# ---- named pipes: refused from their stat, never opened (child process, timeout) ---------


def test_named_pipes_as_feature_files_are_refused_without_blocking(tmp_path, run_limited):
    for name in ("f.h5", "f.pt", "h.npz", "fifo"):
        os.mkfifo(tmp_path / name)
    store = _write_store(tmp_path / "s.zarr")
    chunk = _chunk_files(store, "features")[0]
    chunk.unlink()
    chunk.symlink_to(tmp_path / "fifo")  # a chunk linked to a pipe outside the store
    inner = _write_store(tmp_path / "inner.zarr")
    chunk = _chunk_files(inner, "coords")[0]
    chunk.unlink()
    os.mkfifo(chunk)  # a pipe in place of a chunk
    with h5py.File(tmp_path / "ext.h5", "w") as handle:  # external storage in a pipe
        handle.create_dataset(
            "features", shape=(4, 8), dtype="f4", external=[(str(tmp_path / "fifo"), 0, 128)]
        )
        handle["coords"] = COORDS
        handle["coords"].attrs["patch_size_level0"] = 256
    with h5py.File(tmp_path / "link.h5", "w") as handle:  # an ExternalLink to a pipe
        handle["features"] = h5py.ExternalLink(str(tmp_path / "fifo"), "/features")
        handle["coords"] = COORDS
        handle["coords"].attrs["patch_size_level0"] = 256
    (tmp_path / "slide.bin").write_bytes(b"slide")
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from medvl_engine.errors import MedVLError
        from medvl_engine.export import load_heatmap_npz
        from medvl_engine.features import FeatureStore
        from medvl_engine.features.h5_import import read_clam_pt, read_h5_features
        from medvl_engine.features.bags import read_bag_features, bag_shape
        from medvl_engine.features import open_features_for_slide
        from medvl_engine.cli.main import main
        folder = Path({str(tmp_path)!r})

        class Slide:
            path, dimensions, mpp = folder / "slide.bin", (1024, 1024), None

        def cli():
            code = main(["features", "--from-h5", str(folder / "f.h5"), "--out", str(folder)])
            raise MedVLError(f"exit {{code}}")

        cases = {{
            "cli": cli,
            "for_slide": lambda: open_features_for_slide(folder / "f.h5", Slide()),
            "ext": lambda: read_h5_features(folder / "ext.h5"),
            "link": lambda: read_h5_features(folder / "link.h5"),
            "h5": lambda: read_h5_features(folder / "f.h5"),
            "bag_h5": lambda: read_bag_features(folder / "f.h5"),
            "pt": lambda: read_clam_pt(folder / "f.pt", folder / "f.h5"),
            "npz": lambda: load_heatmap_npz(folder / "h.npz"),
            "store_link": lambda: FeatureStore.open(folder / "s.zarr"),
            "store_pipe": lambda: FeatureStore.open(folder / "inner.zarr"),
            "bag_store": lambda: bag_shape(folder / "inner.zarr"),
        }}
        for name, call in cases.items():
            try:
                call()
                print(name, "LOADED")
            except MedVLError as error:
                print(name, "REFUSED", error)
        """
    )
    started = time.perf_counter()
    returncode, out, err, _ = run_limited(code, timeout_s=60, max_mb=1024)
    assert returncode == 0, err
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert set(lines) == {
        *("cli", "for_slide", "ext", "link", "h5", "bag_h5", "pt", "npz"),
        *("store_link", "store_pipe", "bag_store"),
    }
    assert lines["cli"] == "REFUSED exit 2" and "f.h5: is a named pipe (FIFO)" in err
    assert "keeps its data in external files" in lines["ext"]
    assert "is a link into fifo outside this file" in lines["link"]
    for name in ("for_slide", "h5", "bag_h5", "pt", "npz"):
        assert lines[name].startswith("REFUSED") and "named pipe (FIFO)" in lines[name], lines
    assert "outside the feature store" in lines["store_link"]
    assert "is a named pipe (FIFO), not a regular file" in lines["store_pipe"]
    assert "named pipe" in lines["bag_store"]
    assert time.perf_counter() - started < 60


# ---- HDF5: data kept outside the file ------------------------------------------------------


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd", "/proc/self/environ"])
def test_h5_external_storage_is_refused(tmp_path, target):
    if not os.path.exists(target):
        pytest.skip(f"{target} is absent here")
    path = _write_h5(
        tmp_path / "ext.h5",
        features=lambda handle: handle.create_dataset(
            "features", shape=(4, 8), dtype="f4", external=[(target, 0, 128)]
        ),
    )
    with pytest.raises(
        UnsupportedFormatError,
        match="ext.h5: its 'features' dataset keeps its data in external files",
    ):
        read_h5_features(path)


def test_h5_external_storage_of_coords_is_refused_too(tmp_path):
    path = tmp_path / "ext.h5"
    with h5py.File(path, "w") as handle:
        handle["features"] = _features()
        handle.create_dataset("coords", shape=(4, 2), dtype="i8", external=[("/etc/passwd", 0, 64)])
    with pytest.raises(UnsupportedFormatError, match="'coords' dataset keeps its data in external"):
        read_h5_coords(path, 256)


def test_h5_external_link_is_refused(tmp_path):
    other = _write_h5(tmp_path / "other.h5")
    path = _write_h5(tmp_path / "link.h5", features=h5py.ExternalLink(str(other), "/features"))
    with pytest.raises(
        UnsupportedFormatError,
        match="link.h5: 'features' is a link into other.h5 outside this file",
    ):
        read_h5_features(path)


def test_h5_virtual_dataset_is_refused(tmp_path):
    other = _write_h5(tmp_path / "other.h5")
    layout = h5py.VirtualLayout(shape=(4, 8), dtype="f4")
    layout[:] = h5py.VirtualSource(str(other), "features", shape=(4, 8))
    path = _write_h5(
        tmp_path / "virtual.h5",
        features=lambda handle: handle.create_virtual_dataset("features", layout),
    )
    with pytest.raises(
        UnsupportedFormatError, match="virtual.h5: its 'features' dataset is virtual"
    ):
        read_h5_features(path)


def test_h5_soft_link_cycle_is_one_sentence(tmp_path):
    def cycle(handle: h5py.File) -> None:
        handle["features"] = h5py.SoftLink("/loop")
        handle["loop"] = h5py.SoftLink("/features")

    path = _write_h5(tmp_path / "cycle.h5", features=cycle)
    with pytest.raises(
        MedVLError, match="cycle.h5: 'features' is reached through a cycle of soft links"
    ):
        read_h5_features(path)


def test_h5_soft_link_inside_the_file_is_followed(tmp_path):
    features = _features()

    def linked(handle: h5py.File) -> None:
        handle["data/feats"] = features
        handle["features"] = h5py.SoftLink("/data/feats")

    path = _write_h5(tmp_path / "soft.h5", features=linked)
    data = read_h5_features(path)
    np.testing.assert_allclose(data["features"], features)


# ---- HDF5: declared sizes, bombs, unwritten chunks ----------------------------------------


def _gzip_bomb(path: Path, rows_per_chunk: int, chunks: int, dim: int) -> Path:
    """A .h5 whose 'features' are gzip-compressed zeros: a few MB on disk, rows x dim x 4 bytes
    once read. Chunks are written precompressed, so making it costs nothing."""
    zeros = zlib.compress(bytes(rows_per_chunk * dim * 4), 9)
    with h5py.File(path, "w") as handle:
        dataset = handle.create_dataset(
            "features",
            shape=(rows_per_chunk * chunks, dim),
            dtype="f4",
            chunks=(rows_per_chunk, dim),
            compression="gzip",
        )
        for index in range(chunks):
            dataset.id.write_direct_chunk((index * rows_per_chunk, 0), zeros)
        handle["coords"] = np.stack(
            [np.arange(rows_per_chunk * chunks), np.zeros(rows_per_chunk * chunks, int)], 1
        )
        handle["coords"].attrs["patch_size_level0"] = 1
    return path


def test_h5_bombs_and_lazily_declared_datasets_are_refused_before_reading(tmp_path, run_limited):
    lazy = tmp_path / "lazy.h5"
    with h5py.File(lazy, "w") as handle:  # 2 TB declared, nothing written
        handle.create_dataset("features", shape=(10**9, 512), dtype="f4", chunks=(1, 512))
        handle.create_dataset("coords", shape=(10**9, 2), dtype="i8", chunks=(1, 2))
        handle["coords"].attrs["patch_size_level0"] = 256
    lazy_rows = tmp_path / "lazy_rows.h5"
    with h5py.File(lazy_rows, "w") as handle:  # 10 million rows of features, coords written
        handle.create_dataset("features", shape=(10**7, 1024), dtype="f4", chunks=(64, 1024))
        handle["coords"] = COORDS
        handle["coords"].attrs["patch_size_level0"] = 256
    bomb = _gzip_bomb(tmp_path / "bomb.h5", rows_per_chunk=4096, chunks=160, dim=1024)
    assert bomb.stat().st_size < 20 * 2**20  # 2.7 GB once decompressed
    code = textwrap.dedent(
        f"""
        from pathlib import Path
        from medvl_engine.errors import MedVLError
        from medvl_engine.features.h5_import import read_h5_features
        from medvl_engine.features.bags import read_bag_features
        folder = Path({str(tmp_path)!r})
        for name in ("lazy.h5", "lazy_rows.h5", "bomb.h5"):
            for reader in (read_h5_features, read_bag_features):
                try:
                    reader(folder / name)
                    print(name, "LOADED")
                except MedVLError as error:
                    print(name, type(error).__name__, error)
        """
    )
    returncode, out, err, peak_mb = run_limited(
        code, timeout_s=60, max_mb=1024, address_space_mb=3072
    )
    assert returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 6, out
    for line in lines:
        name, kind, message = line.split(" ", 2)
        assert kind == "ResourceLimitError", line
        assert (
            f"{name}: its 'features' dataset declares" in message
            or "its 'coords' dataset declares" in message
        )
        assert "MEDVL_MAX_ARRAY_BYTES" in message
    assert peak_mb < 1024


def test_the_array_limit_has_an_environment_override(tmp_path, monkeypatch):
    coords = np.stack([np.arange(64) * 256, np.zeros(64, np.int64)], axis=1)
    path = _write_h5(tmp_path / "small.h5", features=_features(64, 256), coords=coords)
    monkeypatch.setenv("MEDVL_MAX_ARRAY_BYTES", "40000")
    with pytest.raises(
        ResourceLimitError,
        match=r"small.h5: its 'features' dataset declares 64 x 256 values \(65.5 kB",
    ):
        read_h5_features(path)
    monkeypatch.setenv("MEDVL_MAX_ARRAY_BYTES", str(2**20))
    assert read_h5_features(path)["features"].shape == (64, 256)


def test_h5_dataset_with_unwritten_chunks_is_incomplete(tmp_path):
    path = tmp_path / "partial.h5"
    with h5py.File(path, "w") as handle:
        dataset = handle.create_dataset("features", shape=(4, 8), dtype="f4", chunks=(1, 8))
        dataset[:2] = _features(2)  # rows 2 and 3 never written: they would read as zeros
        handle["coords"] = COORDS
        handle["coords"].attrs["patch_size_level0"] = 256
    with pytest.raises(
        DataError, match=r"partial.h5: its 'features' dataset is incomplete \(2 of 4 chunks"
    ):
        read_h5_features(path)


# ---- HDF5: what was read ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("abc", "'abc', which is not a number"),
        (b"224", "'224', which is not a number"),
        (0, "0 level-0 px, which is not a positive number"),
        (-224, "-224 level-0 px, which is not a positive number"),
        (1.5, "1.5 level-0 px, which is not a whole number of pixels"),
        (1e9, "1,000,000,000 level-0 px, larger than any slide's side (262,144 px)"),
        (float("nan"), "nan level-0 px, which is not a positive number"),
    ],
)
def test_h5_bad_patch_sizes_are_refused_in_words(tmp_path, value, words):
    path = _write_h5(tmp_path / "bad.h5", patch_size_level0=value)
    with pytest.raises(DataError, match="bad.h5 gives a patch size of " + re.escape(words)):
        read_h5_features(path)


@pytest.mark.parametrize(
    ("attrs", "words"),
    [
        ({"patch_size": "abc"}, "gives a patch size of 'abc', which is not a number"),
        (
            {"patch_size": 256, "downsample": "x"},
            "gives downsample 'x', which is not a positive number",
        ),
        ({"patch_size": 256, "downsample": [0.0, 0.0]}, r"gives downsample \[0.0, 0.0\]"),
        (
            {"patch_size": 256, "patch_level": "one"},
            "gives patch_level 'one', which is not a whole number",
        ),
        (
            {"patch_size_level0": 256, "mpp": "fast"},
            "gives mpp 'fast', which is not a positive number",
        ),
    ],
)
def test_h5_text_attributes_are_refused_in_words(tmp_path, attrs, words):
    path = _write_h5(tmp_path / "clam.h5", patch_size_level0=None)
    with h5py.File(path, "a") as handle:
        for key, value in attrs.items():
            handle["coords"].attrs[key] = value
    with pytest.raises(DataError, match="clam.h5 " + words):
        read_h5_features(path)


def test_h5_nan_and_infinite_features_are_refused(tmp_path):
    features = _features()
    features[2, 3] = np.nan
    features[3, 0] = np.inf
    path = _write_h5(tmp_path / "nan.h5", features=features)
    with pytest.raises(
        MedVLError, match=r"nan.h5: 2 of its 4 feature rows hold values that are not finite"
    ):
        read_h5_features(path)


def test_h5_double_precision_too_large_for_float32_is_refused(tmp_path):
    features = _features().astype(np.float64)
    features[0, 0] = 1e300
    path = _write_h5(tmp_path / "big.h5", features=features)
    with pytest.raises(MedVLError, match="big.h5: 1 of its 4 feature rows .* not finite"):
        read_h5_features(path)


@pytest.mark.parametrize(
    ("coords", "words"),
    [
        ([[0, 0], [256, 0], [0, 0], [256, 256]], r"1 of its 4 patches repeat the coordinates"),
        ([[0, 0], [256, 0], [-256, 0], [256, 256]], "negative positions"),
        ([[0, 0], [256.5, 0], [0, 256], [256, 256]], "not whole pixel positions"),
    ],
)
def test_h5_bad_coords_are_refused(tmp_path, coords, words):
    path = _write_h5(tmp_path / "coords.h5", coords=np.array(coords))
    with pytest.raises(MedVLError, match="coords.h5: .*" + words):
        read_h5_features(path)


def test_h5_text_features_are_refused(tmp_path):
    path = tmp_path / "text.h5"
    with h5py.File(path, "w") as handle:
        handle["features"] = np.array([["a"] * 8] * 4, dtype="S1")
        handle["coords"] = COORDS
        handle["coords"].attrs["patch_size_level0"] = 256
    with pytest.raises(UnsupportedFormatError, match="text.h5: its 'features' dataset holds text"):
        read_h5_features(path)


def test_h5_integer_features_are_refused(tmp_path):
    path = _write_h5(tmp_path / "ints.h5", features=np.arange(32).reshape(4, 8))
    with pytest.raises(MedVLError, match="ints.h5: its features are stored as int64 values"):
        read_h5_features(path)


def test_h5_attribute_with_thousands_of_values_is_refused_before_reading(tmp_path):
    path = _write_h5(tmp_path / "attr.h5", patch_size_level0=None)
    with h5py.File(path, "a") as handle:
        handle["coords"].attrs["patch_size_level0"] = np.full(5000, 256)
    with pytest.raises(
        MedVLError, match="attr.h5: its 'patch_size_level0' attribute holds 5,000 values"
    ):
        read_h5_features(path)


def test_imported_h5_in_the_cli_is_refused_before_the_model_loads(tmp_path, monkeypatch, capsys):
    from medvl_engine.cli.main import main
    from medvl_engine.synthetic import make_synthetic_slide

    slide = make_synthetic_slide(tmp_path / "case.tiff", seed=1, size=(512, 512)).path
    bad = _write_h5(tmp_path / "bad.h5", patch_size_level0="abc")

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the features file was checked")

    monkeypatch.setattr("medvl_engine.encoders.load_encoder", no_model)
    code = main(
        [
            "heatmap",
            str(slide),
            "--prompt",
            "x",
            "--features",
            str(bad),
            "--out",
            str(tmp_path / "o.png"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "bad.h5 gives a patch size of 'abc', which is not a number" in err
    assert "Traceback" not in err and not (tmp_path / "o.png").exists()


def test_patch_size_larger_than_the_slide_is_refused(tmp_path):
    store = FeatureStore(
        features=_features(), coords=COORDS, patch_size_level0=5000, patch_size=224
    )
    store.imported_from = "x.h5"
    slide = _Slide(tmp_path / "small.tiff", (1024, 768))
    with pytest.raises(
        DataError,
        match="patch size of 5,000 level-0 px, larger than the slide's longest side \\(1,024 px\\)",
    ):
        check_store_matches_slide(store, slide)


def test_import_writes_nothing_for_a_refused_file(tmp_path):
    path = _write_h5(tmp_path / "dup.h5", coords=np.zeros((4, 2), np.int64))
    with pytest.raises(MedVLError, match="repeat the coordinates"):
        import_h5_features(path, tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


# ---- CLAM .pt and .npz: zip members ------------------------------------------------------


def _zip_bomb(path: Path, member: str, size: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open(member, "w", force_zip64=True) as stream:
            block = bytes(2**20)
            for _ in range(size // 2**20):
                stream.write(block)
    return path


def test_pt_zip_bomb_is_refused_before_torch_loads_it(tmp_path, monkeypatch):
    coords = _write_h5(tmp_path / "c.h5")
    bomb = _zip_bomb(tmp_path / "bomb.pt", "bomb/data/0", 64 * 2**20)
    assert bomb.stat().st_size < 2**20
    monkeypatch.setenv("MEDVL_MAX_ARRAY_BYTES", str(32 * 2**20))
    import torch

    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    with pytest.raises(
        ResourceLimitError, match="bomb.pt: its contents declare 67.1 MB once uncompressed"
    ):
        read_clam_pt(bomb, coords)


def test_npz_zip_bomb_and_forged_array_header_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDVL_MAX_ARRAY_BYTES", str(32 * 2**20))
    bomb = _zip_bomb(tmp_path / "bomb.npz", "grid.npy", 64 * 2**20)
    with pytest.raises(ResourceLimitError, match="bomb.npz: its contents declare"):
        load_heatmap_npz(bomb)
    header = tmp_path / "header.npz"  # a 100-byte member whose .npy header declares 8 GB
    with zipfile.ZipFile(header, "w") as archive:
        text = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,), }"
        text += " " * (63 - len(text) % 64) + "\n"
        archive.writestr(
            "grid.npy", b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode()
        )
    with pytest.raises(ResourceLimitError, match="header.npz: its contents declare 8 GB"):
        load_heatmap_npz(header)


def test_npz_with_pickled_objects_is_refused(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, grid=np.array([{"a": 1}], dtype=object))
    with pytest.raises(MedVLError, match="objects.npz is not a readable .npz of plain arrays"):
        load_heatmap_npz(path)


def test_mammo_cache_entry_that_is_damaged_is_decoded_again(tmp_path):
    from medvl_engine.data.mammo_dataset import disk_cached_loader

    calls = []

    def loader(record, size):
        calls.append(size)
        return np.zeros((size, size), np.float32), np.zeros((0, 4))

    class Record:
        exam_id, laterality = "e1", "L"

    cached = disk_cached_loader(tmp_path, loader)
    cached(Record(), 8)
    (entry,) = tmp_path.glob("*.npz")
    entry.write_bytes(b"PK\x03\x04 not a zip")
    image, boxes = cached(Record(), 8)
    assert image.shape == (8, 8) and calls == [8, 8]
    image, _ = cached(Record(), 8)  # rewritten, read from the cache now
    assert calls == [8, 8]


# ---- zarr stores --------------------------------------------------------------------------


def test_store_with_a_missing_features_chunk_is_incomplete(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    _chunk_files(store, "features")[0].unlink()
    with pytest.raises(
        DataError, match=r"s.zarr is incomplete: 1 of 1 chunks of its 'features' array are missing"
    ):
        FeatureStore.open(store)


def test_store_with_a_missing_coords_chunk_is_incomplete(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    _chunk_files(store, "coords")[0].unlink()
    with pytest.raises(DataError, match="s.zarr is incomplete: .* its 'coords' array are missing"):
        FeatureStore.open(store)


def test_store_with_one_patch_at_the_origin_is_complete(tmp_path):
    store = _write_store(tmp_path / "one.zarr", rows=1)
    assert _chunk_files(store, "coords"), "the (0, 0) chunk is written"
    shutil.rmtree(store / "coords" / "c")  # as an older medvl left it (zarr skips fill chunks)
    opened = FeatureStore.open(store)
    assert opened.coords.tolist() == [[0, 0]]


def test_store_with_a_chunk_linked_out_of_it_is_refused(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    secret = tmp_path / "elsewhere.bin"
    chunk = _chunk_files(store, "features")[0]
    shutil.copy(chunk, secret)
    chunk.unlink()
    chunk.symlink_to(secret)
    with pytest.raises(
        UnsupportedFormatError, match="is a link to elsewhere.bin, outside the feature store"
    ):
        FeatureStore.open(store)


def test_store_with_double_precision_features_is_read_as_float32(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(store), mode="r+")
    values = np.asarray(group["features"][...], dtype=np.float64)
    group.create_array("features", data=values, overwrite=True)
    opened = FeatureStore.open(store)
    assert opened.features.dtype == np.float32
    np.testing.assert_allclose(
        opened.features, values / np.linalg.norm(values, axis=1, keepdims=True), atol=1e-6
    )


def test_store_with_integer_or_3d_features_is_refused_in_words(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(store), mode="r+")
    group.create_array("features", data=np.arange(32).reshape(4, 8), overwrite=True)
    with pytest.raises(MedVLError, match="s.zarr: its features are stored as int64 values"):
        FeatureStore.open(store)
    group.create_array("features", data=np.ones((2, 2, 8), np.float32), overwrite=True)
    with pytest.raises(MedVLError, match=r"s.zarr: its features have shape \(2, 2, 8\)"):
        FeatureStore.open(store)


def test_store_with_odd_chunk_shapes_reads_the_same(tmp_path):
    store = _write_store(tmp_path / "s.zarr", rows=7)
    expected = FeatureStore.open(store).features
    group = zarr.open_group(str(store), mode="r+")
    values = np.asarray(group["features"][...])
    group.create_array("features", data=values, chunks=(3, 5), overwrite=True)
    np.testing.assert_allclose(FeatureStore.open(store).features, expected, atol=1e-6)


def test_store_with_nan_features_or_duplicate_coords_is_refused(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(store), mode="r+")
    features = np.asarray(group["features"][...])
    features[1] = np.nan
    group["features"][...] = features
    with pytest.raises(
        MedVLError, match="s.zarr: 1 of its 4 feature rows hold values that are not finite"
    ):
        FeatureStore.open(store)
    other = _write_store(tmp_path / "d.zarr")
    group = zarr.open_group(str(other), mode="r+")
    group["coords"][...] = np.array([[0, 0], [256, 0], [256, 0], [768, 0]])
    with pytest.raises(MedVLError, match="d.zarr: 1 of its 4 patches repeat the coordinates"):
        FeatureStore.open(other)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("patch_size_level0", 0, "gives a patch size of 0 level-0 px"),
        ("patch_size_level0", -224, "gives a patch size of -224 level-0 px"),
        ("patch_size_level0", 1.5, "not a whole number of pixels"),
        ("patch_size_level0", 1e9, "larger than any slide's side"),
        ("patch_size_level0", "abc", "'abc', which is not a number"),
        ("n_total", "many", "records n_done as 'many', not a whole number of patches"),
        ("n_total", 9, r"4 feature rows, 4 coordinates and 9 patches recorded do not agree"),
        ("embed_dim", 16, "its features are 8 wide but the store records embed_dim 16"),
        (
            "slide_mpp",
            ["a", 1],
            "records slide_mpp as \\['a', 1\\], not a pair of positive numbers",
        ),
    ],
)
def test_store_attributes_are_checked(tmp_path, key, value, words):
    store = _write_store(tmp_path / "s.zarr")
    group = zarr.open_group(str(store), mode="r+")
    group.attrs[key] = value
    if key == "n_total":
        group.attrs["n_done"] = value
    with pytest.raises(MedVLError, match=words):
        FeatureStore.open(store)


def test_store_with_huge_metadata_is_refused(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    metadata = store / "zarr.json"
    document = json.loads(metadata.read_text())
    document["attributes"]["padding"] = "x" * (5 * 2**20)
    metadata.write_text(json.dumps(document))
    with pytest.raises(MedVLError, match=r"s.zarr: its metadata file zarr.json is 5.24 MB"):
        FeatureStore.open(store)


def test_store_declaring_a_huge_array_is_refused_before_reading(tmp_path):
    store = _write_store(tmp_path / "s.zarr")
    metadata = store / "features" / "zarr.json"
    document = json.loads(metadata.read_text())
    document["shape"] = [10**9, 8]
    metadata.write_text(json.dumps(document))
    group = zarr.open_group(str(store), mode="r+")
    group.attrs.update({"n_total": 10**9, "n_done": 10**9})
    with pytest.raises(
        ResourceLimitError, match="s.zarr: its 'features' array declares 1,000,000,000 x 8 values"
    ):
        FeatureStore.open(store)


def test_gzip_file_named_h5_is_not_hdf5(tmp_path):
    path = tmp_path / "g.h5"
    path.write_bytes(gzip.compress(b"x" * 1000))
    with pytest.raises(UnsupportedFormatError, match="g.h5 is not an HDF5 file"):
        read_h5_features(path)


def test_damaged_cached_import_is_imported_again(tmp_path, monkeypatch):
    from medvl_engine.features import open_features_for_slide

    monkeypatch.setenv("MEDVL_CACHE", str(tmp_path / "cache"))
    slide_file = tmp_path / "slide.bin"
    slide_file.write_bytes(b"a slide's bytes")
    slide = _Slide(slide_file, (1024, 1024))
    source = _write_h5(tmp_path / "feats.h5")
    first = open_features_for_slide(source, slide)
    (cached,) = (tmp_path / "cache" / "features").glob("slide-*.zarr")
    for chunk in _chunk_files(cached, "features"):
        chunk.unlink()  # the cache lost its features: reading it would score zeros
    again = open_features_for_slide(source, slide)
    np.testing.assert_allclose(again.features, first.features)
    assert _chunk_files(cached, "features"), "the cached import was written again"
