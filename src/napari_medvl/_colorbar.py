"""A colour bar for a heatmap layer: the gradient, its limits, prompt, mode, model and notice.

napari draws no colour bar for image layers, so the heatmap dock shows this one. It paints
the same look-up table the layer and the exports use (``medvl_engine.colormaps``) between
the layer's contrast limits, with 0 marked on a signed (diverging) map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from qtpy.QtCore import Qt
from qtpy.QtGui import QColor, QImage, QPixmap
from qtpy.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

if TYPE_CHECKING:
    import napari

__all__ = ["ColorBar", "colorbar_caption", "legend_layer", "shows_legend"]

_BAR_HEIGHT = 14


def _format(value: float) -> str:
    return f"{value:.3g}"


def colorbar_caption(metadata: dict[str, Any]) -> tuple[str, str]:
    """(title, details) for a heatmap layer's metadata: the prompt and mode; the range of the
    scores, the model and its demo notice (details lines joined by newlines)."""
    mode = metadata.get("mode", "")
    normalize = metadata.get("normalize", "none")
    title = f"{metadata.get('prompt', '')}  ({mode}" + (
        f", {normalize})" if normalize != "none" else ")"
    )
    low, high = metadata.get("value_range", (float("nan"), float("nan")))
    lines = [f"scores {_format(low)} .. {_format(high)}"]
    if metadata.get("threshold") is not None:
        lines[0] += f"; hidden below {_format(metadata['threshold'])}"
    if metadata.get("model"):
        lines.append(f"model: {metadata['model']}")
    if metadata.get("demo_notice"):
        lines.append(str(metadata["demo_notice"]))
    return title, "\n".join(lines)


def shows_legend(layer: Any, kinds: tuple[str, ...]) -> bool:
    """True for a colour-mapped MedVL overlay of one of ``kinds`` (``medvl_kind``): an image
    layer whose metadata names the colour map it is drawn with."""
    metadata = getattr(layer, "metadata", None) or {}
    return (
        metadata.get("medvl_kind") in kinds
        and metadata.get("colormap") is not None
        and hasattr(layer, "contrast_limits")
    )


def legend_layer(viewer: napari.Viewer, kinds: tuple[str, ...]) -> Any:
    """The overlay of ``kinds`` whose colour bar a dock opening on ``viewer`` shows: the
    active layer when it is one, else the topmost one; None when there is none."""
    active = viewer.layers.selection.active
    if shows_legend(active, kinds):
        return active
    return next((layer for layer in reversed(viewer.layers) if shows_legend(layer, kinds)), None)


class ColorBar(QWidget):
    """Gradient with low / 0 / high labels and a caption; empty until a heatmap is shown.

    It keeps its size whether empty or not, so showing a heatmap never re-lays out the dock
    (and never shrinks the canvas under the user's view)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel("")
        self.title.setStyleSheet("font-weight: bold")
        self.bar = QLabel()
        self.bar.setMinimumHeight(_BAR_HEIGHT)
        self.bar.setScaledContents(True)
        self.low_label = QLabel("")
        self.zero_label = QLabel("")
        self.zero_label.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.high_label = QLabel("")
        self.high_label.setAlignment(Qt.AlignmentFlag.AlignRight)
        self.details = QLabel("")
        self.details.setWordWrap(True)
        line = self.details.fontMetrics().lineSpacing()
        self.details.setFixedHeight(5 * line)  # a constant size: results never re-lay out
        self.title.setWordWrap(True)
        self.title.setFixedHeight(2 * line)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        ticks = QHBoxLayout()
        for label in (self.low_label, self.zero_label, self.high_label):
            ticks.addWidget(label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.addWidget(self.title)
        layout.addWidget(self.bar)
        layout.addLayout(ticks)
        layout.addWidget(self.details)
        self.colormap = ""
        self.limits = (0.0, 1.0)
        self.clear()

    def show_layer(self, metadata: dict[str, Any], limits: tuple[float, float]) -> None:
        """Show the bar of a heatmap layer: its metadata (colormap, prompt, ...) and limits."""
        from medvl_engine.colormaps import colormap_lut

        name = str(metadata.get("colormap"))
        if name != self.colormap:
            lut = (colormap_lut(name, 256) * 255.0 + 0.5).astype(np.uint8)
            rgba = np.ascontiguousarray(np.repeat(lut[None], _BAR_HEIGHT, axis=0))
            image = QImage(  # type: ignore[call-overload]  # the stubs omit the buffer form
                rgba.data, 256, _BAR_HEIGHT, 4 * 256, QImage.Format.Format_RGBA8888
            )
            self.bar.setPixmap(QPixmap.fromImage(image.copy()))
            self.colormap = name
        low, high = float(limits[0]), float(limits[1])
        self.limits = (low, high)
        self.low_label.setText(_format(low))
        self.high_label.setText(_format(high))
        self.zero_label.setText("0" if low < 0.0 < high else "")
        title, details = colorbar_caption(metadata)
        self.title.setText(title)
        self.details.setText(details)
        self.showing = True

    def show_overlay(self, layer: Any) -> None:
        """Show the bar of overlay ``layer`` (see ``shows_legend``) as it is drawn now."""
        self.show_layer(layer.metadata, tuple(layer.contrast_limits))

    def clear(self) -> None:
        """No heatmap shown: an empty bar and a caption saying so."""
        blank = QPixmap(256, _BAR_HEIGHT)
        blank.fill(QColor(0, 0, 0, 0))
        self.bar.setPixmap(blank)
        self.colormap = ""
        for label in (self.low_label, self.zero_label, self.high_label, self.details):
            label.setText("")
        self.title.setText("colour bar: no heatmap shown")
        self.showing = False

    def pixel_colors(self) -> np.ndarray:
        """The bar's colours as drawn, uint8 RGB [256, 3] (left = low limit)."""
        image = self.bar.pixmap().toImage().convertToFormat(QImage.Format.Format_RGB888)
        row = [image.pixelColor(x, 0) for x in range(image.width())]
        return np.array([[QColor(c).red(), QColor(c).green(), QColor(c).blue()] for c in row])
