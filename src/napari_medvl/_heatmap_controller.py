"""The "Text prompt heatmap" dock's controller: checks the form's inputs, starts and cancels
heatmap jobs, runs the background work and writes the status line; no Qt layout, no layers.

Background work (imports, glyphs, the model) starts once the dock and the slide's overlay layers
are on screen: a thread importing torch holds the GIL in one long stretch
(bench/bench_import_gil.py), a thread loading a model 5 ms at a time, and docking or adding a
layer calls Python from Qt thousands of times.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._event_turns import import_in_background, when_ready
from napari_medvl._heatmap_form import MODEL_TOOLTIP, HeatmapForm
from napari_medvl._heatmap_job import (
    FeatureCache,
    HeatmapOutcome,
    HeatmapRequest,
    heatmap_job,
    parse_prompts,
    preload_encoder,
)
from napari_medvl._napari_compat import prerender_glyphs
from napari_medvl._notify import report_error
from napari_medvl._progress import Progress
from napari_medvl._worker_process import attach_viewer

if TYPE_CHECKING:
    import napari

    from napari_medvl._job_runner import JobRunner

__all__ = ["HeatmapController", "view_level0"]


def model_tooltip() -> str:
    """The model field's tooltip, naming the registered encoders."""
    from medvl_engine.encoders import available_encoders

    names = ", ".join(entry.name for entry in available_encoders())
    return MODEL_TOOLTIP.replace("encoder", f"encoder ({names})", 1)


def view_level0(layer: Any) -> tuple[float, float, float, float] | None:
    """The part of a slide layer in view as (x0, y0, x1, y1) level-0 px, None if unknown."""
    import numpy as np

    try:
        corners = np.asarray(layer.corner_pixels, dtype=np.float64)[:, -2:]  # (y, x)
        level = int(layer.data_level) if layer.multiscale else 0
        factors = np.asarray(layer.downsample_factors[level], dtype=np.float64)[-2:]
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    (y0, x0), (y1, x1) = corners * factors
    if not (x1 > x0 and y1 > y0):
        return None
    return (float(x0), float(y0), float(x1), float(y1))


class HeatmapController:
    """Jobs, background work and status of one heatmap dock.

    ``on_result(outcome)`` and ``on_partial(update)`` receive the job's results on the GUI
    thread (the presenter's); ``preload``: load the model in the background once the dock is
    on screen, so the first Run starts at the slide instead of at loading the model.
    """

    def __init__(
        self,
        viewer: napari.Viewer,
        form: HeatmapForm,
        cache: FeatureCache,
        on_result: Callable[[HeatmapOutcome], None],
        on_partial: Callable[[Any], None],
        preload: bool = True,
    ) -> None:
        self._viewer = viewer
        self.form = form
        self.cache = cache
        attach_viewer(viewer)  # the model process stops when the last such viewer closes
        self._preload = preload
        self.model_work_started = False
        self._pandas: threading.Event | None = None
        self._glyphs: threading.Event | None = None
        self.request_layer: Any = None  # the slide layer of the request started last
        self.runner: JobRunner = form.controls.bind(on_result)
        self.runner.on_partial = on_partial
        self.runner.on_error = self.show_error
        self.runner.after_progress = self.show_progress

    # ----- background work
    def start_model_work(self) -> None:
        """Preload the model (``preload``) and import the encoder registry for the model
        field's tooltip, in background threads; once."""
        if self.model_work_started:
            return
        self.model_work_started = True
        if self._preload:
            preload_encoder(self.cache, self.form.model_name())
        when_ready(
            self.form.native, import_in_background("medvl_engine.encoders"), self._name_encoders
        )

    def shapes_work(self) -> list[threading.Event]:
        """pandas and scipy.linalg (napari imports them for a first shapes layer and its
        transform) and the rank labels' glyphs, made in background threads, started on the
        first call."""
        if self._pandas is None or self._glyphs is None:
            self._pandas = import_in_background("pandas", "scipy.linalg")
            self._glyphs = prerender_glyphs(self.form.native, self._viewer)
        return [self._pandas, self._glyphs]

    def _name_encoders(self) -> None:
        self.form.model.tooltip = model_tooltip()

    # ----- jobs
    def request(self) -> HeatmapRequest | None:
        """The request the form's inputs describe, or None (with a notification) if incomplete."""
        from medvl_engine.errors import ConfigError
        from medvl_engine.prompts import check_prompts

        form = self.form
        layer = form.slide_choice.value
        prompts = parse_prompts(form.prompts.value)
        try:
            if layer is None:
                raise ConfigError(
                    "No slide layer is open: open a slide (File > Open) and choose it here."
                )
            check_prompts(prompts, form.mode.value)
            if form.normalization.value == "fixed" and not (
                form.range_high.value > form.range_low.value
            ):
                raise ConfigError(
                    "The fixed range needs a max above its min: set 'fixed min' < 'fixed max'."
                )
        except ConfigError as problem:
            self.set_status(report_error(problem))
            return None
        fixed = form.normalization.value == "fixed"
        chosen = form.features.value  # one path (an existing file) or None
        features = chosen if isinstance(chosen, Path) and chosen else None
        return HeatmapRequest(
            slide=layer.metadata["slide"],
            model=form.model_name(),
            prompts=tuple(prompts),
            mode=form.mode.value,
            normalization=form.normalization.value,
            top_n=int(form.top_n.value),
            features=features,
            value_range=(float(form.range_low.value), float(form.range_high.value))
            if fixed
            else None,
            view_level0=view_level0(layer),
        )

    def run(self, _value: Any = None) -> Any:
        """Start a heatmap request (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        self.request_layer = self.form.slide_choice.value
        return self.runner.start(heatmap_job, request, self.cache)

    def cancelled(self, _value: Any = None) -> None:
        """After Cancel: say how many patches' features are kept for the next Run."""
        kept = sum(p.done for p in self.cache.partials.values())
        if kept:
            self.set_status(
                f"Cancelled; the features of {kept} patches are kept and Run continues from them."
            )

    # ----- status line
    def demo_notice(self) -> str | None:
        """The demo notice of the model in the form (None for other models)."""
        from medvl_engine.demo_models import demo_notice_for

        return demo_notice_for(self.form.model_name())

    def set_status(self, message: str) -> None:
        """Write ``message`` on the status line, the model's notice under it."""
        self.form.controls.status.value = message
        self.show_notice()

    def show_notice(self, _value: Any = None) -> None:
        """The model's demo notice on the line under the status (empty for other models)."""
        self.form.controls.set_notice(self.demo_notice())

    def show_progress(self, report: Progress) -> None:
        """ "<stage>: done / total, about N s left" once the job reports a total."""
        if report.total > 0:
            message = f"{report.stage}: {report.done} / {report.total}"
            if report.eta_s is not None:
                message += f", about {report.eta_s:.0f} s left"
            self.set_status(message)

    def show_error(self, message: str) -> None:
        """The job's error sentence on the status line."""
        self.form.controls.status.value = message
