"""Outputs never destroy inputs: an output path that is, or lies inside, an input is refused.

Every command and export checks its output paths against the files it reads before any work
is done: ``medvl heatmap X.tiff --out X.tiff`` would otherwise replace the slide with its own
heatmap. Paths are compared after resolving symbolic links and ``..``, and existing files are
also compared by device and inode, so a hard link or a second mount of the same file is caught.

An input folder (a DICOM WSI series, a zarr feature store) holds every path below it. A DICOM
file's own folder counts for outputs named ``*.dcm`` only, because the DICOM readers take the
``.dcm`` files beside it as parts of the same series.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from medvl_engine.errors import ConfigError

__all__ = [
    "check_output_folder_spares_inputs",
    "check_outputs_spare_inputs",
    "dependent_outputs",
]

_DICOM_SUFFIXES = (".dcm", ".dicom")
_DICOM_MAGIC_OFFSET = 128
_DICOM_MAGIC = b"DICM"


def dependent_outputs(path: str | os.PathLike[str]) -> list[Path]:
    """The files written for one ``--out`` path: itself, and for a TopK ``.csv`` its
    ``<stem>_importance.npy`` beside it."""
    path = Path(path)
    written = [path]
    if path.suffix.lower() == ".csv":
        written.append(path.with_name(f"{path.stem}_importance.npy"))
    return written


def check_outputs_spare_inputs(
    outputs: Iterable[str | os.PathLike[str]],
    inputs: Iterable[str | os.PathLike[str] | None],
) -> None:
    """Refuse, with one sentence, any output that is an input or lies inside an input folder.

    ``outputs``: every file (or folder) the command will write. ``inputs``: every file or
    folder it reads (None entries are skipped). Also refused: two outputs that are the same
    file, since the second would silently replace the first. Nothing is opened except the first
    132 bytes of a regular input file without a DICOM suffix, to tell whether it is DICOM.
    Raises ConfigError.
    """
    sources = [Path(p) for p in inputs if p is not None]
    resolved_sources = [(source, _resolve(source)) for source in sources]
    seen: dict[Path, Path] = {}
    for given in (Path(p) for p in outputs):
        target = _resolve(given)
        if target in seen:
            raise ConfigError(
                f"{given.name} is named twice as an output ({seen[target]} and {given}); "
                "give each output its own file name."
            )
        seen[target] = given
        for source, resolved in resolved_sources:
            if target == resolved or _same_file(target, resolved):
                raise ConfigError(
                    f"{given} is the input {source.name}; writing it would destroy the input, "
                    "so choose another output file name."
                )
            if resolved.is_dir() and resolved in target.parents:
                raise ConfigError(
                    f"{given} lies inside the input folder {source.name}, where it would be read "
                    "as part of the input; write it to another folder."
                )
            if (
                target.suffix.lower() in _DICOM_SUFFIXES
                and target.parent == resolved.parent
                and _is_dicom_file(resolved)
            ):
                raise ConfigError(
                    f"{given} would sit beside the DICOM input {source.name}, whose series is "
                    "read from the .dcm files of its folder; write it to another folder."
                )


def check_output_folder_spares_inputs(
    folder: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str] | None]
) -> None:
    """Refuse an output folder that is an input file, an input folder or inside one."""
    folder = Path(folder)
    target = _resolve(folder)
    if target.exists() and not target.is_dir():
        raise ConfigError(
            f"{folder} is an existing file, not a folder; give a folder for the outputs "
            "(it is created when missing)."
        )
    for source in (Path(p) for p in inputs if p is not None):
        resolved = _resolve(source)
        if target == resolved or (resolved.is_dir() and resolved in target.parents):
            raise ConfigError(
                f"the output folder {folder} is inside the input {source.name}, where outputs "
                "would be read as part of the input; write them to another folder."
            )


def _resolve(path: Path) -> Path:
    try:
        return path.expanduser().resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop: compare the path as written
        return Path(os.path.abspath(path))


def _same_file(a: Path, b: Path) -> bool:
    try:
        first, second = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _is_dicom_file(path: Path) -> bool:
    if path.suffix.lower() in _DICOM_SUFFIXES:
        return True
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            handle.seek(_DICOM_MAGIC_OFFSET)
            return handle.read(4) == _DICOM_MAGIC
    except OSError:
        return False
