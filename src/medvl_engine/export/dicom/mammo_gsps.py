"""TopK-Patch boxes as a Grayscale Softcopy Presentation State, one per view.

Each presentation state references its one source image and draws, on layer ``TOPK``, every
box found on that view as a closed POLYLINE (PIXEL units: the same continuous pixel frame as
the SR, (0, 0) the top-left corner of the top-left pixel) with a text ``#<rank> <score>`` in a
box-wide band along the box's top edge; layer ``NOTICE`` carries the model's name (and, for a
demo model, its notice) across the top of the displayed area (DISPLAY units).

A presentation state replaces the image's own grayscale pipeline when applied, so it carries
the source's: the Modality LUT (rescale or table, copied by highdicom from the image), the VOI
the view was shown with (the window or VOI LUT the user chose among the file's, see
:func:`voi_transformations`), and a Presentation LUT Shape of INVERSE for MONOCHROME1 images
(IDENTITY otherwise), so the picture keeps its polarity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.export.dicom.common import Equipment, new_uid, series_laterality

if TYPE_CHECKING:
    from pydicom.dataset import Dataset

    from medvl_engine.io.mammo import Mammogram
    from medvl_engine.models.topksiglip_results import TopKRunSummary, TopKViewSource

__all__ = ["PR_SERIES_NUMBER", "topk_presentation_state", "voi_transformations"]

PR_SERIES_NUMBER = 9302
"""Series Number of the TopK-Patch presentation states (one instance per view)."""

_TEXT_BAND = 0.12
"""Height of the rank/score text band as a fraction of the box height (at least 8 px)."""


def _numbers(value: Any) -> list[float]:
    """DS values (one or many) as floats; [] when absent."""
    if value is None or value == "":
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return [float(value)]
    return [float(v) for v in value]


def _lut_values(value: Any) -> np.ndarray:
    """LUT Data as a 1-D array: US values (one or many) or OW bytes (16-bit words)."""
    if isinstance(value, bytes):
        return np.frombuffer(value, dtype="<u2")
    if isinstance(value, Iterable) and not isinstance(value, str):
        return np.asarray(list(value))
    return np.asarray([value])


def voi_transformations(reference: Dataset, view: Mammogram | TopKViewSource) -> list[Any] | None:
    """The Softcopy VOI LUT that reproduces what ``view`` was shown with, or None.

    ``view.voi`` is one of ``view.voi_choices`` (windows first, then VOI LUT Sequence items,
    the order of the reader's ``voi_index``): that window (centre, width, explanation and the
    file's VOI LUT Function) or that table is kept. A view shown at its full range (the file
    states no VOI) gets None: the viewer then applies its own default.
    """
    from highdicom import VOILUT
    from highdicom.pr import SoftcopyVOILUTTransformation

    choices = list(view.voi_choices)
    if view.voi not in choices:
        return None
    index = choices.index(view.voi)
    centers = _numbers(reference.get("WindowCenter"))
    widths = _numbers(reference.get("WindowWidth"))
    windows = min(len(centers), len(widths))
    if index < windows:
        explanations = reference.get("WindowCenterWidthExplanation")
        explanation = None
        if explanations:
            texts = [explanations] if isinstance(explanations, str) else list(explanations)
            explanation = str(texts[index])[:64] if index < len(texts) and texts[index] else None
        function = str(reference.get("VOILUTFunction") or "LINEAR").strip().upper()
        return [
            SoftcopyVOILUTTransformation(  # lists: highdicom splits a lone str into chars
                window_center=[centers[index]],
                window_width=[widths[index]],
                window_explanation=[explanation] if explanation else None,
                voi_lut_function=function,
            )
        ]
    items = list(reference.get("VOILUTSequence") or [])
    item_index = index - windows
    if not 0 <= item_index < len(items):
        return None
    item = items[item_index]
    descriptor = [int(v) for v in item.LUTDescriptor]
    bits = descriptor[2] if len(descriptor) > 2 else 16
    dtype = np.uint8 if bits <= 8 else np.uint16
    data = _lut_values(item.LUTData)
    return [
        SoftcopyVOILUTTransformation(
            voi_luts=[
                VOILUT(
                    first_mapped_value=descriptor[1],
                    lut_data=data.astype(dtype),
                    lut_explanation=item.get("LUTExplanation"),
                )
            ]
        )
    ]


def _graphics(
    boxes: np.ndarray, ranks: np.ndarray, scores: np.ndarray
) -> tuple[list[Any], list[Any]]:
    from highdicom.pr import AnnotationUnitsValues, GraphicObject, GraphicTypeValues, TextObject

    from medvl_engine.export.dicom.mammo_sr import box_polyline

    graphic_objects, text_objects = [], []
    for box, rank, score in zip(boxes, ranks, scores, strict=True):
        x0, y0, x1, y1 = (float(v) for v in box)
        graphic_objects.append(
            GraphicObject(
                graphic_type=GraphicTypeValues.POLYLINE,
                graphic_data=box_polyline(box),
                units=AnnotationUnitsValues.PIXEL,
                tracking_id=f"#{int(rank)}",
                tracking_uid=new_uid(),
            )
        )
        band = max(8.0, _TEXT_BAND * (y1 - y0))
        text_objects.append(
            TextObject(
                text_value=f"#{int(rank)} {float(score):.3f}",
                units=AnnotationUnitsValues.PIXEL,
                bounding_box=(x0, y0, x1, min(y1, y0 + band)),
                text_justification="LEFT",
            )
        )
    return graphic_objects, text_objects


def topk_presentation_state(
    run: TopKRunSummary,
    view_name: str,
    reference: Dataset,
    equipment: Equipment,
    instance_number: int,
    series_uid: str,
) -> Any:
    """The GSPS of view ``view_name`` ("CC" or "MLO"): its boxes, ranks, scores and VOI."""
    from highdicom import PresentationLUTTransformation
    from highdicom.pr import (
        AnnotationUnitsValues,
        GraphicAnnotation,
        GraphicLayer,
        GrayscaleSoftcopyPresentationState,
        TextObject,
    )

    view = run.cc if view_name == "CC" else run.mlo
    result = run.result
    boxes_layer = GraphicLayer(layer_name="TOPK", order=1, description="TopK-Patch boxes")
    notice_layer = GraphicLayer(layer_name="NOTICE", order=2, description="model")
    graphic_objects, text_objects = _graphics(
        np.asarray(result.boxes[view_name]).reshape(-1, 4),
        np.asarray(result.ranks[view_name]),
        np.asarray(result.scores[view_name]),
    )
    annotations: list[Any] = []
    if graphic_objects:
        annotations.append(
            GraphicAnnotation(
                referenced_images=[reference],
                graphic_layer=boxes_layer,
                graphic_objects=graphic_objects,
                text_objects=text_objects,
            )
        )
    annotations.append(
        GraphicAnnotation(
            referenced_images=[reference],
            graphic_layer=notice_layer,
            text_objects=[
                TextObject(
                    text_value=f"TopK-Patch, model {equipment.label()}"[:1024],
                    units=AnnotationUnitsValues.DISPLAY,
                    bounding_box=(0.01, 0.01, 0.99, 0.05),
                    text_justification="LEFT",
                )
            ],
        )
    )
    photometric = str(reference.get("PhotometricInterpretation", "")).upper()
    shape = "INVERSE" if photometric == "MONOCHROME1" else "IDENTITY"
    layers: Sequence[Any] = [boxes_layer, notice_layer]
    state = GrayscaleSoftcopyPresentationState(
        referenced_images=[reference],
        series_instance_uid=series_uid,
        series_number=PR_SERIES_NUMBER,
        sop_instance_uid=new_uid(),
        instance_number=instance_number,
        content_label="TOPK_PATCH",
        content_description=equipment.description(f"TopK-Patch boxes, {view_name} view"),
        graphic_annotations=annotations,
        graphic_layers=layers,
        voi_lut_transformations=voi_transformations(reference, view),
        presentation_lut_transformation=PresentationLUTTransformation(presentation_lut_shape=shape),
        series_description=equipment.description("TopK-Patch boxes"),
        **equipment.keywords(),
    )
    return series_laterality(state, reference)
