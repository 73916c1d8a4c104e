"""Reading and writing feature stores (zarr) and TRIDENT/CLAM feature files (HDF5)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError, UnsupportedFormatError

__all__ = [
    "STORE_FORMAT",
    "StoreMismatch",
    "create_store",
    "open_store_group",
    "read_clam_pt",
    "read_h5_coords",
    "read_h5_features",
    "read_store",
]

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
    "slide_fingerprint",
)
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


class StoreMismatch(DataError):
    """An existing store holds other features (another slide, encoder or grid, or no record)."""


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
    if stored["slide_fingerprint"] is None and wanted["slide_fingerprint"] is not None:
        raise StoreMismatch(
            f"{path} was written by an older medvl that did not record which slide it belongs "
            "to; delete it (or choose another output path) and extract again.",
            path,
        )
    if stored["slide_fingerprint"] != wanted["slide_fingerprint"]:
        raise StoreMismatch(
            f"{path} already holds features of another slide "
            f"({group.attrs.get('slide') or 'unnamed'}, whose contents differ from "
            f"{attrs.get('slide') or 'this slide'}); choose another output path or delete it "
            "first.",
            path,
        )
    same_coords = "coords" in group and np.array_equal(group["coords"][:], coords)
    if stored != wanted or not same_coords:
        raise StoreMismatch(
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
    if path.is_file() and _starts_with(path, _HDF5_MAGIC):
        raise UnsupportedFormatError(
            f"{path.name} is an HDF5 feature file (TRIDENT/CLAM), not a medvl store; pass it to "
            "--features together with its slide, or import it with `medvl features --from-h5`.",
            path,
        )
    try:
        group = zarr.open_group(str(path), mode="r")
        attrs = dict(group.attrs)
        features_array, coords_array = group["features"], group["coords"]
    except Exception as error:  # zarr raises many types for a bad folder
        raise CorruptFileError(
            f"{path} is not a readable feature store (no zarr group with features and coords); "
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
        "slide_fingerprint": attrs.get("slide_fingerprint"),
        "imported_from": attrs.get("imported_from"),
    }


def store_source_fingerprint(path: Path) -> str | None:
    """``source_fingerprint`` of a complete imported store at ``path``, else None."""
    import zarr

    try:
        attrs = zarr.open_group(str(path), mode="r").attrs
        if attrs.get("format") != STORE_FORMAT or attrs.get("n_done") != attrs.get("n_total"):
            return None
        return attrs.get("source_fingerprint")
    except Exception:  # missing or damaged: imported again
        return None


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(magic)) == magic
    except OSError:
        return False


def read_h5_features(path: Path, patch_size_level0: int | None = None) -> dict[str, Any]:
    """Read a TRIDENT or CLAM ``.h5``: ``features`` [N, D] (or [1, N, D]), ``coords`` [N, 2].

    The patch size comes from the attributes (see :func:`read_h5_coords`), else from
    ``patch_size_level0``. Returns FeatureStore keyword arguments.
    """
    import h5py

    coords, attrs = read_h5_coords(path, patch_size_level0, needs_features=True)
    try:
        with h5py.File(path, "r") as handle:
            features = np.asarray(handle["features"][...], dtype=np.float32)
    except (OSError, KeyError, TypeError, ValueError) as error:
        raise CorruptFileError(
            f"{path.name}: its 'features' dataset could not be read as numbers; re-export it.",
            path,
        ) from error
    return _feature_kwargs(path, features, coords, attrs)


def read_clam_pt(
    pt_path: Path, coords_path: Path, patch_size_level0: int | None = None
) -> dict[str, Any]:
    """Read a CLAM ``.pt`` feature file (a tensor [N, D]) with the coordinates of ``coords_path``.

    The tensor is loaded with ``torch.load(weights_only=True)``: a file holding Python objects
    other than tensors is refused, never run. Returns FeatureStore keyword arguments.
    """
    import pickle
    import warnings

    import torch

    if not pt_path.is_file():
        raise DataError(f"Feature file {pt_path} does not exist; check the path.", pt_path)
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols it then refuses
            warnings.simplefilter("ignore")
            loaded = torch.load(pt_path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsupportedFormatError(
            f"{pt_path.name} holds Python objects other than tensors, which medvl does not "
            "load; give a CLAM feature file (one tensor [N, D]).",
            pt_path,
        ) from error
    except Exception as error:  # torch raises many types for a damaged archive
        raise CorruptFileError(
            f"{pt_path.name} is not a readable PyTorch tensor file; re-export it.", pt_path
        ) from error
    if not isinstance(loaded, torch.Tensor) or loaded.ndim not in (2, 3):
        kind = (
            f"a tensor of shape {tuple(loaded.shape)}"
            if isinstance(loaded, torch.Tensor)
            else (f"a {type(loaded).__name__}")
        )
        raise UnsupportedFormatError(
            f"{pt_path.name} holds {kind}, not CLAM patch features (a tensor [N, D]); give the "
            "feature file from CLAM's pt_files folder.",
            pt_path,
        )
    features = loaded.detach().float().numpy()
    coords, attrs = read_h5_coords(coords_path, patch_size_level0, needs_features=False)
    return _feature_kwargs(pt_path, features, coords, attrs, coords_name=coords_path.name)


def read_h5_coords(
    path: Path, patch_size_level0: int | None = None, *, needs_features: bool = False
) -> tuple[np.ndarray, dict[str, Any]]:
    """``coords`` int64 [N, 2] (x, y) level-0 px of a TRIDENT/CLAM ``.h5`` and its attributes.

    The attributes (file's, then the coords dataset's) get ``patch_size_level0`` resolved:
    TRIDENT's ``patch_size_level0``; else CLAM's ``patch_size`` x ``downsample`` (patches read
    at ``patch_level``); else the ``patch_size_level0`` argument; else DataError naming the
    missing attribute and the option that gives it.
    """
    import h5py

    if not path.is_file():
        raise DataError(f"Feature file {path} does not exist; check the path.", path)
    if not _starts_with(path, _HDF5_MAGIC):
        raise UnsupportedFormatError(
            f"{path.name} is not an HDF5 file; give a TRIDENT or CLAM patch-feature .h5 file.",
            path,
        )
    wanted = ("features", "coords") if needs_features else ("coords",)
    try:
        with h5py.File(path, "r") as handle:
            if any(name not in handle for name in wanted):
                raise UnsupportedFormatError(
                    f"{path.name} has no {' and '.join(repr(n) for n in wanted)} "
                    f"dataset{'s' if len(wanted) > 1 else ''}; give a TRIDENT or CLAM "
                    "patch-feature file.",
                    path,
                )
            coords = np.asarray(handle["coords"][...])
            attrs = {**dict(handle.attrs), **dict(handle["coords"].attrs)}
    except (OSError, KeyError, TypeError, ValueError) as error:
        raise CorruptFileError(
            f"{path.name} is not a readable HDF5 file (damaged or truncated); re-export it.", path
        ) from error
    if coords.size % 2 or not np.issubdtype(coords.dtype, np.number):
        raise CorruptFileError(
            f"{path.name}: its coords {coords.shape} are not (x, y) pairs; re-export it.", path
        )
    attrs["patch_size_level0"] = _patch_size_level0(path, attrs, patch_size_level0)
    return coords.reshape(-1, 2).astype(np.int64), attrs


def _patch_size_level0(path: Path, attrs: dict[str, Any], given: int | None) -> int:
    size0 = attrs.get("patch_size_level0")
    if size0 is None and "patch_size" in attrs:
        level = int(np.atleast_1d(attrs.get("patch_level", 0))[0])
        if "downsample" in attrs:  # CLAM: patch size at its level x that level's downsample
            downsample = float(np.atleast_1d(attrs["downsample"]).astype(float)[0])
            size0 = float(np.atleast_1d(attrs["patch_size"])[0]) * downsample
        elif level == 0:
            size0 = float(np.atleast_1d(attrs["patch_size"])[0])
        elif given is None:
            raise DataError(
                f"{path.name} gives patch_size at pyramid level {level} but no 'downsample' "
                "attribute to scale it to level 0; pass the patch side in level-0 pixels with "
                "--patch-size-level0.",
                path,
            )
    if size0 is None:
        size0 = given
    if size0 is None:
        raise DataError(
            f"{path.name} does not say its patch size (no 'patch_size_level0' attribute, nor "
            "'patch_size', on its coords); pass the patch side in level-0 pixels with "
            "--patch-size-level0.",
            path,
        )
    size0 = float(np.atleast_1d(size0).astype(float)[0])
    if not np.isfinite(size0) or size0 < 1:
        raise DataError(
            f"{path.name} gives a patch size of {size0:g} level-0 px, which is not a positive "
            "number; pass the right one with --patch-size-level0.",
            path,
        )
    return int(round(size0))


def _feature_kwargs(
    path: Path,
    features: np.ndarray,
    coords: np.ndarray,
    attrs: dict[str, Any],
    coords_name: str | None = None,
) -> dict[str, Any]:
    features = features.reshape(-1, features.shape[-1]) if features.ndim == 3 else features
    if features.ndim != 2 or len(features) != len(coords):
        where = f"{path.name} and {coords_name}" if coords_name else path.name
        raise CorruptFileError(
            f"{where}: {len(features)} feature rows but {len(coords)} coordinates "
            "([N, D] and [N, 2] expected); give the features and coordinates of one slide.",
            path,
        )
    if not np.isfinite(features).all():
        raise CorruptFileError(
            f"{path.name} holds features that are not finite numbers (NaN or infinity); "
            "extract them again.",
            path,
        )
    size0 = int(attrs["patch_size_level0"])
    mpp = attrs.get("mpp")
    name = attrs.get("name", path.stem)
    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
    return {
        "features": features,
        "coords": coords,
        "patch_size_level0": size0,
        "patch_size": int(np.atleast_1d(attrs.get("patch_size", size0))[0]),
        "target_mpp": None,
        "encoder": str(attrs.get("encoder", "")),
        "slide": name,
        "mpp": None if mpp is None else (float(mpp), float(mpp)),
    }
