"""A dock form that scrolls inside its dock instead of making napari's window taller.

A dock's minimum height is its form's: a form taller than the window's dock area (the TopK
dock is about 610 px, napari opens at 651 px on a 1600 x 1000 screen) makes Qt grow the main
window, and each line a status label gains or loses grows or shrinks it again, resizing the
canvas: napari then redraws the whole view at the new size on the GUI thread. Inside a scroll
area the form keeps the window's size; the dock scrolls when it does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from magicgui.widgets import Container
from magicgui.widgets.bases import Widget

__all__ = ["ScrollingForm"]


class ScrollingForm(Container[Widget]):
    """A vertical magicgui container in a frameless scroll area.

    napari docks a magicgui widget's ``native``; here that is the scroll area (magicgui's own
    ``native`` of a scrollable container is the widget inside it, which napari would take out
    of the scroll area). :attr:`body` holds the rows; :meth:`add_qt_widget` appends a plain
    Qt widget (a colour bar, a legend) under them.
    """

    def __init__(self, widgets: Sequence[Widget], **kwargs: Any) -> None:
        super().__init__(widgets=widgets, scrollable=True, **kwargs)
        from qtpy.QtWidgets import QFrame

        self.root_native_widget.setFrameShape(QFrame.Shape.NoFrame)

    @property
    def native(self) -> Any:
        """The scroll area napari docks."""
        return self.root_native_widget

    @property
    def body(self) -> Any:
        """The Qt widget that holds the form's rows (inside the scroll area)."""
        return self.root_native_widget.widget()

    def add_qt_widget(self, widget: Any) -> None:
        """Append a plain Qt widget under the form's rows."""
        self.body.layout().addWidget(widget)
