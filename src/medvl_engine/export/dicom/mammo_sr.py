"""TopK-Patch as a Comprehensive 3D SR following TID 1500 (Measurement Report).

Content tree (highdicom's templates):

- TID 1500 Measurement Report, procedure reported SCT 71651007 "Mammography", observed by the
  device "medvl TopK-Patch" (TID 1004; the model's name and, for a demo model, its notice);
  the Image Library lists both source views (when they state Patient Orientation and Imager
  Pixel Spacing, which its entries need).
- One TID 1410 Planar ROI group per TopK box, on the view it was found on: the region is a
  closed POLYLINE of 5 points (x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0) in that image's
  pixel frame (SCOORD: (0, 0) is the top-left corner of the top-left pixel, (Columns, Rows)
  the bottom-right corner of the last; the same continuous frame as the boxes), tracking
  identifier ``"<view> #<rank>"``, finding type DCM 111099 "Selected region", finding site
  the breast with its laterality, the algorithm (TID 4019), and two measurements: the rank
  (99MEDVL TOPK-RANK, UCUM ``{rank}``) and the score w_n / sum w (99MEDVL TOPK-SCORE, UCUM 1).
- One TID 1501 group per zero-shot task (``zero-shot <task>``, both views as source images):
  a qualitative evaluation (the task's question answered with the most probable class) and one
  measurement per class with its probability (see :mod:`.mammo_codes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.export.dicom.common import (
    MANUFACTURER,
    Equipment,
    algorithm_identification,
    device_observer,
    new_uid,
    private_code,
)
from medvl_engine.export.dicom.mammo_codes import (
    RANK_CONCEPT,
    SCORE_CONCEPT,
    class_code,
    probability_concept,
    task_concept,
)

if TYPE_CHECKING:
    from pydicom.dataset import Dataset

    from medvl_engine.models.topksiglip_results import TopKRunSummary

__all__ = ["SR_SERIES_NUMBER", "box_polyline", "topk_sr"]

SR_SERIES_NUMBER = 9301
"""Series Number of the TopK-Patch SR series (PR and PM series follow it)."""

VIEWS = ("CC", "MLO")


def box_polyline(box: np.ndarray) -> np.ndarray:
    """``[5, 2]`` float32 closed polyline (x, y) of box (x0, y0, x1, y1), clockwise from the
    top-left corner, in the image's pixel frame (see module docstring)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]], dtype=np.float32)


def _finding_site(laterality: str | None) -> Any:
    from highdicom.sr import FindingSite
    from pydicom.sr.codedict import codes

    side = {"L": codes.SCT.Left, "R": codes.SCT.Right}.get((laterality or "").upper())
    return FindingSite(anatomic_location=codes.SCT.Breast, laterality=side)


def _roi_groups(run: TopKRunSummary, references: dict[str, Dataset], algorithm: Any) -> list[Any]:
    import highdicom.sr as sr
    from pydicom.sr.codedict import codes

    groups = []
    result = run.result
    rows = [
        (int(rank), view, float(score), np.asarray(box, dtype=np.float64))
        for view in VIEWS
        for rank, score, box in zip(
            result.ranks[view], result.scores[view], result.boxes[view], strict=True
        )
    ]
    for rank, view, score, box in sorted(rows, key=lambda row: row[0]):
        source = references[view]
        region = sr.ImageRegion(
            graphic_type=sr.GraphicTypeValues.POLYLINE,
            graphic_data=box_polyline(box),
            source_image=sr.SourceImageForRegion(
                referenced_sop_class_uid=source.SOPClassUID,
                referenced_sop_instance_uid=source.SOPInstanceUID,
            ),
        )
        groups.append(
            sr.PlanarROIMeasurementsAndQualitativeEvaluations(
                tracking_identifier=sr.TrackingIdentifier(
                    uid=new_uid(), identifier=f"{view} #{rank}"
                ),
                referenced_region=region,
                finding_type=codes.DCM.SelectedRegion,
                algorithm_id=algorithm,
                finding_sites=[_finding_site(run.laterality)],
                measurements=[
                    sr.Measurement(
                        name=private_code(*RANK_CONCEPT),
                        value=float(rank),
                        unit=sr.CodedConcept("{rank}", "UCUM", "rank"),
                    ),
                    sr.Measurement(
                        name=private_code(*SCORE_CONCEPT),
                        value=score,
                        unit=codes.UCUM.NoUnits,
                    ),
                ],
            )
        )
    return groups


