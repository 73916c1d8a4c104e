"""TRIDENT/CLAM patch features: readers of their .h5 and .pt files, and import as a store.

TRIDENT and CLAM write ``features`` [N, D] and ``coords`` [N, 2] (x, y) level-0 px top-left in
an HDF5 file (CLAM also a ``.pt`` tensor [N, D] beside an ``.h5`` of coordinates). The readers
return :class:`~medvl_engine.features.store.FeatureStore` keyword arguments.

Files are opened through :mod:`medvl_engine.guarded_files` (regular files only, no link or
external storage leaving the file, declared sizes within the array limit, every chunk
written) and what they hold is checked by :mod:`.validate` (float features, finite values,
whole non-negative unique coordinates, a sane patch size) before a store is made of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError, UnsupportedFormatError
from medvl_engine.features._sniff import HDF5_MAGIC, ZIP_MAGIC, starts_with
from medvl_engine.features.store import FeatureStore, write_imported_store
from medvl_engine.features.validate import (
    checked_coords,
    checked_features,
    checked_patch_size_level0,
)
from medvl_engine.guarded_files import (
    check_h5_dataset,
    check_zip_archive,
    h5_attribute,
    h5_dataset,
    open_h5,
    require_data_file,
)

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
    from medvl_engine.common.fingerprint import file_fingerprint

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
    ``patch_size_level0``. Returns FeatureStore keyword arguments; raises a MedVLError with
    one sentence for anything else (see the module docstring).
    """
    path = Path(path)
    _require_h5(path)
    with open_h5(path) as handle:
        _require_datasets(handle, path, ("features", "coords"))
        dataset = h5_dataset(handle, "features", path)
        assert dataset is not None
        check_h5_dataset(dataset, path, kinds="biufc")  # declared sizes first: nothing read yet
        coords, attrs = _coords_and_attrs(handle, path, patch_size_level0)
        features = dataset[...]
    return _feature_kwargs(path, features, coords, attrs)


def read_clam_pt(
    pt_path: Path, coords_path: Path, patch_size_level0: int | None = None
) -> dict[str, Any]:
    """Read a CLAM ``.pt`` feature file (a tensor [N, D]) with the coordinates of ``coords_path``.

    The file must be a regular zip-format PyTorch file whose members declare no more than the
    array limit (a zip bomb is refused before anything is decompressed); the tensor is loaded
    with ``torch.load(weights_only=True)``: a file holding Python objects other than tensors
    is refused, never run. Returns FeatureStore keyword arguments.
    """
    import pickle
    import warnings

    import torch

    pt_path, coords_path = Path(pt_path), Path(coords_path)
    if not pt_path.exists():
        raise DataError(f"Feature file {pt_path} does not exist; check the path.", pt_path)
    resolved = require_data_file(pt_path, "CLAM feature file")
    if not starts_with(resolved, ZIP_MAGIC):
        # a bare pickle (or torch's pre-1.6 format): declared sizes cannot be checked before
        # loading, so it is never handed to torch
        raise UnsupportedFormatError(
            f"{pt_path.name} holds Python objects other than tensors in a bare pickle, not a "
            "zip-format PyTorch file, which medvl does not load; give a CLAM feature file (one "
            "tensor [N, D]) saved by torch 1.6 or later.",
            pt_path,
        )
    check_zip_archive(resolved, "CLAM feature file")  # a zip bomb: refused before decompressing
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols it then refuses
            warnings.simplefilter("ignore")
            loaded = torch.load(resolved, map_location="cpu", weights_only=True)
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
    tensor = loaded.detach()
    features = tensor.float().numpy() if tensor.is_floating_point() else tensor.numpy()
    coords, attrs = read_h5_coords(coords_path, patch_size_level0, needs_features=False)
    return _feature_kwargs(pt_path, features, coords, attrs, coords_name=coords_path.name)


def read_h5_coords(
    path: Path, patch_size_level0: int | None = None, *, needs_features: bool = False
) -> tuple[np.ndarray, dict[str, Any]]:
    """``coords`` int64 [N, 2] (x, y) level-0 px of a TRIDENT/CLAM ``.h5`` and its attributes.

    The attributes (file's, then the coords dataset's) get ``patch_size_level0`` resolved:
    TRIDENT's ``patch_size_level0``; else CLAM's ``patch_size`` x ``downsample`` (patches read
    at ``patch_level``); else the ``patch_size_level0`` argument; else DataError naming the
    missing attribute and the option that gives it. Coordinates must be whole, non-negative
    and unique.
    """
    path = Path(path)
    _require_h5(path)
    wanted = ("features", "coords") if needs_features else ("coords",)
    with open_h5(path) as handle:
        _require_datasets(handle, path, wanted)
        return _coords_and_attrs(handle, path, patch_size_level0)


