"""Bags of a slide's patch features read from a store or an .h5, padded to batches with a mask.

A zarr store's features array is found by :mod:`medvl_engine.features.store_io` (the store's
layout is :mod:`medvl_engine.features.store`'s); a TRIDENT/CLAM .h5 is read here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medvl_engine.errors import CorruptFileError, DataError
from medvl_engine.features.store_io import checked_features_array
from medvl_engine.guarded_files import (
    check_h5_dataset,
    h5_dataset,
    open_h5,
    open_h5_file,
)

__all__ = [
    "read_bag_features",
    "read_bag_rows",
    "bag_shape",
    "sample_patch_rows",
    "collate_bags",
    "BagCache",
]

_H5_SUFFIXES = (".h5", ".hdf5")
# what h5py, zarr and their codecs raise for a damaged file (MedVLError is none of these)
_READ_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def _read_h5(path: Path) -> np.ndarray:
    """The whole features dataset of a .h5 (guarded: see :mod:`medvl_engine.guarded_files`)."""
    with open_h5(path) as handle:
        array = np.asarray(_h5_features(handle, path)[0][...])
    if array.ndim == 3 and array.shape[0] == 1:  # TRIDENT stores [1, N, D] in some versions
        array = array[0]
    return array


def _read_zarr(path: Path) -> np.ndarray:
    features = checked_features_array(path)
    try:
        return np.asarray(features[...])
    except Exception as error:  # damaged chunks: zarr and its codecs raise many types
        raise CorruptFileError(
            f"{path}: its features could not be decoded ({type(error).__name__}); re-extract it.",
            path,
        ) from None


def _finite(array: np.ndarray, path: Path) -> np.ndarray:
    """``array`` unless it holds NaN or infinity (which would poison training)."""
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise DataError(
            f"{path} holds features that are not finite numbers (NaN or infinity); re-extract it.",
            path,
        )
    return array


def read_bag_features(path: str | Path) -> torch.Tensor:
    """Patch features of one slide as float32 ``[N, D]`` from a zarr store or a .h5 file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"feature file {path} does not exist; extract features first.", path)
    try:
        array = _read_h5(path) if _is_h5(path) else _read_zarr(path)
    except _READ_ERRORS as error:
        raise CorruptFileError(f"{path} cannot be read ({error}); re-extract it.", path) from None
    if array.ndim != 2 or array.shape[0] == 0:
        raise DataError(
            f"{path} holds features of shape {array.shape}; expected a non-empty [N, D] array.",
            path,
        )
    return torch.from_numpy(_finite(np.ascontiguousarray(array, dtype=np.float32), path))


def _is_h5(path: Path) -> bool:
    return path.suffix.lower() in _H5_SUFFIXES


def _h5_features(handle: Any, path: Path) -> tuple[Any, bool]:
    """The "features" dataset of an open .h5 and whether it is stored ``[1, N, D]``; links out of
    the file, external storage, declared sizes beyond the array limit and unwritten chunks are
    refused (:func:`~medvl_engine.guarded_files.h5_dataset`, ``check_h5_dataset``)."""
    dataset = h5_dataset(handle, "features", path, required=False)
    if dataset is None:
        raise DataError(
            f"{path} has no 'features' dataset (keys: {sorted(handle.keys())}); give a "
            "TRIDENT/CLAM patch-feature .h5.",
            path,
        )
    check_h5_dataset(dataset, path)
    return dataset, dataset.ndim == 3 and dataset.shape[0] == 1


def _checked_shape(path: Path, shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) != 2 or shape[0] == 0:
        raise DataError(
            f"{path} holds features of shape {shape}; expected a non-empty [N, D] array.", path
        )
    return int(shape[0]), int(shape[1])


def _open_features(path: Path) -> Any:
    """Open a bag's features lazily: ``(dataset, leading_one, handle or None)``."""
    if not path.exists():
        raise DataError(f"feature file {path} does not exist; extract features first.", path)
    if _is_h5(path):
        handle = open_h5_file(path)
        try:
            dataset, leading_one = _h5_features(handle, path)
        except BaseException:
            handle.close()
            raise
        return dataset, leading_one, handle
    return checked_features_array(path), False, None


def bag_shape(path: str | Path) -> tuple[int, int]:
    """``(N, D)`` of a bag's features, read from the file's metadata (no feature is read)."""
    path = Path(path)
    try:
        dataset, leading_one, handle = _open_features(path)
        try:
            shape = tuple(dataset.shape[1:] if leading_one else dataset.shape)
        finally:
            if handle is not None:
                handle.close()
    except _READ_ERRORS as error:
        raise CorruptFileError(f"{path} cannot be read ({error}); re-extract it.", path) from None
    return _checked_shape(path, shape)


