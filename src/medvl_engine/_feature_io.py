"""Reading and writing feature stores (zarr) and TRIDENT/CLAM feature files (HDF5)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError, UnsupportedFormatError

__all__ = ["STORE_FORMAT", "create_store", "open_store_group", "read_h5_features", "read_store"]

STORE_FORMAT = "medvl-features/1"
# Attributes that must agree for an existing store to be resumed rather than refused.
_IDENTITY_KEYS = (
    "patch_size_level0",
    "patch_size",
    "level",
    "read_size",
    "encoder",
    "embed_dim",
    "n_total",
)


def create_store(path: Path, coords: np.ndarray, attrs: dict[str, Any], chunk_rows: int):
    """A fresh zarr group with ``coords`` written and ``features`` [N, D] allocated (n_done = 0)."""
    import zarr

    if path.exists():
        if not (path.is_dir() and (not any(path.iterdir()) or _is_store(path))):
            raise DataError(
                f"{path} already exists and is not a medvl feature store; choose a new output "
                "path (nothing there was changed).",
                path,
            )
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # attributes first (one metadata write), so a half-made store is recognised
    group = zarr.open_group(str(path), mode="w", attributes={**attrs, "n_done": 0})
    total, dim = len(coords), int(attrs["embed_dim"])
    group.create_array(
        "features",
        shape=(total, dim),
        dtype="float32",
        chunks=(max(1, min(chunk_rows, max(total, 1))), dim),
        fill_value=0.0,
    )
    group.create_array("coords", data=np.asarray(coords, dtype=np.int64).reshape(-1, 2))
    return group


def _is_store(path: Path) -> bool:
    import zarr

    try:
        return zarr.open_group(str(path), mode="r").attrs.get("format") == STORE_FORMAT
    except Exception:  # zarr raises many types for something that is not a group
        return False


def open_store_group(path: Path, coords: np.ndarray, attrs: dict[str, Any]):
    """The existing group at ``path`` if it is this extraction (to resume), else None.

    Raises DataError when ``path`` holds a store made from a different grid or encoder, so that
    one is never overwritten by accident.
    """
    import zarr

    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return None
    if not _is_store(path):
        raise DataError(
            f"{path} already exists and is not a medvl feature store; choose a new output path "
            "(nothing there was changed).",
            path,
        )
    group = zarr.open_group(str(path), mode="r+")
    if "features" not in group or "coords" not in group:
        return None  # killed while being created: start again
    stored = {key: group.attrs.get(key) for key in _IDENTITY_KEYS}
    wanted = {key: attrs.get(key) for key in _IDENTITY_KEYS}
    same_coords = "coords" in group and np.array_equal(group["coords"][:], coords)
    if stored != wanted or not same_coords:
        raise DataError(
            f"{path} already holds features from another encoder or patch grid "
            f"({stored['encoder']}, {stored['n_total']} patches); choose another output path "
            "or delete it first.",
            path,
        )
    return group


def read_store(path: Path) -> dict[str, Any]:
    """Features, coords and metadata of a complete store, as FeatureStore keyword arguments."""
    import zarr

    if not path.exists():
        raise DataError(f"Feature store {path} does not exist; run `medvl features` first.", path)
    try:
        group = zarr.open_group(str(path), mode="r")
        attrs = dict(group.attrs)
        features_array, coords_array = group["features"], group["coords"]
    except Exception as error:  # zarr raises many types for a bad folder
        raise CorruptFileError(
            f"{path} is not a readable feature store ({type(error).__name__}: {error}); "
            "extract the features again.",
            path,
        ) from error
    if attrs.get("format") != STORE_FORMAT:
        raise UnsupportedFormatError(
            f"{path} is a zarr group but not a medvl feature store; give the folder written by "
            "`medvl features` (or import a TRIDENT/CLAM .h5 file).",
            path,
        )
    done, total = int(attrs.get("n_done", 0)), int(attrs.get("n_total", 0))
    if done < total:
        raise DataError(
            f"Feature store {path} is incomplete ({done} of {total} patches); run the same "
            "`medvl features` command again to finish it.",
            path,
        )
    features = np.empty(features_array.shape, dtype=np.float32)
    features[...] = features_array[...]
    mpp = attrs.get("slide_mpp")
    dims = attrs.get("slide_dimensions")
    return {
        "features": features,
        "coords": np.asarray(coords_array[...], dtype=np.int64),
        "patch_size_level0": int(attrs["patch_size_level0"]),
        "patch_size": int(attrs.get("patch_size", attrs["patch_size_level0"])),
        "target_mpp": attrs.get("target_mpp"),
        "encoder": str(attrs.get("encoder", "")),
        "slide": str(attrs.get("slide", "")),
        "mpp": None if mpp is None else (float(mpp[0]), float(mpp[1])),
        "slide_dimensions": None if dims is None else (int(dims[0]), int(dims[1])),
        "stride": attrs.get("stride_level0"),
    }


def read_h5_features(path: Path) -> dict[str, Any]:
    """Read a TRIDENT or CLAM ``.h5``: ``features`` [N, D] (or [1, N, D]), ``coords`` [N, 2]."""
    import h5py

    if not path.is_file():
        raise DataError(f"Feature file {path} does not exist; check the path.", path)
    try:
        with h5py.File(path, "r") as handle:
            if "features" not in handle or "coords" not in handle:
                raise UnsupportedFormatError(
                    f"{path.name} has no 'features' and 'coords' datasets; give a TRIDENT or "
                    "CLAM patch-feature file.",
                    path,
                )
            features = np.asarray(handle["features"][...], dtype=np.float32)
            coords = np.asarray(handle["coords"][...])
            attrs = {**dict(handle.attrs), **dict(handle["coords"].attrs)}
    except OSError as error:
        raise CorruptFileError(
            f"{path.name} is not a readable HDF5 file ({error}); re-export it.", path
        ) from error
    features = features.reshape(-1, features.shape[-1]) if features.ndim == 3 else features
    coords = coords.reshape(-1, 2).astype(np.int64)
    if features.ndim != 2 or len(features) != len(coords):
        raise CorruptFileError(
            f"{path.name}: features {features.shape} and coords {coords.shape} do not match "
            "([N, D] and [N, 2] expected); re-export it.",
            path,
        )
    size0 = attrs.get("patch_size_level0")
    if size0 is None and "patch_size" in attrs:  # CLAM: patch size at its level x downsample
        downsample = float(np.atleast_1d(attrs.get("downsample", 1.0)).astype(float)[0])
        size0 = float(attrs["patch_size"]) * downsample
    if size0 is None:
        raise DataError(
            f"{path.name} does not say its patch size (attribute patch_size_level0 on coords); "
            "re-export it with TRIDENT or add the attribute.",
            path,
        )
    mpp = attrs.get("mpp")
    return {
        "features": features,
        "coords": coords,
        "patch_size_level0": int(round(float(size0))),
        "patch_size": int(attrs.get("patch_size", size0)),
        "target_mpp": None,
        "encoder": str(attrs.get("encoder", "")),
        "slide": str(attrs.get("name", path.stem)),
        "mpp": None if mpp is None else (float(mpp), float(mpp)),
    }
