"""The feature store: patch features of one slide in memory, and its zarr layout on disk.

Store layout (a zarr group): ``features`` [N, D] float32, ``coords`` [N, 2] int64 (x, y)
level-0 px of each patch's top-left corner; attributes ``patch_size_level0``, ``patch_size``,
``target_mpp``, ``encoder``, ``slide`` (the slide's file name, never its folder),
``slide_fingerprint`` (its content fingerprint, see :mod:`medvl_engine.common.fingerprint`),
``slide_mpp`` ((x, y) um per level-0 px or None), ``slide_dimensions`` ((width, height) level-0
px), ``n_total`` and ``n_done`` (rows written, in order; a store with n_done < n_total is
resumed by running the extraction again). A store imported from a TRIDENT/CLAM file also has
``imported_from`` (that file's name) and ``source_fingerprint`` (its content fingerprint).
A synthetic cohort's store also has ``patch_labels`` [N] int64. The array names are defined
here once; :mod:`.store_io` reads and writes the parts used outside an extraction with them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch
    import zarr

from medvl_engine.errors import CorruptFileError, DataError, MedVLError, UnsupportedFormatError
from medvl_engine.features._sniff import HDF5_MAGIC, starts_with
from medvl_engine.features.validate import (
    checked_coords,
    checked_features,
    checked_patch_size_level0,
    optional_pair,
    optional_positive,
    optional_text,
    optional_whole_positive,
)
from medvl_engine.guarded_files import check_zarr_array, check_zarr_tree

__all__ = [
    "STORE_FORMAT",
    "FeatureStore",
    "COORDS_ARRAY",
    "FEATURES_ARRAY",
    "PATCH_LABELS_ARRAY",
    "StoreMismatch",
    "create_store",
    "extraction_attributes",
    "features_array",
    "open_store_group",
    "record_rows_written",
    "rows_written",
    "read_store",
    "stored_count",
    "write_imported_store",
]

STORE_FORMAT = "medvl-features/1"
# The store's arrays: the only place their names are spelled (store_io and bags use these).
FEATURES_ARRAY, COORDS_ARRAY, PATCH_LABELS_ARRAY = "features", "coords", "patch_labels"
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


class StoreMismatch(DataError):
    """An existing store holds other features (another slide, encoder or grid, or no record)."""


@dataclass
class FeatureStore:
    """Patch features of one slide held in memory for fast re-prompting.

    ``features`` is float32 [N, D], C-contiguous, rows L2-normalised (so a prompt's cosine map
    is one mat-vec); ``coords`` int64 [N, 2] (x, y) level-0 px top-left; ``mpp`` the slide's
    level-0 (x, y) um/px or None; ``slide`` the slide's file name and ``slide_fingerprint`` its
    content fingerprint (None for stores that did not record one); ``imported_from`` the name
    of the TRIDENT/CLAM file the features came from, if any.
    """

    features: np.ndarray
    coords: np.ndarray
    patch_size_level0: int
    patch_size: int
    target_mpp: float | None = None
    encoder: str = ""
    slide: str = ""
    mpp: tuple[float, float] | None = None
    slide_dimensions: tuple[int, int] | None = None
    path: Path | None = None
    stride: int | None = None
    slide_fingerprint: str | None = None
    imported_from: str | None = None

    def __post_init__(self) -> None:
        features = np.ascontiguousarray(self.features, dtype=np.float32)
        norms = np.linalg.norm(features, axis=1, keepdims=True)
        if not np.allclose(norms, 1.0, atol=1e-3):
            features = features / np.maximum(norms, 1e-12)
        self.features = features
        self.coords = np.ascontiguousarray(self.coords, dtype=np.int64).reshape(-1, 2)
        if len(self.coords) != len(self.features):
            raise DataError(
                f"Feature store {self.path or self.slide}: {len(self.features)} feature rows but "
                f"{len(self.coords)} coordinates; re-extract the features."
            )
        self._torch: torch.Tensor | None = None

    @classmethod
    def open(cls, path: str | Path) -> FeatureStore:
        """Load a complete zarr feature store (features read once into float32 memory)."""
        data = read_store(Path(path))
        return cls(**data, path=Path(path))

    @property
    def n_patches(self) -> int:
        return int(self.features.shape[0])

    @property
    def embed_dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def torch_features(self) -> torch.Tensor:
        """The features as a torch tensor sharing memory with ``features`` [N, D] (torch is
        imported on first use, so opening and checking a store stays cheap)."""
        if self._torch is None:
            import torch

            self._torch = torch.from_numpy(self.features)
        return self._torch

    @property
    def stride_level0(self) -> int:
        """Grid step in level-0 px: as recorded, else from the coordinates (patch size if N < 2)."""
        if self.stride:
            return int(self.stride)
        steps = []
        for axis in (0, 1):
            values = np.unique(self.coords[:, axis])
            if len(values) > 1:
                steps.append(int(np.gcd.reduce(np.diff(values))))
        return min(steps) if steps else int(self.patch_size_level0)


def features_array(group: zarr.Group, path: Path) -> zarr.Array[Any]:
    """The features [N, D] array of the store's zarr group at ``path`` (CorruptFileError when
    it is missing or not an array)."""
    import zarr

    name = FEATURES_ARRAY
    try:
        array = group[name]
    except Exception as error:  # zarr raises many types for missing or damaged metadata
        raise CorruptFileError(
            f"{path} has no readable {name!r} array; extract the features again.", path
        ) from error
    if not isinstance(array, zarr.Array):
        raise CorruptFileError(
            f"{path} holds a group where its {name!r} array should be; extract the features again.",
            path,
        )
    return array


def stored_count(group: zarr.Group, key: str, path: Path) -> int:
    """A patch count (``n_done``, ``n_total``) saved in the attributes of the store at ``path``
    (0 when absent)."""
    value = group.attrs.get(key, 0)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not np.isfinite(value)
        or value < 0
        or value != int(value)
    ):
        raise CorruptFileError(
            f"{path} records {key} as {value!r}, not a whole number of patches; extract the "
            "features again.",
            path,
        )
    return int(value)


def extraction_attributes(
    grid: Any, encoder: Any, slide: Any, identity: tuple[str, str | None]
) -> dict[str, Any]:
    """Attributes of the store of patch ``grid`` (coords [N, 2] (x, y) level-0 px) of ``slide``
    encoded by ``encoder`` (features [N, D]); ``identity`` is the slide's (name, fingerprint)."""
    return {
        "format": STORE_FORMAT,
        "patch_size_level0": int(grid.patch_size_level0),
        "patch_size": int(grid.patch_size),
        "level": int(grid.level),
        "read_size": int(getattr(grid, "read_size", grid.patch_size)),
        "stride_level0": int(getattr(grid, "stride_level0", 0)) or None,
        "target_mpp": None if grid.target_mpp is None else float(grid.target_mpp),
        "encoder": str(encoder.name),
        "slide": identity[0],
        "slide_fingerprint": identity[1],
        "slide_mpp": None if slide.mpp is None else [float(v) for v in slide.mpp],
        "slide_dimensions": [int(v) for v in slide.dimensions],
        "embed_dim": int(encoder.embed_dim),
        "n_total": len(grid.coords),
    }