def _runs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """Increasing unique ``rows`` as contiguous runs ``(first row, stop row, offset in rows)``."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [len(rows)]])
    return [
        (int(rows[a]), int(rows[b - 1]) + 1, int(a)) for a, b in zip(starts, stops, strict=True)
    ]


def _read_h5_rows(dataset: Any, leading_one: bool, rows: np.ndarray, width: int) -> np.ndarray:
    """Rows ``[R]`` (increasing, unique) of an h5 features dataset as ``[R, D]``.

    A contiguous dataset is read with one point selection; a chunked one (TRIDENT and CLAM
    write one row per chunk) run by run of consecutive rows, so only chunks holding sampled
    rows are read.
    """
    if dataset.chunks is None:
        return np.asarray(dataset[0, rows] if leading_one else dataset[rows])
    out = np.empty((len(rows), width), dtype=dataset.dtype)
    for start, stop, offset in _runs(rows):
        block = dataset[0, start:stop] if leading_one else dataset[start:stop]
        out[offset : offset + stop - start] = block
    return out


def read_bag_rows(path: str | Path, rows: Sequence[int] | np.ndarray) -> torch.Tensor:
    """Rows ``rows`` ``[R]`` of a bag's features as float32 ``[R, D]``, in the order given.

    Reads only those rows from a .h5 (never the whole dataset): the unique rows in increasing
    order, as :func:`_read_h5_rows` does; a zarr store is read by orthogonal selection.
    """
    path = Path(path)
    wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
    unique, inverse = np.unique(wanted, return_inverse=True)
    try:
        dataset, leading_one, handle = _open_features(path)
        try:
            count, width = _checked_shape(
                path, tuple(dataset.shape[1:] if leading_one else dataset.shape)
            )
            if len(unique) and (unique[0] < 0 or unique[-1] >= count):
                raise DataError(
                    f"rows {int(unique[0])}..{int(unique[-1])} asked of {path}, which has "
                    f"{count} patches; the manifest and the feature file disagree.",
                    path,
                )
            if handle is not None:
                array = _read_h5_rows(dataset, leading_one, unique, width)
            else:
                array = np.asarray(dataset.oindex[unique])
        finally:
            if handle is not None:
                handle.close()
    except _READ_ERRORS as error:
        raise CorruptFileError(f"{path} cannot be read ({error}); re-extract it.", path) from None
    return torch.from_numpy(_finite(np.ascontiguousarray(array[inverse], dtype=np.float32), path))


def sample_patch_rows(count: int, sample: int, generator: torch.Generator) -> np.ndarray:
    """``min(sample, count)`` patch rows drawn uniformly without replacement, increasing ``[S]``."""
    if sample < 1:
        raise ValueError(f"the number of sampled patches must be at least 1, got {sample}")
    chosen = torch.randperm(count, generator=generator)[:sample]
    return np.sort(chosen.numpy())


def collate_bags(bags: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad K bags ``[M_k, D]`` to ``[K, max M_k, D]`` with a mask ``[K, max M_k]`` (True = real).

    Nothing is truncated: every patch of every bag is kept.
    """
    if not bags:
        raise ValueError("collate_bags needs at least one bag")
    dims = {bag.shape[-1] for bag in bags}
    if len(dims) != 1:
        raise DataError(f"bags have different feature widths {sorted(dims)}; use one encoder.")
    longest = max(bag.shape[0] for bag in bags)
    features = bags[0].new_zeros(len(bags), longest, dims.pop())
    mask = torch.zeros(len(bags), longest, dtype=torch.bool)
    for index, bag in enumerate(bags):
        features[index, : bag.shape[0]] = bag
        mask[index, : bag.shape[0]] = True
    return features, mask


class BagCache:
    """Least-recently-used cache of loaded bags, keyed by path (``capacity`` bags in memory)."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Path, torch.Tensor] = OrderedDict()
        self._shapes: dict[Path, tuple[int, int]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the bags: a copy sent to a DataLoader worker starts empty."""
        return {**self.__dict__, "_items": OrderedDict()}

    def shape(self, path: str | Path) -> tuple[int, int]:
        """``(N, D)`` of a bag: from a cached bag, else the file's metadata (kept, it is small)."""
        key = Path(path)
        if key in self._items:
            count, width = self._items[key].shape
            return int(count), int(width)
        if key not in self._shapes:
            self._shapes[key] = bag_shape(key)
        return self._shapes[key]

    def rows(self, path: str | Path, rows: Sequence[int] | np.ndarray) -> torch.Tensor:
        """Rows ``[R]`` of a bag ``[R, D]``: a .h5 is read row by row and never cached whole
        (:func:`read_bag_rows`); a zarr store comes from the cache like :meth:`get`."""
        key = Path(path)
        if _is_h5(key) and key not in self._items:
            return read_bag_rows(key, rows)
        return self.get(key)[torch.as_tensor(np.asarray(rows, dtype=np.int64))]

    def get(self, path: str | Path) -> torch.Tensor:
        key = Path(path)
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        bag = read_bag_features(key)
        if self.capacity > 0:
            self._items[key] = bag
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return bag
