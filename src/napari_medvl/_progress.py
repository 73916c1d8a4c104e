"""Turn an engine call with a ``progress(done, total)`` callback into a generator of progress.

napari's generator workers can only report progress and be cancelled at a
``yield``. Engine functions report progress through a callback instead, so the
call runs in a helper thread whose callback feeds a queue; the generator
yields what arrives. When the worker is quit, the generator is closed, the
next callback raises CancelledError inside the engine call, and the helper
thread stops at its next progress report. No Qt here: testable with plain
iteration.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

__all__ = ["Progress", "run_with_progress"]

T = TypeVar("T")
_POLL_S = 0.1


@dataclass(frozen=True)
class Progress:
    """One progress report: ``done`` of ``total`` units of ``stage`` (total 0 = unknown) and,
    when the job can tell, the seconds it expects the stage still needs (``eta_s``)."""

    stage: str
    done: int = 0
    total: int = 0
    eta_s: float | None = None


def run_with_progress(
    stage: str,
    function: Callable[..., T],
    *args: Any,
    cancel: threading.Event | None = None,
    **kwargs: Any,
) -> Generator[Progress, None, T]:
    """Call ``function(*args, progress=callback, **kwargs)`` in a thread, yielding Progress.

    Use as ``result = yield from run_with_progress("features", extract, slide, ...)``.
    Exceptions raised by ``function`` are re-raised here. Setting ``cancel`` or
    closing the generator cancels the call at its next progress report; with
    ``cancel`` set the generator itself raises CancelledError at once.
    """
    from medvl_engine.errors import CancelledError

    reports: queue.Queue[tuple[int, int]] = queue.Queue()
    cancelled = cancel if cancel is not None else threading.Event()
    outcome: dict[str, Any] = {}

    def callback(done: int, total: int) -> None:
        if cancelled.is_set():
            raise CancelledError(f"{stage} was cancelled.")
        reports.put((int(done), int(total)))

    def target() -> None:
        try:
            outcome["value"] = function(*args, progress=callback, **kwargs)
        except BaseException as error:  # re-raised in the generator's thread
            outcome["error"] = error

    helper = threading.Thread(target=target, name=f"medvl-{stage}", daemon=True)
    yield Progress(stage)
    helper.start()
    last = Progress(stage)
    try:
        while helper.is_alive() or not reports.empty():
            if cancelled.is_set():
                raise CancelledError(f"{stage} was cancelled.")
            try:
                done, total = reports.get(timeout=_POLL_S)
            except queue.Empty:
                yield last  # lets a quit request through while the call is silent
                continue
            last = Progress(stage, done, total)
            yield last
    finally:
        if helper.is_alive():
            cancelled.set()
    helper.join()
    if "error" in outcome:
        raise outcome["error"]
    return cast(T, outcome["value"])