def rows_written(group: zarr.Group, path: Path) -> int:
    """Rows [0, n) of the store at ``path`` that are written (``n_done``)."""
    return stored_count(group, "n_done", path)


def record_rows_written(group: zarr.Group, n_done: int) -> None:
    """Record rows [0, ``n_done``) as written: call after writing them, never before."""
    group.attrs["n_done"] = int(n_done)


def create_store(
    path: Path, coords: np.ndarray, attrs: dict[str, Any], chunk_rows: int
) -> zarr.Group:
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
        FEATURES_ARRAY,
        shape=(total, dim),
        dtype="float32",
        chunks=(max(1, min(chunk_rows, max(total, 1))), dim),
        fill_value=0.0,
    )
    # write_empty_chunks: a chunk of (0, 0) pairs is written too, so a missing chunk means damage
    group.create_array(
        COORDS_ARRAY,
        data=np.asarray(coords, dtype=np.int64).reshape(-1, 2),
        config={"write_empty_chunks": True},
    )
    return group


def _is_store(path: Path) -> bool:
    """Whether ``path`` is a medvl store folder (after :func:`check_zarr_tree`: a folder with a
    named pipe or a link out of it raises MedVLError rather than being opened)."""
    import zarr

    if not path.is_dir():
        return False
    check_zarr_tree(path)
    try:
        return zarr.open_group(str(path), mode="r").attrs.get("format") == STORE_FORMAT
    except Exception:  # zarr raises many types for something that is not a group
        return False


def open_store_group(path: Path, coords: np.ndarray, attrs: dict[str, Any]) -> zarr.Group | None:
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
    try:
        group = zarr.open_group(str(path), mode="r+")
        if FEATURES_ARRAY not in group or COORDS_ARRAY not in group:
            return None  # killed while being created: start again
    except Exception as error:  # zarr raises many types for damaged metadata
        raise DataError(
            f"{path} is a damaged medvl feature store; delete it (or choose another output "
            "path) and extract again.",
            path,
        ) from error
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
    if stored == wanted and stored_count(group, "n_done", path) == 0:
        return None  # no row written yet (stopped while being made, e.g. disk full): made again
    stored_coords = group[COORDS_ARRAY]
    try:
        same_coords = isinstance(stored_coords, zarr.Array) and np.array_equal(
            stored_coords[:], coords
        )
    except Exception:  # odd chunks or dtype: not this extraction
        same_coords = False
    if stored != wanted or not same_coords:
        raise StoreMismatch(
            f"{path} already holds features from another encoder or patch grid "
            f"({stored['encoder']}, {stored['n_total']} patches); choose another output path "
            "or delete it first.",
            path,
        )
    return group


