"""Patch feature stores: batched, resumable extraction from a slide, and TRIDENT/CLAM imports.

- :mod:`.store`: :class:`FeatureStore` (features [N, D], coords [N, 2]) and its zarr layout.
- :mod:`.identity`: which slide a store belongs to (name and content fingerprint).
- :mod:`.extract`: patches of a slide's grid encoded into a store, resumably.
- :mod:`.h5_import`: TRIDENT/CLAM .h5 and CLAM .pt readers and their import as a store.
- :mod:`.sources`: the features a user names for a slide (store, .h5 or .pt), checked.
"""

from medvl_engine.features.extract import (
    PatchGridLike,
    extract_features,
    read_patches,
    slide_features,
    store_path_for,
)
from medvl_engine.features.h5_import import import_h5_features
from medvl_engine.features.identity import (
    check_store_matches_slide,
    slide_identity,
    store_file_name,
)
from medvl_engine.features.sources import open_features_for_slide
from medvl_engine.features.store import FeatureStore

__all__ = [
    "FeatureStore",
    "PatchGridLike",
    "check_store_matches_slide",
    "extract_features",
    "import_h5_features",
    "open_features_for_slide",
    "read_patches",
    "slide_features",
    "slide_identity",
    "store_file_name",
    "store_path_for",
]
