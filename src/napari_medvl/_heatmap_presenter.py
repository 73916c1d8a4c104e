"""The "Text prompt heatmap" dock's presenter: turns heatmap results into napari layers.

Each slide has one heatmap layer per mode, updated in place (``_heatmap_overlay``); earlier
prompts stay in the history list; the colour bar shows the layer's map, limits, prompt, mode,
model and demo notice. While features are computed the layer fills in (visible patches first).
The overlay layers of the bound slide and mode are added (empty) as soon as the dock binds the
slide, one per event-loop turn, so a result only swaps data in (``prepare_overlay``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_medvl._colorbar import shows_legend
from napari_medvl._event_turns import GLYPH_RANKS, GLYPH_STEP_MS, later, show_glyphs, when_all_ready
from napari_medvl._heatmap_controller import HeatmapController
from napari_medvl._heatmap_form import HeatmapForm
from napari_medvl._heatmap_job import HeatmapOutcome, HeatmapUpdate
from napari_medvl._heatmap_overlay import (
    PENDING_KIND,
    HeatmapHistory,
    HistoryEntry,
    find_overlay,
    overlay_key,
    pending_boxes_layer,
    pending_image_layer,
    prepare_overlay,
    show_overlay,
)
from napari_medvl._partial_pacing import PartialMapPacer
from napari_medvl._slide_layers import SLIDE_KIND
from napari_medvl._widget_common import layers_of_kind

if TYPE_CHECKING:
    import napari

__all__ = ["LEGEND_KINDS", "HeatmapPresenter"]

PREPARE_DELAY_MS = 50  # the dock's own layout and drawing come first, in their own turn
MODEL_WORK_AFTER_LAYERS_MS = 600
LEGEND_KINDS = ("heatmap",)  # medvl_kind of the maps whose colour bar the dock shows


class HeatmapPresenter:
    """Overlay layers, history and colour bar of one heatmap dock."""

    def __init__(
        self,
        viewer: napari.Viewer,
        form: HeatmapForm,
        controller: HeatmapController,
        history: HeatmapHistory,
    ) -> None:
        self._viewer = viewer
        self.form = form
        self.controller = controller
        self.history = history
        self.last_outcome: HeatmapOutcome | None = None
        self._showing_history = False
        self._finishing: tuple[HeatmapOutcome, Any] | None = None
        self.partial_pacer = PartialMapPacer(viewer, form.native, self._show_partial_now)

    @property
    def finishing(self) -> bool:
        """True between a result's map and its top patches, history and status."""
        return self._finishing is not None

    # ----- overlay layers, before any result
    def _pending_key(self) -> tuple[str, Any] | None:
        layer = self.form.slide_choice.value
        if layer is None or layer not in self._viewer.layers:
            return None
        return overlay_key(layer.metadata.get("path", ""), self.form.mode.value), layer

    def prepare_overlay_soon(self, _value: Any = None) -> None:
        """Add the bound slide's empty overlay layers on the next event-loop turns."""
        later(self.form.native, PREPARE_DELAY_MS, self._prepare_image)

    def _prepare_image(self) -> None:
        bound = self._pending_key()
        if bound is None:
            return
        key, layer = bound
        frame, mode, style = _frame_of(layer), self.form.mode.value, self.form.style()
        prepare_overlay(
            self._viewer, key, "image", lambda: pending_image_layer(key, frame, mode, style)
        )
        if self.form.top_n.value > 0:
            when_all_ready(self.form.native, self.controller.shapes_work(), self._prepare_boxes)
        else:
            self.controller.start_model_work()

    def _prepare_boxes(self) -> None:
        bound = self._pending_key()
        if bound is None:
            self.controller.start_model_work()
            return
        key, layer = bound
        frame = _frame_of(layer)
        image = find_overlay(self._viewer, key, "image")
        boxes = prepare_overlay(
            self._viewer, key, "shapes", lambda: pending_boxes_layer(key, frame)
        )
        if image is not None:
            self._viewer.layers.selection.active = image
        later(self.form.native, GLYPH_STEP_MS, lambda: self._show_pending_label(boxes))
        # after the new layer's first draws (its shaders and glyphs: the longest of them)
        later(self.form.native, MODEL_WORK_AFTER_LAYERS_MS, self.controller.start_model_work)

    def _show_pending_label(self, boxes: Any) -> None:
        """Show the pending top-patch layer's label (hidden for the layer's first draw), then
        have it show every glyph a rank label can hold, one draw apart."""
        if boxes not in self._viewer.layers or boxes.metadata.get("medvl_kind") != PENDING_KIND:
            return
        boxes.text.visible = True
        later(
            self.form.native,
            GLYPH_STEP_MS,
            lambda: show_glyphs(
                self.form.native, self._viewer, boxes, PENDING_KIND, GLYPH_RANKS[1:]
            ),
        )

    # ----- results
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
            _frame_of(layer),
            key,
            with_boxes=with_boxes,
            with_image=with_image,
            recolor_labels=recolor_labels,
            **self.form.style(),
        )
        if with_image:
            self.form.colorbar.show_layer(image.metadata, image.contrast_limits)
        return image

    def _slide_layer_for(self, outcome: HeatmapOutcome) -> Any:
        layer = self.controller.request_layer
        if layer is not None and layer in self._viewer.layers:
            return layer
        return self.form.slide_choice.value

    def show_partial(self, update: Any) -> None:
        """Swap a partial map (visible patches first) into the overlay layer once the view is
        still (:mod:`._partial_pacing`)."""
        if isinstance(update, HeatmapUpdate):
            self.partial_pacer.offer((self.controller.runner.generation, update))

    @property
    def partial_waiting(self) -> bool:
        """True while a partial map waits for the view to be still."""
        return self.partial_pacer.waiting is not None

    def _show_partial_now(self, offered: tuple[int, HeatmapUpdate]) -> None:
        generation, update = offered
        runner = self.controller.runner
        if runner.worker is None or runner.generation != generation:  # cancelled, or replaced
            return
        self._show(update.outcome, self._slide_layer_for(update.outcome), with_boxes=False)

    def show_outcome(self, outcome: HeatmapOutcome) -> None:
        """Swap the result's map in now and its top patches, history and status in on the
        next event-loop turn: each turn holds one layer update and one redraw."""
        self.last_outcome = outcome
        self.partial_pacer.drop()
        layer = self._slide_layer_for(outcome)
        self._show(outcome, layer, with_boxes=False, recolor_labels=False)
        self._finishing = (outcome, layer)
        later(self.form.native, 0, self._finish_outcome)

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
        entry = self.history.add(slide_path, outcome, _frame_of(layer))
        self._showing_history = True
        try:
            self.form.history_choice.reset_choices()
            self.form.history_choice.value = entry
        finally:
            self._showing_history = False
        self.controller.set_status(
            "Features extracted; new prompts are instant." if outcome.extracted else "Done."
        )

    def history_chosen(self, entry: HistoryEntry | None) -> None:
        """Show an earlier result chosen in the history list again."""
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
        self.controller.set_status(f"Showing an earlier result: {entry.label}.")

    def _shown_key(self) -> str | None:
        """The overlay key of the result shown last, None before any result."""
        if self.last_outcome is None:
            return None
        layer = self._slide_layer_for(self.last_outcome)
        return overlay_key(
            layer.metadata.get("path", "") if layer is not None else "",
            self.last_outcome.request.mode,
        )

    def restyle(self, _value: Any = None) -> None:
        """Redraw the current overlay with the dock's colour map, opacity and threshold."""
        key = self._shown_key()
        if key is None or self.last_outcome is None or find_overlay(self._viewer, key) is None:
            return
        self._show(self.last_outcome, self._slide_layer_for(self.last_outcome), with_boxes=False)

    def toggle_overlay(self, _viewer: Any = None) -> None:
        """Show or hide the heatmap layer of the result shown last (and its top patches)."""
        key = self._shown_key()
        image = find_overlay(self._viewer, key) if key is not None else None
        if key is None or image is None:
            return
        image.visible = not image.visible
        boxes = find_overlay(self._viewer, key, "shapes")
        if boxes is not None:
            boxes.visible = image.visible

    def legend_for_active(self, event: Any) -> None:
        """The colour bar follows the heatmap the user selects (another slide's, an earlier
        one opened from a file)."""
        if shows_legend(event.value, LEGEND_KINDS):
            self.form.colorbar.show_overlay(event.value)

    def layer_removed(self, _event: Any = None) -> None:
        """Clear the colour bar once no heatmap layer is left."""
        if not any(layer.metadata.get("medvl_kind") == "heatmap" for layer in self._viewer.layers):
            self.form.colorbar.clear()


def _frame_of(layer: Any) -> Any:
    return layer.metadata["world_frame"] if layer is not None else None
