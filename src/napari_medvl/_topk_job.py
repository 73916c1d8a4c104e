"""The mammogram TopK job: breast image from two views, TopK-Patch, zero-shot readouts.

No Qt here; runs inside a thread worker. Loaded models stay in a dict so a
second run on other views does not reload them.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from napari_medvl._preload import load_in_background, wait_for_load
from napari_medvl._progress import Progress, run_with_progress

__all__ = ["TopKRequest", "TopKOutcome", "format_readouts", "preload_topk_model", "topk_job"]


def preload_topk_model(
    models: dict[str, Any], loading: dict[str, threading.Event], name: str
) -> threading.Thread | None:
    """Load TopKSigLIP model ``name`` into ``models`` in a background thread, so that a first
    Run starts at the views; None when it is loaded or loading already (see
    :func:`._preload.load_in_background`)."""

    def load() -> Any:
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
    run: Any = None
    """The engine's whole answer (medvl_engine.mammography.BreastTopK): K, evaluated K, views."""


def topk_job(
    request: TopKRequest,
    models: dict[str, Any],
    loading: dict[str, threading.Event] | None = None,
    cancel: threading.Event | None = None,
) -> Generator[Progress, None, TopKOutcome]:
    """Generator job: load the model (once; ``loading`` holds the events of loads already
    under way, see :func:`preload_topk_model`), then :func:`medvl_engine.mammography.topk`,
    the path ``medvl topk`` and the evaluation share (K checked, the breast image at the
    model's own side, TopK-Patch, zero-shot readouts)."""
    from medvl_engine.mammography import topk
    from medvl_engine.models.topksiglip_folder import load_topksiglip

    yield from wait_for_load(loading or {}, request.model, cancel, "TopK")
    model = models.get(request.model)
    if model is None:
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
    result, breast = run.result, run.breast
    layers = None
    if request.frames is not None:
        from napari_medvl._mammo_layers import readable_topk_layers

        yield Progress("building layers")
        sources = {"CC": str(request.cc.path), "MLO": str(request.mlo.path)}
        layers = readable_topk_layers(
            result,
            breast,
            request.frames,
            breast.laterality,
            sources=sources,
            model=request.model,
            run=run,
        )
    return TopKOutcome(request, result, breast, layers, run)


def format_readouts(zero_shot: dict[str, dict[str, float]]) -> str:
    """One line per task, classes by falling probability: ``cancer: yes 0.71, no 0.29``."""
    lines = []
    for task, probabilities in zero_shot.items():
        ranked = sorted(probabilities.items(), key=lambda item: -item[1])
        lines.append(f"{task}: " + ", ".join(f"{name} {p:.2f}" for name, p in ranked))
    return "\n".join(lines) if lines else "(no zero-shot readouts)"
