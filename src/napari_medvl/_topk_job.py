"""The mammogram TopK job: breast image from two views, TopK-Patch, zero-shot readouts.

No Qt here; runs inside a thread worker. The engine's :func:`medvl_engine.mammography.topk`
(the path ``medvl topk`` and the evaluation share) runs in the model process where it can
(:mod:`._worker_process`; the child runs :func:`topk_here` on its own loaded models,
:mod:`._worker_topk`): the job sends the two views' files and the VOI each is shown with (a
view made in memory, whose path names no file, goes as the Mammogram itself), the child opens
them with the engine and sends back the run's plain summary
(:class:`medvl_engine.models.topksiglip_results.TopKRunSummary`: result, breast image, views,
model name, K), so napari's process loads no model and imports no torch. It runs here, in
threads, when no process can be started (or ``MEDVL_MODEL_PROCESS=0``), or when the model is
loaded here already. Either way the outcome keeps the summary, never the model, and
the result layers are built here (numpy only). Models loaded here stay in a dict, so a second
run on other views does not reload them.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from napari_medvl._child_jobs import LoadedElsewhere, model_process_for, relay
from napari_medvl._preload import load_in_background, wait_for_load
from napari_medvl._progress import Progress, run_with_progress

if TYPE_CHECKING:
    from medvl_engine.models.topksiglip_results import TopKRunSummary
    from napari_medvl._worker_process import ModelProcess

__all__ = [
    "TopKOutcome",
    "TopKRequest",
    "format_readouts",
    "preload_topk_model",
    "topk_here",
    "topk_job",
    "view_for_child",
]

_WORKER = "napari_medvl._worker_topk"


def preload_topk_model(
    models: dict[str, Any], loading: dict[str, threading.Event], name: str
) -> threading.Thread | None:
    """Load TopKSigLIP model ``name`` in a background thread, so that a first Run starts at
    the views: in the model process (``models[name]`` is then a LoadedElsewhere), else into
    ``models``; None when it is loaded or loading already (see
    :func:`._preload.load_in_background`)."""

    def load() -> Any:
        from napari_medvl._worker_process import model_process

        process = model_process()  # started here, in the background, on first use
        if process is not None:
            process.call(f"{_WORKER}:preload_in_child", {"model": name})
            return LoadedElsewhere(name)
        from medvl_engine.models.topksiglip_folder import load_topksiglip

        return load_topksiglip(name)

    return load_in_background(models, loading, name, load)


@dataclass(frozen=True)
class TopKRequest:
    """Two views of one breast (engine Mammogram objects), a model and K (None: the K the
    model was evaluated with)."""

    cc: Any
    mlo: Any
    model: str
    k: int | None = None
    frames: dict[str, Any] | None = None
    """World frames (WorldFrame) of the CC and MLO layers: the job builds the layers in them."""


@dataclass
class TopKOutcome:
    """The engine's TopKResult and the BreastImage it was computed on."""

    request: TopKRequest
    result: Any
    breast: Any
    layers: list[Any] | None = None
    """LayerData built in the worker for ``request.frames`` (None without frames)."""
    run: TopKRunSummary | None = None
    """The run without its model (TopKRunSummary: K, evaluated K, views, model name, grid),
    which the layers keep for the DICOM exports."""


def topk_job(
    request: TopKRequest,
    models: dict[str, Any],
    loading: dict[str, threading.Event] | None = None,
    cancel: threading.Event | None = None,
) -> Generator[Progress, None, TopKOutcome]:
    """Generator job: TopK-Patch on the request's views, in the model process where it can
    (module docstring), then the result layers for ``request.frames``.

    Waits for a load of the model already under way (``loading``, see
    :func:`preload_topk_model`); yields Progress; returns the outcome with the run's summary.
    """
    loading = loading if loading is not None else {}
    yield from wait_for_load(loading, request.model, cancel, "TopK")
    process = model_process_for(models.get(request.model), cancel=cancel)
    if process is None:
        summary = yield from topk_here(request, models, loading, cancel)
    else:
        summary = yield from _topk_in_process(process, request, models, cancel)
    layers = None
    if request.frames is not None:
        from napari_medvl._mammo_layers import readable_topk_layers

        yield Progress("building layers")
        layers = readable_topk_layers(
            summary.result,
            summary.breast,
            request.frames,
            summary.laterality,
            sources={view: str(path) for view, path in summary.sources().items()},
            model=request.model,
            run=summary,
        )
    return TopKOutcome(request, summary.result, summary.breast, layers, summary)


def _topk_in_process(
    process: ModelProcess,
    request: TopKRequest,
    models: dict[str, Any],
    cancel: threading.Event | None,
) -> Generator[Progress, None, TopKRunSummary]:
    """The run in the model process: the views go as :func:`view_for_child` makes them, the
    summary comes back."""
    payload = {
        "cc": view_for_child(request.cc),
        "mlo": view_for_child(request.mlo),
        "model": request.model,
        "k": request.k,
    }
    steps = process.run(f"{_WORKER}:topk_in_child", payload, cancel, label="TopK request")
    summary: TopKRunSummary = yield from relay(steps)
    models.setdefault(request.model, LoadedElsewhere(request.model))
    return summary


def view_for_child(mammogram: Any) -> Any:
    """A view as the model process gets it: its file and VOI (TopKViewSource, which the child
    reads again) when its path is a file, else the Mammogram itself (pixels float32 [H, W]
    and what was read with them: a view made in memory)."""
    from medvl_engine.models.topksiglip_results import TopKViewSource

    if Path(str(mammogram.path)).is_file():
        return TopKViewSource.of(mammogram)
    return mammogram


def topk_here(
    request: TopKRequest,
    models: dict[str, Any],
    loading: dict[str, threading.Event] | None = None,
    cancel: threading.Event | None = None,
) -> Generator[Progress, None, TopKRunSummary]:
    """:func:`medvl_engine.mammography.topk` in this process (threads): load the model once
    into ``models``, then K checked, the breast image at the model's own side, TopK-Patch and
    the zero-shot readouts; returns the run's summary (``BreastTopK.summary()``)."""
    from medvl_engine.mammography import topk
    from medvl_engine.models.topksiglip_folder import load_topksiglip

    yield from wait_for_load(loading or {}, request.model, cancel, "TopK")
    model = models.get(request.model)
    if model is None or isinstance(model, LoadedElsewhere):
        model = yield from run_with_progress(
            "loading model", lambda progress: load_topksiglip(request.model), cancel=cancel
        )
        models[request.model] = model
    run = yield from run_with_progress(
        "TopK-Patch",
        lambda progress: topk(
            request.cc, request.mlo, model, k=request.k, model_name=request.model
        ),
        cancel=cancel,
    )
    return run.summary()


def format_readouts(zero_shot: dict[str, dict[str, float]]) -> str:
    """One line per task, classes by falling probability: ``cancer: yes 0.71, no 0.29``."""
    lines = []
    for task, probabilities in zero_shot.items():
        ranked = sorted(probabilities.items(), key=lambda item: -item[1])
        lines.append(f"{task}: " + ", ".join(f"{name} {p:.2f}" for name, p in ranked))
    return "\n".join(lines) if lines else "(no zero-shot readouts)"
