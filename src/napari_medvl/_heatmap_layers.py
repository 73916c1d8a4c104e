"""Heatmap result layers: a prompt's score map on its slide and its top patches, rank-labelled."""

from __future__ import annotations

from typing import Any

import numpy as np

from napari_medvl._layer_frame import LayerData, WorldFrame, boxes_layer, layer_units

__all__ = [
    "RANK_LABEL_COLOR",
    "RANK_LABEL_SIZE",
    "TOP_PATCH_OPACITY",
    "TOP_PATCH_TEXT",
    "heatmap_layers",
    "heatmap_result_layers",
    "rank_label_colors",
    "rank_label_text",
]


def heatmap_layers(
    heatmap: Any,
    top_patches: tuple[np.ndarray, np.ndarray] | None,
    frame: WorldFrame,
    prompt: str | None = None,
    colormap: str = "auto",
    opacity: float = 0.5,
    blending: str = "translucent",
    store: Any = None,
    slide: Any = None,
    threshold: float | None = None,
    model: str | None = None,
    overlay_key: str | None = None,
) -> list[LayerData]:
    """Image layer of an engine Heatmap plus a shapes layer of its top patches.

    The image takes ``heatmap.scale``/``heatmap.translate`` as the engine computed them
    (napari (y, x), in the slide's world units); the top patches (boxes (x0, y0, x1, y1)
    level-0 px, scores) are drawn through the slide's ``frame``. Colours follow
    ``_overlay_style.overlay_view``: the shared colour maps ("auto": diverging and symmetric
    about 0 for signed maps), cells below ``threshold`` hidden. The feature ``store``, ``slide``,
    ``model`` and its demo notice are kept in the heatmap's metadata for exports and the
    colour bar; ``overlay_key`` names the (slide, mode) overlay the layer is updated in place for.
    """
    from napari_medvl._overlay_style import OverlayStyle, napari_colormap, overlay_view

    label = prompt if prompt is not None else heatmap.prompt
    view = overlay_view(
        heatmap.grid,
        heatmap.mode,
        heatmap.normalize,
        heatmap.value_range,
        OverlayStyle(colormap=colormap, opacity=opacity, blending=blending, threshold=threshold),
    )
    image_kwargs = {
        "name": f"heatmap: {label}",
        "colormap": napari_colormap(view.colormap),
        "opacity": opacity,
        "blending": blending,
        "contrast_limits": view.contrast_limits,
        "interpolation2d": "nearest",
        "units": layer_units(frame),
        "scale": tuple(float(v) for v in heatmap.scale),
        "translate": tuple(float(v) for v in heatmap.translate),
        "metadata": {
            "medvl_kind": "heatmap",
            "prompt": label,
            "mode": heatmap.mode,
            "normalize": heatmap.normalize,
            "heatmap": heatmap,
            "top_patches": top_patches,
            "feature_store": store,
            "slide": slide,
            "world_frame": frame.as_dict(),
            "colormap": view.colormap,
            "signed": view.signed,
            "value_range": view.value_range,
            "threshold": threshold,
            "model": model,
            "demo_notice": _demo_notice(model),
            "overlay_key": overlay_key,
        },
    }
    layers: list[LayerData] = [(view.data, image_kwargs, "image")]
    if top_patches is not None:
        boxes, scores = top_patches
        colors = rank_label_colors(boxes, frame, image_kwargs, view.data, opacity)
        layers.append(
            boxes_layer(
                boxes,
                scores,
                frame,
                name=f"top patches: {label}",
                edge_color=RANK_LABEL_COLOR,
                text_format=TOP_PATCH_TEXT,
                extra_features={"label_color": colors},
            )
        )
        layers[-1][1]["metadata"]["overlay_key"] = overlay_key
        layers[-1][1]["opacity"] = TOP_PATCH_OPACITY
        layers[-1][1]["text"] = rank_label_text(layers[-1][1]["text"]["string"])
    return layers


