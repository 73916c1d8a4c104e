"""The slide records of a LIMIT run: reports filtered as ``task.report_filter`` says, the
train / val / test splits, and the class label of a labelled slide."""

from __future__ import annotations

from collections.abc import Callable

import torch

from medvl_engine.data.manifest import SlideRecord
from medvl_engine.errors import DataError

__all__ = ["label_of", "report_filter", "split_records"]


def report_filter(spec: str) -> Callable[[str], str] | None:
    """The filter ``task.report_filter`` names; prints one line saying what will run.

    ``rules`` (the rule-based filter), ``none``, ``path/to/file.py:function`` (a function of
    the user's own file, e.g. a local LLM wrapped by :func:`medvl_engine.data.llm_report_filter`)
    or an entry point of the group ``medvl.report_filters``; functions of Python itself
    (``os:system``) or of other modules are refused
    (see :mod:`medvl_engine.data.report_filter_loader`).
    """
    from medvl_engine.data.report_filter_loader import resolve_report_filter

    resolved = resolve_report_filter(spec)
    if resolved.function is not None and spec.strip() != "rules":
        print(f"limit: report filter: {resolved.description}", flush=True)
    return resolved.function


def split_records(
    records: list[SlideRecord], val_fraction: float, seed: int
) -> dict[str, list[SlideRecord]]:
    """The ``train`` / ``val`` / ``test`` records by their ``split`` column.

    Without val rows, ``val_fraction`` of the training slides (at least one, chosen by a
    generator seeded with ``seed``) are held out as val. DataError when no training slide is
    left.
    """
    splits = {name: [r for r in records if r.split == name] for name in ("train", "val", "test")}
    if not splits["val"] and val_fraction > 0 and len(splits["train"]) > 1:
        generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(splits["train"]), generator=generator).tolist()
        count = max(1, round(val_fraction * len(order)))
        held = set(order[:count])
        splits["val"] = [r for i, r in enumerate(splits["train"]) if i in held]
        splits["train"] = [r for i, r in enumerate(splits["train"]) if i not in held]
    if not splits["train"]:
        raise DataError("the manifest has no training slides (split = train); add some.")
    return splits


def label_of(record: SlideRecord) -> str:
    """The class label of a labelled slide record."""
    if record.label is None:
        raise DataError(f"slide {record.slide_id} has no label")
    return record.label
