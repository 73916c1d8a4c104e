"""The model process: one persistent child process that runs the docks' engine work.

Loading a model and extracting features in threads of napari's own process competes with the
GUI thread for the GIL (importing torch alone holds it for about 0.3 s in one stretch, see
bench/bench_import_gil.py), and the viewer stutters. The docks instead send their requests to
a child process started with the "spawn" context on first use, which keeps the loaded models
and open slides between requests; napari's process never imports torch.

Protocol (messages are tuples pickled through one duplex Pipe; nothing that needs torch
crosses it):
  to the child    ("run", job, "module:function", payload), ("cancel", job), ("stop",)
  to napari       ("ready", pid), (job, "yield", value), (job, "return", value),
                  (job, "error", ErrorReport)
A handler ``function(payload, state, cancel)`` is a generator run in its own thread of the
child: what it yields and returns must be plain data (numpy arrays, dataclasses of this
plugin or the engine's torch-free records, such as TopKRunSummary); ``state`` is a dict kept
for the child's lifetime (models, open slides); ``cancel`` is set by ("cancel", job).
:meth:`ModelProcess.run` is the napari side: a generator that yields what the handler yields,
returns what it returns, and raises its MedVLError (one sentence) again. Small results (score
grids of a few hundred kB, a TopK run with its breast image of a few MB) are pickled whole;
the patch features stay in the child (and in the feature store on disk). Handlers:
:mod:`._worker_heatmap`, :mod:`._worker_classify`, :mod:`._worker_topk`, :mod:`._worker_segment`.

The process stops when the last viewer that used it closes (:func:`attach_viewer`), at
interpreter exit, or when napari's process dies (the child's end of the pipe reads EOF).
Where no process can be started (a frozen application, a sandbox), ``model_process()``
returns None after saying so once, and the docks run their jobs in threads as before;
``MEDVL_MODEL_PROCESS=0`` chooses threads on purpose. No Qt here except in attach_viewer.
"""

from __future__ import annotations

import atexit
import importlib
import itertools
import logging
import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ENV_SWITCH",
    "ErrorReport",
    "ModelProcess",
    "attach_viewer",
    "model_process",
    "shutdown_model_process",
]

ENV_SWITCH = "MEDVL_MODEL_PROCESS"
"""Environment variable: "0" runs the models in napari's own process (threads)."""

START_TIMEOUT_S = 120.0  # the child's first reply (it imports this module only)
STOP_TIMEOUT_S = 5.0
CHILD_NICENESS = 10
"""The child's scheduling priority below napari's (POSIX nice): on a machine whose cores are
all busy, the model's threads otherwise take the CPU the event loop needs for each frame."""
_POLL_S = 0.1
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorReport:
    """An exception of the child, as plain data: the name of its nearest class defined in
    :mod:`medvl_engine.errors` (None for other errors), its type name, sentence and file."""

    medvl_class: str | None
    type_name: str
    message: str
    path: str | None = None
    details: str = ""

    @classmethod
    def of(cls, error: BaseException) -> ErrorReport:
        from medvl_engine import errors

        base = next(
            (
                klass.__name__
                for klass in type(error).__mro__
                if klass.__module__ == errors.__name__ and issubclass(klass, errors.MedVLError)
            ),
            None,
        )
        path = getattr(error, "path", None)
        message = error.message if isinstance(error, errors.MedVLError) else str(error)
        return cls(
            base,
            type(error).__name__,
            message,
            str(path) if path is not None else None,
            "".join(traceback.format_exception(error)),
        )

    def error(self) -> BaseException:
        """The exception to raise in napari's process: the same MedVLError class (or its
        nearest base in medvl_engine.errors) with the same sentence, else a RuntimeError."""
        from medvl_engine import errors

        if self.medvl_class is not None:
            klass = getattr(errors, self.medvl_class, errors.MedVLError)
            return klass(self.message, self.path)
        return RuntimeError(f"{self.type_name} in the model process: {self.message}")


