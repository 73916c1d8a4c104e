"""A model chooser: registry names and model folders on disk, plus "browse..." for any folder.

The list comes from :func:`medvl_engine.model_folders.list_models` (a handful of small
config reads). Choosing "browse..." opens a folder dialog; a chosen folder joins the list
and becomes the value. ``value`` is what the engine's loaders take: a name or a folder path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from magicgui.widgets import ComboBox, Container, PushButton
from magicgui.widgets.bases import Widget

__all__ = ["BROWSE", "ModelPicker"]

BROWSE = "browse..."


class ModelPicker(Container[Widget]):
    """Combo box of models of one family (``"topksiglip"`` or ``"encoder"``) and a refresh."""

    def __init__(self, family: str, default: str, label: str = "model") -> None:
        self.family = family
        self._extra: list[tuple[str, str]] = []
        self._choices: list[tuple[str, str]] = []
        self.combo = ComboBox(choices=self._choice_list, label=label)
        self.refresh_button = PushButton(text="refresh")
        super().__init__(
            widgets=[self.combo, self.refresh_button], layout="horizontal", label=label
        )
        self.margins = (0, 0, 0, 0)
        self._previous = default
        self.refresh()
        self.set_value(default)
        self.combo.changed.connect(self._chosen)
        self.refresh_button.changed.connect(self.refresh)

    def _choice_list(self, _widget: Any = None) -> list[tuple[str, str]]:
        return [*self._choices, *self._extra, (BROWSE, BROWSE)]

    def refresh(self, _value: Any = None) -> None:
        """Re-read the registry and the model folders on disk, keeping the current value."""
        from medvl_engine.model_folders import list_models

        current = self.combo.value if self.combo.value not in (None, BROWSE) else self._previous
        try:
            listed = list_models(self.family)
        except Exception:  # an unreadable cache folder must not break the dock
            listed = []
        self._choices = [(choice.label, choice.value) for choice in listed]
        self._rebuild()
        self.set_value(current)

    def _rebuild(self) -> None:
        """Re-list the choices in order (registry, disk, added folders, browse...)."""
        with self.combo.changed.blocked():
            self.combo.native.clear()
            self.combo.reset_choices()

    @property
    def value(self) -> str:
        value = self.combo.value
        return str(value) if value not in (None, BROWSE) else self._previous

    @value.setter
    def value(self, new: str) -> None:
        self.set_value(new)

    def set_value(self, value: str | Path) -> None:
        """Select ``value``, adding it to the list first when it is a folder not listed yet."""
        text = str(value)
        if text not in [v for _, v in self._choice_list()]:
            self._extra.append((Path(text).name if Path(text).is_dir() else text, text))
            self._rebuild()
        self._previous = text
        self.combo.value = text

    def _chosen(self, value: Any) -> None:
        if value != BROWSE:
            if value is not None:
                self._previous = str(value)
            return
        folder = self._ask_folder()
        self.set_value(folder or self._previous)

    def _ask_folder(self) -> str | None:
        from qtpy.QtWidgets import QFileDialog

        folder = QFileDialog.getExistingDirectory(self.native, "Model folder")
        return folder or None
