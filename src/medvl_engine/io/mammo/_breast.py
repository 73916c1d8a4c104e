"""The TopKSigLIP breast image: CC over MLO, each view cropped, oriented and resized.

Per view (pixels [H, W] in [0, 1], source px):

1. Background removal: threshold halfway between the background level (5th
   percentile) and Otsu's threshold, keep the largest connected component,
   crop to its bounding box.
2. Flip left-right so the chest wall is on the left: the chest wall is the
   crop side holding more breast tissue; when the two sides are within 10 %,
   the DICOM laterality decides (right breasts are flipped).
3. Rotate 90 degrees clockwise, so the chest wall runs along the top edge.
   A cropped breast is portrait (chest wall longer than nipple depth), while
   each half of the model input is landscape (768 rows x 1536 cols); rotating
   fills that slot with one near-uniform scale, where squeezing the portrait
   crop into it would shrink rows about 4x more than columns and distort the
   small findings (calcifications) the model must see.
4. Resize with the aspect ratio kept (anti-aliased), top-left anchored; the
   rest of the slot stays 0 (background).

Points map by one affine transform per view, in continuous pixel coordinates
(x, y): pixel (row i, col j) covers [j, j+1) x [i, i+1). ``from_source`` and
``to_source`` are exact inverses; boxes [x0, y0, x1, y1] map by their corners.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from medvl_engine.errors import MedVLError
from medvl_engine.io.mammo._pairing import check_pair

if TYPE_CHECKING:
    from medvl_engine.io.mammo._mammogram import Mammogram

__all__ = ["BreastImage", "ViewPlacement", "breast_image", "breast_mask", "chest_wall_side"]

VIEWS = ("CC", "MLO")
_MASK_MAX_PX = 512
_OPENING_STEPS = 4
"""Opening radius (px of the 512-px mask) that cuts film edges and markers off the breast."""
_SKIN_FRACTION = 0.1


@dataclass
class ViewPlacement:
    """Where one source view went: crop box (x0, y0, x1, y1) source px, flip, affine [3, 3]."""

    view: str
    source_shape: tuple[int, int]
    crop: tuple[int, int, int, int]
    flipped: bool
    matrix: np.ndarray
    placed_size: tuple[int, int]
    """(width, height) in breast-image px covered by the resized breast."""


@dataclass
class BreastImage:
    """CC (rows 0..h-1) over MLO (rows h..2h-1); ``image`` float32 [2h, w] in [0, 1]."""

    image: np.ndarray
    size: tuple[int, int]
    placements: dict[str, ViewPlacement] = field(default_factory=dict)
    laterality: str | None = None

    def _placement(self, view: str) -> ViewPlacement:
        key = view.upper()
        if key not in self.placements:
            raise MedVLError(f"view {view!r} is not in this breast image; use 'CC' or 'MLO'.")
        return self.placements[key]

    def from_source(self, view: str, points_xy: npt.ArrayLike) -> np.ndarray:
        """[N, 2] (x, y) source px of ``view`` -> [N, 2] (x, y) breast-image px."""
        return _apply(self._placement(view).matrix, points_xy)

    def to_source(self, view: str, points_xy: npt.ArrayLike) -> np.ndarray:
        """[N, 2] (x, y) breast-image px -> [N, 2] (x, y) source px of ``view``."""
        return _apply(np.linalg.inv(self._placement(view).matrix), points_xy)

    def source_size(self, view: str) -> tuple[int, int]:
        """(width, height) px of ``view``'s source image: the bounds its boxes are clipped to."""
        rows, columns = self._placement(view).source_shape
        return columns, rows

    def boxes_from_source(self, view: str, boxes: npt.ArrayLike) -> np.ndarray:
        """[N, 4] boxes (x0, y0, x1, y1) source px -> [N, 4] breast-image px (by corners)."""
        return _map_boxes(self._placement(view).matrix, boxes)

    def boxes_to_source(self, view: str, boxes: npt.ArrayLike) -> np.ndarray:
        """[N, 4] boxes (x0, y0, x1, y1) breast-image px -> [N, 4] source px (by corners)."""
        return _map_boxes(np.linalg.inv(self._placement(view).matrix), boxes)


