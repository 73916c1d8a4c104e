"""The feature store: patch features of one slide in memory, and its zarr layout on disk.

Store layout (a zarr group): ``features`` [N, D] float32, ``coords`` [N, 2] int64 (x, y)
level-0 px of each patch's top-left corner; attributes ``patch_size_level0``, ``patch_size``,
``target_mpp``, ``encoder``, ``slide`` (the slide's file name, never its folder),
``slide_fingerprint`` (its content fingerprint, see :mod:`medvl_engine._fingerprint`),
``slide_mpp`` ((x, y) um per level-0 px or None), ``slide_dimensions`` ((width, height) level-0
px), ``n_total`` and ``n_done`` (rows written, in order; a store with n_done < n_total is
resumed by running the extraction again). A store imported from a TRIDENT/CLAM file also has
``imported_from`` (that file's name) and ``source_fingerprint`` (its content fingerprint).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    import zarr

from medvl_engine.errors import CorruptFileError, DataError, UnsupportedFormatError
from medvl_engine.features._sniff import HDF5_MAGIC, starts_with

__all__ = [
    "STORE_FORMAT",
    "FeatureStore",
    "StoreMismatch",
    "create_store",
    "open_store_group",
    "read_store",
    "store_array",
    "stored_count",
    "store_source_fingerprint",
    "write_imported_store",
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
        self._torch = torch.from_numpy(self.features)

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
        """The features as a torch tensor sharing memory with ``features`` [N, D]."""
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


def store_array(group: zarr.Group, name: str, path: Path) -> zarr.Array[Any]:
    """The array ``name`` ("features" or "coords") of the store's zarr group at ``path``."""
    import zarr

    array = group[name]
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
    if not isinstance(value, (int, float)):
        raise CorruptFileError(
            f"{path} records {key} as {value!r}, not a number; extract the features again.",
            path,
        )
    return int(value)


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
    stored_coords = group["coords"]
    same_coords = isinstance(stored_coords, zarr.Array) and np.array_equal(stored_coords[:], coords)
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
    if path.is_file() and starts_with(path, HDF5_MAGIC):
        raise UnsupportedFormatError(
            f"{path.name} is an HDF5 feature file (TRIDENT/CLAM), not a medvl store; pass it to "
            "--features together with its slide, or import it with `medvl features --from-h5`.",
            path,
        )
    try:
        group = zarr.open_group(str(path), mode="r")
        attrs: dict[str, Any] = dict(group.attrs)
        features_array, coords_array = group["features"], group["coords"]
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
        fingerprint = attrs.get("source_fingerprint")
        return None if fingerprint is None else str(fingerprint)
    except Exception:  # missing or damaged: imported again
        return None


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
    group = create_store(out_path, store.coords, attrs, chunk_rows=4096)
    store_array(group, "features", out_path)[:] = store.features
    group.attrs["n_done"] = store.n_patches  # last: a killed import reads as incomplete
    store.path = out_path