class ModelProcess:
    """napari's handle on the model process: start, run jobs, cancel, stop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._queues: dict[int, queue.Queue[tuple[str, Any]]] = {}
        self._process: Any = None
        self._connection: Any = None
        self._lost = threading.Event()  # the child's end of the pipe closed
        self.pid: int | None = None

    @property
    def alive(self) -> bool:
        return self._process is not None and not self._lost.is_set() and self._process.is_alive()

    def start(self, cancel: threading.Event | None = None) -> None:
        """Start the child and wait for its first message (raises OSError / RuntimeError
        when it cannot be started, CancelledError when ``cancel`` is set meanwhile). Call
        from a background thread: it takes ~0.1 - 1 s."""
        with self._lock:
            if self.alive:
                return
            if self._process is not None:  # died: reaped before a new one starts
                self._process.join(STOP_TIMEOUT_S)
                self._connection.close()
            import multiprocessing

            context = multiprocessing.get_context("spawn")
            ours, theirs = context.Pipe(duplex=True)
            process = context.Process(
                target=serve, args=(theirs,), name="medvl-models", daemon=True
            )
            with _main_script_hidden():
                process.start()
            theirs.close()
            waited = 0.0
            while not ours.poll(_POLL_S):
                waited += _POLL_S
                if (cancel is not None and cancel.is_set()) or waited > START_TIMEOUT_S:
                    process.terminate()
                    process.join(STOP_TIMEOUT_S)
                    if waited > START_TIMEOUT_S:
                        raise RuntimeError("the model process did not answer")
                    from medvl_engine.errors import CancelledError

                    raise CancelledError("The request was cancelled.")
            hello = ours.recv()
            if not (isinstance(hello, tuple) and hello[0] == "ready"):
                process.terminate()
                raise RuntimeError(f"the model process answered {hello!r}")
            self._process, self._connection, self.pid = process, ours, int(hello[1])
            self._lost = threading.Event()
            threading.Thread(
                target=self._read, args=(ours, self._lost), name="medvl-model-replies", daemon=True
            ).start()

    def _read(self, connection: Any, lost: threading.Event) -> None:
        """Hand every reply to its job's queue; on EOF fail the jobs still waiting."""
        while True:
            try:
                job, kind, value = connection.recv()
            except (EOFError, OSError, ValueError):
                break
            waiting = self._queues.get(job)
            if waiting is not None:
                waiting.put((kind, value))
        lost.set()
        for waiting in list(self._queues.values()):
            waiting.put(("gone", None))

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            self._connection.send(message)

    def run(
        self,
        handler: str,
        payload: Any,
        cancel: threading.Event | None = None,
        label: str = "request",
    ) -> Generator[Any, None, Any]:
        """Run ``handler`` ("module:function") on ``payload`` in the child: yields what it
        yields, returns what it returns. Setting ``cancel`` or closing the generator cancels
        the job in the child; ``cancel`` set raises CancelledError ("The ``label`` was
        cancelled.") here at once."""
        from medvl_engine.errors import CancelledError

        self.start(cancel)
        job = next(self._ids)
        replies: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._queues[job] = replies
        finished = False
        try:
            try:
                self._send(("run", job, handler, payload))
            except (OSError, ValueError) as error:  # it died since start(): said as one sentence
                finished = True
                raise _process_gone() from error
            while True:
                if cancel is not None and cancel.is_set():
                    raise CancelledError(f"The {label} was cancelled.")
                try:
                    kind, value = replies.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if kind == "yield":
                    yield value
                    continue
                finished = True
                if kind == "return":
                    return value
                if kind == "error":
                    raise value.error()
                raise _process_gone()
        finally:
            self._queues.pop(job, None)
            if not finished and self.alive:
                try:
                    self._send(("cancel", job))
                except (OSError, ValueError):
                    pass

    def call(self, handler: str, payload: Any, cancel: threading.Event | None = None) -> Any:
        """Run ``handler`` to its end, dropping what it yields; its return value."""
        steps = self.run(handler, payload, cancel)
        while True:
            try:
                next(steps)
            except StopIteration as finished:
                return finished.value

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Ask the child to stop, wait ``timeout_s``, then terminate it; reaped either way."""
        with self._lock:
            process, connection = self._process, self._connection
            self._process = self._connection = None
            self.pid = None
        if process is None:
            return
        try:
            with self._send_lock:
                connection.send(("stop",))
        except (OSError, ValueError):
            pass
        process.join(timeout_s)
        if process.is_alive():
            process.terminate()
            process.join(timeout_s)
        connection.close()


@contextmanager
def _main_script_hidden() -> Iterator[None]:
    """While the child is launched, napari's ``__main__`` names no script: "spawn" would
    otherwise run that script again in the child, and a script without a ``__main__`` guard
    (``viewer = napari.Viewer(); napari.run()``) would open a second viewer there."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    names: tuple[str, ...] = ("__file__", "__spec__")
    saved: dict[str, Any] = {name: main.__dict__[name] for name in names if name in vars(main)}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _process_gone() -> BaseException:
    from medvl_engine.errors import MedVLError

    return MedVLError(
        "The model process stopped unexpectedly (out of memory?); press Run to start it again."
    )


# ----- napari's side: one process for this interpreter, stopped with the last viewer
_shared: ModelProcess | None = None
_unavailable: str | None = None
_viewers: set[int] = set()
_shared_lock = threading.Lock()


