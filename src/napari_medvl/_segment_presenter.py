"""The "Segment by prompts" dock's presenter: the area table, and the class map as one labels
layer per slide, ``tissue map: <slide>`` (no tissue transparent, each class its export colour,
"uncertain" grey), updated in place by a new run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._segment_form import SegmentForm
from napari_medvl._segment_job import SegmentOutcome, format_areas
from napari_medvl._slide_layers import slide_frame

if TYPE_CHECKING:
    import napari

__all__ = ["SegmentPresenter", "label_colormap"]


def label_colormap(count: int) -> Any:
    """A napari DirectLabelColormap: 0 transparent, labels 1..count the classes' colours of the
    exports, count + 1 ("uncertain") grey."""
    from napari.utils.colormaps import DirectLabelColormap

    from medvl_engine.export.regions import class_colors

    colours: dict[int | None, tuple[float, float, float, float]] = {
        None: (0.0, 0.0, 0.0, 0.0),
        0: (0.0, 0.0, 0.0, 0.0),
    }
    for label, (r, g, b) in enumerate(class_colors(count), start=1):
        colours[label] = (r / 255, g / 255, b / 255, 1.0)
    return DirectLabelColormap(color_dict=colours)


class SegmentPresenter:
    """Area table, tissue-map layer and status of one segmentation dock."""

    def __init__(self, viewer: napari.Viewer, form: SegmentForm) -> None:
        self._viewer = viewer
        self.form = form
        self.last_outcome: SegmentOutcome | None = None

    def layer_name(self, outcome: SegmentOutcome | None = None) -> str:
        """Name of the slide's map layer: ``tissue map: <slide file>``."""
        outcome = outcome or self.last_outcome
        slide = outcome.request.slide if outcome is not None else None
        return f"tissue map: {Path(str(slide.path)).name}" if slide is not None else "tissue map"

    def show_outcome(self, outcome: SegmentOutcome) -> None:
        """Show the map layer, the area table and a status line (with the notes, if any)."""
        from medvl_engine.demo_models import demo_notice_for

        self.last_outcome = outcome
        result = outcome.result
        mapped = result.class_map
        self.form.table.value = format_areas(result.table)
        name = self.layer_name(outcome)
        metadata = {
            "medvl_kind": "segmentation",
            "segmentation": result,
            "label_names": mapped.label_names,
            "slide": outcome.request.slide,
            "model": outcome.request.model,
            "demo_notice": demo_notice_for(outcome.request.model),
        }
        viewer: Any = self._viewer  # napari generates add_labels at run time
        existing = [layer for layer in viewer.layers if layer.name == name]
        if existing:
            layer: Any = existing[0]
            layer.data = mapped.labels
            layer.scale = mapped.scale
            layer.translate = mapped.translate
            layer.colormap = label_colormap(len(mapped.names))
            layer.metadata.update(metadata)
        else:
            metadata["world_frame"] = slide_frame(outcome.request.slide.mpp).as_dict()
            viewer.add_labels(
                mapped.labels,
                name=name,
                opacity=0.5,
                scale=mapped.scale,
                translate=mapped.translate,
                units=("um", "um") if mapped.units == "um" else ("pixel", "pixel"),
                colormap=label_colormap(len(mapped.names)),
                metadata=metadata,
            )
        notice = demo_notice_for(outcome.request.model)
        self.form.controls.set_notice(notice)
        status = " ".join(result.notes) or (
            f"{len(result.regions)} regions of {len(mapped.names)} classes "
            f"({outcome.request.model})."
        )
        self.form.controls.status.value = f"{status} ({notice})" if notice else status