def _apply(matrix: np.ndarray, points_xy: npt.ArrayLike) -> np.ndarray:
    points = np.asarray(points_xy, dtype=np.float64).reshape(-1, 2)
    homogeneous = np.column_stack([points, np.ones(len(points))])
    return np.asarray((homogeneous @ matrix.T)[:, :2])


def _map_boxes(matrix: np.ndarray, boxes: npt.ArrayLike) -> np.ndarray:
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    a = _apply(matrix, boxes[:, [0, 1]])
    b = _apply(matrix, boxes[:, [2, 3]])
    return np.column_stack([np.minimum(a, b), np.maximum(a, b)])


def _threshold(small: np.ndarray, fraction: float = 0.5) -> float | None:
    """``fraction`` of the way from the background level (5th percentile) to Otsu's threshold."""
    from skimage.filters import threshold_otsu

    low = float(np.percentile(small, 5))
    if float(small.max()) <= low:
        return None
    return low + fraction * (float(threshold_otsu(small)) - low)


def breast_mask(pixels: np.ndarray) -> tuple[np.ndarray, int, float | None]:
    """Largest bright component of a downsampled view: (mask bool [h, w], downsample, threshold)."""
    from scipy import ndimage

    step = max(1, int(np.ceil(max(pixels.shape) / _MASK_MAX_PX)))
    small = pixels[::step, ::step].astype(np.float32)
    threshold = _threshold(small)
    if threshold is None:  # a constant image
        return np.ones(small.shape, bool), step, None
    mask = ndimage.binary_opening(
        small > threshold, structure=np.ones((3, 3), bool), iterations=_OPENING_STEPS
    )
    labels, count = ndimage.label(mask)
    if count == 0:
        return np.ones(small.shape, bool), step, None
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=np.arange(1, count + 1))
    largest = labels == (int(np.argmax(sizes)) + 1)
    return ndimage.binary_fill_holes(largest), step, threshold


def _crop_box(pixels: np.ndarray) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """Crop (x0, y0, x1, y1) source px around the breast and the full-resolution mask inside it.

    The component is found on a downsampled copy; its bounding box is then
    refined at full resolution with a lower threshold (a tenth of the way to
    Otsu's, so the faint skin line stays in) among pixels near the component
    (within the opening radius plus one coarse cell); mirrored inputs give mirrored crops.
    """
    from scipy import ndimage

    coarse, step, threshold = breast_mask(pixels)
    height, width = pixels.shape
    if threshold is None:
        return (0, 0, width, height), np.ones((height, width), bool)
    threshold = _threshold(pixels[::step, ::step].astype(np.float32), _SKIN_FRACTION)
    # the opening eroded up to _OPENING_STEPS cells where the breast meets the image edge
    near = ndimage.binary_dilation(
        coarse, structure=np.ones((3, 3), bool), iterations=_OPENING_STEPS + 1
    )
    near = np.repeat(np.repeat(near, step, axis=0), step, axis=1)
    padded = np.zeros((height, width), bool)
    padded[: min(height, near.shape[0]), : min(width, near.shape[1])] = near[:height, :width]
    fine = padded & (pixels > threshold)
    rows = np.flatnonzero(fine.any(axis=1))
    cols = np.flatnonzero(fine.any(axis=0))
    if rows.size == 0:
        return (0, 0, width, height), np.ones((height, width), bool)
    x0, x1 = int(cols[0]), int(cols[-1]) + 1
    y0, y1 = int(rows[0]), int(rows[-1]) + 1
    return (x0, y0, x1, y1), fine[y0:y1, x0:x1]


def _chest_wall_on_right(crop_mask: np.ndarray, laterality: str | None) -> bool:
    half = crop_mask.shape[1] // 2
    left = float(crop_mask[:, :half].sum())
    right = float(crop_mask[:, crop_mask.shape[1] - half :].sum())
    if max(left, right) > 0 and abs(left - right) > 0.1 * max(left, right):
        return right > left
    return laterality == "R"


