"""Guarded opening of the non-image files medvl reads: HDF5, zip archives (.pt, .npz), zarr stores.

Every reader of a TRIDENT/CLAM ``.h5``, a CLAM ``.pt``, a heatmap or cache ``.npz`` and a zarr
feature store goes through this module, so each gets the same guarantees as the slide readers:

- the path is a regular file (or, for a store, a folder whose every entry is a regular file or
  folder inside it): a named pipe, device, socket or ``/proc`` entry is refused without being
  opened, so nothing blocks or reads endless bytes;
- HDF5 datasets that keep their data elsewhere (external storage, ``ExternalLink``, virtual
  datasets) are refused, and soft links are followed only inside the file, a cycle refused;
- every size a file declares (dataset shapes, chunk shapes, zip members, ``.npy`` headers) is
  checked against :func:`medvl_engine.io.limits.max_array_bytes` before anything is allocated,
  so compression bombs and lazily declared datasets cost nothing;
- a dataset or store array with chunks missing (which read back as zeros) is refused as
  incomplete.

Failures are :class:`~medvl_engine.errors.MedVLError` subclasses with one sentence.
"""

from medvl_engine.guarded_files._archives import check_zip_archive, load_npz
from medvl_engine.guarded_files._common import (
    MAX_ARCHIVE_MEMBERS,
    MAX_ATTRIBUTE_VALUES,
    MAX_METADATA_BYTES,
    MAX_STORE_ENTRIES,
    require_data_file,
)
from medvl_engine.guarded_files._hdf5 import (
    check_h5_dataset,
    h5_attribute,
    h5_dataset,
    open_h5,
    open_h5_file,
)
from medvl_engine.guarded_files._zarr import check_zarr_array, check_zarr_tree, open_zarr_group

__all__ = [
    "MAX_ARCHIVE_MEMBERS",
    "MAX_ATTRIBUTE_VALUES",
    "MAX_METADATA_BYTES",
    "MAX_STORE_ENTRIES",
    "check_h5_dataset",
    "check_zarr_array",
    "check_zarr_tree",
    "check_zip_archive",
    "h5_attribute",
    "h5_dataset",
    "load_npz",
    "open_h5",
    "open_h5_file",
    "open_zarr_group",
    "require_data_file",
]
