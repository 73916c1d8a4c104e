"""Griffe extension: Sphinx roles in docstrings shown as inline code on the API pages.

The engine's docstrings name other objects the Sphinx way (``:func:`patch_grid```,
``:mod:`.store```, ``:class:`~medvl_engine.io.Slide```); mkdocstrings reads docstrings as
Markdown, where those roles would print literally. This turns each into inline code: the
target as written, or its last part for the ``~`` form, without the leading dot of a
relative name.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|attr|data|obj|exc|const):`([^`]+)`")


def _as_code(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target.lstrip('.')}`"


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx cross-reference role replaced by inline code."""
    return _ROLE.sub(_as_code, text)


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
