"""Features given by the user for one slide: a medvl store, a TRIDENT/CLAM .h5 or a CLAM .pt.

A ``.h5`` or ``.pt`` file is imported once into the cache, next to the slide's other stores,
under a name keyed by the slide's fingerprint and the file's own fingerprint (and its
coordinates file's, for ``.pt``); later calls read that store instead of the file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from medvl_engine.common.cache import cache_dir
from medvl_engine.common.fingerprint import file_fingerprint, short_fingerprint
from medvl_engine.errors import DataError, MedVLError, UnsupportedFormatError
from medvl_engine.features._sniff import HDF5_MAGIC, ZIP_MAGIC
from medvl_engine.features.h5_import import read_clam_pt, read_h5_features
from medvl_engine.features.identity import check_store_matches_slide, slide_identity
from medvl_engine.features.store import FeatureStore, write_imported_store
from medvl_engine.features.store_io import store_source_fingerprint
from medvl_engine.guarded_files import require_data_file

if TYPE_CHECKING:
    from medvl_engine.tiling import SlideLike

__all__ = ["clam_coords_path", "open_features_for_slide"]

_H5_SUFFIXES = (".h5", ".hdf5")


def open_features_for_slide(
    path: str | Path,
    slide: SlideLike,
    *,
    coords_path: str | Path | None = None,
    patch_size_level0: int | None = None,
) -> FeatureStore:
    """The features at ``path`` for ``slide``, checked to belong to it.

    ``path`` is a medvl store (a ``.zarr`` folder), a TRIDENT/CLAM ``.h5`` file or a CLAM
    ``.pt`` file (coordinates from ``coords_path``, else ``<stem>.h5`` beside it or in a
    sibling ``h5_files`` folder). A ``.h5``/``.pt`` file is imported once into the cache next
    to the slide's other stores, keyed by the slide's and the file's fingerprints, and read
    from there afterwards. Features that record no pixel size take the slide's, so their maps
    are placed in micrometres like the slide.
    """
    path = Path(path)
    kind = _kind(path)
    if kind == "store":
        store = FeatureStore.open(path)
        check_store_matches_slide(store, slide)
        return _with_slide_mpp(store, slide)
    if kind == "pt":
        coords = Path(coords_path) if coords_path is not None else clam_coords_path(path)
    else:
        coords = None
    slide_name, slide_fp = slide_identity(slide)
    parts = [file_fingerprint(path), f"patch_size_level0={patch_size_level0}"]
    if coords is not None and coords.is_file():
        parts.append(file_fingerprint(coords))
    source_key = "|".join(parts)
    digest = hashlib.sha1(source_key.encode()).hexdigest()[:12]
    slide_part = short_fingerprint(slide_fp) if slide_fp else "nofingerprint"
    stem = Path(slide_name).stem or "slide"
    cached = cache_dir() / "features" / f"{stem}-{slide_part}-{kind}-{digest}.zarr"
    if store_source_fingerprint(cached) == source_key:
        try:
            store = FeatureStore.open(cached)
        except MedVLError:  # a cached import damaged (or made by an older medvl): import again
            pass
        else:
            check_store_matches_slide(store, slide)
            return _with_slide_mpp(store, slide)
    if kind == "pt":
        assert coords is not None
        data = read_clam_pt(path, coords, patch_size_level0)
    else:
        data = read_h5_features(path, patch_size_level0)
    data["slide"] = slide_name
    data["mpp"] = None if slide.mpp is None else tuple(float(v) for v in slide.mpp)
    data["slide_dimensions"] = tuple(int(v) for v in slide.dimensions)
    store = FeatureStore(**data, slide_fingerprint=slide_fp, imported_from=path.name)
    store.path = path
    check_store_matches_slide(store, slide)  # patches outside the slide: never cached
    write_imported_store(cached, store, source_fingerprint=source_key)
    return store


def _with_slide_mpp(store: FeatureStore, slide: SlideLike) -> FeatureStore:
    """``store``, given the slide's pixel size when it records none (placed like the slide)."""
    if store.mpp is None and slide.mpp is not None:
        store.mpp = (float(slide.mpp[0]), float(slide.mpp[1]))
    return store


def clam_coords_path(pt_path: Path) -> Path:
    """The CLAM coordinates of ``<stem>.pt``: ``<stem>.h5`` beside it or in ``../h5_files``."""
    name = f"{pt_path.stem}.h5"
    candidates = [
        pt_path.with_suffix(".h5"),
        pt_path.parent.parent / "h5_files" / name,
        pt_path.parent / "h5_files" / name,
        pt_path.parent.parent / "patches" / name,
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise DataError(
        f"{pt_path.name} is a CLAM feature file without its coordinates: no {name} beside it or "
        "in a sibling h5_files folder; pass the coordinates file with --coords.",
        pt_path,
    )


def _kind(path: Path) -> str:
    """'store', 'h5' or 'pt' from the suffix, else from the first bytes."""
    if not path.exists():
        raise DataError(f"Feature file {path} does not exist; check the path.", path)
    if path.is_dir():
        return "store"
    # a named pipe, device or /proc entry is refused before it is fingerprinted or opened
    require_data_file(path, "feature file (a .zarr store, .h5 or .pt)")
    suffix = path.suffix.lower()
    if suffix in _H5_SUFFIXES:
        return "h5"
    if suffix == ".pt":
        return "pt"
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError as error:
        raise DataError(
            f"Feature file {path.name} could not be read ({error.strerror or 'read error'}); "
            "check its permissions.",
            path,
        ) from error
    if head == HDF5_MAGIC:
        return "h5"
    if head.startswith(ZIP_MAGIC):
        return "pt"
    raise UnsupportedFormatError(
        f"{path.name} is neither a medvl feature store (a .zarr folder) nor a TRIDENT/CLAM "
        ".h5 or CLAM .pt feature file; give one of those.",
        path,
    )
