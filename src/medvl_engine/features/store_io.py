"""Parts of a zarr feature store read or written outside an extraction.

The layout (array names, ``format``) is :mod:`medvl_engine.features.store`'s; this module only
uses its constants: the features array checked for a bag reader, the rows an extraction has
written so far, an imported store's source fingerprint, the synthetic cohorts' per-patch
labels, and a whole store written from arrays in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.errors import CorruptFileError, DataError
from medvl_engine.features.store import (
    COORDS_ARRAY,
    FEATURES_ARRAY,
    PATCH_LABELS_ARRAY,
    STORE_FORMAT,
)
from medvl_engine.guarded_files import check_zarr_array, check_zarr_tree, open_zarr_group

if TYPE_CHECKING:
    import zarr

__all__ = [
    "checked_features_array",
    "read_patch_labels",
    "store_source_fingerprint",
    "write_store",
    "written_rows",
]


def checked_features_array(path: Path) -> zarr.Array[Any]:
    """The features array ``[N, D]`` of the zarr store at ``path``, not read: regular files
    inside the folder only, numeric, within the array limit, every chunk present."""
    import zarr

    root = check_zarr_tree(path)
    try:
        group = zarr.open_group(str(root), mode="r")
        features = group[FEATURES_ARRAY] if FEATURES_ARRAY in group else None
    except Exception as error:
        raise CorruptFileError(
            f"{path} is not a readable zarr feature store ({type(error).__name__}); re-extract it.",
            path,
        ) from None
    if not isinstance(features, zarr.Array):
        raise DataError(
            f"feature store {path} has no {FEATURES_ARRAY!r} array; re-extract it.", path
        )
    check_zarr_array(features, root)
    return features


def read_patch_labels(path: Path, *, refuse_group: bool = True) -> np.ndarray | None:
    """Per-patch labels ``[N]`` of the store at ``path`` (synthetic cohorts write them), or None
    when it has none.

    The folder is checked before zarr opens it (regular files inside it only) and the array
    before it is read (numeric, 8-byte items within the array limit; unwritten chunks allowed).
    A group where the array should be raises DataError, or gives None when ``refuse_group`` is
    False.
    """
    import zarr

    group = open_zarr_group(path)  # regular files inside the store only
    if PATCH_LABELS_ARRAY not in group:
        return None
    labels = group[PATCH_LABELS_ARRAY]
    if not isinstance(labels, zarr.Array):
        if not refuse_group:
            return None
        raise DataError("a feature store holds a group where an array should be; extract again")
    check_zarr_array(labels, path, out_itemsize=8, require_all_chunks=False)
    return np.asarray(labels[...])


def write_store(
    path: Path,
    features: np.ndarray,
    coords: np.ndarray,
    attrs: dict[str, Any],
    *,
    patch_labels: np.ndarray | None = None,
) -> None:
    """Write a whole store at ``path`` (replacing what is there) from arrays in memory:
    ``features`` [N, D] as float32, ``coords`` [N, 2] (x, y) level-0 px as int64, optional
    ``patch_labels`` [N] as int64, then the attributes ``attrs`` as given (nothing added)."""
    import zarr

    group = zarr.open_group(str(path), mode="w")
    group.create_array(FEATURES_ARRAY, data=np.asarray(features).astype(np.float32))
    group.create_array(COORDS_ARRAY, data=np.asarray(coords).astype(np.int64))
    if patch_labels is not None:
        group.create_array(PATCH_LABELS_ARRAY, data=np.asarray(patch_labels).astype(np.int64))
    group.attrs.update(attrs)


def store_source_fingerprint(path: Path) -> str | None:
    """``source_fingerprint`` of a complete imported store at ``path``, else None."""
    import zarr

    try:
        check_zarr_tree(path)
        attrs = zarr.open_group(str(path), mode="r").attrs
        if attrs.get("format") != STORE_FORMAT or attrs.get("n_done") != attrs.get("n_total"):
            return None
        fingerprint = attrs.get("source_fingerprint")
        return None if fingerprint is None else str(fingerprint)
    except Exception:  # missing or damaged: imported again
        return None


def written_rows(path: Path, start: int, n_total: int, embed_dim: int) -> np.ndarray:
    """Rows [start, n_done) of the store at ``path`` while an extraction writes it, float32
    [M, embed_dim] (it writes rows before it raises ``n_done``); M = 0 when the store is absent,
    being made, of another grid or width, or has nothing new. Never blocks on a chunk that is
    not a regular file (:func:`~medvl_engine.guarded_files.check_zarr_tree`)."""
    import zarr

    nothing = np.zeros((0, embed_dim), dtype=np.float32)
    if not path.is_dir():
        return nothing
    try:
        check_zarr_tree(path)
        group = zarr.open_group(str(path), mode="r")
        attrs = dict(group.attrs)
        features = group[FEATURES_ARRAY]
    except Exception:  # being created or rewritten: read it on the next call
        return nothing
    done = attrs.get("n_done", 0)
    if (
        not isinstance(features, zarr.Array)
        or not isinstance(done, int)
        or attrs.get("n_total") != n_total
        or features.shape[1:] != (embed_dim,)
        or min(done, n_total) <= start
    ):
        return nothing
    return np.asarray(features[start : min(done, n_total)], dtype=np.float32)
