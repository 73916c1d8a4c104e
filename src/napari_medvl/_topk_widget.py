"""Dock widget "Mammogram TopK": a CC + MLO pair, a model, K -> ranked boxes, importance, readouts.

Also the reading-room habits: "Hang views" places the R CC, L CC, R MLO and L MLO layers in
the usual four-view layout with the chest walls facing (see :mod:`._mammo_hanging`; the
chest-wall side is measured off the GUI thread), and "Reset window" puts every mammogram
back on its DICOM VOI window (the display pipeline maps that window to 0..1). K's maximum
follows the chosen model's candidate patches. Ctrl+Enter runs.

The result layers of the chosen pair (importance maps, box rims, boxes, labels on both views)
are added empty and invisible as soon as the CC and MLO are chosen, one per event-loop turn
(``_mammo_layers.pending_topk_layers``): adding a napari layer holds the GUI thread 0.2 - 0.8 s,
so a result, first or not, only fills these layers (one per turn) and adds none.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

from magicgui.widgets import ComboBox, Container, PushButton, SpinBox, TextEdit

from napari_medvl._colorbar import ColorBar, legend_layer, shows_legend
from napari_medvl._event_turns import (
    GLYPH_RANKS,
    import_in_background,
    later,
    show_glyphs,
    viewer_open,
    when_all_ready,
)
from napari_medvl._glyph_prerender import prerender_glyphs
from napari_medvl._layers import MAMMOGRAM_KIND, LayerData, WorldFrame
from napari_medvl._mammo_hanging import hang_views
from napari_medvl._mammo_layers import (
    TOPK_PENDING_KIND,
    pending_topk_layers,
    readable_topk_layers,
)
from napari_medvl._model_picker import ModelPicker
from napari_medvl._notify import report_error
from napari_medvl._progress import Progress
from napari_medvl._topk_job import (
    TopKOutcome,
    TopKRequest,
    format_readouts,
    preload_topk_model,
    topk_job,
)
from napari_medvl._widget_common import JobControls, add_layer, layers_of_kind, upsert_layer

__all__ = ["DEFAULT_MODEL", "TopKWidget"]

DEFAULT_MODEL = "topksiglip-demo"
_K_LIMIT_UNKNOWN = 256
PREPARE_DELAY_MS = 50  # the dock's own layout and drawing come first, in their own turn
LEGEND_KINDS = ("topk",)  # medvl_kind of the importance maps whose colour bar the dock shows
MODEL_AFTER_LAYERS_MS = 600  # after the result layers' first draws (their shaders and glyphs)


def _measure_sides(
    items: list[tuple[Any, Any, str]], cancel: Any = None
) -> Generator[Progress, None, dict[Any, str]]:
    """Chest-wall side of each (layer, pixels, laterality), off the GUI thread."""
    from medvl_engine.io.mammo import chest_wall_side

    sides = {}
    for done, (layer, pixels, laterality) in enumerate(items):
        yield Progress("finding chest walls", done, len(items))
        sides[layer] = chest_wall_side(pixels, laterality)
    return sides


def _reopen_with_voi(
    items: list[tuple[Any, Any]], index: int, cancel: Any = None
) -> Generator[Progress, None, dict[Any, Any]]:
    """Each (layer, Mammogram) read again from its file with VOI ``index``, off the GUI thread."""
    from medvl_engine.io.mammo import open_mammogram

    reopened = {}
    for done, (layer, mammogram) in enumerate(items):
        yield Progress("applying VOI", done, len(items))
        reopened[layer] = open_mammogram(mammogram.path, voi_index=index)
    return reopened


class TopKWidget(Container):
    """TopK-Patch on a CC + MLO pair of mammogram layers."""

    def __init__(self, napari_viewer: Any) -> None:
        self._viewer = napari_viewer
        self.models: dict[str, Any] = {}
        self._loading: dict[str, threading.Event] = {}  # models loading in the background
        self.cc_choice = ComboBox(label="CC", choices=self._mammogram_choices, nullable=True)
        self.mlo_choice = ComboBox(label="MLO", choices=self._mammogram_choices, nullable=True)
        self.model = ModelPicker("topksiglip", DEFAULT_MODEL)
        self.k = SpinBox(label="K", value=15, min=1, max=_K_LIMIT_UNKNOWN)
        self.voi = ComboBox(label="VOI", choices=self._voi_choices)
        self.hang_button = PushButton(text="Hang views (R | L, CC over MLO)")
        self.reset_window_button = PushButton(text="Reset window (DICOM VOI)")
        self.controls = JobControls(run_text="Run TopK")
        self.readouts = TextEdit(label="zero-shot", value="")
        self.readouts.native.setReadOnly(True)
        super().__init__(
            widgets=[
                self.cc_choice,
                self.mlo_choice,
                self.model,
                self.k,
                self.voi,
                Container(
                    widgets=[self.hang_button, self.reset_window_button],
                    layout="horizontal",
                    labels=False,
                ),
                self.controls,
                self.readouts,
            ]
        )
        self.colorbar = ColorBar()
        self.native.layout().addWidget(self.colorbar)
        self._pandas = import_in_background("pandas")  # napari's shapes layers need it
        self._glyphs = prerender_glyphs(self.native, napari_viewer)  # for the rank labels
        self._queued: list[LayerData] = []  # result data waiting for its turn
        self._preparing: list[LayerData] = []  # pending layers waiting for their turn
        self._adding_pending = False  # one chain of turns adds them, however often prepared
        self.last_outcome: TopKOutcome | None = None
        self.outcomes: dict[str | None, TopKOutcome] = {}
        self.runner = self.controls.bind(self._show_outcome)
        self._hang_runner = JobControls().bind(self._apply_hanging)
        self._voi_runner = JobControls().bind(self._apply_voi)
        self.controls.run_button.changed.connect(self.run)
        self.hang_button.changed.connect(self.hang)
        self.reset_window_button.changed.connect(self.reset_window)
        self.model.combo.changed.connect(self._model_changed)
        self.voi.changed.connect(self.choose_voi)
        self.cc_choice.changed.connect(self._refresh_voi)
        self.cc_choice.changed.connect(self._prepare_layers_soon)
        self.mlo_choice.changed.connect(self._prepare_layers_soon)
        self.controls.bind_run_key(self.run, self.native)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self._refresh_choices)
        napari_viewer.layers.selection.events.active.connect(self._legend_for_active)
        shown = legend_layer(napari_viewer, LEGEND_KINDS)  # a map opened before the dock
        if shown is not None:
            self._show_existing(shown)
        self._refresh_choices()
        self._model_changed()
        self._prepare_layers_soon()

    def _legend_for_active(self, event: Any) -> None:
        """The colour bar follows the importance map the user selects (the other breast's)."""
        if shows_legend(event.value, LEGEND_KINDS):
            self._show_existing(event.value)

    def _show_existing(self, importance: Any) -> None:
        """The colour bar and zero-shot readouts of a TopK result's importance map that is
        in the viewer already (shown by the demo, or selected by the user)."""
        self.colorbar.show_overlay(importance)
        result = importance.metadata.get("topk_result")
        if getattr(result, "zero_shot", None):
            self.readouts.value = format_readouts(result.zero_shot)

    # --- choices -------------------------------------------------------------------------
    def _mammogram_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return layers_of_kind(self._viewer, MAMMOGRAM_KIND)

    def _refresh_choices(self, _event: Any = None) -> None:
        self._refresh_voi()
        for choice, view in ((self.cc_choice, "CC"), (self.mlo_choice, "MLO")):
            choice.reset_choices()
            if choice.value is None:
                matching = [
                    layer
                    for _, layer in self._mammogram_choices()
                    if layer.metadata.get("view") == view
                ]
                if matching:
                    choice.value = matching[-1]

    def _voi_choices(self, _widget: Any = None) -> list[tuple[str, int]]:
        """The VOI transforms the chosen CC file offers (window centre/width, VOI LUTs)."""
        layer = self.cc_choice.value
        mammogram = layer.metadata.get("mammogram") if layer is not None else None
        names = list(getattr(mammogram, "voi_choices", None) or [])
        if not names:
            return [(f"the file's display ({getattr(mammogram, 'voi', 'none')})", 0)]
        return [(name, index) for index, name in enumerate(names)]

    def _refresh_voi(self, _value: Any = None) -> None:
        with self.voi.changed.blocked():
            self.voi.reset_choices()

    def choose_voi(self, index: Any = None) -> Any:
        """Re-read every DICOM mammogram with VOI ``index`` (where it has one), off the GUI
        thread; returns the worker, or None when no open view offers that VOI."""
        index = int(self.voi.value if index is None else index)
        items = [
            (layer, layer.metadata["mammogram"])
            for _, layer in self._mammogram_choices()
            if len(getattr(layer.metadata.get("mammogram"), "voi_choices", [])) > index
        ]
        if not items:
            return None
        return self._voi_runner.start(_reopen_with_voi, items, index)

    def _apply_voi(self, reopened: dict[Any, Any]) -> None:
        for layer, mammogram in reopened.items():
            layer.data = mammogram.pixels
            layer.metadata["mammogram"] = mammogram
            layer.contrast_limits = (0.0, 1.0)
        names = sorted({mammogram.voi for mammogram in reopened.values()})
        self.controls.status.value = f"VOI applied to {len(reopened)} view(s): {', '.join(names)}."

    def _model_changed(self, _value: Any = None) -> None:
        """K's maximum follows the model's candidate patches; the status line shows its notice."""
        from medvl_engine.demo_models import demo_notice_for
        from medvl_engine.model_folders import topk_candidates

        candidates = topk_candidates(self.model.value)
        self.set_k_limit(candidates or _K_LIMIT_UNKNOWN)
        self.controls.set_notice(demo_notice_for(self.model.value))

    def set_k_limit(self, candidates: int) -> None:
        """Cap K at ``candidates`` (lowering the current K when above)."""
        if self.k.value > candidates:
            self.k.value = candidates
        self.k.max = candidates
        self.k.tooltip = f"patches to mark, at most the model's {candidates} candidates"

    # --- run -----------------------------------------------------------------------------
    def request(self) -> TopKRequest | None:
        from medvl_engine.errors import ConfigError

        cc, mlo = self.cc_choice.value, self.mlo_choice.value
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
            model=self.model.value.strip() or DEFAULT_MODEL,
            k=int(self.k.value),
            frames=self._frames(),
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
            self.controls.status.value = f"Refused: {error}"
            report_error(error)
            return None
        return self.runner.start(topk_job, request, self.models, self._loading)

    def _frames(self) -> dict[str, WorldFrame]:
        """World frames of the chosen CC and MLO layers."""
        cc, mlo = self.cc_choice.value, self.mlo_choice.value
        return {
            "CC": WorldFrame.from_dict(cc.metadata["world_frame"]),
            "MLO": WorldFrame.from_dict(mlo.metadata["world_frame"]),
        }

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
            )
        self._queued.extend(layers)
        if len(self._queued) == len(layers):
            self._fill_next_layer()

    @property
    def drawing(self) -> bool:
        """True while result layers are still being filled (one per event-loop turn)."""
        return bool(self._queued)

    def _fill_next_layer(self) -> None:
        """Fill one result layer (its pending layer, renamed, or the same-named layer of an
        earlier result; added only when neither exists), then let the event loop run before
        the next one."""
        if not viewer_open(self._viewer):
            self._queued.clear()
        if not self._queued:
            return
        layer_data = self._queued.pop(0)
        name = layer_data[1]["name"]
        waiting = self._pending_layer(name)
        if waiting is not None and name not in self._viewer.layers:
            waiting.name = name
        upsert_layer(self._viewer, layer_data)
        if self._queued:
            later(self.native, 0, self._fill_next_layer)

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

    def _prepare_layers_soon(self, _value: Any = None) -> None:
        """Add the chosen pair's result layers, empty, over the next event-loop turns."""
        later(self.native, PREPARE_DELAY_MS, self._prepare_layers)

    def _prepare_layers(self) -> None:
        cc, mlo = self.cc_choice.value, self.mlo_choice.value
        if cc is None or mlo is None or cc is mlo:
            return
        laterality = cc.metadata.get("laterality") or mlo.metadata.get("laterality")
        self._preparing = [
            layer_data
            for layer_data in pending_topk_layers(self._frames(), laterality)
            if layer_data[1]["metadata"]["result_name"] not in self._viewer.layers
            and self._pending_layer(layer_data[1]["metadata"]["result_name"]) is None
        ]
        if not self._adding_pending:
            self._adding_pending = True
            self._add_next_pending()

    def _add_next_pending(self) -> None:
        """Add (or take over) one pending layer per event-loop turn; shapes layers wait for
        pandas, imported in the background. A result queued meanwhile fills what exists and
        adds the rest itself."""
        if not self._preparing or self._queued or not viewer_open(self._viewer):
            if self._adding_pending and not self._queued:  # the pair's layers are all there
                later(self.native, MODEL_AFTER_LAYERS_MS, self._preload_model)
            self._adding_pending = False
            return
        shapes_need = [self._pandas, self._glyphs]
        if self._preparing[0][2] == "shapes" and not all(e.is_set() for e in shapes_need):
            when_all_ready(self.native, shapes_need, self._add_next_pending)
            return
        layer_data = self._preparing.pop(0)
        name = layer_data[1]["metadata"]["result_name"]
        if name in self._viewer.layers or self._pending_layer(name) is not None:
            layer = None
        else:
            layer = self._take_over_pending(layer_data) or add_layer(self._viewer, layer_data)
        if layer is not None and name.split(" ")[-2] == "labels":
            show_glyphs(self.native, self._viewer, layer, TOPK_PENDING_KIND, GLYPH_RANKS[1:])
        later(self.native, 0, self._add_next_pending)

    def _preload_model(self) -> None:
        """Load the chosen model in the background once the pair's result layers are added
        and drawn (a thread loading a model holds the GIL in stretches: not while napari adds
        layers), so that the first Run starts at the views."""
        if viewer_open(self._viewer) and not self.runner.running:
            name = self.model.value.strip() or DEFAULT_MODEL
            preload_topk_model(self.models, self._loading, name)

    def _take_over_pending(self, layer_data: LayerData) -> Any:
        """A pending layer of another pair (never filled) in the same role and view, renamed
        and moved to this pair's view; None when there is none."""
        data, kwargs, layer_type = layer_data
        role = kwargs["metadata"]["result_name"].split(" ")[-2:]
        for layer in self._viewer.layers:
            metadata = layer.metadata
            if (
                metadata.get("medvl_kind") == TOPK_PENDING_KIND
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

    def _show_outcome(self, outcome: TopKOutcome) -> None:
        from medvl_engine.demo_models import demo_notice_for

        self.last_outcome = outcome
        candidates = self.models[outcome.request.model].geometry.num_candidates
        self.set_k_limit(int(candidates))
        self.outcomes[outcome.breast.laterality] = outcome
        self._draw(outcome, self._frames_of(outcome) or self._frames())
        self.readouts.value = format_readouts(outcome.result.zero_shot)
        notice = demo_notice_for(outcome.request.model)
        laterality = outcome.breast.laterality
        prefix = f"TopK {laterality}" if laterality else "TopK"
        for _, kwargs, _ in outcome.layers or []:
            if kwargs["name"] == f"{prefix} importance CC":
                self.colorbar.show_layer(kwargs["metadata"], kwargs["contrast_limits"])
        self.controls.set_notice(notice)
        status = f"Top {outcome.request.k} patches shown ({outcome.request.model})."
        self.controls.status.value = f"{status} ({notice})" if notice else status

    # --- reading-room layout ----------------------------------------------------------------
    def hang(self, _value: Any = None) -> Any:
        """Measure chest-wall sides off the GUI thread, then hang the views; returns the worker."""
        items = [
            (layer, layer.data, layer.metadata.get("laterality"))
            for _, layer in self._mammogram_choices()
            if layer.metadata.get("chest_wall") not in ("left", "right")
        ]
        return self._hang_runner.start(_measure_sides, items)

    def _apply_hanging(self, sides: dict[Any, str]) -> None:
        for layer, side in sides.items():
            layer.metadata["chest_wall"] = side
        hung, skipped = hang_views(self._viewer)
        for outcome in self.outcomes.values():  # boxes follow their views
            frames = self._frames_of(outcome)
            if frames is not None:
                self._draw(outcome, frames)
        self._viewer.reset_view()
        message = f"Hung {len(hung)} view(s)."
        if skipped:
            message += (
                f" Left in place (view or side unknown, or a second copy): {', '.join(skipped)}."
            )
        self.controls.status.value = message

    def _frames_of(self, outcome: TopKOutcome) -> dict[str, WorldFrame] | None:
        frames = {}
        for view, mammogram in (("CC", outcome.request.cc), ("MLO", outcome.request.mlo)):
            layer = next(
                (
                    layer
                    for _, layer in self._mammogram_choices()
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
        for _, layer in self._mammogram_choices():
            layer.contrast_limits = (0.0, 1.0)
            layer.gamma = 1.0
        names = {
            layer.metadata["mammogram"].voi
            for _, layer in self._mammogram_choices()
            if layer.metadata.get("mammogram") is not None
        }
        self.controls.status.value = f"Window reset to the file's VOI ({', '.join(sorted(names))})."
