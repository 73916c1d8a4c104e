"""Whole-slide images as lazy pyramids: ``open_slide(path) -> Slide``.

Backends: TIFF-family slides via tiffslide (``_tiff``), DICOM WSI (``_dicom_wsi``, ``_dicom_tiles``,
``_dicom_frames``) and plain images with a lazily built pyramid (``_plain``); each hands its
levels to :class:`Slide` as :class:`~medvl_engine.io.slide._parts.SlideParts`. The pixel-source
kit that wraps a backend's tiles as dask arrays is :mod:`medvl_engine.io.slide.pixel_sources`.
"""

from medvl_engine.io.slide._slide import SLIDE_SUFFIXES, Slide, open_slide, sniff_kind

__all__ = ["SLIDE_SUFFIXES", "Slide", "open_slide", "sniff_kind"]
