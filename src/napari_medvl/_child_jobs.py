"""A dock's job as the model process runs it: which process takes it, and what comes back.

No Qt here. Each dock's job (heatmap, segmentation, classification, TopK) runs in the model
process (:mod:`._worker_process`) unless its model is loaded in napari's own process (a demo
viewer given model objects) or its slide is not a file the child can open; then it runs here,
in threads. :func:`model_process_for` makes that choice, and :func:`relay` passes on what the
child's job yields, closing it (which cancels it in the child) when the dock's job is closed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from napari_medvl._worker_process import ModelProcess

__all__ = ["LoadedElsewhere", "model_process_for", "relay"]


@dataclass(frozen=True)
class LoadedElsewhere:
    """In a dock's cache of models: model ``name`` is loaded in the model process."""

    name: str


def model_process_for(
    loaded: Any, slide: Any = None, cancel: threading.Event | None = None
) -> ModelProcess | None:
    """The model process for a job whose model the dock's cache holds as ``loaded`` (None when
    not loaded), on ``slide`` (an engine Slide, opened again in the child from its file); None
    to run the job here: its model is loaded here, the slide is no file, or no process can be
    started (:func:`._worker_process.model_process`)."""
    if loaded is not None and not isinstance(loaded, LoadedElsewhere):
        return None  # a model loaded here (the demo's), with what it made
    if slide is not None and not Path(str(getattr(slide, "path", ""))).exists():
        return None
    from napari_medvl._worker_process import model_process

    return model_process(cancel)


def relay(
    steps: Generator[Any, None, Any], convert: Callable[[Any], Any] | None = None
) -> Generator[Any, None, Any]:
    """Yield what the child's job ``steps`` (:meth:`ModelProcess.run`) yields, each item passed
    through ``convert`` when given, and return what it returns. Closing this generator closes
    ``steps``, which cancels the job in the child."""
    try:
        while True:
            try:
                item = next(steps)
            except StopIteration as finished:
                return finished.value
            yield item if convert is None else convert(item)
    finally:
        steps.close()
