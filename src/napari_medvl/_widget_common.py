"""Pieces every MedVL dock widget shares: layer pickers, run/cancel/progress, layer upserts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from magicgui.widgets import Container, Label, ProgressBar, PushButton
from magicgui.widgets.bases import Widget

from napari_medvl._job_runner import JobRunner
from napari_medvl._layer_frame import LayerData
from napari_medvl._progress import Progress

if TYPE_CHECKING:
    import napari

__all__ = [
    "JobControls",
    "add_layer",
    "layers_of_kind",
    "one_refresh",
    "set_if_changed",
    "upsert_layer",
]


def layers_of_kind(viewer: napari.Viewer, kind: str) -> list[tuple[str, Any]]:
    """(name, layer) of the viewer's layers whose metadata says ``medvl_kind == kind``."""
    return [
        (layer.name, layer)
        for layer in viewer.layers
        if getattr(layer, "metadata", {}).get("medvl_kind") == kind
    ]


def add_layer(viewer: napari.Viewer, layer_data: LayerData) -> Any:
    """Add the layer to ``viewer``; a shapes layer's meshes then keep their shader programs
    when its rectangles are replaced (``_napari_compat.keep_mesh_shaders``) and draws no
    empty highlight (``hide_empty_highlights``), and while hidden
    the layer adds nothing to each draw (``skip_draw_updates_while_hidden``). Returns the
    layer."""
    from napari.layers import Layer

    from napari_medvl._napari_compat import (
        hide_empty_highlights,
        keep_mesh_shaders,
        skip_draw_updates_while_hidden,
    )

    layer = viewer.add_layer(Layer.create(*layer_data))
    if layer_data[2] == "shapes":
        keep_mesh_shaders(viewer, layer)
        hide_empty_highlights(viewer, layer)
    skip_draw_updates_while_hidden(layer)
    return layer


def upsert_layer(viewer: napari.Viewer, layer_data: LayerData) -> Any:
    """Add the layer, or replace the data and settings of a same-named layer of the same type.

    Re-running a prompt updates its layer in place instead of piling up copies. Plain image
    layers and rectangle shapes layers are updated in place (removing a layer makes napari
    collect garbage on the GUI thread, about a second each); other kinds are replaced.
    """
    data, kwargs, layer_type = layer_data
    name = kwargs.get("name")
    existing = next((layer for layer in viewer.layers if layer.name == name), None)
    if existing is not None and type(existing).__name__.lower() == layer_type:
        from napari_medvl._napari_compat import one_dims_update

        with one_dims_update(viewer, existing):
            updated = _update_in_place(existing, data, kwargs, layer_type)
        if updated:
            return existing
        viewer.layers.remove(existing)
    return add_layer(viewer, layer_data)


_IMAGE_SETTINGS = ("affine", "scale", "translate", "colormap", "opacity", "blending")
_SHAPES_SETTINGS = ("edge_width", "edge_color", "face_color", "opacity")


@contextmanager
def one_refresh(layer: Any) -> Iterator[None]:
    """Changes made to ``layer`` inside refresh it once, at the end.

    napari refreshes a layer on every new data, scale, contrast limit or feature table
    (slicing, thumbnail, extent, the viewer's dims: 5 - 10 ms each on the GUI thread, three
    for one new set of rectangles). Uses napari's ``Layer._block_refresh`` where it exists.
    """
    block = getattr(layer, "_block_refresh", None)
    if block is None:
        yield
        return
    with block():
        yield
    layer.refresh()


def set_if_changed(layer: Any, name: str, value: Any) -> None:
    """Set ``layer.<name>`` unless it holds ``value`` already: each assignment refreshes the
    layer on the GUI thread (a new colour map, for one, rebuilds its shader)."""
    import numpy as np

    current = getattr(layer, name)
    if name == "colormap":
        same = current.name == (value if isinstance(value, str) else value.name)
    elif name in ("edge_color", "face_color"):
        from napari.utils.colormaps.standardize_color import transform_color

        wanted = transform_color(value)  # [1, 4], or one colour per shape [N, 4]
        current = np.asarray(current)
        same = (
            len(current) > 0
            and wanted.shape[0] in (1, len(current))
            and bool(np.allclose(current, wanted))
        )
    else:
        if name == "affine":
            current = current.affine_matrix
        try:
            same = bool(np.all(np.asarray(current) == np.asarray(value)))
        except (TypeError, ValueError):
            same = False
    if not same:
        setattr(layer, name, value)


def _same_text(text: Any, wanted: dict[str, Any]) -> bool:
    """True when a shapes layer's text already shows ``wanted`` (napari's text dict)."""
    import numpy as np
    from napari.utils.colormaps.standardize_color import transform_color

    return (
        getattr(text.string, "format", None) == wanted.get("string")
        and bool(np.allclose(text.color.constant, transform_color(wanted.get("color", "k"))[0]))
        and text.visible == wanted.get("visible", True)
        and text.anchor == wanted.get("anchor", text.anchor)
        and text.size == wanted.get("size", text.size)
    )


