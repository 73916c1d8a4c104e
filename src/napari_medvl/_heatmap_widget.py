"""Dock widget "Text prompt heatmap": a slide, a model, prompts -> heatmap and top patches.

The widget collects inputs, runs ``heatmap_job`` in a thread worker (a new
request cancels the running one) and turns the engine's results into layers
with the builders of ``_layers``; it holds no model math and reads no files.
Each slide has one heatmap layer per mode, updated in place (``_heatmap_overlay``);
earlier prompts stay in the history list; the colour bar shows the layer's map,
limits, prompt, mode, model and demo notice. While features are computed the
layer fills in (visible patches first) and the progress bar counts patches.
The overlay layers of the bound slide and mode are added (empty) as soon as the dock binds
the slide, one per event-loop turn, so a result only swaps data in (``prepare_overlay``).
"""

from __future__ import annotations

import threading
from typing import Any

from magicgui.widgets import (
    CheckBox,
    ComboBox,
    Container,
    FileEdit,
    FloatSlider,
    FloatSpinBox,
    LineEdit,
    SpinBox,
)

from napari_medvl._colorbar import ColorBar, legend_layer, shows_legend
from napari_medvl._event_turns import (
    GLYPH_RANKS,
    GLYPH_STEP_MS,
    import_in_background,
    later,
    show_glyphs,
    when_all_ready,
    when_ready,
)
from napari_medvl._glyph_prerender import prerender_glyphs
from napari_medvl._heatmap_job import (
    FeatureCache,
    HeatmapOutcome,
    HeatmapRequest,
    HeatmapUpdate,
    heatmap_job,
    parse_prompts,
    preload_encoder,
)
from napari_medvl._heatmap_overlay import (
    PENDING_KIND,
    HeatmapHistory,
    find_overlay,
    overlay_key,
    pending_boxes_layer,
    pending_image_layer,
    prepare_overlay,
    show_overlay,
)
from napari_medvl._layers import SLIDE_KIND
from napari_medvl._notify import report_error
from napari_medvl._progress import Progress
from napari_medvl._widget_common import JobControls, layers_of_kind

__all__ = ["BLENDINGS", "HeatmapWidget"]

BLENDINGS = ("translucent", "additive")
PREPARE_DELAY_MS = 50  # the dock's own layout and drawing come first, in their own turn
MODEL_WORK_DELAY_MS = 1500  # the latest start of the background work when no slide is bound
MODEL_WORK_AFTER_LAYERS_MS = 600
LEGEND_KINDS = ("heatmap",)  # medvl_kind of the maps whose colour bar the dock shows
TOGGLE_KEY = "Control-Shift-H"  # shows / hides the heatmap shown last, from anywhere in napari


_MODEL_TOOLTIP = "A registered encoder, a model folder or a Hugging Face id."


def _model_tooltip() -> str:
    from medvl_engine.encoders import available_encoders

    names = ", ".join(entry.name for entry in available_encoders())
    return _MODEL_TOOLTIP.replace("encoder", f"encoder ({names})", 1)


def _view_level0(layer: Any) -> tuple[float, float, float, float] | None:
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


