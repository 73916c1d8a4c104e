"""One background job per widget: start, progress, cancel, results, errors.

A widget owns a JobRunner. ``start`` cancels the job still running (a new
request replaces the old one), runs the generator in a napari thread worker
(listed in napari's running tasks, held weakly there: ``_job_status``),
forwards Progress to the widget's progress bar, hands the return value to
``on_result`` only if the job was not superseded or cancelled, and turns
errors into a one-sentence notification. A job may also yield other objects
(e.g. a partial result drawn while it goes on): they go to ``on_partial`` when
set. ``on_error``, when set, receives the sentence shown for an error, so a
status line can say it instead of the stage the job was in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any, cast

from napari.qt.threading import GeneratorWorker
from superqt.utils import create_worker

from napari_medvl._job_status import list_running_job
from napari_medvl._notify import report_error
from napari_medvl._progress import Progress

__all__ = ["JobRunner"]


class JobRunner:
    """Runs at most one generator job at a time for one widget."""

    def __init__(
        self,
        on_progress: Callable[[Progress], None],
        on_result: Callable[[Any], None],
        on_state: Callable[[bool], None],
    ) -> None:
        self._on_progress = on_progress
        self._on_result = on_result
        self._on_state = on_state
        self._generation = 0
        self._cancel: threading.Event | None = None
        self.worker: Any = None
        self.last_error: BaseException | None = None
        self.on_partial: Callable[[Any], None] | None = None
        self.after_progress: Callable[[Progress], None] | None = None
        self.on_error: Callable[[str], None] | None = None
        self.displaying: Callable[[], bool] | None = None

    @property
    def generation(self) -> int:
        """Counts jobs started and cancelled: what a job reported is stale once it changed."""
        return self._generation

    @property
    def running(self) -> bool:
        """True while a job runs, and while the widget still shows its result (``displaying``
        says so when a result is drawn over several event-loop turns)."""
        return self.worker is not None or (self.displaying is not None and self.displaying())

    def start(
        self, job: Callable[..., Generator[Any, None, Any]], *args: Any, **kwargs: Any
    ) -> Any:
        """Cancel any running job and start ``job(*args, cancel=event, **kwargs)``."""
        self.cancel()
        self._generation += 1
        generation = self._generation
        cancel = threading.Event()
        self._cancel = cancel
        self.last_error = None
        worker = create_worker(
            cast(Any, job),
            *args,
            cancel=cancel,
            _start_thread=False,
            _worker_class=GeneratorWorker,
            _ignore_errors=True,
            **kwargs,
        )
        list_running_job(worker, getattr(job, "__name__", "job").strip("_").replace("_", " "))
        worker.yielded.connect(lambda report: self._progress(generation, report))
        worker.returned.connect(lambda value: self._returned(generation, value))
        worker.errored.connect(lambda error: self._errored(generation, error))
        worker.finished.connect(lambda *_: self._finished(generation))
        self.worker = worker
        self._on_state(True)
        worker.start()
        return worker

    def cancel(self) -> None:
        """Ask the running job to stop; its result, if any still arrives, is dropped."""
        if self._cancel is not None:
            self._cancel.set()
        if self.worker is not None:
            self.worker.quit()
            self._generation += 1
            self.worker = None
            self._on_state(False)

    def _current(self, generation: int) -> bool:
        return generation == self._generation

    def _progress(self, generation: int, report: Any) -> None:
        if not self._current(generation):
            return
        if isinstance(report, Progress):
            self._on_progress(report)
            if self.after_progress is not None:
                self.after_progress(report)
        elif self.on_partial is not None:
            try:
                self.on_partial(report)
            except Exception as error:  # a partial result that cannot be shown is reported
                self._errored(generation, error)

    def _returned(self, generation: int, value: Any) -> None:
        if self._current(generation):
            try:
                self._on_result(value)
            except Exception as error:  # a result that cannot be shown is reported, not raised
                self._errored(generation, error)

    def _errored(self, generation: int, error: BaseException) -> None:
        from medvl_engine.errors import CancelledError

        if not self._current(generation) or isinstance(error, CancelledError):
            return
        self.last_error = error
        message = report_error(error)
        if self.on_error is not None:
            self.on_error(message)

    def _finished(self, generation: int) -> None:
        if self._current(generation):
            self.worker = None
            self._on_state(False)
