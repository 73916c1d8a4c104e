"""Breast images, ROI masks and labels for TopKSigLIP training and evaluation.

A :class:`MammoDataset` turns manifest records into samples: the breast image (CC view on the top
half, MLO below, ``[1, S, S]`` float32 in [0, 1]) built by
:func:`medvl_engine.io.mammo.breast_image`, the ROI boxes mapped from each view's source px into
breast px (``from_source``), the ROI mask rasterised on the candidate grid ``[G, G]``, the
tabular attribute vector ``[15]`` and the parsed report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medvl_engine.common.atomic import atomic_write_stream
from medvl_engine.data.mammo_augment import MammoAugmentConfig, augment_breast
from medvl_engine.data.mammo_manifest import MammoRecord
from medvl_engine.data.mammo_reports import tabular_attributes
from medvl_engine.data.patch_geometry import PatchGeometry, rasterize_boxes
from medvl_engine.errors import DataError, MedVLError

__all__ = [
    "BreastSample",
    "MammoDataset",
    "collate_breasts",
    "disk_cached_loader",
    "load_breast",
    "record_attributes",
]


@dataclass
class BreastSample:
    """One breast: image ``[1, S, S]``, boxes ``[M, 4]`` (x0, y0, x1, y1) breast px, labels."""

    image: torch.Tensor
    boxes: torch.Tensor
    roi_mask: torch.Tensor  # [G, G] float32
    has_roi: bool
    attributes: torch.Tensor  # [15] float32
    report: str
    record: MammoRecord


def load_breast(record: MammoRecord, image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Read both views of a record: breast image ``[S, S]`` float32 and ROI boxes ``[M, 4]``.

    Boxes are mapped corner by corner from each view's source px into breast-image px.
    Raises :class:`DataError` naming the record when a view cannot be read.
    """
    from medvl_engine.io.mammo import breast_image, open_mammogram

    try:
        cc = open_mammogram(record.cc_path)
        mlo = open_mammogram(record.mlo_path)
    except MedVLError as error:
        raise DataError(
            f"exam {record.exam_id} ({record.laterality}): {error.message}", error.path
        ) from None
    breast = breast_image(cc, mlo, size=(image_size, image_size // 2))
    boxes = []
    for view, items in record.roi_boxes.items():
        for x0, y0, x1, y1 in items:
            corners = np.asarray(breast.from_source(view, np.array([[x0, y0], [x1, y1]], float)))
            boxes.append(
                [corners[:, 0].min(), corners[:, 1].min(), corners[:, 0].max(), corners[:, 1].max()]
            )
    image = np.asarray(breast.image, dtype=np.float32)
    if image.shape != (image_size, image_size):
        raise DataError(
            f"exam {record.exam_id}: breast image has shape {image.shape}, expected "
            f"({image_size}, {image_size}); check medvl_engine.io.mammo.breast_image.",
            record.cc_path,
        )
    return image, np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


def disk_cached_loader(
    folder: str | Path,
    loader: Callable[[MammoRecord, int], tuple[np.ndarray, np.ndarray]] = load_breast,
) -> Callable[[MammoRecord, int], tuple[np.ndarray, np.ndarray]]:
    """Wrap a breast loader so each (record, size) is decoded once and kept as ``.npz`` in folder.

    The file name is derived from the exam id, laterality and size; it is written atomically.
    """
    return _DiskCachedLoader(Path(folder), loader)


@dataclass(frozen=True)
class _DiskCachedLoader:
    """The loader :func:`disk_cached_loader` returns (a class, so DataLoader workers can unpickle
    it)."""

    folder: Path
    loader: Callable[[MammoRecord, int], tuple[np.ndarray, np.ndarray]]

    def __call__(self, record: MammoRecord, image_size: int) -> tuple[np.ndarray, np.ndarray]:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in record.exam_id)
        path = self.folder / f"{safe}_{record.laterality}_{image_size}.npz"
        if path.is_file():
            stored = _cached_breast(path)
            if stored is not None:
                return stored
        image, boxes = self.loader(record, image_size)
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_stream(
            path,
            lambda handle: np.savez(handle, image=image, boxes=boxes),
            binary=True,
            what="breast-image cache",
        )
        return image, boxes


def _cached_breast(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(image, boxes) of a cache ``.npz`` read through the guarded reader (regular file, sizes
    declared within the array limit, never unpickled); None when it is damaged, forged or not
    a cache entry, so the breast is decoded again and the entry rewritten."""
    from medvl_engine.guarded_files import load_npz

    try:
        stored = load_npz(path, "breast-image cache file")
    except MedVLError:
        return None
    image, boxes = stored.get("image"), stored.get("boxes")
    if image is None or boxes is None or image.ndim != 2 or boxes.size % 4:
        return None
    return image, boxes


class MammoDataset:
    """Samples of a list of records; deterministic augmentation keyed by (seed, epoch, index).

    cache=True keeps each decoded breast image in memory after its first read (small cohorts).
    loader(record, image_size) -> (image [S, S], boxes [M, 4] breast px) reads one breast
    (default :func:`load_breast`).
    """

    def __init__(
        self,
        records: list[MammoRecord],
        geometry: PatchGeometry,
        augment: MammoAugmentConfig | None = None,
        seed: int = 0,
        cache: bool = True,
        loader: Callable[[MammoRecord, int], tuple[np.ndarray, np.ndarray]] = load_breast,
    ) -> None:
        if not records:
            raise DataError("the mammography dataset has no records; check the manifest and split.")
        self.records = records
        self.geometry = geometry
        self.augment = augment
        self.seed = seed
        self.loader = loader
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] | None = {} if cache else None

    def __len__(self) -> int:
        return len(self.records)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without decoded images: a copy sent to a DataLoader worker starts with an
        empty cache."""
        return {**self.__dict__, "_cache": {} if self._cache is not None else None}

    def _load(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is not None and index in self._cache:
            return self._cache[index]
        loaded = self.loader(self.records[index], self.geometry.image_size)
        if self._cache is not None:
            self._cache[index] = loaded
        return loaded

    def breast(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Unaugmented breast ``index``: image ``[S, S]`` float32 and ROI boxes ``[M, 4]``."""
        return self._load(index)

    def sample(self, index: int, epoch: int = 0) -> BreastSample:
        """Sample ``index``; augmented (seeded by seed, epoch, index) when augment is set."""
        record = self.records[index]
        image_np, boxes_np = self._load(index)
        image = torch.from_numpy(image_np)[None]
        boxes = torch.from_numpy(boxes_np).float()
        if self.augment is not None:
            generator = torch.Generator().manual_seed(
                (self.seed * 1_000_003 + epoch) * 1_000_003 + index
            )
            image, boxes = augment_breast(image, boxes, self.augment, generator)
        mask = rasterize_boxes(boxes.numpy(), self.geometry)
        return BreastSample(
            image=image.float(),
            boxes=boxes,
            roi_mask=torch.from_numpy(mask),
            has_roi=bool(record.has_roi and mask.any()),
            attributes=torch.from_numpy(record_attributes(record)),
            report=record.report,
            record=record,
        )


def record_attributes(record: MammoRecord) -> np.ndarray:
    """``[15]`` tabular vector of a record; the slots of a missing field are NaN.

    BI-RADS (slots 0-4), density (5-8), cancer (9-10) and finding types (11-14) are the fields;
    :func:`medvl_engine.losses.tabular_similarity` compares two rows over the fields both have.
    """
    vector = tabular_attributes(
        record.birads or 1, record.density or "A", bool(record.cancer), record.findings or []
    )
    for present, slots in (
        (record.birads is not None, slice(0, 5)),
        (record.density is not None, slice(5, 9)),
        (record.cancer is not None, slice(9, 11)),
        (record.findings is not None, slice(11, 15)),
    ):
        if not present:
            vector[slots] = np.nan
    return vector


def collate_breasts(samples: list[BreastSample]) -> dict[str, Any]:
    """Stack samples: images ``[B, 1, S, S]``, roi_mask ``[B, G, G]``, has_roi ``[B]`` bool,
    attributes ``[B, 15]``, reports (list of str), boxes (list of ``[M_b, 4]``)."""
    return {
        "images": torch.stack([s.image for s in samples]),
        "roi_mask": torch.stack([s.roi_mask for s in samples]),
        "has_roi": torch.tensor([s.has_roi for s in samples]),
        "attributes": torch.stack([s.attributes for s in samples]),
        "reports": [s.report for s in samples],
        "boxes": [s.boxes for s in samples],
    }
