"""The "Mammogram TopK" dock's presenter: turns TopK results and reading-room jobs into layers.

The result layers of the chosen pair (importance maps, and the boxes with their rims and labels
as one shapes layer, on both views)
are added empty and invisible as soon as the CC and MLO are chosen, one per event-loop turn
(``_mammo_layers.pending_topk_layers``): adding a napari layer holds the GUI thread 0.2 - 1.5 s,
so a result, first or not, only fills these layers (one per turn, in place: the same layer
objects) and adds none. Those of the exam's other breast (its one CC and one MLO) follow,
while no TopK job runs or result is drawn, so that its Run fills layers too. Once drawn (their
shaders built, the rank glyphs rendered) pending layers are hidden: napari draws a visible
layer on every frame even at opacity 0; a result shows its layers again. "Hang views"
places the views in the four-view layout (:mod:`._mammo_hanging`) and "Reset window" puts every
mammogram back on its DICOM VOI window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from napari_medvl._colorbar import shows_legend
from napari_medvl._event_turns import (
    GLYPH_RANKS,
    GLYPH_STEP_MS,
    IMPORT_POLL_MS,
    import_in_background,
    later,
    show_glyphs,
    viewer_open,
    when_all_ready,
)
from napari_medvl._layer_frame import LayerData, WorldFrame
from napari_medvl._mammo_hanging import hang_views
from napari_medvl._mammo_layers import (
    TOPK_PENDING_KIND,
    pending_topk_layers,
    readable_topk_layers,
)
from napari_medvl._napari_compat import prerender_glyphs
from napari_medvl._topk_controller import TopKController
from napari_medvl._topk_form import TopKForm
from napari_medvl._topk_job import TopKOutcome, format_readouts
from napari_medvl._widget_common import add_layer, upsert_layer

if TYPE_CHECKING:
    import napari

__all__ = ["LEGEND_KINDS", "TopKPresenter"]

PREPARE_DELAY_MS = 50  # the dock's own layout and drawing come first, in their own turn
LEGEND_KINDS = ("topk",)  # medvl_kind of the importance maps whose colour bar the dock shows
MODEL_AFTER_LAYERS_MS = 600  # after the result layers' first draws (their shaders and glyphs)
HIDE_PENDING_MS = 1000  # a pending layer is drawn this long (its shaders), then hidden


class TopKPresenter:
    """Result layers, colour bar, readouts and the reading-room layout of one TopK dock."""

    def __init__(self, viewer: napari.Viewer, form: TopKForm, controller: TopKController) -> None:
        self._viewer = viewer
        self.form = form
        self.controller = controller
        # napari's shapes layers need pandas, its transforms of the hung views scipy.linalg
        self._pandas = import_in_background("pandas", "scipy.linalg")
        self._glyphs = prerender_glyphs(form.native, viewer)  # for the rank labels
        self._queued: list[LayerData] = []  # result data waiting for its turn
        self._preparing: list[LayerData] = []  # pending layers waiting for their turn
        self._chosen_names: set[str] = set()  # result names of the chosen pair's layers
        self._wanted_names: set[str] = set()  # those and the other breast's: not taken over
        self._preload_due = False  # the model loads once the chosen pair's layers are there
        self._adding_pending = False  # one chain of turns adds them, however often prepared
        self.last_outcome: TopKOutcome | None = None
        self.outcomes: dict[str | None, TopKOutcome] = {}

    def legend_for_active(self, event: Any) -> None:
        """The colour bar follows the importance map the user selects (the other breast's)."""
        if shows_legend(event.value, LEGEND_KINDS):
            self.show_existing(event.value)

    def show_existing(self, importance: Any) -> None:
        """The colour bar and zero-shot readouts of a TopK result's importance map that is
        in the viewer already (shown by the demo, or selected by the user)."""
        self.form.colorbar.show_overlay(importance)
        result = importance.metadata.get("topk_result")
        if getattr(result, "zero_shot", None):
            self.form.readouts.value = format_readouts(result.zero_shot)

    # --- results ---------------------------------------------------------------------------
    def _draw(self, outcome: TopKOutcome, frames: dict[str, WorldFrame]) -> None:
        """Fill the outcome's layers: those the worker built when the views have not moved since."""
        if outcome.layers is not None and frames == outcome.request.frames:
            layers = outcome.layers
        else:
            sources = {"CC": str(outcome.request.cc.path), "MLO": str(outcome.request.mlo.path)}
            layers = readable_topk_layers(
                outcome.result,
                outcome.breast,
                frames,
                outcome.breast.laterality,
                sources=sources,
                model=outcome.request.model,
                run=outcome.run,
            )
        self._queued.extend(layers)
        if len(self._queued) == len(layers):
            self._fill_next_layer()

    @property
    def drawing(self) -> bool:
        """True while result layers are still being filled (one per event-loop turn)."""
        return bool(self._queued)

    def _fill_next_layer(self) -> None:
        """Fill one result layer (its pending layer, renamed and shown in a turn before, or
        the same-named layer of an earlier result; added only when neither exists), then let
        the event loop run before the next one."""
        if not viewer_open(self._viewer):
            self._queued.clear()
        if not self._queued:
            return
        name = self._queued[0][1]["name"]
        waiting = self._pending_layer(name)
        if waiting is not None and (name not in self._viewer.layers or not waiting.visible):
            if name not in self._viewer.layers:
                waiting.name = name
            waiting.visible = True  # at opacity 0 still; napari rebuilds its scene graph
            later(self.form.native, 0, self._fill_next_layer)  # the fill: a turn of its own
            return
        upsert_layer(self._viewer, self._queued.pop(0))
        if self._queued:
            later(self.form.native, 0, self._fill_next_layer)

    def show_outcome(self, outcome: TopKOutcome) -> None:
        """Fill the result's layers, colour bar, readouts and status."""
        from medvl_engine.demo_models import demo_notice_for

        self.last_outcome = outcome
        if outcome.run is not None:  # the model's G^2 candidates, from the run (no model here)
            self.form.set_k_limit(outcome.run.candidates)
        self.outcomes[outcome.breast.laterality] = outcome
        self._draw(outcome, self._frames_of(outcome) or self.controller.frames())
        self.form.readouts.value = format_readouts(outcome.result.zero_shot)
        notice = demo_notice_for(outcome.request.model)
        laterality = outcome.breast.laterality
        prefix = f"TopK {laterality}" if laterality else "TopK"
        for _, kwargs, _ in outcome.layers or []:
            if kwargs["name"] == f"{prefix} importance CC":
                self.form.colorbar.show_layer(kwargs["metadata"], kwargs["contrast_limits"])
        self.form.controls.set_notice(notice)
        k, evaluated = outcome.result.k, outcome.result.evaluated_k
        status = f"Top {k} patches shown ({outcome.request.model}"
        if evaluated is not None:
            status += (
                ", the K it was evaluated at)."
                if k == evaluated
                else f"); it was evaluated at K = {evaluated}."
            )
        else:
            status += ")."
        self.form.controls.status.value = f"{status} ({notice})" if notice else status

    # --- result layers, before any result ----------------------------------------------------
    def _pending_layer(self, result_name: str) -> Any:
        """The pending layer that waits for the result layer ``result_name``, or None."""
        for layer in self._viewer.layers:
            metadata = layer.metadata
            if (
                metadata.get("medvl_kind") == TOPK_PENDING_KIND
                and metadata.get("result_name") == result_name
            ):
                return layer
        return None

    def prepare_layers_soon(self, _value: Any = None) -> None:
        """Add the chosen pair's result layers, empty, over the next event-loop turns."""
        later(self.form.native, PREPARE_DELAY_MS, self._prepare_layers)

    def _prepare_layers(self) -> None:
        cc, mlo = self.form.cc_choice.value, self.form.mlo_choice.value
        if cc is None or mlo is None or cc is mlo:
            return
        laterality = cc.metadata.get("laterality") or mlo.metadata.get("laterality")
        chosen = pending_topk_layers(self.controller.frames(), laterality)
        others = [
            layer_data
            for side, frames in self._other_pairs(laterality, (cc, mlo))
            for layer_data in pending_topk_layers(frames, side)
        ]
        self._chosen_names = {layer_data[1]["metadata"]["result_name"] for layer_data in chosen}
        self._wanted_names = self._chosen_names | {
            layer_data[1]["metadata"]["result_name"] for layer_data in others
        }
        self._preparing = [
            layer_data
            for layer_data in chosen + others
            if layer_data[1]["metadata"]["result_name"] not in self._viewer.layers
            and self._pending_layer(layer_data[1]["metadata"]["result_name"]) is None
        ]
        self._preload_due = True
        if not self._adding_pending:
            self._adding_pending = True
            self._add_next_pending()

    def _other_pairs(
        self, laterality: str | None, chosen: tuple[Any, Any]
    ) -> list[tuple[str, dict[str, WorldFrame]]]:
        """(laterality, world frames of its CC and MLO) of each other breast in the viewer
        with exactly one CC and one MLO view (a breast with more, a prior exam's say, is left
        to its own choice)."""
        from medvl_engine.io.mammo import view_family

        views: dict[str, dict[str, list[Any]]] = {}
        for _, layer in self.controller.mammograms():
            side = layer.metadata.get("laterality")
            family = view_family(layer.metadata.get("view"))
            if side in (None, laterality) or family is None or any(layer is c for c in chosen):
                continue
            views.setdefault(side, {}).setdefault(family, []).append(layer)
        return [
            (side, {v: WorldFrame.from_dict(found[v][0].metadata["world_frame"]) for v in found})
            for side, found in sorted(views.items())
            if len(found.get("CC", [])) == 1 and len(found.get("MLO", [])) == 1
        ]

    def _add_next_pending(self) -> None:
        """Add (or take over) one pending layer per event-loop turn; shapes layers wait for
        pandas, imported in the background. A result queued meanwhile fills what exists of
        its pair and adds the rest itself; the other breast's layers wait while a TopK job
        runs or a result is drawn (each add holds the GUI thread), then follow."""
        if not viewer_open(self._viewer):
            self._preparing.clear()
        if self._queued:  # the result adds the chosen pair's missing layers itself
            self._preparing = [
                layer_data
                for layer_data in self._preparing
                if layer_data[1]["metadata"]["result_name"] not in self._chosen_names
            ]
            self._preload_due = False  # the run loads the model
        chosen_left = any(
            layer_data[1]["metadata"]["result_name"] in self._chosen_names
            for layer_data in self._preparing
        )
        if self._preload_due and not chosen_left:  # the pair's layers are all there
            self._preload_due = False
            later(self.form.native, MODEL_AFTER_LAYERS_MS, self.controller.preload_model)
        if not self._preparing:
            self._adding_pending = False
            return
        if not chosen_left and (self._queued or self.controller.runner.running):
            later(self.form.native, IMPORT_POLL_MS, self._add_next_pending)
            return
        shapes_need = [self._pandas, self._glyphs]
        if self._preparing[0][2] == "shapes" and not all(e.is_set() for e in shapes_need):
            when_all_ready(self.form.native, shapes_need, self._add_next_pending)
            return
        layer_data = self._preparing.pop(0)
        name = layer_data[1]["metadata"]["result_name"]
        if name in self._viewer.layers or self._pending_layer(name) is not None:
            layer = None
        else:
            layer = self._take_over_pending(layer_data) or add_layer(self._viewer, layer_data)
        if layer is not None and layer_data[2] == "shapes":  # the marks carry the rank labels
            show_glyphs(self.form.native, self._viewer, layer, TOPK_PENDING_KIND, GLYPH_RANKS[1:])
        if layer is not None:
            later(self.form.native, HIDE_PENDING_MS, lambda: self._hide_when_drawn(layer))
        later(self.form.native, 0, self._add_next_pending)

    def _hide_when_drawn(self, layer: Any) -> None:
        """Hide a pending layer once it has been drawn (its shaders built; a marks layer's
        glyphs rendered, its last glyph rank shown a draw ago): napari draws every visible
        layer on every frame, even at opacity 0 (8 of them for a four-view exam: each pan
        frame costs more), and skips hidden ones. A result makes it visible again."""
        if (
            not viewer_open(self._viewer)
            or layer not in self._viewer.layers
            or layer.metadata.get("medvl_kind") != TOPK_PENDING_KIND
        ):
            return
        labels = type(layer).__name__ == "Shapes"  # the marks carry the rank labels
        if labels and layer.features["rank"][0] != GLYPH_RANKS[-1]:  # glyphs still showing
            later(self.form.native, GLYPH_STEP_MS, lambda: self._hide_when_drawn(layer))
            return
        if labels and not layer.metadata.get("glyphs_drawn"):
            layer.metadata["glyphs_drawn"] = True  # hidden after one more draw
            later(self.form.native, GLYPH_STEP_MS * 2, lambda: self._hide_when_drawn(layer))
            return
        layer.visible = False

    def _take_over_pending(self, layer_data: LayerData) -> Any:
        """A pending layer of another pair (never filled, and not one the chosen pair or the
        other breast waits for) in the same role and view, renamed and moved to this pair's
        view; None when there is none."""
        data, kwargs, layer_type = layer_data
        role = kwargs["metadata"]["result_name"].split(" ")[-2:]
        for layer in self._viewer.layers:
            metadata = layer.metadata
            if (
                metadata.get("medvl_kind") == TOPK_PENDING_KIND
                and metadata["result_name"] not in self._wanted_names
                and metadata["result_name"].split(" ")[-2:] == role
                and type(layer).__name__.lower() == layer_type
            ):
                layer.metadata = kwargs["metadata"]
                layer.name = kwargs["name"]
                if layer_type == "image":
                    layer.affine = kwargs["affine"]
                else:
                    layer.data = data
                return layer
        return None

    # --- reading-room layout ----------------------------------------------------------------
    def apply_voi(self, reopened: dict[Any, Any]) -> None:
        """Show each reopened mammogram (layer -> Mammogram) on its layer."""
        for layer, mammogram in reopened.items():
            layer.data = mammogram.pixels
            layer.metadata["mammogram"] = mammogram
            layer.contrast_limits = (0.0, 1.0)
        names = sorted({mammogram.voi for mammogram in reopened.values()})
        self.form.controls.status.value = (
            f"VOI applied to {len(reopened)} view(s): {', '.join(names)}."
        )

    def apply_hanging(self, sides: dict[Any, str]) -> None:
        """Record the measured chest-wall sides (layer -> side), hang the views and move the
        results' boxes with them."""
        for layer, side in sides.items():
            layer.metadata["chest_wall"] = side
        hung, skipped = hang_views(self._viewer)
        for outcome in self.outcomes.values():  # boxes follow their views
            frames = self._frames_of(outcome)
            if frames is not None:
                self._draw(outcome, frames)
        self._move_pending(self._pending_moves())  # then the view resets
        message = f"Hung {len(hung)} view(s)."
        if skipped:
            message += (
                f" Left in place (view or side unknown, or a second copy): {', '.join(skipped)}."
            )
        self.form.controls.status.value = message

    def _pending_moves(self) -> list[tuple[Any, str, Any]]:
        """(pending layer, attribute, value) that place each pending layer of the chosen pair
        and the other breast on its view's present frame (an invisible layer left where a
        view was would widen the viewer's range)."""
        cc, mlo = self.form.cc_choice.value, self.form.mlo_choice.value
        if cc is None or mlo is None or cc is mlo:
            return []
        laterality = cc.metadata.get("laterality") or mlo.metadata.get("laterality")
        pairs = [(laterality, self.controller.frames())]
        pairs += self._other_pairs(laterality, (cc, mlo))
        moves = []
        for side, frames in pairs:
            for data, kwargs, layer_type in pending_topk_layers(frames, side):
                layer = self._pending_layer(kwargs["metadata"]["result_name"])
                if layer is not None:
                    moves.append(
                        (layer, "affine", kwargs["affine"])
                        if layer_type == "image"
                        else (layer, "data", data)
                    )
        return moves

    def _move_pending(self, moves: list[tuple[Any, str, Any]]) -> None:
        """Make one move per event-loop turn (each refreshes its layer), then fit the view."""
        if not viewer_open(self._viewer):
            return
        if not moves:
            self._viewer.reset_view()
            return
        layer, attribute, value = moves.pop(0)
        if layer in self._viewer.layers and layer.metadata.get("medvl_kind") == TOPK_PENDING_KIND:
            setattr(layer, attribute, value)
        later(self.form.native, 0, lambda: self._move_pending(moves))

    def _frames_of(self, outcome: TopKOutcome) -> dict[str, WorldFrame] | None:
        frames = {}
        for view, mammogram in (("CC", outcome.request.cc), ("MLO", outcome.request.mlo)):
            layer = next(
                (
                    layer
                    for _, layer in self.controller.mammograms()
                    if str(layer.metadata.get("path")) == str(mammogram.path)
                ),
                None,
            )
            if layer is None:
                return None
            frames[view] = WorldFrame.from_dict(layer.metadata["world_frame"])
        return frames

    def reset_window(self, _value: Any = None) -> None:
        """Every mammogram back on its DICOM VOI window (display values 0..1) and gray map."""
        mammograms = self.controller.mammograms()
        for _, layer in mammograms:
            layer.contrast_limits = (0.0, 1.0)
            layer.gamma = 1.0
        names = {
            layer.metadata["mammogram"].voi
            for _, layer in mammograms
            if layer.metadata.get("mammogram") is not None
        }
        self.form.controls.status.value = (
            f"Window reset to the file's VOI ({', '.join(sorted(names))})."
        )
