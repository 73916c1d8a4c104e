"""Dock widget "Export": a heatmap or TopK layer -> PNG, QuPath GeoJSON, CSV, TIFF or NPZ."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from magicgui.types import FileDialogMode
from magicgui.widgets import ComboBox, Container, FileEdit
from magicgui.widgets.bases import Widget

from napari_medvl._export_job import (
    HEATMAP_SUFFIXES,
    TOPK_SUFFIXES,
    export_job,
    exportable,
    proposed_export_path,
)
from napari_medvl._notify import report_info
from napari_medvl._widget_common import JobControls

if TYPE_CHECKING:
    import napari

__all__ = ["ExportWidget"]


class ExportWidget(Container[Widget]):
    """Writes the chosen overlay layer with the engine's exporters, by file suffix."""

    def __init__(self, napari_viewer: napari.Viewer) -> None:
        self._viewer = napari_viewer
        self.layer_choice = ComboBox(label="layer", choices=self._choices, nullable=True)
        self.path = FileEdit(
            label="file",
            mode=FileDialogMode.OPTIONAL_FILE,
            filter="*" + " *".join(HEATMAP_SUFFIXES),
            value=Path.home() / "heatmap.geojson",
        )
        self._proposed: Path | None = Path(str(self.path.value))
        self.controls = JobControls(run_text="Export")
        super().__init__(widgets=[self.layer_choice, self.path, self.controls])
        self.last_written: Path | None = None
        self.runner = self.controls.bind(self._written)
        self.controls.run_button.changed.connect(self.run)
        layer_events = napari_viewer.layers.events
        for event in (layer_events.inserted, layer_events.removed, layer_events.renamed):
            event.connect(self._refresh_choices)
        layer_events.inserted.connect(self._watch_metadata)
        for layer in napari_viewer.layers:
            layer.events.metadata.connect(self._refresh_choices)
        self.layer_choice.changed.connect(self._propose_path)
        self._refresh_choices()

    def _propose_path(self, _value: Any = None) -> None:
        """Name the file after the chosen layer, beside its input image, keeping the suffix
        when the layer can be written with it; a path the user typed stays."""
        layer = self.layer_choice.value
        current = Path(str(self.path.value))
        if layer is None or (self._proposed is not None and current != self._proposed):
            return
        kinds = HEATMAP_SUFFIXES if layer.metadata.get("medvl_kind") == "heatmap" else TOPK_SUFFIXES
        suffix = current.suffix if current.suffix.lower() in kinds else ".geojson"
        self._proposed = proposed_export_path(layer.name, dict(layer.metadata), suffix)
        self.path.value = self._proposed

    def _choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return [
            (layer.name, layer)
            for layer in self._viewer.layers
            if exportable(getattr(layer, "metadata", {}))
        ]

    def _watch_metadata(self, event: Any) -> None:
        """A docked result fills a pending layer by setting its metadata (a TopK result, then
        renamed): the list of exportable layers follows it."""
        event.value.events.metadata.connect(self._refresh_choices)

    def _refresh_choices(self, _event: Any = None) -> None:
        """The exportable layers; the last one is chosen when none is, and the path follows the
        chosen layer's name until the user types one."""
        self.layer_choice.reset_choices()
        if self.layer_choice.value is None and self.layer_choice.choices:
            self.layer_choice.value = self.layer_choice.choices[-1]
        self._propose_path()

    def run(self, _value: Any = None) -> Any:
        """Start writing the chosen layer to the chosen file; returns the worker or None."""
        from medvl_engine.errors import ExportError
        from napari_medvl._notify import report_error

        layer = self.layer_choice.value
        if layer is None:
            report_error(
                ExportError(
                    "Nothing to export: run the heatmap or TopK widget first, then choose its "
                    "layer here."
                )
            )
            return None
        return self.runner.start(export_job, dict(layer.metadata), Path(str(self.path.value)))

    def _written(self, path: Path) -> None:
        self.last_written = Path(path)
        self.controls.status.value = f"Wrote {Path(path).name}."
        report_info(f"Wrote {path}")
