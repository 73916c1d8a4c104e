"""napari-medvl: ask a slide or a mammogram a question in words, see the answer on the image."""

__version__ = "0.1.0"
__all__ = ["__version__"]
