"""Walk the chain of image directories (IFDs) of a TIFF before a full parser sees it.

A TIFF is a chain of IFDs, each ending in the file offset of the next; SubIFDs (tag 330)
hang pyramid levels off an IFD as a list of offsets. A chain that points back to an earlier
IFD makes a parser loop forever, and a forged chain of millions of IFDs makes it run for
hours, so :func:`check_ifd_chain` follows the chain (classic TIFF, BigTIFF and Hamamatsu
NDPI, whose next-IFD offsets are 64-bit in an otherwise classic TIFF) and the SubIFD lists, reading
only the directory entries, and stops at the first repeated IFD of the chain or past
``MAX_IFDS`` directories.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from medvl_engine.errors import CorruptFileError, UnsupportedFormatError

__all__ = ["MAX_IFDS", "check_ifd_chain"]

MAX_IFDS = 10_000
"""Directories (pages plus SubIFDs) a slide file may hold; real slides have at most hundreds."""

_SUBIFDS_TAG = 330
_NDPI_FORMAT_TAG = 65420
_MAX_ENTRIES = 65_535
_OFFSET_TYPES = {4: "I", 13: "I", 16: "Q", 18: "Q"}  # LONG, IFD, LONG8, IFD8


class _Layout:
    """Byte order and field sizes of one TIFF flavour."""

    def __init__(self, order: str, big: bool) -> None:
        self.order = order
        self.big = big
        self.count_format = order + ("Q" if big else "H")
        self.count_size = 8 if big else 2
        self.entry_size = 20 if big else 12
        self.entry_format = order + ("HHQ" if big else "HHI")
        self.inline_size = 8 if big else 4
        self.next_format = order + ("Q" if big else "I")
        self.next_size = 8 if big else 4


def _damaged(path: Path, problem: str) -> CorruptFileError:
    return CorruptFileError(
        f"{path.name}: {problem}; the file is damaged, re-copy or re-export it.", path
    )


def check_ifd_chain(path: str | os.PathLike[str]) -> int:
    """Number of IFDs in the TIFF at ``path`` (main chain plus SubIFDs), after checking that
    no directory is reached twice, that every offset lies inside the file and that there are
    at most ``MAX_IFDS``. Raises CorruptFileError or UnsupportedFormatError with a sentence.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size

        def read(offset: int, count: int) -> bytes:
            handle.seek(offset)
            data = handle.read(count)
            if len(data) != count:
                raise _damaged(path, f"a table at byte {offset:,} runs past the end of the file")
            return data

        head = read(0, 8) if size >= 8 else b""
        if head[:2] not in (b"II", b"MM"):
            raise _damaged(path, "the TIFF header is missing")
        order = "<" if head[:2] == b"II" else ">"
        (magic,) = struct.unpack(order + "H", head[2:4])
        if magic == 43:
            layout = _Layout(order, big=True)
            (first,) = struct.unpack(order + "Q", read(8, 8))
        elif magic == 42:
            layout = _Layout(order, big=False)
            (first,) = struct.unpack(order + "I", head[4:8])
        else:
            raise _damaged(path, "the TIFF header has an unknown version number")

        seen: set[int] = set()
        main_chain: set[int] = set()
        pending = [(first, True)]  # (offset, whether its next-IFD link is followed)
        ndpi_wide_offsets = False
        while pending:
            offset, is_main = pending.pop()
            while offset:
                if is_main and offset in main_chain:
                    raise _damaged(
                        path,
                        f"its chain of image directories loops back to byte {offset:,}, so "
                        "reading it would never end",
                    )
                if offset + layout.count_size > size:
                    break  # the parser reports (or skips) a directory outside the file
                if is_main:
                    main_chain.add(offset)
                elif offset in seen:
                    break  # a SubIFD listed twice is read twice, not forever
                seen.add(offset)
                if len(seen) > MAX_IFDS:
                    raise UnsupportedFormatError(
                        f"{path.name}: holds more than {MAX_IFDS:,} images (IFDs), far more than "
                        "a slide has; it is damaged or not a slide, export the slide on its own.",
                        path,
                    )
                (entries,) = struct.unpack(layout.count_format, read(offset, layout.count_size))
                if entries > _MAX_ENTRIES:
                    break
                table_at = offset + layout.count_size
                next_at = table_at + entries * layout.entry_size
                if next_at + layout.next_size > size:
                    break
                table = read(table_at, entries * layout.entry_size)
                for index in range(entries):
                    start = index * layout.entry_size
                    tag, kind, count = struct.unpack_from(layout.entry_format, table, start)
                    value_at = table_at + start + layout.entry_size - layout.inline_size
                    if tag == _NDPI_FORMAT_TAG and len(seen) == 1:
                        ndpi_wide_offsets = not layout.big
                    if tag == _SUBIFDS_TAG and kind in _OFFSET_TYPES and count:
                        subs = _sub_offsets(path, read, layout, kind, count, value_at, size)
                        pending.extend((sub, False) for sub in subs)
                if not is_main:
                    break  # parsers read SubIFDs from the list, not by their next-IFD links
                if ndpi_wide_offsets and next_at + 8 <= size:
                    (offset,) = struct.unpack(order + "Q", read(next_at, 8))
                else:
                    (offset,) = struct.unpack(layout.next_format, read(next_at, layout.next_size))
    return len(seen)


def _sub_offsets(
    path: Path,
    read: Callable[[int, int], bytes],
    layout: _Layout,
    kind: int,
    count: int,
    value_at: int,
    size: int,
) -> list[int]:
    """The SubIFD offsets of one entry (inline when they fit in the value field); none when
    the list lies outside the file (the parser reports that)."""
    item = _OFFSET_TYPES[kind]
    width = struct.calcsize(item)
    if count > MAX_IFDS:
        raise _damaged(path, f"an image directory lists {count:,} sub-images")
    if count * width <= layout.inline_size:
        data = read(value_at, count * width)
    else:
        (pointer,) = struct.unpack(
            layout.order + ("Q" if layout.big else "I"), read(value_at, layout.inline_size)
        )
        if pointer + count * width > size:
            return []
        data = read(pointer, count * width)
    return [value for value in struct.unpack(layout.order + item * count, data) if value]