def read_store(path: Path) -> dict[str, Any]:
    """Features, coords and metadata of a complete store, as FeatureStore keyword arguments.

    The folder is checked before zarr opens it (:func:`~medvl_engine.guarded_files.check_zarr_tree`:
    regular files inside it only), each array before it is read (numeric, within the array
    limit, every chunk present) and what was read after (float features, finite; whole, unique,
    non-negative coordinates, one per feature row; a whole positive patch size). Each failure
    is one sentence (MedVLError).
    """
    import zarr

    if not path.exists() and not path.is_symlink():
        raise DataError(f"Feature store {path} does not exist; run `medvl features` first.", path)
    if path.is_file() and starts_with(path, HDF5_MAGIC):
        raise UnsupportedFormatError(
            f"{path.name} is an HDF5 feature file (TRIDENT/CLAM), not a medvl store; pass it to "
            "--features together with its slide, or import it with `medvl features --from-h5`.",
            path,
        )
    root = check_zarr_tree(path)
    try:
        group = zarr.open_group(str(root), mode="r")
        attrs: dict[str, Any] = dict(group.attrs)
        features_array, coords_array = group[FEATURES_ARRAY], group[COORDS_ARRAY]
        if not isinstance(features_array, zarr.Array) or not isinstance(coords_array, zarr.Array):
            raise TypeError("features and coords must be arrays")
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
    done, total = stored_count(group, "n_done", path), stored_count(group, "n_total", path)
    if done < total:
        raise DataError(
            f"Feature store {path} is incomplete ({done} of {total} patches); run the same "
            "`medvl features` command again to finish it.",
            path,
        )
    check_zarr_array(features_array, root, kinds="biufc")
    check_zarr_array(
        coords_array, root, out_itemsize=8, kinds="iuf", single_rows_may_be_unwritten=True
    )
    try:
        raw_features = features_array[...]
        raw_coords = coords_array[...]
    except MedVLError:
        raise
    except Exception as error:  # damaged chunks: zarr and its codecs raise many types
        raise CorruptFileError(
            f"{path}: its arrays could not be decoded ({type(error).__name__}); the store is "
            "damaged, extract the features again.",
            path,
        ) from error
    label = path.name
    features = checked_features(raw_features, label, path)
    coords = checked_coords(raw_coords, label, path)
    if len(features) != len(coords) or len(features) != total:
        raise CorruptFileError(
            f"{label}: {len(features)} feature rows, {len(coords)} coordinates and {total} "
            "patches recorded do not agree; the store is damaged, extract the features again.",
            path,
        )
    recorded_dim = attrs.get("embed_dim")
    if recorded_dim is not None and recorded_dim != features.shape[1]:
        raise CorruptFileError(
            f"{label}: its features are {features.shape[1]} wide but the store records "
            f"embed_dim {recorded_dim!r}; the store is damaged, extract the features again.",
            path,
        )
    size0 = checked_patch_size_level0(
        attrs.get("patch_size_level0"), label, path, advice="extract the features again"
    )
    patch_size = checked_patch_size_level0(
        attrs.get("patch_size", size0), label, path, advice="extract the features again"
    )
    return {
        "features": features,
        "coords": coords,
        "patch_size_level0": size0,
        "patch_size": patch_size,
        "target_mpp": optional_positive(attrs, "target_mpp", path),
        "encoder": str(attrs.get("encoder", "") or ""),
        "slide": str(attrs.get("slide", "") or ""),
        "mpp": optional_pair(attrs, "slide_mpp", path, float),
        "slide_dimensions": optional_pair(attrs, "slide_dimensions", path, int),
        "stride": optional_whole_positive(attrs, "stride_level0", path),
        "slide_fingerprint": optional_text(attrs, "slide_fingerprint"),
        "imported_from": optional_text(attrs, "imported_from"),
    }


def write_imported_store(out_path: Path, store: FeatureStore, *, source_fingerprint: str) -> None:
    """Write ``store`` (features from a TRIDENT/CLAM file) as a complete zarr store at out_path."""
    attrs = {
        "format": STORE_FORMAT,
        "patch_size_level0": store.patch_size_level0,
        "patch_size": store.patch_size,
        "level": 0,
        "target_mpp": store.target_mpp,
        "encoder": store.encoder,
        "slide": store.slide,
        "slide_fingerprint": store.slide_fingerprint,
        "slide_mpp": None if store.mpp is None else list(store.mpp),
        "slide_dimensions": None
        if store.slide_dimensions is None
        else list(store.slide_dimensions),
        "embed_dim": store.embed_dim,
        "n_total": store.n_patches,
        "imported_from": store.imported_from,
        "source_fingerprint": source_fingerprint,
    }
    from medvl_engine.common.write_errors import reporting_write_errors

    with reporting_write_errors("feature store", out_path):  # disk full, read-only: a sentence
        group = create_store(out_path, store.coords, attrs, chunk_rows=4096)
        features_array(group, out_path)[:] = store.features
        record_rows_written(group, store.n_patches)  # last: a killed import reads as incomplete
    store.path = out_path
