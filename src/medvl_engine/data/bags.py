"""Patch-feature bags: reading feature files and padding variable-size bags with a mask."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medvl_engine.errors import CorruptFileError, DataError

__all__ = ["read_bag_features", "collate_bags", "BagCache"]


def _read_h5(path: Path) -> np.ndarray:
    import h5py

    with h5py.File(path, "r") as handle:
        if "features" not in handle:
            raise DataError(
                f"{path} has no 'features' dataset (keys: {sorted(handle.keys())}); give a "
                "TRIDENT/CLAM patch-feature .h5.",
                path,
            )
        array = np.asarray(handle["features"])
    if array.ndim == 3 and array.shape[0] == 1:  # TRIDENT stores [1, N, D] in some versions
        array = array[0]
    return array


def _read_zarr(path: Path) -> np.ndarray:
    import zarr

    try:
        group = zarr.open_group(str(path), mode="r")
    except Exception as error:
        raise CorruptFileError(
            f"{path} is not a readable zarr feature store ({type(error).__name__}); re-extract it.",
            path,
        ) from None
    if "features" not in group:
        raise DataError(f"feature store {path} has no 'features' array; re-extract it.", path)
    return np.asarray(group["features"][...])


def read_bag_features(path: str | Path) -> torch.Tensor:
    """Patch features of one slide as float32 ``[N, D]`` from a zarr store or a .h5 file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"feature file {path} does not exist; extract features first.", path)
    try:
        array = _read_h5(path) if path.suffix.lower() in (".h5", ".hdf5") else _read_zarr(path)
    except OSError as error:
        raise CorruptFileError(f"{path} cannot be read ({error}); re-extract it.", path) from None
    if array.ndim != 2 or array.shape[0] == 0:
        raise DataError(
            f"{path} holds features of shape {array.shape}; expected a non-empty [N, D] array.",
            path,
        )
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


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

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the bags: a copy sent to a DataLoader worker starts empty."""
        return {**self.__dict__, "_items": OrderedDict()}

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
