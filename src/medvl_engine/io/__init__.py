"""Reading slides and mammograms: ``open_slide`` and ``open_mammogram``."""

from medvl_engine.io.slide import Slide, open_slide

__all__ = ["Slide", "open_slide"]
