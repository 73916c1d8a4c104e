"""TRIDENT/CLAM patch features: readers of their .h5 and .pt files, and import as a store.

TRIDENT and CLAM write ``features`` [N, D] and ``coords`` [N, 2] (x, y) level-0 px top-left in
an HDF5 file (CLAM also a ``.pt`` tensor [N, D] beside an ``.h5`` of coordinates). The readers
return :class:`~medvl_engine.features.store.FeatureStore` keyword arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError, UnsupportedFormatError
from medvl_engine.features._sniff import HDF5_MAGIC, starts_with
from medvl_engine.features.store import FeatureStore, write_imported_store

__all__ = ["import_h5_features", "read_clam_pt", "read_h5_coords", "read_h5_features"]


def import_h5_features(
    h5_path: str | Path,
    out_path: str | Path | None = None,
    *,
    slide_mpp: tuple[float, float] | None = None,
    encoder: str = "",
    patch_size_level0: int | None = None,
) -> FeatureStore:
    """Load a TRIDENT/CLAM ``.h5`` (features [N, D], coords [N, 2], patch_size_level0) as a store.

    Nothing is re-encoded. With ``out_path`` the features are also written as a zarr store
    that records the file it came from (``imported_from``, ``source_fingerprint``); it records
    no slide fingerprint, since the file does not say which slide file it was made from.
    ``patch_size_level0`` is used when the file's attributes do not give the patch size.
    """
    from medvl_engine._fingerprint import file_fingerprint

    h5_path = Path(h5_path)
    data = read_h5_features(h5_path, patch_size_level0=patch_size_level0)
    data["mpp"] = slide_mpp if slide_mpp is not None else data.get("mpp")
    data["encoder"] = encoder or data.get("encoder", "")
    store = FeatureStore(**data, imported_from=h5_path.name)
    if out_path is not None:
        write_imported_store(Path(out_path), store, source_fingerprint=file_fingerprint(h5_path))
    return store


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
    if not starts_with(path, HDF5_MAGIC):
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
