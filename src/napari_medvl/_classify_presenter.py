"""The "Slide classification" dock's presenter: the ranking, and the attention map of the class
chosen under "show attention of" as one image layer per slide, ``attention: <slide>``, updated in
place when another class or a new run is shown."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._classify_form import ClassifyForm
from napari_medvl._classify_job import ClassifyOutcome, format_ranking
from napari_medvl._slide_layers import slide_frame

if TYPE_CHECKING:
    import napari

__all__ = ["ClassifyPresenter", "attention_colormap"]


def attention_colormap() -> Any:
    """The shared sequential map (attention weights are never negative) as a napari Colormap."""
    from napari.utils.colormaps import Colormap

    from medvl_engine.colormaps import SEQUENTIAL_MAP, colormap_lut

    return Colormap(colors=colormap_lut(SEQUENTIAL_MAP), name=f"medvl {SEQUENTIAL_MAP}")


class ClassifyPresenter:
    """Ranking, attention layer, colour bar and status of one classification dock."""

    def __init__(self, viewer: napari.Viewer, form: ClassifyForm) -> None:
        self._viewer = viewer
        self.form = form
        self.last_outcome: ClassifyOutcome | None = None

    def class_choices(self) -> list[str]:
        """Classes of the last result, best first."""
        if self.last_outcome is None:
            return []
        return [name for name, _ in self.last_outcome.classification.ranked]

    def show_outcome(self, outcome: ClassifyOutcome) -> None:
        """List the ranking and show the predicted class's attention."""
        from medvl_engine.demo_models import demo_notice_for

        self.last_outcome = outcome
        classification = outcome.classification
        self.form.ranking.value = format_ranking(classification)
        self.form.shown_class.reset_choices()
        self.form.shown_class.value = classification.predicted
        self.show_class(classification.predicted)
        notice = demo_notice_for(outcome.request.model)
        self.form.controls.set_notice(notice)
        status = (
            f"Predicted: {classification.predicted} (tau_attn {classification.tau_attn:g}, "
            f"{outcome.request.model})."
        )
        self.form.controls.status.value = f"{status} ({notice})" if notice else status

    def layer_name(self, outcome: ClassifyOutcome | None = None) -> str:
        """Name of the slide's attention layer: ``attention: <slide file>``."""
        outcome = outcome or self.last_outcome
        slide = outcome.request.slide if outcome is not None else None
        return f"attention: {Path(str(slide.path)).name}" if slide is not None else "attention"

    def show_class(self, name: Any) -> None:
        """Put class ``name``'s attention map into the slide's attention layer (in place)."""
        outcome = self.last_outcome
        if outcome is None or name is None or name not in outcome.heatmaps:
            return
        from medvl_engine.colormaps import SEQUENTIAL_MAP
        from medvl_engine.demo_models import demo_notice_for

        heatmap = outcome.heatmaps[name]
        score = dict(outcome.classification.ranked)[name]
        layer_name = self.layer_name(outcome)
        metadata = {
            "colormap": SEQUENTIAL_MAP,
            "value_range": tuple(float(v) for v in heatmap.value_range),
            "demo_notice": demo_notice_for(outcome.request.model),
            "medvl_kind": "heatmap",
            "prompt": f"attention of {name}",
            "mode": "attention",
            "normalize": "none",
            "heatmap": heatmap,
            "top_patches": None,
            "feature_store": outcome.store,
            "slide": outcome.request.slide,
            "class_score": score,
            "model": outcome.request.model,
        }
        limits = tuple(float(v) for v in heatmap.value_range)
        existing = [layer for layer in self._viewer.layers if layer.name == layer_name]
        layer: Any
        if existing:
            layer = existing[0]
            layer.data = heatmap.grid
            layer.scale = heatmap.scale
            layer.translate = heatmap.translate
            layer.contrast_limits = limits
            layer.metadata.update(metadata)
        else:
            metadata["world_frame"] = slide_frame(outcome.request.slide.mpp).as_dict()
            layer = self._viewer.add_image(
                heatmap.grid,
                name=layer_name,
                colormap=attention_colormap(),
                opacity=0.6,
                blending="translucent",
                contrast_limits=limits,
                interpolation2d="nearest",
                units=("um", "um") if heatmap.units == "um" else ("pixel", "pixel"),
                scale=heatmap.scale,
                translate=heatmap.translate,
                metadata=metadata,
            )
        self.form.colorbar.show_layer(layer.metadata, layer.contrast_limits)
        self.form.controls.status.value = (
            f"Showing attention of {name} (score {score:.4f}; alpha x N, 1 = uniform)."
        )
