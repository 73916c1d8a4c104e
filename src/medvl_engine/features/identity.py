"""Which slide a feature store belongs to: the slide's name and content fingerprint.

A store records the slide's file name and content fingerprint (see
:mod:`medvl_engine.common.fingerprint`); a store is used for a slide only when they agree, or, for
features imported without a fingerprint, when its patches lie on the slide.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvl_engine.common.fingerprint import short_fingerprint, slide_fingerprint
from medvl_engine.errors import DataError
from medvl_engine.features.store import FeatureStore
from medvl_engine.features.validate import checked_patch_size_level0

if TYPE_CHECKING:
    from medvl_engine.tiling import SlideLike

__all__ = ["check_store_matches_slide", "slide_identity", "store_file_name"]

_FINGERPRINTS: dict[tuple[Any, ...], str] = {}


def slide_identity(slide: SlideLike) -> tuple[str, str | None]:
    """(file name, content fingerprint) of an open slide; ("", None) for one without a file.

    Fingerprints are remembered per (path, size, modification time, inode), so asking again
    for an unchanged file costs one stat.
    """
    raw = getattr(slide, "path", None)
    if raw is None or str(raw) == "":
        return "", None
    path = Path(raw)
    try:
        info = path.stat()
    except OSError:
        return path.name, None
    key = (str(path), info.st_size, info.st_mtime_ns, info.st_ino, info.st_dev)
    if key not in _FINGERPRINTS:
        try:
            _FINGERPRINTS[key] = slide_fingerprint(path)
        except OSError as error:
            raise DataError(
                f"{path.name} could not be read to check which slide it is "
                f"({error.strerror or 'read error'}); check the file is readable.",
                path,
            ) from error
    return path.name, _FINGERPRINTS[key]


def store_file_name(slide: SlideLike) -> str:
    """``<slide stem>-<12 hex digits of its fingerprint>.zarr``: same-named slides never share."""
    name, fingerprint = slide_identity(slide)
    stem = Path(name).stem or "slide"
    return f"{stem}-{short_fingerprint(fingerprint)}.zarr" if fingerprint else f"{stem}.zarr"


def check_store_matches_slide(store: FeatureStore, slide: SlideLike) -> None:
    """Raise DataError unless ``store`` was made from ``slide`` (same content fingerprint).

    A store imported from a TRIDENT/CLAM file without a slide fingerprint is accepted when its
    patches lie on the slide; a store that records no fingerprint at all (written by an older
    medvl) is refused, since nothing says which slide it belongs to.
    """
    slide_name, fingerprint = slide_identity(slide)
    label = store.path.name if store.path is not None else "The feature store"
    if store.slide_fingerprint is None and not store.imported_from:
        raise DataError(
            f"{label} does not record which slide it was made from (an older medvl wrote it); "
            f"extract the features of {slide_name or 'the slide'} again with `medvl features`.",
            store.path,
        )
    if store.slide_fingerprint is not None and store.slide_fingerprint != fingerprint:
        made_from = store.slide or "an unnamed slide"
        same_name = " (another file with the same name)" if made_from == slide_name else ""
        raise DataError(
            f"{label} was made from {made_from}{same_name}, not from {slide_name}: their "
            f"contents differ; pass the store extracted from {slide_name}, or leave out "
            "--features to extract it.",
            store.path,
        )
    _check_patches_on_slide(store, slide, label, slide_name)


def _check_patches_on_slide(
    store: FeatureStore, slide: SlideLike, label: str, slide_name: str
) -> None:
    """Refuse a store whose patches lie outside the slide (features of a larger slide), or
    whose patch side is not a whole number of pixels between 1 and the slide's longest side."""
    width, height = (int(v) for v in slide.dimensions)
    checked_patch_size_level0(
        store.patch_size_level0,
        label,
        store.path,
        slide_side=max(width, height, 1),
        advice=f"pass the features made from {slide_name or 'this slide'} (or the right "
        "--patch-size-level0)",
    )
    if store.n_patches == 0:
        return
    right = int(store.coords[:, 0].max())
    bottom = int(store.coords[:, 1].max())
    if store.coords.min() < 0 or right >= width or bottom >= height:
        raise DataError(
            f"{label} has patches up to ({right}, {bottom}) level-0 px, outside {slide_name} "
            f"({width} x {height} px), so it belongs to another slide; pass the features "
            f"made from {slide_name}.",
            store.path,
        )
