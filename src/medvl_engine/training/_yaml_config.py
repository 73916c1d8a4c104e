"""Reading a YAML config file: only a small regular text file, nested a few levels, no aliases.

:func:`read_yaml_config` checks the file with ``os.stat`` before opening it (a named pipe
would block, a device never ends), reads at most :func:`max_config_bytes` bytes, refuses
binary content, and parses with a safe loader that stops past :data:`MAX_CONFIG_DEPTH` levels
and at any alias (a few aliased lines can describe billions of nodes). Every refusal is one
:class:`~medvl_engine.errors.ConfigError` sentence naming the file. The module imports neither
torch nor the io package, so ``medvl-train`` refuses a bad file before its libraries load.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from medvl_engine.common.env import positive_int_setting
from medvl_engine.errors import ConfigError

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "PSEUDO_FOLDERS",
    "max_config_bytes",
    "read_yaml_config",
    "safe_yaml",
]

MAX_CONFIG_BYTES = 1024 * 1024
"""Largest YAML config read (a recipe is a few KB); env MEDVL_MAX_CONFIG_BYTES overrides."""

MAX_CONFIG_DEPTH = 32
"""Deepest nesting of mappings and lists in a YAML config or override value."""

PSEUDO_FOLDERS = (Path("/dev"), Path("/proc"), Path("/sys"))
"""Folders of kernel-made files: never a config, never a place for a run."""


class _TooDeep(Exception):
    """Raised by :class:`_ConfigLoader` past :data:`MAX_CONFIG_DEPTH` levels."""


class _Alias(Exception):
    """Raised by :class:`_ConfigLoader` at an alias (``*name``)."""


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader that stops at a nesting depth and refuses aliases.

    Aliases let a few lines describe a structure of billions of nodes; deep nesting makes
    the composer recurse past Python's stack. Both are refused before anything is built.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _Alias
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise _TooDeep
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def safe_yaml(text: str, what: str) -> Any:
    """``text`` parsed as YAML by :class:`_ConfigLoader`; ConfigError naming ``what``."""
    loader: _ConfigLoader | None = None
    try:
        loader = _ConfigLoader(text)  # its reader refuses control characters already
        return loader.get_single_data()
    except _TooDeep:
        raise ConfigError(
            f"{what} is nested more than {MAX_CONFIG_DEPTH} levels deep; a config needs a few "
            "levels, so flatten it."
        ) from None
    except _Alias:
        raise ConfigError(
            f"{what} uses a YAML alias (*name); write the value out in full instead."
        ) from None
    except RecursionError:
        raise ConfigError(f"{what} is nested too deeply to read; flatten it.") from None
    except (yaml.YAMLError, ValueError, OverflowError, TypeError) as error:
        # constructors raise ValueError too (an integer of 5,000 digits, a bad date)
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigError(f"{what} is not valid YAML ({detail[:120]}); fix it.") from None
    finally:
        if loader is not None:
            loader.dispose()


def max_config_bytes() -> int:
    """Largest YAML config read, in bytes (env MEDVL_MAX_CONFIG_BYTES overrides)."""
    return positive_int_setting("MEDVL_MAX_CONFIG_BYTES", MAX_CONFIG_BYTES)


def _file_type(mode: int) -> str:
    """What a non-regular ``st_mode`` is, in words (io._safe_open's words; importing the io
    package would load dask before a bad config is refused)."""
    for test, words in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def read_yaml_config(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file, read only when it is a small regular text file.

    Refused in one sentence naming the file: a missing path, a folder, a named pipe, device
    or socket (nothing is opened, so a FIFO cannot block), a file larger than
    :func:`max_config_bytes`, a binary file (``/bin/ls``), YAML nested past
    :data:`MAX_CONFIG_DEPTH` levels or using aliases, and a top level that is not a mapping.
    """
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} does not exist; pass an existing YAML file.", path
        ) from None
    except (OSError, RuntimeError) as error:
        raise ConfigError(
            f"config file {path} cannot be inspected ({getattr(error, 'strerror', error)}); "
            "pass a readable YAML file.",
            path,
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            f"config file {path} is {_file_type(info.st_mode)}, not a YAML file; pass "
            "a recipe such as train/limit_demo.yaml.",
            path,
        )
    resolved = path.resolve()
    if any(root in resolved.parents for root in PSEUDO_FOLDERS):
        raise ConfigError(
            f"config file {path} is a file the system makes up ({resolved}), not a YAML file; "
            "pass a recipe such as train/limit_demo.yaml.",
            path,
        )
    limit = max_config_bytes()
    if info.st_size > limit:
        raise ConfigError(
            f"config file {path} is {info.st_size:,} bytes, more than the {limit:,} a config may "
            "take (a recipe is a few KB); pass the right file, or raise MEDVL_MAX_CONFIG_BYTES.",
            path,
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise ConfigError(
            f"config file {path} cannot be read ({error.strerror}); check its permissions.", path
        ) from None
    if len(data) > limit:
        raise ConfigError(
            f"config file {path} is more than {limit:,} bytes long (a recipe is a few KB); pass "
            "the right file, or raise MEDVL_MAX_CONFIG_BYTES.",
            path,
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:
        raise ConfigError(
            f"config file {path} is not a text file (it holds binary data); pass a YAML "
            "recipe such as train/limit_demo.yaml.",
            path,
        )
    loaded = safe_yaml(text, f"config file {path}")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"config file {path} holds a YAML {type(loaded).__name__}, but a config must be a "
            "mapping with the sections 'run' and 'task'.",
            path,
        )
    return loaded
