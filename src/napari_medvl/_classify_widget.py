"""Dock widget "Slide classification": LIMIT zero-shot classes, ranked, with their attention maps.

The user picks a slide layer, a model and class prompts (typed one per line, or an organ
preset); Run scores every class (Eq. 5: the best cosine between the class embedding and the
slide embedding that class's attention pools). The ranking is listed in the dock; the
attention map of the class chosen under "show attention of" is one image layer per slide,
``attention: <slide>``, updated in place when another class or a new run is shown. Work runs
off the GUI thread; Ctrl+Enter runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from magicgui.widgets import ComboBox, Container, FileEdit, FloatSpinBox, TextEdit

from napari_medvl._classify_job import (
    ClassifyCache,
    ClassifyOutcome,
    ClassifyRequest,
    classify_job,
    format_ranking,
)
from napari_medvl._colorbar import ColorBar
from napari_medvl._layers import SLIDE_KIND, slide_frame
from napari_medvl._model_picker import ModelPicker
from napari_medvl._notify import report_error
from napari_medvl._widget_common import JobControls, layers_of_kind

__all__ = ["CUSTOM", "ClassifyWidget", "attention_colormap"]

CUSTOM = "custom (type below)"
DEFAULT_MODEL = "medvl-demo"
DEFAULT_PRESET = "synthetic demo slide"


def attention_colormap() -> Any:
    """The shared sequential map (attention weights are never negative) as a napari Colormap."""
    from napari.utils.colormaps import Colormap

    from medvl_engine.colormaps import SEQUENTIAL_MAP, colormap_lut

    return Colormap(colors=colormap_lut(SEQUENTIAL_MAP), name=f"medvl {SEQUENTIAL_MAP}")


def _parse_classes(text: str) -> tuple[str, ...]:
    """One class per line (or separated by ';'), stripped, empties and repeats dropped."""
    seen: list[str] = []
    for part in text.replace(";", "\n").splitlines():
        name = part.strip()
        if name and name not in seen:
            seen.append(name)
    return tuple(seen)


class ClassifyWidget(Container):
    """Zero-shot slide classification with report-guided attention maps."""

    def __init__(self, napari_viewer: Any, cache: ClassifyCache | None = None) -> None:
        from medvl_engine.prompts import CLASS_PRESETS

        self._viewer = napari_viewer
        self.cache = cache if cache is not None else ClassifyCache()
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        self.model = ModelPicker("encoder", DEFAULT_MODEL)
        self.preset = ComboBox(label="classes", choices=[CUSTOM, *CLASS_PRESETS], value=CUSTOM)
        self.classes = TextEdit(label="one per line", value="")
        self.tau = FloatSpinBox(
            label="tau_attn (0 = model's)", value=0.0, min=0.0, max=10.0, step=0.01
        )
        self.features = FileEdit(label="features (optional)", mode="r", nullable=True)
        self.controls = JobControls(run_text="Classify slide")
        self.ranking = TextEdit(label="ranking", value="")
        self.ranking.native.setReadOnly(True)
        self.last_outcome: ClassifyOutcome | None = None
        self.shown_class = ComboBox(
            label="show attention of", choices=self._class_choices, nullable=True
        )
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.preset,
                self.classes,
                self.tau,
                self.features,
                self.controls,
                self.ranking,
                self.shown_class,
            ]
        )
        self.colorbar = ColorBar()
        self.native.layout().addWidget(self.colorbar)
        self.runner = self.controls.bind(self._show_outcome)
        self.controls.run_button.changed.connect(self.run)
        self.preset.changed.connect(self._preset_chosen)
        self.shown_class.changed.connect(self._show_class)
        self.model.combo.changed.connect(self._model_changed)
        self.controls.bind_run_key(self.run, self.native)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self._refresh_choices)
        self._refresh_choices()
        self.preset.value = DEFAULT_PRESET
        self._model_changed()

    def _slide_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return layers_of_kind(self._viewer, SLIDE_KIND)

    def _class_choices(self, _widget: Any = None) -> list[str]:
        """Classes of the last result, best first (a callable, so napari's reset keeps them)."""
        if self.last_outcome is None:
            return []
        return [name for name, _ in self.last_outcome.classification.ranked]

    def _refresh_choices(self, _event: Any = None) -> None:
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None:
            choices = self._slide_choices()
            if choices:
                self.slide_choice.value = choices[-1][1]

    def _preset_chosen(self, name: str) -> None:
        from medvl_engine.prompts import CLASS_PRESETS

        if name in CLASS_PRESETS:
            self.classes.value = "\n".join(CLASS_PRESETS[name])

    def _model_changed(self, _value: Any = None) -> None:
        from medvl_engine.demo_models import demo_notice_for

        self.controls.set_notice(demo_notice_for(self.model.value))

    def request(self) -> ClassifyRequest | None:
        from medvl_engine.errors import ConfigError

        layer = self.slide_choice.value
        classes = _parse_classes(self.classes.value)
        problem = None
        if layer is None:
            problem = "Open a slide and choose it here before classifying."
        elif len(classes) < 2:
            problem = "Give at least two classes, one per line, or choose an organ preset."
        if problem:
            self.controls.status.value = problem
            report_error(ConfigError(problem))
            return None
        features = self.features.value
        features = Path(features) if features and str(features) not in ("", ".") else None
        slide = layer.metadata["slide"]
        return ClassifyRequest(
            slide=slide,
            model=self.model.value,
            classes=classes,
            tau_attn=float(self.tau.value) or None,
            features=features,
            store=None if features is not None else self._opened_store(slide),
        )

    def _opened_store(self, slide: Any) -> Any:
        """The feature store of a features layer opened on ``slide`` (the latest), or None."""
        stores = [
            layer.metadata.get("feature_store")
            for layer in self._viewer.layers
            if layer.metadata.get("medvl_kind") == "features"
            and layer.metadata.get("slide") is slide
        ]
        return stores[-1] if stores else None

    def run(self, _value: Any = None) -> Any:
        """Start the classification (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        return self.runner.start(classify_job, request, self.cache)

    def _show_outcome(self, outcome: ClassifyOutcome) -> None:
        from medvl_engine.demo_models import demo_notice_for

        self.last_outcome = outcome
        classification = outcome.classification
        self.ranking.value = format_ranking(classification)
        self.shown_class.reset_choices()
        self.shown_class.value = classification.predicted
        self._show_class(classification.predicted)
        notice = demo_notice_for(outcome.request.model)
        self.controls.set_notice(notice)
        status = (
            f"Predicted: {classification.predicted} (tau_attn {classification.tau_attn:g}, "
            f"{outcome.request.model})."
        )
        self.controls.status.value = f"{status} ({notice})" if notice else status

    def layer_name(self, outcome: ClassifyOutcome | None = None) -> str:
        """Name of the slide's attention layer: ``attention: <slide file>``."""
        outcome = outcome or self.last_outcome
        slide = outcome.request.slide if outcome is not None else None
        return f"attention: {Path(str(slide.path)).name}" if slide is not None else "attention"

    def _show_class(self, name: Any) -> None:
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
        if layer_name in self._viewer.layers:
            layer = self._viewer.layers[layer_name]
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
        self.colorbar.show_layer(layer.metadata, layer.contrast_limits)
        self.controls.status.value = (
            f"Showing attention of {name} (score {score:.4f}; alpha x N, 1 = uniform)."
        )