def _update_in_place(layer: Any, data: Any, kwargs: dict[str, Any], layer_type: str) -> bool:
    """Give ``layer`` the new data and settings (one refresh); False when this kind must be
    replaced."""
    import numpy as np

    if layer_type == "image":
        if kwargs.get("multiscale") or kwargs.get("rgb") or layer.multiscale or layer.rgb:
            return False
        values = np.asarray(data)
        if values.ndim != layer.data.ndim:
            return False
        with one_refresh(layer):
            layer.data = values
            for key in _IMAGE_SETTINGS:
                if key in kwargs:
                    set_if_changed(layer, key, kwargs[key])
            if "contrast_limits" in kwargs:
                set_if_changed(layer, "contrast_limits", kwargs["contrast_limits"])
    elif layer_type == "shapes":
        if kwargs.get("shape_type", "rectangle") != "rectangle" or any(
            kind != "rectangle" for kind in layer.shape_type
        ):
            return False
        with one_refresh(layer):
            # one replacement (napari re-reads the viewer's extent on each data event: two
            # here, four for removing the old rectangles and adding the new ones)
            layer.data = [(np.asarray(shape), "rectangle") for shape in data]
            if "features" in kwargs:
                layer.features = kwargs["features"]
            for key in _SHAPES_SETTINGS:
                if key in kwargs:
                    set_if_changed(layer, key, kwargs[key])
            if "text" in kwargs and not _same_text(layer.text, kwargs["text"]):
                layer.text = kwargs["text"]
    else:
        return False
    layer.metadata.clear()
    layer.metadata.update(kwargs.get("metadata") or {})
    return True


class JobControls(Container[Widget]):
    """Run and Cancel buttons, a progress bar and a status line bound to one JobRunner."""

    def __init__(self, run_text: str = "Run") -> None:
        self.run_button = PushButton(text=run_text)
        self.cancel_button = PushButton(text="Cancel", enabled=False)
        self.progress = ProgressBar(value=0, min=0, max=1, visible=False)
        self.status = Label(value="")
        self.notice = Label(value="", visible=False)
        super().__init__(
            widgets=[
                Container(widgets=[self.run_button, self.cancel_button], layout="horizontal"),
                self.progress,
                self.status,
                self.notice,
            ],
            labels=False,
        )
        self.cancel_button.changed.connect(self._cancel_clicked)
        self.runner: JobRunner | None = None
        self._wrap_text_lines()

    def _wrap_text_lines(self) -> None:
        """Status and notice wrap inside the dock's width instead of widening the dock."""
        from qtpy.QtWidgets import QSizePolicy

        for label in (self.status.native, self.notice.native):
            label.setWordWrap(True)
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def bind(self, on_result: Any) -> JobRunner:
        """Create the widget's JobRunner, reporting into these controls."""
        self.runner = JobRunner(self.show_progress, on_result, self.set_running)
        return self.runner

    def _cancel_clicked(self) -> None:
        if self.runner is not None and self.runner.running:
            self.runner.cancel()
            self.status.value = "Cancelled."

    def set_notice(self, notice: str | None) -> None:
        """Show the model's notice (e.g. the demo-model notice) under the status line."""
        self.notice.value = notice or ""
        self.notice.visible = bool(notice)

    def set_running(self, running: bool) -> None:
        """The bar shows only once a job reports a total: an indeterminate bar animates 60
        times a second, and every frame repaints the window around the canvas."""
        self.cancel_button.enabled = running
        self.progress.visible = False
        if running:
            self.status.value = "Working..."
        elif self.runner is not None and self.runner.last_error is not None:
            from medvl_engine.errors import MedVLError

            error = self.runner.last_error
            sentence = str(error) if isinstance(error, MedVLError) else type(error).__name__
            self.status.value = f"Failed: {sentence}"
        elif self.status.value == "Working..." or self.status.value.endswith("..."):
            self.status.value = "Stopped."

    def bind_run_key(self, action: Any, dock: Any, sequence: str = "Ctrl+Return") -> Any:
        """Run ``action`` on ``sequence`` while focus is anywhere in ``dock`` (a Qt widget)."""
        from qtpy.QtCore import Qt
        from qtpy.QtGui import QKeySequence

        try:
            from qtpy.QtGui import QShortcut  # type: ignore[attr-defined]  # Qt6 only
        except ImportError:  # Qt5 keeps it in QtWidgets
            from qtpy.QtWidgets import QShortcut  # type: ignore[attr-defined]

        shortcut = QShortcut(QKeySequence(sequence), dock)
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(action)
        self.run_button.tooltip = f"{self.run_button.text} ({sequence.replace('Return', 'Enter')})"
        return shortcut

    def show_progress(self, report: Progress) -> None:
        if report.total > 0:
            self.progress.max = report.total
            self.progress.value = min(report.done, report.total)
            self.progress.visible = True
            self.status.value = f"{report.stage}: {report.done} / {report.total}"
        else:
            self.status.value = f"{report.stage}..."
