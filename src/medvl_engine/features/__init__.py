"""Patch feature stores: batched, resumable extraction from a slide, and TRIDENT/CLAM imports.

- :mod:`.store`: :class:`FeatureStore` (features [N, D], coords [N, 2]) and its zarr layout.
- :mod:`.identity`: which slide a store belongs to (name and content fingerprint).
- :mod:`.extract`: patches of a slide's grid encoded into a store, resumably.
- :mod:`.h5_import`: TRIDENT/CLAM .h5 and CLAM .pt readers and their import as a store.
- :mod:`.sources`: the features a user names for a slide (store, .h5 or .pt), checked.
- :mod:`.partial`: a slide's features filled in as they are computed (the view's first).
- :mod:`.bags`: bags of a slide's patch features read from a store or an .h5, padded to batches.

Importing this package loads no torch: each name below is imported from its module on first
use, so a features file can be opened and checked before any model library loads.
"""

from medvl_engine.common.lazy import lazy_exports

__all__ = [
    "BagCache",
    "FeatureStore",
    "PartialFeatures",
    "PatchGridLike",
    "check_store_matches_slide",
    "collate_bags",
    "extract_features",
    "grid_patches",
    "import_h5_features",
    "open_features_for_slide",
    "patches_in_view",
    "read_bag_features",
    "read_patches",
    "slide_features",
    "slide_identity",
    "store_file_name",
    "store_path_for",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BagCache": "bags",
        "FeatureStore": "store",
        "PartialFeatures": "partial",
        "PatchGridLike": "extract",
        "check_store_matches_slide": "identity",
        "collate_bags": "bags",
        "extract_features": "extract",
        "grid_patches": "extract",
        "import_h5_features": "h5_import",
        "open_features_for_slide": "sources",
        "patches_in_view": "partial",
        "read_bag_features": "bags",
        "read_patches": "extract",
        "slide_features": "extract",
        "slide_identity": "identity",
        "store_file_name": "identity",
        "store_path_for": "extract",
    },
)
