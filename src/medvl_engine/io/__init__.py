"""Reading slides and mammograms: ``open_slide``, ``open_mammogram``, ``breast_image``."""

from medvl_engine.io.mammo import BreastImage, Mammogram, breast_image, open_mammogram
from medvl_engine.io.slide import Slide, open_slide

__all__ = ["BreastImage", "Mammogram", "Slide", "breast_image", "open_mammogram", "open_slide"]