def model_process(cancel: threading.Event | None = None) -> ModelProcess | None:
    """The running (or started now) model process, or None where jobs run in threads: the
    switch says so, or a process could not be started (said once, as a log warning and a
    napari notification). ``cancel`` set while it starts raises CancelledError."""
    from medvl_engine.errors import CancelledError

    global _shared, _unavailable
    if os.environ.get(ENV_SWITCH, "1").strip() in {"0", "false", "no", "off"}:
        return None
    with _shared_lock:
        if _unavailable is not None:
            return None
        if _shared is None:
            _shared = ModelProcess()
        shared = _shared
    try:
        shared.start(cancel)
    except CancelledError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure to spawn means threads
        with _shared_lock:
            _unavailable = f"{type(error).__name__}: {error}"
        _say_threads(_unavailable)
        return None
    return shared


def _say_threads(reason: str) -> None:
    message = (
        f"MedVL could not start its model process ({reason}); models run in napari's own "
        "process, and the viewer may stutter while they work."
    )
    _log.warning(message)
    try:
        from napari.utils.notifications import show_warning

        show_warning(message)
    except Exception:  # noqa: BLE001 - no napari here: the log line says it
        pass


def shutdown_model_process() -> None:
    """Stop the model process if one runs (at exit, and when the last viewer closes)."""
    global _shared
    with _shared_lock:
        shared, _shared = _shared, None
    if shared is not None:
        shared.stop()


atexit.register(shutdown_model_process)


def attach_viewer(viewer: Any) -> None:
    """Stop the model process when ``viewer`` and every other attached viewer have closed
    (in a background thread, which waits for the child's exit: no process is left)."""
    import warnings

    with warnings.catch_warnings():  # napari warns plugins about its private attributes
        warnings.simplefilter("ignore", FutureWarning)
        window = getattr(getattr(viewer, "window", None), "_qt_window", None)
    if window is None or id(window) in _viewers:
        return
    key = id(window)
    _viewers.add(key)

    def closed(*_args: Any) -> None:
        _viewers.discard(key)
        if not _viewers:
            threading.Thread(
                target=shutdown_model_process, name="medvl-model-stop", daemon=False
            ).start()

    window.destroyed.connect(closed)


# ----- the child's side
def serve(connection: Any) -> None:
    """The child's main loop: run each job in a thread, cancel on request, stop on "stop"
    or when napari's end of the pipe closes."""
    os.environ[ENV_SWITCH] = "0"  # the child's own jobs run in its threads
    if hasattr(os, "nice"):  # napari's process gets the cores first: the GUI never waits
        try:
            os.nice(CHILD_NICENESS)
        except OSError:
            pass
    send_lock = threading.Lock()
    state: dict[str, Any] = {}
    cancels: dict[int, threading.Event] = {}

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            try:
                connection.send(message)
            except (OSError, ValueError):
                pass  # napari's end is gone: the loop below reads EOF and stops

    def run_job(job: int, handler: str, payload: Any, cancel: threading.Event) -> None:
        try:
            function = _handler(handler)
            steps = function(payload, state, cancel)
            while True:
                try:
                    value = next(steps)
                except StopIteration as finished:
                    send((job, "return", finished.value))
                    return
                send((job, "yield", value))
        except BaseException as error:  # noqa: BLE001 - every error goes back as a report
            send((job, "error", ErrorReport.of(error)))
        finally:
            cancels.pop(job, None)

    send(("ready", os.getpid()))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            break
        kind = message[0]
        if kind == "stop":
            break
        if kind == "cancel":
            event = cancels.get(message[1])
            if event is not None:
                event.set()
        elif kind == "run":
            _, job, handler, payload = message
            cancels[job] = threading.Event()
            threading.Thread(
                target=run_job,
                args=(job, handler, payload, cancels[job]),
                name=f"medvl-job-{job}",
                daemon=True,
            ).start()
    for event in list(cancels.values()):
        event.set()
    for close in state.pop("_on_stop", []):
        close()


def status_in_child(
    payload: Any, state: dict[str, Any], cancel: threading.Event
) -> Generator[Any, None, dict[str, Any]]:
    """The child's pid and which of ``payload`` (module names) it has imported."""
    del state, cancel
    yield from ()
    return {"pid": os.getpid(), "imported": [name for name in payload if name in sys.modules]}


def _handler(name: str) -> Callable[..., Generator[Any, None, Any]]:
    module, _, function = name.partition(":")
    if not module.startswith("napari_medvl."):
        raise ValueError(f"{name} is not a handler of this plugin")
    handler: Callable[..., Generator[Any, None, Any]] = getattr(
        importlib.import_module(module), function
    )
    return handler
