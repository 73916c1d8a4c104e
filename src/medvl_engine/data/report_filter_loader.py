"""Resolve a ``report_filter`` setting to the function that cleans reports before training.

A setting may run only code its user chose on purpose:

- ``rules``: :func:`medvl_engine.data.filter_report`; ``none``: reports are used as written;
- ``path/to/file.py:function``: a function defined in the user's own Python file, run only
  with the user's consent: ``medvl-train --allow-code`` (or :func:`allow_code` from Python).
  A config can be shared, so a file it names is never imported on the config's word alone;
  without consent the setting is one sentence saying what it asks to run. With consent, the
  file and function are printed on stderr before the file is imported;
- ``NAME``: an entry point registered under the group :data:`ENTRY_POINT_GROUP` by an installed
  package (``[project.entry-points."medvl.report_filters"]``), or its ``module:function`` value
  (installing the package was the consent: no ``--allow-code`` needed);
- ``medvl_engine.<module>:function``: a function of medvl itself.

Anything else, and in particular functions of Python itself (``os:system``,
``subprocess:run``, ``builtins:eval``) or of other installed packages, is refused with a
:class:`ConfigError` sentence.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from medvl_engine.data.reports import filter_report
from medvl_engine.errors import ConfigError

__all__ = [
    "ENTRY_POINT_GROUP",
    "ResolvedReportFilter",
    "allow_code",
    "check_report_filter_consent",
    "code_allowed",
    "resolve_report_filter",
]

ENTRY_POINT_GROUP = "medvl.report_filters"
_HOW = (
    "name a function in your own Python file (path/to/filters.py:function) or an entry point "
    f"registered under '{ENTRY_POINT_GROUP}'"
)


_consent_lock = threading.Lock()
_consent_depth = 0


@contextmanager
def allow_code(allowed: bool = True) -> Iterator[None]:
    """While inside, code files named by a config (``file.py:function``) may run.

    ``medvl-train --allow-code`` enters it around the run; ``allowed=False`` is a no-op, so
    callers can pass their flag straight through.
    """
    global _consent_depth
    if not allowed:
        yield
        return
    with _consent_lock:
        _consent_depth += 1
    try:
        yield
    finally:
        with _consent_lock:
            _consent_depth -= 1


def code_allowed() -> bool:
    """Whether the user consented to running code files named by a config."""
    return _consent_depth > 0


def _file_reference(spec: str) -> tuple[Path, str] | None:
    """``(path, function)`` when ``spec`` names a Python file (``path/to/file.py:function``)."""
    target, _, attribute = spec.strip().rpartition(":")
    if target.endswith(".py"):
        return Path(target).expanduser(), attribute
    return None


def check_report_filter_consent(spec: str, setting: str = "task.report_filter") -> None:
    """ConfigError when ``spec`` names a Python file and the user did not consent to run it.

    Cheap (nothing is read or imported): run on load, before any data are made.
    """
    reference = _file_reference(spec)
    if reference is None or code_allowed():
        return
    path, attribute = reference
    raise ConfigError(
        f"{setting}={spec.strip()!r} asks to run the function {attribute!r} from the Python file "
        f"{os.path.abspath(path)}, and medvl runs code named by a config only with your consent; "
        "check that file, then pass --allow-code to medvl-train to run it (or install it as "
        f"an entry point under '{ENTRY_POINT_GROUP}')."
    )


@dataclass(frozen=True)
class ResolvedReportFilter:
    """The function to apply (None: keep reports as written) and what it is, in words."""

    function: Callable[[str], str] | None
    description: str


def resolve_report_filter(spec: str, setting: str = "task.report_filter") -> ResolvedReportFilter:
    """The report filter a setting names (see the module docstring); ConfigError otherwise."""
    spec = spec.strip()
    if spec == "rules":
        return ResolvedReportFilter(filter_report, "medvl's rule-based filter")
    if spec == "none":
        return ResolvedReportFilter(None, "none (reports are used as written)")
    target, _, attribute = spec.rpartition(":")
    if target.endswith(".py"):
        check_report_filter_consent(spec, setting)
        return _from_file(Path(target), attribute, spec, setting)
    entry_point = _entry_point(spec)
    if entry_point is not None:
        return _from_entry_point(entry_point, spec, setting)
    if not target or not attribute:
        raise ConfigError(
            f"{setting}={spec!r} is not rules, none or a report filter medvl can find; {_HOW}."
        )
    return _from_module(target, attribute, spec, setting)


def _entry_point(spec: str) -> importlib.metadata.EntryPoint | None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if spec in (entry_point.name, entry_point.value):
            return entry_point
    return None


def _python_install_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return [Path(paths[name]).resolve() for name in names if name in paths]


def _from_file(path: Path, attribute: str, spec: str, setting: str) -> ResolvedReportFilter:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ConfigError(
            f"{setting}={spec!r} names {path}, which does not exist or is not a regular file; "
            "give the path of your Python file and the function in it as path/to/filters.py:name."
        )
    if any(path.is_relative_to(folder) for folder in _python_install_dirs()):
        raise ConfigError(
            f"{setting}={spec!r} names a file of the Python installation ({path}), not one of "
            f"your own, and medvl does not call those; {_HOW}."
        )
    if not attribute.isidentifier():
        raise ConfigError(
            f"{setting}={spec!r} does not name a function after the colon; write it as "
            "path/to/filters.py:function_name."
        )
    module_name = f"medvl_user_report_filter_{abs(hash(str(path)))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ConfigError(f"{setting}={spec!r}: {path} cannot be read as a Python file; {_HOW}.")
    module = importlib.util.module_from_spec(module_spec)
    print(
        f"medvl: running {path} to use its function {attribute} as {setting} "
        "(allowed by --allow-code)",
        file=sys.stderr,
        flush=True,
    )
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - the user's own file may fail in any way
        raise ConfigError(
            f"{setting}={spec!r}: running {path} failed ({type(error).__name__}); fix the file "
            "(import it with python to see the full error)."
        ) from error
    function = getattr(module, attribute, None)
    defined_here = (
        inspect.isfunction(function) and Path(function.__code__.co_filename).resolve() == path
    )
    if not defined_here:
        raise ConfigError(
            f"{setting}={spec!r}: {path} defines no function {attribute!r} of its own (a name "
            "imported from elsewhere does not count); define `def "
            f"{attribute}(report: str) -> str` in that file."
        )
    return ResolvedReportFilter(function, f"function {attribute} from {path}")


def _from_entry_point(
    entry_point: importlib.metadata.EntryPoint, spec: str, setting: str
) -> ResolvedReportFilter:
    try:
        function = entry_point.load()
    except (ImportError, AttributeError) as error:
        raise ConfigError(
            f"{setting}={spec!r} is the entry point {entry_point.name} = {entry_point.value}, "
            f"which cannot be imported ({type(error).__name__}); reinstall the package that "
            "provides it."
        ) from error
    _refuse_python_itself(function, spec, setting)
    if not callable(function):
        raise ConfigError(
            f"{setting}={spec!r} is the entry point {entry_point.value}, which is not a function; "
            "register a function that takes a report and returns the cleaned text."
        )
    owner = entry_point.dist.name if entry_point.dist is not None else "an installed package"
    return ResolvedReportFilter(
        function, f"entry point {entry_point.name} = {entry_point.value} from {owner}"
    )


def _from_module(module_name: str, attribute: str, spec: str, setting: str) -> ResolvedReportFilter:
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise ConfigError(
            f"{setting}={spec!r} names a function of Python itself, which medvl never calls on "
            f"reports; {_HOW}."
        )
    if top != "medvl_engine":
        raise ConfigError(
            f"{setting}={spec!r} names a function of an installed module that is not registered "
            f"as a report filter; {_HOW}."
        )
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        raise ConfigError(
            f"{setting}={spec!r} cannot be imported (medvl has no function {attribute!r} in "
            f"{module_name}); check the name, or {_HOW}."
        ) from None
    if not inspect.isfunction(function):
        raise ConfigError(f"{setting}={spec!r} is not a function; {_HOW}.")
    return ResolvedReportFilter(function, f"function {attribute} from {module_name}")


def _refuse_python_itself(function: object, spec: str, setting: str) -> None:
    module = getattr(function, "__module__", None) or ""
    top = module.split(".")[0]
    if inspect.isbuiltin(function) or top in sys.stdlib_module_names or top == "builtins":
        raise ConfigError(
            f"{setting}={spec!r} resolves to {module or 'a built-in'}."
            f"{getattr(function, '__name__', '?')}, a function of Python itself, which medvl "
            f"never calls on reports; {_HOW}."
        )
