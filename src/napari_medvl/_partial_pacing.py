"""Partial maps wait for a still view: a pan or zoom in progress keeps its frame rate.

Showing a new partial map costs one layer update and a redraw on the GUI thread; landing on
a frame of a pan it makes that frame one of the longest. A :class:`PartialMapPacer` holds
the newest partial map while the viewer's camera or dims moved in the last ``still_ms``
and shows it once the view has been still that long, or at the latest ``max_wait_ms``
after it arrived (a user panning without pause still sees the map fill in). A newer map
replaces a waiting one; the complete map is the presenter's to show at once, and drops
whatever partial map still waits (:meth:`PartialMapPacer.drop`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from napari_medvl._event_turns import later, viewer_open

__all__ = ["MAX_WAIT_MS", "STILL_MS", "PartialMapPacer"]

STILL_MS = 250  # a view unmoved this long is taken as looked at, not being panned
MAX_WAIT_MS = 2000  # a partial map is shown this long after it arrived, panning or not
LOOK_EVERY_MS = 100  # how often a waiting map looks whether the view is still


class PartialMapPacer:
    """Shows partial maps through ``show`` when the view of ``viewer`` is still.

    ``parent`` is the dock's Qt widget (its timers die with it). The clock is
    ``time.monotonic`` in ms unless ``clock`` is given (tests).
    """

    def __init__(
        self,
        viewer: Any,
        parent: Any,
        show: Callable[[Any], None],
        still_ms: int = STILL_MS,
        max_wait_ms: int = MAX_WAIT_MS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._viewer = viewer
        self._parent = parent
        self._show = show
        self.still_ms = still_ms
        self.max_wait_ms = max_wait_ms
        self._clock = clock or (lambda: time.monotonic() * 1000.0)
        self._moved_at = -float("inf")
        self._waiting: Any = None
        self._arrived_at = 0.0
        self._scheduled = False  # a timer will look again
        for emitter in (
            viewer.camera.events.center,
            viewer.camera.events.zoom,
            viewer.dims.events.current_step,
        ):
            emitter.connect(self._moved)

    @property
    def waiting(self) -> Any:
        """The partial map held back for a still view (None when none waits)."""
        return self._waiting

    def _moved(self, _event: Any = None) -> None:
        self._moved_at = self._clock()

    def offer(self, update: Any) -> None:
        """Show ``update`` now if the view is still, else once it is (or ``max_wait_ms`` after
        the first of the maps waiting since the last one shown)."""
        if self._waiting is None:
            self._arrived_at = self._clock()
        self._waiting = update
        if not self._scheduled:
            self._check()

    def drop(self) -> None:
        """Forget the waiting partial map (the complete map, or a new job, replaces it)."""
        self._waiting = None

    def _due_in_ms(self) -> float:
        now = self._clock()
        until_still = self._moved_at + self.still_ms - now
        until_latest = self._arrived_at + self.max_wait_ms - now
        return max(min(until_still, until_latest), 0.0)

    def _check(self) -> None:
        if self._waiting is None or not viewer_open(self._viewer):
            return
        due_in = self._due_in_ms()
        if due_in <= 0:
            update, self._waiting = self._waiting, None
            self._show(update)
        else:
            self._scheduled = True
            later(self._parent, min(int(due_in) + 1, LOOK_EVERY_MS), self._look_again)

    def _look_again(self) -> None:
        self._scheduled = False
        self._check()
