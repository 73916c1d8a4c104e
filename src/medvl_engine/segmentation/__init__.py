"""Segmentation by prompts: class probabilities per patch, a tissue map, and its regions.

:func:`segment_store` turns a feature store and class embeddings into a
:class:`SegmentResult` (the class map, the polygons and the area table);
:func:`medvl_engine.pathology.segment` is the one call per user action around it (the slide,
the features, the model and the prompt ensembles), used by ``medvl segment``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medvl_engine.segmentation.class_map import (
    DEFAULT_LOGIT_SCALE,
    DEFAULT_MIN_CONFIDENCE,
    NO_TISSUE,
    UNCERTAIN,
    ClassMap,
    class_map,
    class_probabilities,
    model_logit_scale,
)
from medvl_engine.segmentation.regions import (
    DEFAULT_MIN_AREA_UM2,
    Region,
    area_table,
    class_regions,
)

if TYPE_CHECKING:
    import torch

    from medvl_engine.features import FeatureStore

__all__ = [
    "DEFAULT_LOGIT_SCALE",
    "DEFAULT_MIN_AREA_UM2",
    "DEFAULT_MIN_CONFIDENCE",
    "NO_TISSUE",
    "UNCERTAIN",
    "ClassMap",
    "Region",
    "SegmentResult",
    "area_table",
    "class_map",
    "class_probabilities",
    "class_regions",
    "model_logit_scale",
    "segment_store",
]


@dataclass
class SegmentResult:
    """What segmenting a slide found: the class map, its polygons (level-0 px) and area table,
    the features it rests on, the encoder's name, the templates of the ensembles (None: the
    names as they are), and ``notes``: sentences on what the result lacks (no tissue, a class
    that wins nowhere)."""

    class_map: ClassMap
    regions: list[Region]
    table: list[dict[str, Any]]
    store: FeatureStore
    model: str
    templates: tuple[str, ...] | None
    classes: dict[str, tuple[str, ...]]
    store_path: Path | None = None
    extracted: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return self.class_map.names

    @property
    def empty(self) -> bool:
        """True when no cell of the map is tissue."""
        return not bool((self.class_map.labels > 0).any())


def segment_store(
    store: FeatureStore,
    classes: dict[str, tuple[str, ...]],
    class_embeddings: torch.Tensor | np.ndarray,
    *,
    tissue: tuple[np.ndarray, float] | None = None,
    logit_scale: float = DEFAULT_LOGIT_SCALE,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    min_area_um2: float = DEFAULT_MIN_AREA_UM2,
    smooth: float = 0.5,
    simplify: float = 0.25,
    slide_dimensions: tuple[int, int] | None = None,
    model: str = "",
    templates: tuple[str, ...] | None = None,
) -> SegmentResult:
    """Segment ``store``'s patches among ``classes`` (name -> names) with their embeddings
    [K, D]: probabilities (:func:`class_probabilities`), map (:func:`class_map`), regions
    (:func:`class_regions`) and the area table. ``tissue`` as :func:`class_map` takes it."""
    names = list(classes)
    probabilities = class_probabilities(store.features, class_embeddings, logit_scale)
    mapped = class_map(
        store,
        probabilities,
        names,
        tissue=tissue,
        min_confidence=min_confidence,
        logit_scale=logit_scale,
        slide_dimensions=slide_dimensions,
    )
    regions = class_regions(mapped, min_area_um2=min_area_um2, smooth=smooth, simplify=simplify)
    table = area_table(mapped, regions)
    notes = []
    if not (mapped.labels > 0).any():
        notes.append("No tissue was found on the slide's patches; the map is empty.")
    else:
        nowhere = [row["class"] for row in table if row["cells"] == 0 and row["class"] != UNCERTAIN]
        if nowhere:
            notes.append(
                f"{', '.join(repr(n) for n in nowhere)} won no part of the tissue; "
                "it has no region."
            )
    return SegmentResult(
        class_map=mapped,
        regions=regions,
        table=table,
        store=store,
        model=model or store.encoder,
        templates=templates,
        classes=dict(classes),
        store_path=store.path,
        notes=notes,
    )
