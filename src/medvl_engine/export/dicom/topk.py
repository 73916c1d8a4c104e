"""Write a TopK-Patch result as DICOM: SR (TID 1500), a GSPS per view, a Parametric Map per view.

All objects join the study of the source views, each kind in a new series (SR 9301, PR 9302,
PM 9303), with new UIDs for every series and instance. From the sources they carry only the
references and the Patient / General Study attributes their IODs require (see
:func:`medvl_engine.export.dicom.common.source_reference`); no text value names a folder of
this machine. The files of one call are written together (:func:`atomic_group`): either all
of them appear or none does.

Each writer takes the run as :func:`medvl_engine.mammography.topk` returns it (a BreastTopK,
as ``medvl topk`` has it) or as its plain summary (``BreastTopK.summary()``, what the napari
plugin's layers keep, computed in its model process): the objects are made from the summary
either way, so the same run gives the same content.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from medvl_engine.common.atomic import atomic_group
from medvl_engine.common.reason import error_reason
from medvl_engine.errors import ExportError
from medvl_engine.export.dicom.common import (
    Equipment,
    new_uid,
    require_dicom,
    require_highdicom,
    source_reference,
    write_dataset,
)
from medvl_engine.export.input_guard import check_outputs_spare_inputs
from medvl_engine.models.topksiglip_results import TopKRunSummary

if TYPE_CHECKING:
    from pydicom.dataset import Dataset

    from medvl_engine.mammography import BreastTopK

__all__ = ["TOPK_DICOM_NAMES", "topk_dicom_objects", "write_topk_dicom", "write_topk_sr"]

VIEWS = ("CC", "MLO")

TOPK_DICOM_NAMES = {
    "sr": "topk_sr.dcm",
    "CC_pr": "topk_CC_pr.dcm",
    "MLO_pr": "topk_MLO_pr.dcm",
    "CC_pm": "topk_CC_pm.dcm",
    "MLO_pm": "topk_MLO_pm.dcm",
}
"""File names :func:`write_topk_dicom` writes in its folder (fixed: a source's file name can
name the patient)."""


TopKRun = Union["BreastTopK", TopKRunSummary]
"""A TopK-Patch run: the engine's BreastTopK, or its plain TopKRunSummary."""


def _summary(run: TopKRun) -> TopKRunSummary:
    return run if isinstance(run, TopKRunSummary) else run.summary()


def _sources(run: TopKRun) -> dict[str, Path]:
    paths: dict[str, Path | None] = {"CC": Path(run.cc.path), "MLO": Path(run.mlo.path)}
    require_dicom(paths)
    return {view: Path(str(path)) for view, path in paths.items()}


def topk_dicom_objects(
    run: TopKRun,
    *,
    model_name: str | os.PathLike[str] | None,
    presentation_states: bool = True,
    parametric_maps: bool = True,
) -> dict[str, Any]:
    """The DICOM objects of ``run`` (highdicom datasets), keyed as :data:`TOPK_DICOM_NAMES`.

    model_name: the model as the user named it (registry name or folder; only its display
    name is written, with the demo notice for a demo model). Raises ExportError when a view
    is not a DICOM file.
    """
    require_highdicom()
    from medvl_engine.export.dicom.mammo_gsps import topk_presentation_state
    from medvl_engine.export.dicom.mammo_pmap import topk_parametric_map
    from medvl_engine.export.dicom.mammo_sr import topk_sr

    sources = _sources(run)
    summary = _summary(run)
    references = {view: source_reference(path) for view, path in sources.items()}
    equipment = Equipment.for_model(model_name)
    try:
        objects: dict[str, Any] = {"sr": topk_sr(summary, references, equipment)}
        if presentation_states:
            series = new_uid()
            for number, view in enumerate(VIEWS, start=1):
                objects[f"{view}_pr"] = topk_presentation_state(
                    summary, view, references[view], equipment, number, series
                )
        if parametric_maps:
            series = new_uid()
            for number, view in enumerate(VIEWS, start=1):
                objects[f"{view}_pm"] = topk_parametric_map(
                    summary, view, references[view], equipment, number, series
                )
    except (ValueError, TypeError, AttributeError) as error:  # highdicom refusing a source
        names = " and ".join(path.name for path in sources.values())
        reason = error_reason(error) or type(error).__name__
        raise ExportError(
            f"the DICOM outputs for {names} could not be made ({reason}); export GeoJSON/CSV "
            "instead.",
            sources["CC"],
        ) from error
    return objects


def _write_all(objects: dict[str, Dataset], paths: dict[str, Path], sources: list[Path]) -> None:
    check_outputs_spare_inputs(paths.values(), sources)
    with atomic_group():
        for key, dataset in objects.items():
            write_dataset(dataset, paths[key], sources)


def write_topk_sr(
    run: TopKRun, path: str | os.PathLike[str], *, model_name: str | os.PathLike[str] | None
) -> Path:
    """Write the TopK-Patch SR of ``run`` to ``path`` (atomically) and return it."""
    path = Path(path)
    objects = topk_dicom_objects(
        run, model_name=model_name, presentation_states=False, parametric_maps=False
    )
    _write_all(objects, {"sr": path}, list(_sources(run).values()))
    return path


def write_topk_dicom(
    run: TopKRun,
    out_dir: str | os.PathLike[str],
    *,
    model_name: str | os.PathLike[str] | None,
    parametric_maps: bool = True,
) -> list[Path]:
    """Write the SR, a GSPS per view and (with ``parametric_maps``) a Parametric Map per view
    of ``run`` into folder ``out_dir`` (created if missing) under :data:`TOPK_DICOM_NAMES`;
    return the paths (SR first). Raises ExportError when a view is not DICOM, or the folder
    cannot be made."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ExportError(
            f"could not create folder {folder} for the DICOM outputs ({error.strerror}); "
            "choose another folder.",
            folder,
        ) from error
    objects = topk_dicom_objects(run, model_name=model_name, parametric_maps=parametric_maps)
    paths = {key: folder / TOPK_DICOM_NAMES[key] for key in objects}
    _write_all(objects, paths, list(_sources(run).values()))
    return list(paths.values())
