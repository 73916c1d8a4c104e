"""Models loaded in a background thread before a job needs them, and a job's wait for them.

A dock loads its model once its layers are on screen (``load_in_background``); a job started
meanwhile waits for that load (``wait_for_load``) instead of loading the model a second time.
A failed load is not reported here: the job then loads the model itself and reports the
error sentence. No Qt here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import Any

from napari_medvl._progress import Progress

__all__ = ["load_in_background", "wait_for_load"]

_POLL_S = 0.1


def load_in_background(
    loaded: dict[str, Any],
    loading: dict[str, threading.Event],
    name: str,
    load: Callable[[], Any],
) -> threading.Thread | None:
    """Run ``loaded[name] = load()`` in a daemon thread, with ``loading[name]`` set while it
    runs; None when ``name`` is loaded or loading already."""
    if name in loaded or name in loading:
        return None
    done = threading.Event()
    loading[name] = done

    def run() -> None:
        try:
            loaded[name] = load()
        except Exception:  # reported by the job that loads it again (see above)
            pass
        finally:
            loading.pop(name, None)
            done.set()

    thread = threading.Thread(target=run, name="medvl-preload", daemon=True)
    thread.start()
    return thread


def wait_for_load(
    loading: dict[str, threading.Event],
    name: str,
    cancel: threading.Event | None,
    request: str,
) -> Generator[Progress, None, None]:
    """Yield "loading model" progress until a background load of ``name`` is done; raises
    CancelledError ("The ``request`` request was cancelled.") when ``cancel`` is set."""
    underway = loading.get(name)
    while underway is not None and not underway.wait(_POLL_S):
        if cancel is not None and cancel.is_set():
            from medvl_engine.errors import CancelledError

            raise CancelledError(f"The {request} request was cancelled.")
        yield Progress("loading model")