class HeatmapWidget(Container):
    """Text prompt heatmap over a whole-slide image layer."""

    def __init__(
        self, napari_viewer: Any, cache: FeatureCache | None = None, preload: bool = True
    ) -> None:
        """``preload``: load the model in the background now, so the first Run starts at the
        slide (a first overlay within seconds) instead of at loading the model."""
        from medvl_engine.colormaps import COLORMAP_CHOICES
        from medvl_engine.prompts import MODES, NORMALIZATIONS

        self._viewer = napari_viewer
        self.cache = cache if cache is not None else FeatureCache()
        self.history = HeatmapHistory()
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        # Background work (imports, glyphs, the model) starts once the dock and the slide's
        # overlay layers are on screen: a thread importing torch holds the GIL in one long
        # stretch (bench/bench_import_gil.py), a thread loading a model 5 ms at a time, and
        # docking or adding a layer calls Python from Qt thousands of times.
        self._pandas: threading.Event | None = None
        self._glyphs: threading.Event | None = None
        self._preload = preload
        self._model_work_started = False
        self.model = LineEdit(label="model", value="medvl-demo", tooltip=_MODEL_TOOLTIP)
        self.prompts = LineEdit(
            label="prompts",
            value="tumor",
            tooltip=(
                "cosine: one prompt; softmax: two or more classes separated by ';' (the first is "
                "mapped); contrast: two prompts 'A; B' (A minus B)"
            ),
        )
        self.features = FileEdit(
            label="features",
            mode="r",
            filter="Features (*.h5 *.pt *.zarr)",
            nullable=True,
            tooltip=(
                "Optional: this slide's features made elsewhere (a medvl .zarr store, a "
                "TRIDENT/CLAM .h5, or a CLAM .pt with its .h5 beside it); empty: extract them."
            ),
        )
        self.mode = ComboBox(label="mode", choices=MODES, value="cosine")
        self.normalization = ComboBox(label="normalise", choices=NORMALIZATIONS, value="none")
        self.range_low = FloatSpinBox(
            label="fixed min",
            value=-1.0,
            min=-10.0,
            max=10.0,
            step=0.05,
            enabled=False,
            tooltip="Score shown at the bottom of the colour map when normalise is 'fixed'.",
        )
        self.range_high = FloatSpinBox(
            label="fixed max",
            value=1.0,
            min=-10.0,
            max=10.0,
            step=0.05,
            enabled=False,
            tooltip="Score shown at the top of the colour map when normalise is 'fixed'.",
        )
        self.top_n = SpinBox(label="top patches", value=10, min=0, max=500)
        self.history_choice = ComboBox(
            label="history",
            choices=self._history_choices,
            nullable=True,
            tooltip="Earlier prompts on this slide: choose one to show it again.",
        )
        self.colormap = ComboBox(
            label="colour map",
            choices=COLORMAP_CHOICES,
            value="auto",
            tooltip="auto: blue-white-red centred on 0 for signed maps, viridis otherwise.",
        )
        self.opacity = FloatSlider(label="opacity", value=0.5, min=0.0, max=1.0, step=0.05)
        self.hide_below = CheckBox(label="hide below", value=False)
        self.threshold = FloatSpinBox(
            label="threshold",
            value=0.0,
            min=-10.0,
            max=10.0,
            step=0.01,
            tooltip="With 'hide below' on, cells scoring under this value are transparent.",
        )
        self.blending = ComboBox(label="blending", choices=BLENDINGS, value="translucent")
        self.controls = JobControls(run_text="Run")
        self.colorbar = ColorBar()
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.prompts,
                self.features,
                self.mode,
                self.normalization,
                self.range_low,
                self.range_high,
                self.top_n,
                self.controls,
                self.history_choice,
                self.colormap,
                self.blending,
                self.opacity,
                self.hide_below,
                self.threshold,
            ]
        )
        self.native.layout().addWidget(self.colorbar)
        self._fix_sizes()
        self.last_outcome: HeatmapOutcome | None = None
        self._showing_history = False
        self.runner = self.controls.bind(self._show_outcome)
        self.runner.on_partial = self._show_partial
        self.runner.on_error = self._show_error
        self.runner.after_progress = self._show_progress
        self._finishing: tuple[HeatmapOutcome, Any] | None = None
        self.runner.displaying = lambda: self._finishing is not None
        self.controls.run_button.changed.connect(self.run)
        self.controls.cancel_button.changed.connect(self._cancelled)
        self.prompts.native.returnPressed.connect(self.run)
        self.model.changed.connect(self._show_notice)
        self.normalization.changed.connect(self._normalization_changed)
        self.history_choice.changed.connect(self._history_chosen)
        self.slide_choice.changed.connect(self._prepare_overlay_soon)
        self.mode.changed.connect(self._prepare_overlay_soon)
        for control in (
            self.colormap,
            self.opacity,
            self.hide_below,
            self.threshold,
            self.blending,
        ):
            control.changed.connect(self._restyle)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self._refresh_choices)
        napari_viewer.layers.events.removed.connect(self._layer_removed)
        napari_viewer.layers.selection.events.active.connect(self._legend_for_active)
        shown = legend_layer(napari_viewer, LEGEND_KINDS)  # a map opened before the dock
        if shown is not None:
            self.colorbar.show_overlay(shown)
        self._refresh_choices()  # binding a slide prepares its overlay layers
        self._show_notice()
        self.controls.bind_run_key(self.run, self.native)
        later(self.native, MODEL_WORK_DELAY_MS, self._start_model_work)
        napari_viewer.bind_key(TOGGLE_KEY, self.toggle_overlay, overwrite=True)

    def _start_model_work(self) -> None:
        """Preload the model (``preload``) and import the encoder registry for the model
        field's tooltip, in background threads; once."""
        if self._model_work_started:
            return
        self._model_work_started = True
        if self._preload:
            preload_encoder(self.cache, self.model.value.strip() or "medvl-demo")
        when_ready(self.native, import_in_background("medvl_engine.encoders"), self._name_encoders)

    def _shapes_work(self) -> list[threading.Event]:
        """pandas (napari imports it for a first shapes layer) and the rank labels' glyphs,
        made in background threads, started on the first call."""
        if self._pandas is None or self._glyphs is None:
            self._pandas = import_in_background("pandas")
            self._glyphs = prerender_glyphs(self.native, self._viewer)
        return [self._pandas, self._glyphs]

    def _name_encoders(self) -> None:
        self.model.tooltip = _model_tooltip()

    def _fix_sizes(self) -> None:
        """Text that changes (status, history labels) wraps or elides instead of widening the
        dock, so results never re-lay out the window and the canvas keeps its size."""
        from qtpy.QtWidgets import QComboBox, QSizePolicy

        progress = self.controls.progress.native
        policy = progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        progress.setSizePolicy(policy)
        status = self.controls.status.native  # wraps already (JobControls)
        status.setFixedHeight(3 * status.fontMetrics().lineSpacing())
        status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        notice = self.controls.notice.native
        notice.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        notice.setFixedHeight(2 * notice.fontMetrics().lineSpacing())
        policy = notice.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        notice.setSizePolicy(policy)
        policy = progress.sizePolicy()
        policy.setHorizontalPolicy(QSizePolicy.Policy.Ignored)
        progress.setSizePolicy(policy)
        for combo in (self.history_choice.native, self.slide_choice.native):
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(16)

    # ----- inputs
    def _slide_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return layers_of_kind(self._viewer, SLIDE_KIND)

    def _history_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        layer = self.slide_choice.value if hasattr(self, "slide_choice") else None
        path = layer.metadata.get("path") if layer is not None else None
        return [(entry.label, entry) for entry in self.history.for_slide(path)]

    def _refresh_choices(self, _event: Any = None) -> None:
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None and self.slide_choice.choices:
            self.slide_choice.value = self.slide_choice.choices[-1]

    def _normalization_changed(self, value: str) -> None:
        fixed = value == "fixed"
        self.range_low.enabled = fixed
        self.range_high.enabled = fixed

    def style(self) -> dict[str, Any]:
        """The overlay style the dock's controls describe (see ``heatmap_layers``)."""
        return {
            "colormap": self.colormap.value,
            "opacity": float(self.opacity.value),
            "blending": self.blending.value,
            "threshold": float(self.threshold.value) if self.hide_below.value else None,
        }

    def request(self) -> HeatmapRequest | None:
        """The request the current inputs describe, or None (with a notification) if incomplete."""
        from medvl_engine.errors import ConfigError
        from medvl_engine.prompts import check_prompts

        layer = self.slide_choice.value
        prompts = parse_prompts(self.prompts.value)
        try:
            if layer is None:
                raise ConfigError(
                    "No slide layer is open: open a slide (File > Open) and choose it here."
                )
            check_prompts(prompts, self.mode.value)
            if self.normalization.value == "fixed" and not (
                self.range_high.value > self.range_low.value
            ):
                raise ConfigError(
                    "The fixed range needs a max above its min: set 'fixed min' < 'fixed max'."
                )
        except ConfigError as problem:
            self._set_status(report_error(problem), notice=False)
            return None
        fixed = self.normalization.value == "fixed"
        return HeatmapRequest(
            slide=layer.metadata["slide"],
            model=self.model.value.strip() or "medvl-demo",
            prompts=tuple(prompts),
            mode=self.mode.value,
            normalization=self.normalization.value,
            top_n=int(self.top_n.value),
            features=self.features.value or None,
            value_range=(float(self.range_low.value), float(self.range_high.value))
            if fixed
            else None,
            view_level0=_view_level0(layer),
        )

    def run(self, _value: Any = None) -> Any:
        """Start a heatmap request (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        self._request_layer = self.slide_choice.value
        return self.runner.start(heatmap_job, request, self.cache)

    # ----- status line
    def demo_notice(self) -> str | None:
        from medvl_engine.demo_models import demo_notice_for

        return demo_notice_for(self.model.value.strip() or "medvl-demo")

    def _set_status(self, message: str, notice: bool = True) -> None:
        self.controls.status.value = message
        self._show_notice()

    def _show_notice(self, _value: Any = None) -> None:
        """The model's demo notice on the line under the status (empty for other models)."""
        self.controls.set_notice(self.demo_notice())

    def _show_progress(self, report: Progress) -> None:
        if report.total > 0:
            message = f"{report.stage}: {report.done} / {report.total}"
            if report.eta_s is not None:
                message += f", about {report.eta_s:.0f} s left"
            self._set_status(message)

    def _show_error(self, message: str) -> None:
        self.controls.status.value = message

    def _cancelled(self, _value: Any = None) -> None:
        partial = self.cache.partials
        kept = sum(p.done for p in partial.values())
        if kept:
            self._set_status(
                f"Cancelled; the features of {kept} patches are kept and Run continues from them."
            )

    # ----- overlay layers, before any result
    def _pending_key(self) -> tuple[str, Any] | None:
        layer = self.slide_choice.value
        if layer is None or layer not in self._viewer.layers:
            return None
        return overlay_key(layer.metadata.get("path", ""), self.mode.value), layer

    def _prepare_overlay_soon(self, _value: Any = None) -> None:
        """Add the bound slide's empty overlay layers on the next event-loop turns."""
        later(self.native, PREPARE_DELAY_MS, self._prepare_image)

    def _prepare_image(self) -> None:
        bound = self._pending_key()
        if bound is None:
            return
        key, layer = bound
        frame, mode, style = self._frame_of(layer), self.mode.value, self.style()
        prepare_overlay(
            self._viewer, key, "image", lambda: pending_image_layer(key, frame, mode, style)
        )
        if self.top_n.value > 0:
            when_all_ready(self.native, self._shapes_work(), self._prepare_boxes)
        else:
            self._start_model_work()

    def _prepare_boxes(self) -> None:
        bound = self._pending_key()
        if bound is None:
            self._start_model_work()
            return
        key, layer = bound
        frame = self._frame_of(layer)
        image = find_overlay(self._viewer, key, "image")
        boxes = prepare_overlay(
            self._viewer, key, "shapes", lambda: pending_boxes_layer(key, frame)
        )
        if image is not None:
            self._viewer.layers.selection.active = image
        later(self.native, GLYPH_STEP_MS, lambda: self._show_pending_label(boxes))
        # after the new layer's first draws (its shaders and glyphs: the longest of them)
        later(self.native, MODEL_WORK_AFTER_LAYERS_MS, self._start_model_work)

    def _show_pending_label(self, boxes: Any) -> None:
        """Show the pending top-patch layer's label (hidden for the layer's first draw), then
        have it show every glyph a rank label can hold, one draw apart."""
        if boxes not in self._viewer.layers or boxes.metadata.get("medvl_kind") != PENDING_KIND:
            return
        boxes.text.visible = True
        later(
            self.native,
            GLYPH_STEP_MS,
            lambda: show_glyphs(self.native, self._viewer, boxes, PENDING_KIND, GLYPH_RANKS[1:]),
        )

    # ----- results
    def _frame_of(self, layer: Any) -> Any:
        return layer.metadata["world_frame"] if layer is not None else None

    def _show(
        self,
        outcome: HeatmapOutcome,
        layer: Any,
        with_boxes: bool,
        with_image: bool = True,
        recolor_labels: bool | None = None,
    ) -> Any:
        slide_path = layer.metadata.get("path", "") if layer is not None else ""
        key = overlay_key(slide_path, outcome.request.mode)
        image = show_overlay(
            self._viewer,
            outcome,
            self._frame_of(layer),
            key,
            with_boxes=with_boxes,
            with_image=with_image,
            recolor_labels=recolor_labels,
            **self.style(),
        )
        if with_image:
            self.colorbar.show_layer(image.metadata, image.contrast_limits)
        return image

    def _slide_layer_for(self, outcome: HeatmapOutcome) -> Any:
        layer = getattr(self, "_request_layer", None)
        if layer is not None and layer in self._viewer.layers:
            return layer
        return self.slide_choice.value

    def _show_partial(self, update: Any) -> None:
        if not isinstance(update, HeatmapUpdate):
            return
        self._show(update.outcome, self._slide_layer_for(update.outcome), with_boxes=False)

    def _show_outcome(self, outcome: HeatmapOutcome) -> None:
        """Swap the result's map in now and its top patches, history and status in on the
        next event-loop turn: each turn holds one layer update and one redraw."""
        self.last_outcome = outcome
        layer = self._slide_layer_for(outcome)
        self._show(outcome, layer, with_boxes=False, recolor_labels=False)
        self._finishing = (outcome, layer)
        later(self.native, 0, self._finish_outcome)

    def _finish_outcome(self) -> None:
        if self._finishing is None:
            return
        outcome, layer = self._finishing
        self._finishing = None
        gone = layer is not None and layer not in self._viewer.layers  # or the viewer closed
        if gone or outcome is not self.last_outcome:
            return
        self._show(outcome, layer, with_boxes=True, with_image=False)
        slide_path = layer.metadata.get("path", "") if layer is not None else ""
        entry = self.history.add(slide_path, outcome, self._frame_of(layer))
        self._showing_history = True
        try:
            self.history_choice.reset_choices()
            self.history_choice.value = entry
        finally:
            self._showing_history = False
        self._set_status(
            "Features extracted; new prompts are instant." if outcome.extracted else "Done."
        )

    def _history_chosen(self, entry: Any) -> None:
        if self._showing_history or entry is None:
            return
        self.last_outcome = entry.outcome
        layer = next(
            (
                candidate
                for _, candidate in layers_of_kind(self._viewer, SLIDE_KIND)
                if candidate.metadata.get("path") == entry.slide_path
            ),
            None,
        )
        self._show(entry.outcome, layer, with_boxes=True)
        self._set_status(f"Showing an earlier result: {entry.label}.")

    def _restyle(self, _value: Any = None) -> None:
        """Redraw the current overlay with the dock's colour map, opacity and threshold."""
        if self.last_outcome is None:
            return
        layer = self._slide_layer_for(self.last_outcome)
        key = overlay_key(
            layer.metadata.get("path", "") if layer is not None else "",
            self.last_outcome.request.mode,
        )
        if find_overlay(self._viewer, key) is None:
            return
        self._show(self.last_outcome, layer, with_boxes=False)

    def toggle_overlay(self, _viewer: Any = None) -> None:
        """Show or hide the heatmap layer of the result shown last (and its top patches)."""
        if self.last_outcome is None:
            return
        layer = self._slide_layer_for(self.last_outcome)
        key = overlay_key(
            layer.metadata.get("path", "") if layer is not None else "",
            self.last_outcome.request.mode,
        )
        image = find_overlay(self._viewer, key)
        if image is None:
            return
        image.visible = not image.visible
        boxes = find_overlay(self._viewer, key, "shapes")
        if boxes is not None:
            boxes.visible = image.visible

    def _legend_for_active(self, event: Any) -> None:
        """The colour bar follows the heatmap the user selects (another slide's, an earlier
        one opened from a file)."""
        if shows_legend(event.value, LEGEND_KINDS):
            self.colorbar.show_overlay(event.value)

    def _layer_removed(self, _event: Any = None) -> None:
        if not any(layer.metadata.get("medvl_kind") == "heatmap" for layer in self._viewer.layers):
            self.colorbar.clear()
