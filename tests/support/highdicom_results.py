"""DICOM result objects as another tool would make them, built directly with highdicom on a
source image: segmentations, bulk simple annotations and their annotation groups.

Every object names the same equipment (manufacturer ``Other``, model ``tool``) and fresh UIDs;
segmentations are TILED_FULL with every frame kept, so their frame grid is the source's.
"""

from __future__ import annotations

from typing import Any

import highdicom as hd
import numpy as np
import pydicom
from pydicom.sr.codedict import codes

EQUIPMENT = ("Other", "tool", "1", "1")  # manufacturer, model, software, serial
ALGORITHM = "other-seg"


def segment(number: int, label: str) -> hd.seg.SegmentDescription:
    """Segment ``number`` called ``label`` (a neoplasm), found by the automatic ``ALGORITHM``."""
    return hd.seg.SegmentDescription(
        segment_number=number,
        segment_label=label,
        segmented_property_category=codes.SCT.MorphologicallyAbnormalStructure,
        segmented_property_type=codes.SCT.Neoplasm,
        algorithm_type="AUTOMATIC",
        algorithm_identification=hd.AlgorithmIdentificationSequence(
            name=ALGORITHM, family=codes.cid7162.ArtificialIntelligence, version="2"
        ),
    )


def segmentation(
    source: pydicom.Dataset,
    pixels: np.ndarray,
    label: str,
    kind: str = "BINARY",
    **grid: Any,
) -> hd.seg.Segmentation:
    """A one-segment ``kind`` (BINARY or FRACTIONAL) segmentation of ``source``: ``pixels``
    ``[rows, columns]`` (bool or float in [0, 1]) on the source's grid, or on the grid that
    ``grid`` names (``pixel_measures``, ``plane_orientation``, ``plane_positions``)."""
    return hd.seg.Segmentation(
        [source],
        pixels,
        kind,
        [segment(1, label)],
        hd.UID(),
        2,
        hd.UID(),
        1,
        *EQUIPMENT,
        tile_pixel_array=True,
        dimension_organization_type="TILED_FULL",
        omit_empty_frames=False,
        **grid,
    )


def annotation_group(
    number: int, label: str, graphic_type: str, graphic_data: list[np.ndarray]
) -> hd.ann.AnnotationGroup:
    """Manual annotation group ``number`` of tissue: one ``[N, 3]`` array of slide coordinates
    (x, y, z mm; ``SlideGeometry.to_slide``) per POINT / POLYGON / ... ``graphic_type``."""
    return hd.ann.AnnotationGroup(
        number=number,
        uid=hd.UID(),
        label=label,
        annotated_property_category=codes.SCT.Tissue,
        annotated_property_type=codes.SCT.Tissue,
        graphic_type=graphic_type,
        graphic_data=graphic_data,
        algorithm_type="MANUAL",
    )


def bulk_annotations(
    source: pydicom.Dataset, groups: list[hd.ann.AnnotationGroup]
) -> hd.ann.MicroscopyBulkSimpleAnnotations:
    """Bulk simple annotations of ``source`` holding ``groups``, in 3D slide coordinates."""
    return hd.ann.MicroscopyBulkSimpleAnnotations(
        [source], "3D", groups, hd.UID(), 3, hd.UID(), 1, *EQUIPMENT
    )
