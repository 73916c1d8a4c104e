"""The "Segment by prompts" dock's presenter: the area table, the legend and, per slide, the
class map as a labels layer (``tissue map: <slide>``) and its regions as a shapes layer
(``regions: <slide>``), both updated in place by a new run (``_segment_layers``). A run whose
new classes' prompt ensembles must be encoded first shows the map of every class, the new ones
from their first wording (the job's FirstLook), then the complete map.

Painting on the labels layer recounts the areas: every paint stroke (napari's
``events.paint``), and every other change of its cells (an undo, new data: napari's
``set_data`` and ``data`` events, let through only when the cells differ from those counted
last) starts a recount of an edited copy of the labels off the GUI thread (the
regions are traced again, which takes longer than a stroke on a large map); a newer stroke
supersedes a recount still running. The table, the outlines and the layer's ``segmentation``
(what an export of the layer writes) then follow the edited map. The outlines are not the
editable truth (``_segment_layers``): an edit of a polygon is pointed back to the labels
layer in the status line, and the next recount draws the outlines from the labels again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from napari_medvl._job_runner import JobRunner
from napari_medvl._segment_form import SegmentForm
from napari_medvl._segment_job import (
    FirstLook,
    RecountOutcome,
    SegmentOutcome,
    format_areas,
    recount_job,
)
from napari_medvl._segment_layers import (
    class_rgba,
    display_labels,
    label_colormap,
    map_layer_name,
    regions_layer,
    regions_layer_name,
    update_regions_layer,
)
from napari_medvl._slide_layers import slide_frame
from napari_medvl._widget_common import add_layer, one_refresh, set_if_changed

if TYPE_CHECKING:
    import napari

__all__ = ["SegmentPresenter", "label_colormap"]


def _checksum(labels: Any) -> int:
    """CRC-32 of a labels array's cells (a millisecond per megabyte)."""
    import zlib

    return zlib.crc32(np.ascontiguousarray(labels).data)


