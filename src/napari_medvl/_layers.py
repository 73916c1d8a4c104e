"""Pure layer builders: engine objects in, napari LayerData tuples out, one module per job.

Each builder returns ``(data, kwargs, layer_type)``, the tuple napari readers return and
``napari.layers.Layer.create(*tuple)`` takes; nothing here needs a viewer. This module names
them all in one place; they live by job:

- :mod:`._layer_frame`: the world frame every layer shares, boxes and score-grid layers;
- :mod:`._slide_layers`: a whole-slide image as a multiscale layer;
- :mod:`._mammogram_layers`: mammogram views side by side;
- :mod:`._topk_layers`: a TopK result's importance maps and ranked boxes;
- :mod:`._heatmap_layers`: a prompt heatmap and its rank-labelled top patches.
"""

from __future__ import annotations

from napari_medvl._heatmap_layers import (
    RANK_LABEL_COLOR,
    RANK_LABEL_SIZE,
    TOP_PATCH_OPACITY,
    TOP_PATCH_TEXT,
    heatmap_layers,
    heatmap_result_layers,
    rank_label_colors,
    rank_label_text,
)
from napari_medvl._layer_frame import (
    LayerData,
    WorldFrame,
    boxes_layer,
    grid_image_layer,
    layer_units,
)
from napari_medvl._mammogram_layers import MAMMOGRAM_GAP_PX, MAMMOGRAM_KIND, mammogram_layers
from napari_medvl._slide_layers import SLIDE_KIND, slide_frame, slide_layer
from napari_medvl._topk_layers import (
    TOPK_BOX_COLOR,
    TOPK_BOX_TEXT,
    importance_layers,
    topk_layers,
)

__all__ = [
    "MAMMOGRAM_GAP_PX",
    "MAMMOGRAM_KIND",
    "RANK_LABEL_COLOR",
    "RANK_LABEL_SIZE",
    "SLIDE_KIND",
    "TOPK_BOX_COLOR",
    "TOPK_BOX_TEXT",
    "TOP_PATCH_OPACITY",
    "TOP_PATCH_TEXT",
    "LayerData",
    "WorldFrame",
    "boxes_layer",
    "grid_image_layer",
    "heatmap_layers",
    "heatmap_result_layers",
    "importance_layers",
    "layer_units",
    "mammogram_layers",
    "rank_label_colors",
    "rank_label_text",
    "slide_frame",
    "slide_layer",
    "topk_layers",
]