def rank_label_text(text_format: str) -> dict[str, Any]:
    """napari text of a top-patch layer: ``text_format``, each label in its ``label_color``."""
    return {
        "string": text_format,
        "color": {"feature": "label_color"},
        "anchor": "upper_left",
        "size": RANK_LABEL_SIZE,
    }


_TISSUE_LUMINANCE = 0.75  # H&E under a translucent overlay: a light pink


def rank_label_colors(
    boxes_xyxy: np.ndarray,
    frame: WorldFrame,
    image_kwargs: dict[str, Any],
    grid: np.ndarray,
    opacity: float,
) -> list[str]:
    """ "black" or "white" per box [N, 4] (x0, y0, x1, y1) level-0 px: whichever contrasts
    with the heatmap cell under the box's centre as drawn (its colour at ``opacity`` over
    light tissue; relative luminance L = 0.2126 R + 0.7152 G + 0.0722 B, black above 0.5).

    ``grid`` [R, C] is the layer's data and ``image_kwargs`` its scale, translate, contrast
    limits and colour map; a hidden (NaN) cell or one off the grid counts as tissue.
    """
    boxes = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    if not len(boxes):
        return []
    centres = frame.to_world(np.column_stack([boxes[:, [0, 2]].mean(1), boxes[:, [1, 3]].mean(1)]))
    scale = np.asarray(image_kwargs["scale"], dtype=np.float64)
    origin = np.asarray(image_kwargs["translate"], dtype=np.float64) - scale / 2.0
    cells = np.floor((centres - origin) / scale).astype(np.int64)
    inside = np.all((cells >= 0) & (cells < np.asarray(grid.shape[:2])), axis=1)
    values = np.full(len(boxes), np.nan)
    values[inside] = grid[cells[inside, 0], cells[inside, 1]]
    low, high = image_kwargs["contrast_limits"]
    normalised = np.clip((values - low) / (high - low if high > low else 1.0), 0.0, 1.0)
    rgba = np.asarray(image_kwargs["colormap"].map(np.nan_to_num(normalised)), dtype=np.float64)
    luminance = rgba[:, :3] @ np.array([0.2126, 0.7152, 0.0722])
    shown = opacity * luminance + (1.0 - opacity) * _TISSUE_LUMINANCE
    shown[~np.isfinite(values)] = _TISSUE_LUMINANCE
    return ["black" if value > 0.5 else "white" for value in shown]


TOP_PATCH_TEXT = "#{rank}\n{score:.2f}"
"""A top patch's rank label: the rank over the score, about four characters wide, so the labels
of side-by-side patches stay apart down to a patch about five characters wide on screen."""

# Magenta is in neither shared map (viridis, blue-white-red), so boxes stay visible over any
# cell of the heatmap; rank labels take black or white by the cell under them.
RANK_LABEL_COLOR = "magenta"
RANK_LABEL_SIZE = 11  # text points; each label black or white, whichever its cell contrasts
TOP_PATCH_OPACITY = 0.7  # napari's default for shapes, stated: a pending layer starts at 0


def _demo_notice(model: str | None) -> str | None:
    if not model:
        return None
    from medvl_engine.demo_models import demo_notice_for

    return demo_notice_for(model)


def heatmap_result_layers(
    outcome: Any,
    frame: dict[str, Any] | WorldFrame | None,
    blending: str = "translucent",
    **style: Any,
) -> list[LayerData]:
    """Layers for a heatmap job's outcome (``heatmap``, ``top_patches``) on a slide's frame.

    ``style`` passes on to :func:`heatmap_layers` (colormap, opacity, threshold, overlay_key).
    """
    if frame is None:
        world = WorldFrame(units=outcome.heatmap.units)
    elif isinstance(frame, WorldFrame):
        world = frame
    else:
        world = WorldFrame.from_dict(frame)
    return heatmap_layers(
        outcome.heatmap,
        outcome.top_patches,
        world,
        blending=blending,
        store=getattr(outcome, "store", None),
        slide=getattr(getattr(outcome, "request", None), "slide", None),
        model=getattr(getattr(outcome, "request", None), "model", None),
        **style,
    )