def _zero_shot_groups(
    run: TopKRunSummary, references: dict[str, Dataset], algorithm: Any
) -> list[Any]:
    import highdicom.sr as sr
    from pydicom.sr.codedict import codes

    sources = [
        sr.SourceImageForMeasurementGroup(
            referenced_sop_class_uid=references[view].SOPClassUID,
            referenced_sop_instance_uid=references[view].SOPInstanceUID,
        )
        for view in VIEWS
    ]
    groups = []
    for task, probabilities in run.zero_shot.items():
        if not probabilities:
            continue
        best = max(probabilities, key=lambda name: probabilities[name])
        groups.append(
            sr.MeasurementsAndQualitativeEvaluations(
                tracking_identifier=sr.TrackingIdentifier(
                    uid=new_uid(), identifier=f"zero-shot {task}"
                ),
                algorithm_id=algorithm,
                finding_sites=[_finding_site(run.laterality)],
                source_images=sources,
                qualitative_evaluations=[
                    sr.QualitativeEvaluation(name=task_concept(task), value=class_code(task, best))
                ],
                measurements=[
                    sr.Measurement(
                        name=probability_concept(task, name),
                        value=float(probability),
                        unit=codes.UCUM.NoUnits,
                    )
                    for name, probability in probabilities.items()
                ],
            )
        )
    return groups


def _library(references: dict[str, Dataset]) -> list[Dataset]:
    """The views for the Image Library (TID 1600, optional in TID 1500): its projection
    radiography entries (TID 1603) need Patient Orientation and Imager Pixel Spacing, so it is
    left out when a view lacks them."""
    views = [references[view] for view in VIEWS]
    complete = all("PatientOrientation" in v and "ImagerPixelSpacing" in v for v in views)
    return views if complete else []


def topk_sr(run: TopKRunSummary, references: dict[str, Dataset], equipment: Equipment) -> Any:
    """The Comprehensive 3D SR (highdicom ``Comprehensive3DSR``) of TopK-Patch ``run`` (the
    run's plain summary, ``BreastTopK.summary()``: the same report whichever process ran it).

    references: ``{"CC": header, "MLO": header}`` from
    :func:`medvl_engine.export.dicom.common.source_reference`; equipment: the model's.
    """
    import highdicom.sr as sr
    from pydicom.sr.codedict import codes

    algorithm = algorithm_identification(
        equipment,
        [
            f"K={run.k}",
            f"evaluated_K={int(run.evaluated_k)}",
            f"image_size={int(run.image_size)}",
            f"grid={int(run.grid)}",
        ],
    )
    report = sr.MeasurementReport(
        observation_context=sr.ObservationContext(
            observer_device_context=device_observer(equipment, "TopK-Patch")
        ),
        procedure_reported=codes.SCT.Mammography,
        imaging_measurements=[
            *_roi_groups(run, references, algorithm),
            *_zero_shot_groups(run, references, algorithm),
        ],
        referenced_images=_library(references) or None,
    )
    return sr.Comprehensive3DSR(
        evidence=[references[view] for view in VIEWS],
        content=report,
        series_instance_uid=new_uid(),
        series_number=SR_SERIES_NUMBER,
        sop_instance_uid=new_uid(),
        instance_number=1,
        manufacturer=MANUFACTURER,
        is_complete=True,
        series_description=equipment.description("TopK-Patch report"),
    )
