"""What a DICOM result object holds, as plain numpy data placed on its source image.

Coordinates are (x, y) pixel positions of the source image (for a whole-slide image: its
level 0), continuous, the top-left corner of the image at (0, 0): pixel (x, y) covers
[x, x + 1) x [y, y + 1) (QuPath's and DICOM's SCOORD convention). When a whole-slide object
could not be placed on its source (the source was not found) ``units`` is "um": micrometres
from the object's own top-left corner, which is the slide's for objects derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["DicomResult", "ResultImage", "ResultShapes", "RESULT_KINDS"]

RESULT_KINDS = {
    "SR": "structured report",
    "GSPS": "presentation state",
    "PM": "parametric map",
    "SEG": "segmentation",
    "ANN": "bulk annotations",
}


@dataclass
class ResultShapes:
    """A group of vector annotations of one kind.

    ``shape_type``: "rectangle", "polygon", "path" (open polyline), "ellipse" (4 corners of
    its bounding box) or "point"; ``shapes``: float64 [k_i, 2] (x, y) per shape (a point is
    [1, 2]); ``labels``: the text to show per shape ("#1 0.93", "mass: 12.3 mm"); ``values``:
    measurement name (with unit) -> float64 [n] per shape (NaN where a shape has none);
    ``source_uid``: the SOP Instance UID of the image the shapes lie on ("" when unknown).
    """

    name: str
    shape_type: str
    shapes: list[np.ndarray]
    labels: list[str]
    values: dict[str, np.ndarray] = field(default_factory=dict)
    source_uid: str = ""

    def __len__(self) -> int:
        return len(self.shapes)


@dataclass
class ResultImage:
    """A map or mask over the source image.

    ``values`` [rows, cols]: float32 real-world values (a parametric map, NaN where none),
    float32 in [0, 1] (a fractional segment) or uint8 0/1 (a binary segment); pixel (c, r)
    covers x in [ox + c * sx, ox + (c + 1) * sx), y likewise, with ``origin`` (ox, oy) and
    ``pixel_size`` (sx, sy) in source px (or um, see the module docstring). ``kind`` is "map"
    or "mask"; ``value_range`` the values' meaningful range and ``unit`` their unit;
    ``color`` the (r, g, b) 0..255 display colour a segment recommends (None when none).
    """

    name: str
    values: np.ndarray
    origin: tuple[float, float]
    pixel_size: tuple[float, float]
    kind: str = "map"
    value_range: tuple[float, float] = (0.0, 1.0)
    unit: str = ""
    source_uid: str = ""
    color: tuple[int, int, int] | None = None


@dataclass
class DicomResult:
    """One result object read back: its identity, what it refers to, and its layers.

    ``kind`` one of :data:`RESULT_KINDS`; ``source_uids``: SOP Instance UIDs of the images
    it references; ``placed_on``: the SOP Instance UID of the level-0 image its coordinates
    are in ("" when not placed, see ``units``); ``algorithm``: "name version" of the
    algorithms named in it; ``notes``: sentences about what could not be read exactly.
    """

    path: Path
    kind: str
    sop_class: str
    sop_instance_uid: str
    series_instance_uid: str
    study_instance_uid: str
    frame_of_reference_uid: str
    source_uids: list[str]
    description: str = ""
    algorithm: list[str] = field(default_factory=list)
    units: str = "px"
    placed_on: str = ""
    shapes: list[ResultShapes] = field(default_factory=list)
    images: list[ResultImage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
