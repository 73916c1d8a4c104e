"""Hang mammograms as a reading room does: R CC | L CC over R MLO | L MLO, chest walls facing.

Layout (napari world, source px, y down): the right breast's views form the left column and
the left breast's the right column, so the two breasts face each other across the midline at
x = 0 as the radiologist sees the patient; CC views on the top row, MLO views below. Each view
is turned (mirrored left-right when needed) so its chest wall lies along the midline: right
views end at x = -gap / 2 with the chest wall on their right edge, left views start at
x = +gap / 2 with the chest wall on their left edge. Where the chest wall is comes from the
engine (:func:`medvl_engine.io.mammo.chest_wall_side`), not from an assumption about how the
file was stored.

A mirrored view keeps its pixels as they are; its layer gets a negative x scale, and its
``metadata["world_frame"]`` says so, so boxes in source px drawn through that frame land on
the right tissue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from napari_medvl._layer_frame import WorldFrame
from napari_medvl._mammogram_layers import MAMMOGRAM_GAP_PX, MAMMOGRAM_KIND

if TYPE_CHECKING:
    import napari

__all__ = ["HANGING_SLOTS", "HungView", "hang_views", "hanging_frames"]

HANGING_SLOTS = {
    ("R", "CC"): (0, 0),
    ("L", "CC"): (0, 1),
    ("R", "MLO"): (1, 0),
    ("L", "MLO"): (1, 1),
}
"""(laterality, view) -> (row, column) of the four-view hanging."""


@dataclass(frozen=True)
class HungView:
    """One view to hang: its (laterality, view) slot, size and the side its chest wall is on."""

    key: Any
    laterality: str
    view: str
    height: int
    width: int
    chest_wall: str  # "left" or "right", in the stored image


def hanging_frames(
    views: Sequence[HungView], gap: float = MAMMOGRAM_GAP_PX
) -> dict[Any, WorldFrame]:
    """World frames placing each view in its slot with the chest wall on the midline.

    Views whose (laterality, view) is not one of :data:`HANGING_SLOTS` are left out.
    Row 0 starts at y = 0; row 1 at the tallest row-0 view's height plus ``gap``.
    """
    slotted = [v for v in views if (v.laterality, v.view) in HANGING_SLOTS]
    top_heights = [v.height for v in slotted if HANGING_SLOTS[(v.laterality, v.view)][0] == 0]
    row_top = {0: 0.0, 1: (max(top_heights) + gap) if top_heights else 0.0}
    frames: dict[Any, WorldFrame] = {}
    for view in slotted:
        row, column = HANGING_SLOTS[(view.laterality, view.view)]
        wanted = "right" if column == 0 else "left"  # chest wall towards the midline
        mirrored = view.chest_wall != wanted
        left_edge = -gap / 2.0 - view.width if column == 0 else gap / 2.0
        frames[view.key] = WorldFrame(
            scale_y=1.0,
            scale_x=-1.0 if mirrored else 1.0,
            offset_y=row_top[row],
            offset_x=left_edge + view.width if mirrored else left_edge,
            units="px",
        )
    return frames


def _slot_view(view: str | None) -> str | None:
    from medvl_engine.io.mammo import view_family

    return view_family(view)


def hang_views(viewer: napari.Viewer, gap: float = MAMMOGRAM_GAP_PX) -> tuple[list[Any], list[str]]:
    """Move the viewer's mammogram layers into the four-view hanging.

    When several layers claim one slot, the one added last is hung and the others are left
    where they are. Returns (layers hung, names of mammogram layers left where they were:
    unknown laterality or view, or a slot already taken). The chest-wall side is computed
    once per layer and kept in its metadata.
    """
    from medvl_engine.io.mammo import chest_wall_side

    candidates: dict[tuple[str, str], Any] = {}
    skipped: list[str] = []
    for layer in viewer.layers:
        if layer.metadata.get("medvl_kind") != MAMMOGRAM_KIND:
            continue
        laterality, view = layer.metadata.get("laterality"), _slot_view(layer.metadata.get("view"))
        if laterality not in ("L", "R") or view is None:
            skipped.append(layer.name)
            continue
        previous = candidates.get((laterality, view))
        if previous is not None:
            skipped.append(previous.name)
        candidates[(laterality, view)] = layer
    views = []
    for (laterality, view), layer in candidates.items():
        side = layer.metadata.get("chest_wall")
        if side not in ("left", "right"):
            side = chest_wall_side(layer.data, laterality)
            layer.metadata["chest_wall"] = side
        height, width = layer.data.shape[:2]
        views.append(HungView(layer, laterality, view, int(height), int(width), side))
    frames = hanging_frames(views, gap)
    for layer, frame in frames.items():
        transform = frame.image_transform()
        layer.scale = transform["scale"]
        layer.translate = transform["translate"]
        layer.metadata["world_frame"] = frame.as_dict()
    return list(frames), skipped
