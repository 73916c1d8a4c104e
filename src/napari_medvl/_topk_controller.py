"""The "Mammogram TopK" dock's controller: checks the chosen pair, starts and cancels TopK
jobs, loads models in the background and runs the reading-room jobs (chest-wall sides, VOI);
no Qt layout, no layers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from napari_medvl._event_turns import viewer_open
from napari_medvl._layer_frame import WorldFrame
from napari_medvl._notify import report_error
from napari_medvl._progress import Progress
from napari_medvl._topk_form import K_LIMIT_UNKNOWN, TopKForm
from napari_medvl._topk_job import TopKOutcome, TopKRequest, preload_topk_model, topk_job
from napari_medvl._widget_common import JobControls
from napari_medvl._worker_process import attach_viewer

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["TopKController", "measure_sides", "reopen_with_voi"]


def measure_sides(
    items: list[tuple[Any, Any, str]], cancel: Any = None
) -> Generator[Progress, None, dict[Any, str]]:
    """Chest-wall side of each (layer, pixels, laterality), off the GUI thread."""
    from medvl_engine.io.mammo import chest_wall_side

    sides = {}
    for done, (layer, pixels, laterality) in enumerate(items):
        yield Progress("finding chest walls", done, len(items))
        sides[layer] = chest_wall_side(pixels, laterality)
    return sides


def reopen_with_voi(
    items: list[tuple[Any, Any]], index: int, cancel: Any = None
) -> Generator[Progress, None, dict[Any, Any]]:
    """Each (layer, Mammogram) read again from its file with VOI ``index``, off the GUI thread."""
    from medvl_engine.io.mammo import open_mammogram

    reopened = {}
    for done, (layer, mammogram) in enumerate(items):
        yield Progress("applying VOI", done, len(items))
        reopened[layer] = open_mammogram(mammogram.path, voi_index=index)
    return reopened


class TopKController:
    """Jobs and models of one TopK dock.

    ``on_result(outcome)``, ``on_hung(sides)`` and ``on_voi(reopened)`` receive the results of
    the TopK, chest-wall and VOI jobs on the GUI thread (the presenter's).
    """

    def __init__(
        self,
        viewer: napari.Viewer,
        form: TopKForm,
        on_result: Callable[[TopKOutcome], None],
        on_hung: Callable[[dict[Any, str]], None],
        on_voi: Callable[[dict[Any, Any]], None],
    ) -> None:
        self._viewer = viewer
        self.form = form
        self.models: dict[str, Any] = {}  # loaded here, or LoadedElsewhere (model process)
        self.loading: dict[str, threading.Event] = {}  # models loading in the background
        self.runner: JobRunner = form.controls.bind(on_result)
        self.hang_runner: JobRunner = JobControls().bind(on_hung)
        self.voi_runner: JobRunner = JobControls().bind(on_voi)
        attach_viewer(viewer)  # the model process stops when the last such viewer closes

    def mammograms(self) -> list[tuple[str, Any]]:
        """The mammogram layers the form offers."""
        return self.form._mammogram_choices()

    # --- model ---------------------------------------------------------------------------
    def model_changed(self, _value: Any = None) -> None:
        """K's maximum follows the model's candidate patches and K becomes the K it was
        evaluated with (both read from its config.json, no torch); the status line shows
        its notice."""
        from medvl_engine.demo_models import demo_notice_for
        from medvl_engine.errors import MedVLError
        from medvl_engine.mammography import evaluated_k
        from medvl_engine.model_folders import topk_candidates

        name = self.form.model_name()
        candidates = topk_candidates(name)
        self.form.set_k_limit(candidates or K_LIMIT_UNKNOWN)
        try:
            evaluated: int | None = evaluated_k(name)
        except MedVLError:  # not found or unreadable: the loader says why when it is run
            evaluated = None
        self.form.set_evaluated_k(evaluated)
        self.form.controls.set_notice(demo_notice_for(self.form.model.value))

    def preload_model(self) -> None:
        """Load the chosen model in the background, in the model process where it can (else a
        thread here, which holds the GIL in stretches: call it once the pair's result layers
        are added and drawn), so that the first Run starts at the views; not while a job runs
        or once the viewer closed."""
        if viewer_open(self._viewer) and not self.runner.running:
            preload_topk_model(self.models, self.loading, self.form.model_name())

    # --- run -----------------------------------------------------------------------------
    def frames(self) -> dict[str, WorldFrame]:
        """World frames of the chosen CC and MLO layers."""
        cc, mlo = self.form.cc_choice.value, self.form.mlo_choice.value
        return {
            "CC": WorldFrame.from_dict(cc.metadata["world_frame"]),
            "MLO": WorldFrame.from_dict(mlo.metadata["world_frame"]),
        }

    def request(self) -> TopKRequest | None:
        """The request the chosen views describe, or None (with a notification)."""
        from medvl_engine.errors import ConfigError

        cc, mlo = self.form.cc_choice.value, self.form.mlo_choice.value
        if cc is None or mlo is None or cc is mlo:
            report_error(
                ConfigError(
                    "TopK needs two different mammogram layers, a CC and an MLO view of one "
                    "breast: open both and choose them here."
                )
            )
            return None
        return TopKRequest(
            cc=cc.metadata["mammogram"],
            mlo=mlo.metadata["mammogram"],
            model=self.form.model_name(),
            k=int(self.form.k.value),
            frames=self.frames(),
        )

    def run(self, _value: Any = None) -> Any:
        """Start TopK on the chosen views (cancelling a running job); returns the worker or None.

        A pair the engine refuses (other patient, study or breast, two views of one kind) is
        refused here at once with the engine's sentence, before any model loads.
        """
        from medvl_engine.errors import MedVLError
        from medvl_engine.io.mammo import check_pair

        request = self.request()
        if request is None:
            return None
        try:
            check_pair(request.cc, request.mlo)
        except MedVLError as error:
            self.form.controls.status.value = f"Refused: {error}"
            report_error(error)
            return None
        return self.runner.start(topk_job, request, self.models, self.loading)

    # --- reading room --------------------------------------------------------------------
    def choose_voi(self, index: Any = None) -> Any:
        """Re-read every DICOM mammogram with VOI ``index`` (where it has one), off the GUI
        thread; returns the worker, or None when no open view offers that VOI."""
        index = int(self.form.voi.value if index is None else index)
        items = [
            (layer, layer.metadata["mammogram"])
            for _, layer in self.mammograms()
            if len(getattr(layer.metadata.get("mammogram"), "voi_choices", [])) > index
        ]
        if not items:
            return None
        return self.voi_runner.start(reopen_with_voi, items, index)

    def hang(self, _value: Any = None) -> Any:
        """Measure chest-wall sides off the GUI thread, then hang the views; returns the worker."""
        items = [
            (layer, layer.data, layer.metadata.get("laterality"))
            for _, layer in self.mammograms()
            if layer.metadata.get("chest_wall") not in ("left", "right")
        ]
        return self.hang_runner.start(measure_sides, items)
