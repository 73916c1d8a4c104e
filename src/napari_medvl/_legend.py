"""A legend of classes for a tissue map: one colour swatch and class name per label.

napari shows no legend for a labels layer, so the "Segment by prompts" dock shows this one
under its area table: the classes in label order, then "uncertain", each with the colour its
cells have on the map, its outlines in the regions layer and its class in the GeoJSON export
(:func:`medvl_engine.export.regions.class_colors`). It stays in the dock as long as the dock
is open, so the colours can be read while painting.
"""

from __future__ import annotations

from collections.abc import Sequence

from qtpy.QtGui import QColor, QPixmap
from qtpy.QtWidgets import QGridLayout, QLabel, QWidget

__all__ = ["ClassLegend"]

_SWATCH_PX = 14


class ClassLegend(QWidget):
    """Swatches and names; empty until a map is shown. ``entries()`` reads them back."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(4, 2, 4, 2)
        self._grid.setHorizontalSpacing(6)
        self._grid.setVerticalSpacing(2)
        self._entries: list[tuple[str, tuple[int, int, int]]] = []

    def show_classes(
        self, names: Sequence[str], colours: Sequence[tuple[float, float, float, float]]
    ) -> None:
        """One row per (name, RGBA colour 0..1), in order; unchanged rows are not redrawn."""
        entries = [
            (str(name), (round(r * 255), round(g * 255), round(b * 255)))
            for name, (r, g, b, _) in zip(names, colours, strict=True)
        ]
        if entries == self._entries:
            return
        while self._grid.count():
            item = self._grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        for row, (name, (r, g, b)) in enumerate(entries):
            pixmap = QPixmap(_SWATCH_PX, _SWATCH_PX)
            pixmap.fill(QColor(r, g, b))
            swatch = QLabel()
            swatch.setPixmap(pixmap)
            swatch.setToolTip(f"#{r:02x}{g:02x}{b:02x}")
            self._grid.addWidget(swatch, row, 0)
            self._grid.addWidget(QLabel(name), row, 1)
        self._grid.setColumnStretch(1, 1)
        self._entries = entries

    def entries(self) -> list[tuple[str, tuple[int, int, int]]]:
        """(class name, (r, g, b) 0..255) of each row shown."""
        return list(self._entries)