def _place_view(
    pixels: np.ndarray, laterality: str | None, view: str, size: tuple[int, int], row: int
) -> tuple[np.ndarray, ViewPlacement]:
    from skimage.transform import resize

    slot_w, slot_h = size
    (x0, y0, x1, y1), crop_mask = _crop_box(pixels)
    crop = pixels[y0:y1, x0:x1]
    crop_h, crop_w = crop.shape
    flipped = _chest_wall_on_right(crop_mask, laterality)
    if flipped:
        crop = crop[:, ::-1]
    rotated = np.rot90(crop, k=-1)  # chest wall (left edge) -> top edge; shape [crop_w, crop_h]
    rot_h, rot_w = rotated.shape
    scale = min(slot_w / rot_w, slot_h / rot_h)
    new_w = max(1, min(slot_w, round(rot_w * scale)))
    new_h = max(1, min(slot_h, round(rot_h * scale)))
    resized = resize(
        rotated.astype(np.float32),
        (new_h, new_w),
        order=1,
        anti_aliasing=scale < 1,
        preserve_range=True,
    )
    slot = np.zeros((slot_h, slot_w), np.float32)
    slot[:new_h, :new_w] = np.clip(resized, 0.0, 1.0)

    crop_to_origin = np.array([[1, 0, -x0], [0, 1, -y0], [0, 0, 1]], float)
    flip = np.array([[-1, 0, crop_w], [0, 1, 0], [0, 0, 1]], float) if flipped else np.eye(3)
    rotate = np.array([[0, -1, crop_h], [1, 0, 0], [0, 0, 1]], float)  # (x, y) -> (H - y, x)
    place = np.array([[new_w / rot_w, 0, 0], [0, new_h / rot_h, row], [0, 0, 1]], float)
    matrix = place @ rotate @ flip @ crop_to_origin
    placement = ViewPlacement(
        view=view,
        source_shape=(int(pixels.shape[0]), int(pixels.shape[1])),
        crop=(x0, y0, x1, y1),
        flipped=flipped,
        matrix=matrix,
        placed_size=(new_w, new_h),
    )
    return slot, placement


def breast_image(cc: Mammogram, mlo: Mammogram, size: tuple[int, int] = (1536, 768)) -> BreastImage:
    """Stack the CC view over the MLO view of one breast: image float32 [2 h, w].

    ``size`` is (w, h) of each view's slot (the paper's 1536 x 768, giving a
    1536 x 1536 input). See the module docstring for crop, flip and rotation. The pair is
    checked first (:func:`medvl_engine.io.mammo._pairing.check_pair`): views of different
    patients, studies or breasts, or two views of the same kind, are refused.
    """
    slot_w, slot_h = (int(v) for v in size)
    if slot_w < 2 or slot_h < 2:
        raise MedVLError(f"breast image size {size} is too small; give (width, height) >= 2.")
    check_pair(cc, mlo)
    laterality = cc.laterality or mlo.laterality
    image = np.zeros((2 * slot_h, slot_w), np.float32)
    placements = {}
    for index, (view, mammogram) in enumerate((("CC", cc), ("MLO", mlo))):
        slot, placement = _place_view(
            np.asarray(mammogram.pixels, np.float32),
            mammogram.laterality or laterality,
            view,
            (slot_w, slot_h),
            row=index * slot_h,
        )
        image[index * slot_h : (index + 1) * slot_h] = slot
        placements[view] = placement
    return BreastImage(
        image=image, size=(slot_w, slot_h), placements=placements, laterality=laterality
    )


def chest_wall_side(pixels: np.ndarray, laterality: str | None = None) -> str:
    """'left' or 'right': the image edge the chest wall lies along in a view [H, W].

    The same rule ``breast_image`` flips by (the side of the breast's bounding box holding
    more tissue, laterality deciding a near tie: right breasts -> 'right'), on the
    downsampled breast mask only, so it is cheap enough to hang views by.
    """
    coarse, _, threshold = breast_mask(np.asarray(pixels, np.float32))
    if threshold is not None:
        rows = np.flatnonzero(coarse.any(axis=1))
        cols = np.flatnonzero(coarse.any(axis=0))
        if rows.size and cols.size:
            coarse = coarse[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    return "right" if _chest_wall_on_right(coarse, laterality) else "left"
