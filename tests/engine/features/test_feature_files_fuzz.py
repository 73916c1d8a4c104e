"""Property-based fuzzing of the feature-file readers (TRIDENT/CLAM .h5 and zarr stores).

Random shapes, dtypes, attributes, links, unwritten chunks and damaged bytes: every reader
either returns features that mean something (float32 [N, D] finite, coords int64 [N, 2] whole,
non-negative and unique, one per row, a positive whole patch size) or raises a MedVLError;
never another exception. The example counts are kept small so the file runs in seconds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medvl_engine.errors import MedVLError
from medvl_engine.features import FeatureStore
from medvl_engine.features.bags import bag_shape, read_bag_features, read_bag_rows
from medvl_engine.features.h5_import import import_h5_features, read_h5_coords, read_h5_features
from medvl_engine.features.store import write_imported_store

# MEDVL_FUZZ_EXAMPLES=500 explores further (with fresh random examples each run)
EXAMPLES = int(os.environ.get("MEDVL_FUZZ_EXAMPLES", "0") or 0)
FUZZ = settings(
    max_examples=EXAMPLES or 80,
    deadline=None,
    derandomize=not EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

DTYPES = ["f2", "f4", "f8", "i4", "u1", "?", "S3", "c8"]
ATTRIBUTE_VALUES = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=5),
    st.binary(max_size=5).map(lambda b: b.replace(b"\x00", b"0")),
    st.lists(st.floats(0.1, 1e4), min_size=0, max_size=3).map(np.array),
    st.lists(st.integers(-5, 5000), min_size=1, max_size=3).map(np.array),
)
ATTRIBUTE_KEYS = [
    "patch_size_level0",
    "patch_size",
    "patch_level",
    "downsample",
    "mpp",
    "encoder",
    "name",
]


def _values(draw: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    count = int(np.prod(shape))
    if dtype == "S3":
        return np.array(
            draw(st.lists(st.binary(max_size=3), min_size=count, max_size=count)), dtype="S3"
        ).reshape(shape)
    numbers = draw(
        st.lists(
            st.one_of(
                st.integers(-3, 3000).map(float), st.sampled_from([np.nan, np.inf, -0.0, 0.5])
            ),
            min_size=count,
            max_size=count,
        )
    )
    array = np.array(numbers, dtype=np.float64).reshape(shape)
    if np.dtype(dtype).kind in "iub":
        array = np.nan_to_num(array, nan=0, posinf=1, neginf=0)
        if np.dtype(dtype).kind == "u":
            array = np.clip(np.abs(array), 0, 255 if dtype == "u1" else None)
    return array.astype(dtype)


@st.composite
def h5_recipes(draw: Any) -> dict[str, Any]:
    rows = draw(st.integers(0, 6))
    recipe: dict[str, Any] = {"rows": rows}
    for name, width in (("features", draw(st.integers(1, 5))), ("coords", 2)):
        kind = draw(
            st.sampled_from(
                [
                    "2d",
                    "2d",
                    "2d",
                    "3d",
                    "1d",
                    "scalar",
                    "wide",
                    "absent",
                    "group",
                    "soft",
                    "external",
                ]
            )
        )
        shape = {
            "2d": (rows, width),
            "3d": (1, rows, width),
            "1d": (rows,),
            "scalar": (),
            "wide": (rows, width + 1),
        }.get(kind)
        dtype = draw(
            st.sampled_from(DTYPES if name == "features" else ["i8", "f8", "u4", "S3", "f4"])
        )
        recipe[name] = {
            "kind": kind,
            "shape": shape,
            "dtype": dtype,
            "values": None if shape is None else _values(draw, shape, dtype),
            "chunked": draw(st.booleans()),
            "gzip": draw(st.booleans()),
            "written": draw(st.sampled_from(["all", "all", "all", "none", "half"])),
        }
    recipe["attrs"] = draw(
        st.dictionaries(st.sampled_from(ATTRIBUTE_KEYS), ATTRIBUTE_VALUES, max_size=4)
    )
    recipe["on_file"] = draw(st.booleans())
    recipe["damage"] = draw(st.sampled_from(["none", "none", "truncate", "flip"]))
    recipe["damage_at"] = draw(st.floats(0.0, 1.0))
    return recipe


def _write(path: Path, recipe: dict[str, Any]) -> None:
    with h5py.File(path, "w") as handle:
        for name in ("features", "coords"):
            spec = recipe[name]
            if spec["kind"] == "absent":
                continue
            if spec["kind"] == "group":
                handle.create_group(name)
                continue
            if spec["kind"] == "soft":
                handle[name] = h5py.SoftLink("/features" if name == "coords" else "/coords")
                continue
            if spec["kind"] == "external":
                handle[name] = h5py.ExternalLink("/etc/hostname", "/x")
                continue
            values, shape = spec["values"], spec["shape"]
            options: dict[str, Any] = {}
            if shape and all(shape) and spec["chunked"]:
                options["chunks"] = tuple(max(1, side // 2) for side in shape)
                if spec["gzip"]:
                    options["compression"] = "gzip"
            dataset = handle.create_dataset(name, shape=shape, dtype=values.dtype, **options)
            if spec["written"] == "all" or not shape:
                dataset[...] = values
            elif spec["written"] == "half" and shape[0] > 1:
                dataset[: shape[0] // 2] = values[: shape[0] // 2]
        real_coords = recipe["coords"]["kind"] in ("2d", "3d", "1d", "scalar", "wide")
        holder = handle["coords"] if real_coords and not recipe["on_file"] else handle
        for key, value in recipe["attrs"].items():
            holder.attrs[key] = value
    if recipe["damage"] != "none":
        data = bytearray(path.read_bytes())
        at = int(recipe["damage_at"] * (len(data) - 1))
        if recipe["damage"] == "truncate":
            del data[max(at, 8) :]
        else:
            for offset in range(at, min(at + 4, len(data))):
                data[offset] ^= 0xFF
        path.write_bytes(bytes(data))


def _check_loaded(data: dict[str, Any]) -> None:
    features, coords = data["features"], data["coords"]
    assert features.dtype == np.float32 and features.ndim == 2 and np.isfinite(features).all()
    assert coords.dtype == np.int64 and coords.shape == (len(features), 2)
    assert (coords >= 0).all() and len(np.unique(coords, axis=0)) == len(coords)
    assert isinstance(data["patch_size_level0"], int) and data["patch_size_level0"] >= 1


def _attempt(call: Any) -> Any:
    try:
        return call()
    except MedVLError as error:
        assert error.message and "\n" not in error.message
        return None


@FUZZ
@given(recipe=h5_recipes())
def test_h5_readers_load_valid_data_or_raise_medvl_error(recipe):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.h5"
        _write(path, recipe)
        data = _attempt(lambda: read_h5_features(path, patch_size_level0=None))
        if data is not None:
            _check_loaded(data)
        coords = _attempt(lambda: read_h5_coords(path, 224))
        if coords is not None:
            assert coords[0].dtype == np.int64 and coords[0].ndim == 2
        store = _attempt(
            lambda: import_h5_features(path, Path(folder) / "out.zarr", patch_size_level0=224)
        )
        if store is not None:
            reopened = FeatureStore.open(Path(folder) / "out.zarr")
            np.testing.assert_allclose(reopened.features, store.features, atol=1e-6)
            np.testing.assert_array_equal(reopened.coords, store.coords)
        bag = _attempt(lambda: read_bag_features(path))
        if bag is not None:
            assert bag.ndim == 2 and bool(bag.isfinite().all())
        shape = _attempt(lambda: bag_shape(path))
        if shape is not None and shape[0] > 0:
            _attempt(lambda: read_bag_rows(path, [0, shape[0] - 1]))


@pytest.fixture(scope="module")
def valid_store(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz_store")
    rng = np.random.default_rng(0)
    coords = np.array([[64 * i, 64 * (i % 3)] for i in range(12)], dtype=np.int64)
    store = FeatureStore(
        features=rng.standard_normal((12, 6)).astype(np.float32),
        coords=coords,
        patch_size_level0=64,
        patch_size=64,
    )
    store.imported_from = "x.h5"
    path = folder / "valid.zarr"
    write_imported_store(path, store, source_fingerprint="fuzz")
    return path


STORE_ATTRIBUTES = [
    "patch_size_level0",
    "patch_size",
    "n_done",
    "n_total",
    "slide_mpp",
    "slide_dimensions",
    "stride_level0",
    "target_mpp",
    "format",
]


@FUZZ
@given(
    attrs=st.dictionaries(
        st.sampled_from(STORE_ATTRIBUTES),
        st.one_of(
            ATTRIBUTE_VALUES.filter(lambda v: not isinstance(v, (bytes, np.ndarray))),
            st.lists(st.integers(-2, 9), max_size=3),
            st.none(),
        ),
        max_size=3,
    ),
    removed=st.lists(st.integers(0, 50), max_size=2),
    garbage=st.lists(st.integers(0, 50), max_size=2),
    rewrite=st.sampled_from([None, "f8", "i4", "f2", "3d", "chunks"]),
)
def test_store_readers_load_valid_data_or_raise_medvl_error(
    valid_store, attrs, removed, garbage, rewrite
):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.zarr"
        shutil.copytree(valid_store, path)
        group = zarr.open_group(str(path), mode="r+")
        for key, value in attrs.items():
            group.attrs[key] = value.item() if isinstance(value, np.generic) else value
        if rewrite is not None:
            values = np.asarray(group["features"][...])
            if rewrite == "3d":
                values = values[None]
            elif rewrite != "chunks":
                values = values.astype(rewrite)
            group.create_array(
                "features",
                data=values,
                overwrite=True,
                chunks=(5, 4) if rewrite == "chunks" else "auto",
            )
        files = sorted(p for p in path.rglob("*") if p.is_file())
        for index in garbage:
            files[index % len(files)].write_bytes(b"\x00garbage\xff" * (index + 1))
        for index in removed:
            target = files[index % len(files)]
            if target.exists():
                target.unlink()
        store = _attempt(lambda: FeatureStore.open(path))
        if store is not None:
            assert store.features.dtype == np.float32 and np.isfinite(store.features).all()
            assert len(np.unique(store.coords, axis=0)) == len(store.coords) == store.n_patches
            assert store.patch_size_level0 >= 1
        bag = _attempt(lambda: read_bag_features(path))
        if bag is not None:
            assert bag.ndim == 2 and bool(bag.isfinite().all())
