"""The mammogram TopK job in the model process: the child's handlers.

The child opens the two views from their files with the VOI napari shows them with, runs
:func:`napari_medvl._topk_job.topk_here` on the TopKSigLIP models it keeps in its ``state``,
and sends back the run's plain summary
(:class:`medvl_engine.models.topksiglip_results.TopKRunSummary`, torch-free). No Qt and no
torch at import.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from napari_medvl._preload import wait_for_load
from napari_medvl._progress import Progress
from napari_medvl._topk_job import TopKRequest, preload_topk_model, topk_here

if TYPE_CHECKING:
    from medvl_engine.models.topksiglip_results import TopKRunSummary

__all__ = ["preload_in_child", "topk_in_child"]


def _models(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, threading.Event]]:
    """The child's loaded TopK models by name, and the events of loads under way."""
    return state.setdefault("topk_models", {}), state.setdefault("topk_loading", {})


def preload_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Progress, None, str]:
    """Load TopKSigLIP model ``payload["model"]`` into the child; returns its name."""
    models, loading = _models(state)
    name = str(payload["model"])
    thread = preload_topk_model(models, loading, name)  # threads: the child's own switch
    if thread is not None:
        thread.join()
    yield from wait_for_load(loading, name, cancel, "model loading")
    if name not in models:  # the load failed: load again for its error sentence
        from medvl_engine.models.topksiglip_folder import load_topksiglip

        models[name] = load_topksiglip(name)
    return name


def topk_in_child(
    payload: dict[str, Any], state: dict[str, Any], cancel: threading.Event
) -> Generator[Progress, None, TopKRunSummary]:
    """The child's TopK job: ``payload`` holds the views ``cc`` and ``mlo`` (TopKViewSource:
    file and VOI, read here; or a Mammogram made in memory), the ``model`` and ``k`` (None:
    the model's evaluated K)."""
    from medvl_engine.io.mammo import Mammogram, open_mammogram

    yield Progress("reading views")
    cc, mlo = (
        source
        if isinstance(source, Mammogram)
        else open_mammogram(source.path, voi_index=source.voi_index)
        for source in (payload["cc"], payload["mlo"])
    )
    models, loading = _models(state)
    request = TopKRequest(cc, mlo, str(payload["model"]), payload["k"])
    return (yield from topk_here(request, models, loading, cancel))