class SegmentPresenter:
    """Area table, legend, tissue-map and regions layers and status of one segmentation
    dock; ``edits`` counts the paint strokes recounted or being recounted."""

    def __init__(self, viewer: napari.Viewer, form: SegmentForm) -> None:
        self._viewer = viewer
        self.form = form
        self.last_outcome: SegmentOutcome | None = None
        self.edits = 0
        self._drawing = False
        self._pending = False
        self._counted: int | None = None  # checksum of the cells the table counts
        self._watched: set[int] = set()
        self._colormaps: dict[int, Any] = {}
        self.recounts = JobRunner(lambda _report: None, self._recounted, lambda _running: None)

    def layer_name(self, outcome: SegmentOutcome | None = None) -> str:
        """Name of the slide's map layer: ``tissue map: <slide file>``."""
        outcome = outcome or self.last_outcome
        return map_layer_name(outcome.request.slide if outcome is not None else None)

    def regions_name(self, outcome: SegmentOutcome | None = None) -> str:
        """Name of the slide's regions layer: ``regions: <slide file>``."""
        outcome = outcome or self.last_outcome
        return regions_layer_name(outcome.request.slide if outcome is not None else None)

    def show_outcome(self, outcome: SegmentOutcome) -> None:
        """Show the map and regions layers, the area table, the legend and a status line
        (with the notes, if any)."""
        from medvl_engine.demo_models import demo_notice_for

        self.recounts.cancel()  # a recount of the previous map no longer applies
        self.last_outcome = outcome
        result = outcome.result
        self._draw(outcome)
        notice = demo_notice_for(outcome.request.model)
        self.form.controls.set_notice(notice)
        status = " ".join(result.notes) or (
            f"{len(result.regions)} regions of {len(result.names)} classes "
            f"({outcome.request.model})."
        )
        self.form.controls.status.value = f"{status} ({notice})" if notice else status

    def show_first_look(self, look: FirstLook) -> None:
        """Show the map of every class, the new ones from their first wording, while their
        prompt ensembles are encoded (the complete map follows); the status line names them."""
        self.show_outcome(look.outcome)
        pending = ", ".join(repr(name) for name in look.pending)
        self.form.controls.status.value = (
            f"First look, {pending} from one wording: encoding the prompt ensemble..."
        )

    def _draw(self, outcome: SegmentOutcome, map_data: bool = True) -> None:
        """Table, legend, labels layer and regions layer of ``outcome`` (in place when the
        slide's layers are open); ``map_data`` False keeps the labels the layer holds (the
        user's, which may have moved on since a recount began)."""
        from medvl_engine.demo_models import demo_notice_for

        result = outcome.result
        mapped = result.class_map
        self.form.table.value = format_areas(result.table)
        self.form.legend.show_classes(mapped.label_names[1:], class_rgba(len(mapped.names)))
        metadata = {
            "medvl_kind": "segmentation",
            "segmentation": result,
            "label_names": mapped.label_names,
            "slide": outcome.request.slide,
            "model": outcome.request.model,
            "demo_notice": demo_notice_for(outcome.request.model),
            "world_frame": slide_frame(mapped.mpp).as_dict(),
        }
        viewer: Any = self._viewer  # napari generates add_labels at run time
        name = self.layer_name(outcome)
        self._drawing = True
        try:
            layer: Any = next((lay for lay in viewer.layers if lay.name == name), None)
            if layer is not None:
                with one_refresh(layer):
                    if map_data:
                        layer.data = display_labels(mapped.labels)
                        self._counted = _checksum(layer.data)
                    set_if_changed(layer, "scale", mapped.scale)
                    set_if_changed(layer, "translate", mapped.translate)
                    colormap = self._colormap(len(mapped.names))
                    if layer.colormap is not colormap:
                        layer.colormap = colormap
                layer.metadata.update(metadata)
            else:
                layer = viewer.add_labels(
                    display_labels(mapped.labels),
                    name=name,
                    opacity=0.5,
                    scale=mapped.scale,
                    translate=mapped.translate,
                    units=("um", "um") if mapped.units == "um" else ("pixel", "pixel"),
                    colormap=self._colormap(len(mapped.names)),
                    metadata=metadata,
                )
                self._counted = _checksum(layer.data)
            self._watch_labels(layer)
            shapes_data = regions_layer(result, self.regions_name(outcome))
            shapes_data[1]["metadata"]["slide"] = outcome.request.slide
            shapes: Any = next(
                (lay for lay in viewer.layers if lay.name == shapes_data[1]["name"]), None
            )
            if shapes is not None and type(shapes).__name__ == "Shapes":
                update_regions_layer(shapes, shapes_data)
            else:
                shapes = add_layer(viewer, shapes_data)
                shapes.events.data.connect(self._outline_edited)
        finally:
            self._drawing = False

    def _colormap(self, count: int) -> Any:
        """The label colour map of ``count`` classes, one object per count: napari keeps a
        colour map's texture with it, so showing a class count again costs nothing."""
        if count not in self._colormaps:
            self._colormaps[count] = label_colormap(count)
        return self._colormaps[count]

    def _watch_labels(self, layer: Any) -> None:
        """Recount on each paint stroke (and on data the user sets) of ``layer``, once."""
        if id(layer) in self._watched:
            return
        self._watched.add(id(layer))
        for event in (layer.events.paint, layer.events.data, layer.events.set_data):
            event.connect(self._soon)

    def _soon(self, _event: Any = None) -> None:
        """Recount on the next event-loop turn: napari says "paint" before it writes the
        stroke's last cells, and one turn gathers the events of one edit."""
        if self._drawing or self._pending:
            return
        from qtpy.QtCore import QTimer

        self._pending = True
        QTimer.singleShot(0, self.labels_edited)

    def labels_edited(self, _event: Any = None) -> Any:
        """Start the recount of the map layer's labels (after a paint stroke); returns the
        worker, or None when there is no result or the change is the dock's own."""
        self._pending = False
        outcome = self.last_outcome
        if self._drawing or outcome is None:
            return None
        layer = next((lay for lay in self._viewer.layers if lay.name == self.layer_name()), None)
        if layer is None or _checksum(layer.data) == self._counted:
            return None
        self.edits += 1
        labels = np.array(layer.data, copy=True)  # the GUI thread may paint on while it runs
        self._counted = _checksum(labels)
        return self.recounts.start(recount_job, outcome.result, labels, self.edits)

    def _recounted(self, recounted: RecountOutcome) -> None:
        """Show the recounted table and outlines (the labels layer already shows the edit)."""
        outcome = self.last_outcome
        if outcome is None or recounted.edit != self.edits:
            return
        result = recounted.result
        self.last_outcome = SegmentOutcome(outcome.request, result)
        self._draw(self.last_outcome, map_data=False)
        edited = " ".join(result.notes)
        self.form.controls.status.value = (
            f"Areas recounted from the edited map: {len(result.regions)} regions. {edited}"
        ).strip()

    def _outline_edited(self, event: Any) -> None:
        """Point an edit of an outline to the labels layer, which holds the classes."""
        if self._drawing or getattr(event, "action", None) not in ("added", "changed", "removed"):
            return
        self.form.controls.status.value = (
            f"The areas count the cells of '{self.layer_name()}': paint there to change a "
            "class; the outlines are drawn from it again after each stroke."
        )
