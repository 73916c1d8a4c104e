"""Results as DICOM objects, for images that came as DICOM (made with highdicom).

- :mod:`.common`: UIDs, equipment, algorithm and observer identification, the reduced source
  header an output may carry, the path-leak guard and the atomic write.
- :mod:`.topk`: TopK-Patch on a mammography pair as a TID 1500 Comprehensive 3D SR
  (:mod:`.mammo_sr`), a Grayscale Softcopy Presentation State per view (:mod:`.mammo_gsps`)
  and the importance as a Parametric Map per view (:mod:`.mammo_pmap`); codes in
  :mod:`.mammo_codes`.
- :mod:`.wsi_pmap`: a whole-slide prompt heatmap as a Parametric Map on the slide's grid.
- :mod:`.wsi_ann`: a heatmap's top patches as Microscopy Bulk Simple Annotations.
- :mod:`.wsi_source`: the DICOM source a whole-slide result derives from, and its maker.

Importing this package loads neither highdicom nor numpy: each name is imported from its
module on first use.
"""

from medvl_engine.common.lazy import lazy_exports

__all__ = [
    "TOPK_DICOM_NAMES",
    "Equipment",
    "leaked_paths",
    "require_dicom",
    "require_highdicom",
    "source_reference",
    "topk_dicom_objects",
    "write_dataset",
    "write_heatmap_parametric_map",
    "write_heatmap_parametric_map_pyramid",
    "write_top_patches_annotations",
    "write_topk_dicom",
    "write_topk_sr",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "TOPK_DICOM_NAMES": "topk",
        "Equipment": "common",
        "leaked_paths": "common",
        "require_dicom": "common",
        "require_highdicom": "common",
        "source_reference": "common",
        "topk_dicom_objects": "topk",
        "write_dataset": "common",
        "write_heatmap_parametric_map": "wsi_pmap",
        "write_heatmap_parametric_map_pyramid": "wsi_pmap",
        "write_top_patches_annotations": "wsi_ann",
        "write_topk_dicom": "topk",
        "write_topk_sr": "topk",
    },
)
