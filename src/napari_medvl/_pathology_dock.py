"""What the slide docks that score class prompts share: slide and model pickers, the class
list with its organ presets, an optional features file, the job controls and their wiring.

The "Slide classification" and "Segment by prompts" docks are each a :class:`PathologyForm`
(the widgets, laid out as slide, model, classes preset, class lines, the dock's own options,
features, job controls, the dock's results), a :class:`PathologyController` subclass (checks
the form, starts the dock's job) and a presenter; :class:`PathologyDock` wires the three
together the same way for both.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from magicgui.types import FileDialogMode
from magicgui.widgets import ComboBox, FileEdit, TextEdit
from magicgui.widgets.bases import Widget

from napari_medvl._model_picker import ModelPicker
from napari_medvl._notify import report_error
from napari_medvl._scrolling_form import ScrollingForm
from napari_medvl._slide_layers import SLIDE_KIND
from napari_medvl._widget_common import JobControls, layers_of_kind
from napari_medvl._worker_process import attach_viewer

if TYPE_CHECKING:
    import napari

    from medvl_engine.errors import MedVLError
    from napari_medvl._job_runner import JobRunner

__all__ = [
    "CUSTOM",
    "DEFAULT_MODEL",
    "DEFAULT_PRESET",
    "PathologyController",
    "PathologyDock",
    "PathologyForm",
]

CUSTOM = "custom (type below)"
DEFAULT_MODEL = "medvl-demo"
DEFAULT_PRESET = "synthetic demo slide"

CacheT = TypeVar("CacheT")
RequestT = TypeVar("RequestT")
OutcomeT = TypeVar("OutcomeT")


class PathologyForm(ScrollingForm):
    """Slide, model, classes (custom or a preset), ``options``, optional features, the job
    controls, then ``results``; :meth:`preset_text` fills the class lines from a preset."""

    def __init__(
        self,
        slide_choices: Callable[[], list[tuple[str, Any]]],
        *,
        classes_label: str,
        run_text: str,
        options: Sequence[Widget] = (),
        results: Sequence[Widget] = (),
    ) -> None:
        """``slide_choices()``: the slide layers to offer."""
        from medvl_engine.prompts import CLASS_PRESETS

        self._slide_source = slide_choices
        self.slide_choice = ComboBox(label="slide", choices=self._slide_choices, nullable=True)
        self.model = ModelPicker("encoder", DEFAULT_MODEL)
        self.preset = ComboBox(label="classes", choices=[CUSTOM, *CLASS_PRESETS], value=CUSTOM)
        self.classes = TextEdit(label=classes_label, value="")
        self.features = FileEdit(
            label="features (optional)", mode=FileDialogMode.EXISTING_FILE, nullable=True
        )
        self.controls = JobControls(run_text=run_text)
        super().__init__(
            widgets=[
                self.slide_choice,
                self.model,
                self.preset,
                self.classes,
                *options,
                self.features,
                self.controls,
                *results,
            ]
        )
        self.preset.changed.connect(self._preset_chosen)

    def _slide_choices(self, _widget: Any = None) -> list[tuple[str, Any]]:
        return self._slide_source()

    def refresh_choices(self, _event: Any = None) -> None:
        """Offer the open slide layers again; choose the newest when none is chosen."""
        self.slide_choice.reset_choices()
        if self.slide_choice.value is None:
            choices = self._slide_choices()
            if choices:
                self.slide_choice.value = choices[-1][1]

    def _preset_chosen(self, name: str) -> None:
        from medvl_engine.prompts import CLASS_PRESETS

        if name in CLASS_PRESETS:
            self.classes.value = self.preset_text(name)

    def preset_text(self, name: str) -> str:
        """The class lines of organ preset ``name``: its class names, one per line."""
        from medvl_engine.prompts import CLASS_PRESETS

        return "\n".join(CLASS_PRESETS[name])

    def features_path(self) -> Path | None:
        """The features file chosen, or None."""
        chosen = self.features.value
        return Path(str(chosen)) if chosen and str(chosen) not in ("", ".") else None


class PathologyController(Generic[CacheT, RequestT, OutcomeT]):
    """Jobs of one dock; ``on_result(outcome)`` receives each result on the GUI thread (the
    presenter's). Subclasses give :meth:`request` and :attr:`job`."""

    job: ClassVar[Callable[..., Generator[Any, None, Any]]]

    def __init__(
        self,
        viewer: napari.Viewer,
        form: PathologyForm,
        cache: CacheT,
        on_result: Callable[[OutcomeT], None],
    ) -> None:
        self._viewer = viewer
        self.form = form
        self.cache = cache
        self.runner: JobRunner = form.controls.bind(on_result)
        attach_viewer(viewer)  # the model process stops when the last such viewer closes

    def model_changed(self, _value: Any = None) -> None:
        """The chosen model's demo notice under the status line."""
        from medvl_engine.demo_models import demo_notice_for

        self.form.controls.set_notice(demo_notice_for(self.form.model.value))

    def refuse(self, problem: MedVLError) -> None:
        """Say ``problem`` in the status line and as a notification."""
        self.form.controls.status.value = str(problem)
        report_error(problem)

    def request(self) -> RequestT | None:
        """The request the form's inputs describe, or None (with a notification)."""
        raise NotImplementedError

    def run(self, _value: Any = None) -> Any:
        """Start the dock's job (cancelling a running one); returns the worker or None."""
        request = self.request()
        if request is None:
            return None
        return self.runner.start(type(self).job, request, self.cache)


class PathologyDock(Generic[CacheT, RequestT, OutcomeT]):
    """The dock-facing calls both docks offer, delegated to their controller and presenter.

    Mixed in before the dock's form: ``class SegmentWidget(PathologyDock[...], SegmentForm)``.
    """

    controller: PathologyController[CacheT, RequestT, OutcomeT]
    presenter: Any

    def wire(self, viewer: napari.Viewer, form: PathologyForm) -> None:
        """Run button, Ctrl+Enter, the model notice, the slide list following the viewer's
        layers, and the demo preset chosen."""
        form.controls.run_button.changed.connect(self.run)
        form.model.combo.changed.connect(self.controller.model_changed)
        form.controls.bind_run_key(self.run, form.native)
        for event in (viewer.layers.events.inserted, viewer.layers.events.removed):
            event.connect(form.refresh_choices)
        form.refresh_choices()
        form.preset.value = DEFAULT_PRESET
        self.controller.model_changed()

    @staticmethod
    def slide_layers(viewer: napari.Viewer) -> Callable[[], list[tuple[str, Any]]]:
        """The callable a form asks for the slide layers of ``viewer``."""
        return lambda: layers_of_kind(viewer, SLIDE_KIND)

    @property
    def cache(self) -> CacheT:
        """Models (and features) kept between runs."""
        return self.controller.cache

    @cache.setter
    def cache(self, cache: CacheT) -> None:
        self.controller.cache = cache

    @property
    def runner(self) -> JobRunner:
        """The runner of the dock's jobs."""
        return self.controller.runner

    @property
    def last_outcome(self) -> OutcomeT | None:
        """The result shown last."""
        outcome: OutcomeT | None = self.presenter.last_outcome
        return outcome

    def request(self) -> RequestT | None:
        """The request the form's inputs describe, or None (with a notification)."""
        return self.controller.request()

    def run(self, _value: Any = None) -> Any:
        """Start the dock's job (cancelling a running one); returns the worker or None."""
        return self.controller.run()

    def layer_name(self, outcome: OutcomeT | None = None) -> str:
        """Name of the slide's result layer."""
        name: str = self.presenter.layer_name(outcome)
        return name
