"""The segmentation job: the engine's ``segment`` with progress, off the GUI thread.

No Qt here. :func:`medvl_engine.pathology.segment` (the call ``medvl segment`` makes) takes
the features from the engine's cache or a features file the user names; the encoders stay
loaded in a ``SegmentCache``.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from napari_medvl._progress import Progress, run_with_progress

__all__ = ["SegmentCache", "SegmentOutcome", "SegmentRequest", "format_areas", "segment_job"]


@dataclass(frozen=True)
class SegmentRequest:
    """A slide (engine Slide), a model, classes (name -> names, >= 2), the templates ("conch"
    or "none"), the grid overlap (1, 2, 4), the confidence below which a cell is uncertain."""

    slide: Any
    model: str
    classes: dict[str, tuple[str, ...]]
    templates: str = "conch"
    overlap: int = 1
    min_confidence: float = 0.5
    features: Path | None = None


@dataclass
class SegmentOutcome:
    """The request and the engine's SegmentResult."""

    request: SegmentRequest
    result: Any


@dataclass
class SegmentCache:
    """Encoders by model name."""

    encoders: dict[str, Any] = field(default_factory=dict)


def segment_job(
    request: SegmentRequest, cache: SegmentCache, cancel: threading.Event | None = None
) -> Generator[Progress, None, SegmentOutcome]:
    """Generator job: load the encoder, then segment (features extracted or read as needed)."""
    from medvl_engine.encoders import load_encoder
    from medvl_engine.errors import CancelledError
    from medvl_engine.pathology import segment

    encoder = cache.encoders.get(request.model)
    if encoder is None:
        encoder = yield from run_with_progress(
            "loading model", lambda progress: load_encoder(request.model), cancel=cancel
        )
        cache.encoders[request.model] = encoder

    def run(progress: Any = None) -> Any:
        return segment(
            request.slide,
            request.classes,
            encoder,
            templates=request.templates,
            overlap=request.overlap,
            min_confidence=request.min_confidence,
            features=request.features,
            progress=progress,
            cancel=cancel,
        )

    result = yield from run_with_progress("features", run, cancel=cancel)
    if cancel is not None and cancel.is_set():
        raise CancelledError("The segmentation was cancelled.")
    return SegmentOutcome(request, result)


def format_areas(table: list[dict[str, Any]]) -> str:
    """One line per class: ``tumor  12.3%  0.153 mm^2  (2 regions)``."""
    width = max((len(str(row["class"])) for row in table), default=0)
    lines = []
    for row in table:
        if row["area_um2"] is not None:
            area = f"{row['area_um2'] / 1e6:.3f} mm^2"
        else:
            area = f"{row['area_px2']:,.0f} px^2"
        lines.append(
            f"{row['class']:<{width}}  {100 * row['share_of_tissue']:5.1f}%  {area}  "
            f"({row['regions']} regions)"
        )
    return "\n".join(lines)