def _require_h5(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        raise DataError(f"Feature file {path} does not exist; check the path.", path)
    require_data_file(path, "TRIDENT or CLAM .h5 file")
    if not starts_with(path, HDF5_MAGIC):
        raise UnsupportedFormatError(
            f"{path.name} is not an HDF5 file; give a TRIDENT or CLAM patch-feature .h5 file.",
            path,
        )


def _require_datasets(handle: Any, path: Path, wanted: tuple[str, ...]) -> None:
    if any(h5_dataset(handle, name, path, required=False) is None for name in wanted):
        raise UnsupportedFormatError(
            f"{path.name} has no {' and '.join(repr(n) for n in wanted)} "
            f"dataset{'s' if len(wanted) > 1 else ''}; give a TRIDENT or CLAM "
            "patch-feature file.",
            path,
        )


_ATTRIBUTES = ("patch_size_level0", "patch_size", "patch_level", "downsample", "mpp", "encoder")


def _coords_and_attrs(
    handle: Any, path: Path, patch_size_level0: int | None
) -> tuple[np.ndarray, dict[str, Any]]:
    """Coordinates and the known attributes (file's, then the coords dataset's), checked."""
    dataset = h5_dataset(handle, "coords", path)
    assert dataset is not None
    check_h5_dataset(dataset, path, out_itemsize=8, kinds="iuf")
    attrs: dict[str, Any] = {}
    for holder in (handle, dataset):
        for key in (*_ATTRIBUTES, "name"):
            value = h5_attribute(holder, key, path)
            if value is not None:
                attrs[key] = value
    raw = dataset[...]
    if raw.size % 2:
        raise CorruptFileError(
            f"{path.name}: its coords {raw.shape} are not (x, y) pairs; re-export it.", path
        )
    attrs["patch_size_level0"] = _patch_size_level0(path, attrs, patch_size_level0)
    coords = checked_coords(raw, path.name, path, advice="re-export the file")
    return coords, attrs


def _patch_size_level0(path: Path, attrs: dict[str, Any], given: int | None) -> int:
    label = path.name
    if attrs.get("patch_size_level0") is not None:
        return checked_patch_size_level0(attrs["patch_size_level0"], label, path)
    if attrs.get("patch_size") is not None:
        size = checked_patch_size_level0(attrs["patch_size"], label, path)
        level = _whole_attribute(path, attrs.get("patch_level", 0), "patch_level")
        if attrs.get("downsample") is not None:  # CLAM: patch size at its level x downsample
            downsample = _positive_attribute(path, attrs["downsample"], "downsample")
            return checked_patch_size_level0(size * downsample, label, path, whole=False)
        if level == 0:
            return size
        if given is None:
            raise DataError(
                f"{path.name} gives patch_size at pyramid level {level} but no 'downsample' "
                "attribute to scale it to level 0; pass the patch side in level-0 pixels with "
                "--patch-size-level0.",
                path,
            )
    if given is None:
        raise DataError(
            f"{path.name} does not say its patch size (no 'patch_size_level0' attribute, nor "
            "'patch_size', on its coords); pass the patch side in level-0 pixels with "
            "--patch-size-level0.",
            path,
        )
    return checked_patch_size_level0(given, label, path)


def _one_number(value: Any) -> float | None:
    if isinstance(value, (str, bytes)):
        return None
    array = np.asarray(value)
    if array.dtype.kind not in "iuf" or array.size < 1:
        return None
    return float(array.reshape(-1)[0])


def _whole_attribute(path: Path, value: Any, key: str) -> int:
    number = _one_number(value)
    if number is None or not np.isfinite(number) or number < 0 or number != round(number):
        raise DataError(
            f"{path.name} gives {key} {_shown(value)}, which is not a whole number of 0 or "
            "more; re-export the file or pass --patch-size-level0.",
            path,
        )
    return int(number)


def _positive_attribute(path: Path, value: Any, key: str) -> float:
    number = _one_number(value)
    if number is None or not np.isfinite(number) or number <= 0:
        raise DataError(
            f"{path.name} gives {key} {_shown(value)}, which is not a positive number; "
            "re-export the file or pass --patch-size-level0.",
            path,
        )
    return number


def _shown(value: Any) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def _feature_kwargs(
    path: Path,
    features: np.ndarray,
    coords: np.ndarray,
    attrs: dict[str, Any],
    coords_name: str | None = None,
) -> dict[str, Any]:
    features = checked_features(features, path.name, path, advice="re-export the file")
    if len(features) != len(coords):
        where = f"{path.name} and {coords_name}" if coords_name else path.name
        raise CorruptFileError(
            f"{where}: {len(features)} feature rows but {len(coords)} coordinates "
            "([N, D] and [N, 2] expected); give the features and coordinates of one slide.",
            path,
        )
    size0 = int(attrs["patch_size_level0"])
    patch_size = size0
    if attrs.get("patch_size") is not None:
        patch_size = checked_patch_size_level0(attrs["patch_size"], path.name, path)
    mpp = attrs.get("mpp")
    if mpp is not None:
        mpp = _positive_attribute(path, mpp, "mpp")
    name = attrs.get("name", path.stem)
    encoder = attrs.get("encoder", "")
    return {
        "features": features,
        "coords": coords,
        "patch_size_level0": size0,
        "patch_size": patch_size,
        "target_mpp": None,
        "encoder": encoder if isinstance(encoder, str) else "",
        "slide": name if isinstance(name, str) else path.stem,
        "mpp": None if mpp is None else (mpp, mpp),
    }
