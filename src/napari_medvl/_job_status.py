"""A dock's job in napari's list of running tasks, without napari keeping the job once it ends.

napari lists every worker its ``create_worker`` starts in the window's task-status manager, so
that closing the window while one runs asks first and then cancels it. The manager never
forgets an entry, and each entry holds its worker (``worker.quit`` as its cancel callback):
the worker, its signals, the dock's callbacks connected to them, the dock and, through the
dock, the closed viewer with its layers stayed alive after the viewer was closed (napari keeps
the window itself alive through a theme connection it never disconnects). Every full garbage
collection then walked all of it: a collection of the oldest generation held the GUI thread
for most of 200 ms once a few viewers had been opened and closed.

Here the entry holds the worker weakly: the close dialog and "cancel all" still reach a job
that runs, and a job that has ended is freed with everything its callbacks reach. Builds on
``Window._register_task_status`` / ``_update_task_status`` (what napari's ``create_worker``
calls), on the napari versions ``_napari_compat.WRITTEN_FOR["task_status"]`` names.
"""

from __future__ import annotations

import weakref
from typing import Any

from napari_medvl._napari_compat import patch_applies

__all__ = ["PROVIDER", "list_running_job"]

PROVIDER = "napari-medvl"
"""How the close dialog names our jobs: ``napari-medvl: <job> running``."""


def list_running_job(worker: Any, name: str) -> bool:
    """List ``worker`` (a superqt worker not started yet) in the task list of the current
    viewer's window as ``name``, holding it weakly; its status follows the worker's signals.
    False when there is no viewer or the installed napari is not one this was written for
    (the job then runs unlisted: closing the window does not ask first)."""
    import napari
    from napari.utils.task_status import Status

    viewer = napari.current_viewer()
    if viewer is None or not patch_applies("task_status"):
        return False
    window = viewer.window
    quit_job = weakref.WeakMethod(worker.quit)

    def cancel() -> bool:
        live = quit_job()
        if live is not None:
            live()
        return live is not None

    status_id = window._register_task_status(
        PROVIDER, Status.PENDING, f"{name} waiting", cancel_callback=cancel
    )
    window_ref = weakref.ref(window)

    def update(status: Status, description: str) -> None:
        live = window_ref()
        if live is not None:
            live._update_task_status(status_id, status, description=description)

    worker.started.connect(lambda: update(Status.BUSY, f"{name} running"))
    worker.errored.connect(lambda *_: update(Status.FAILED, f"{name} failed"))
    worker.finished.connect(lambda: update(Status.COMPLETED, f"{name} done"))
    if hasattr(worker, "aborted"):
        worker.aborted.connect(lambda: update(Status.CANCELLED, f"{name} cancelled"))
    return True
