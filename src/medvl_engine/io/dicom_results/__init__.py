"""DICOM result objects read back as plain data on their source image (no Qt).

Structured reports (TID 1500 planar ROIs), presentation states (graphic and text
annotations), parametric maps, segmentations (binary and fractional) and microscopy bulk
annotations, made by medvl or by other tools following the same templates, become shapes
and image grids in the level-0 px of the image they refer to:

- :mod:`.read`: :func:`read_dicom_result`, :func:`is_dicom_result`.
- :mod:`.result`: :class:`DicomResult`, :class:`ResultShapes`, :class:`ResultImage`.
- :mod:`.describe`: :func:`describe_dicom_result` (what ``medvl info`` prints).
- :mod:`.source`: the source image (level 0 of a slide), :func:`dicom_image_source`.
- :mod:`.geometry`: :class:`SlideGeometry`, level-0 px <-> slide coordinates.

Importing this package loads neither numpy nor highdicom: each name is imported from its
module on first use.
"""

from medvl_engine.common.lazy import lazy_exports

__all__ = [
    "DicomImageSource",
    "DicomResult",
    "RESULT_KINDS",
    "ResultImage",
    "ResultShapes",
    "SlideGeometry",
    "describe_dicom_result",
    "dicom_image_source",
    "is_dicom_result",
    "read_dicom_result",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DicomImageSource": "source",
        "DicomResult": "result",
        "RESULT_KINDS": "result",
        "ResultImage": "result",
        "ResultShapes": "result",
        "SlideGeometry": "geometry",
        "describe_dicom_result": "describe",
        "dicom_image_source": "source",
        "is_dicom_result": "read",
        "read_dicom_result": "read",
    },
)
