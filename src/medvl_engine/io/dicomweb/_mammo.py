"""A mammography study on a DICOMweb server -> its CC and MLO views per breast, as local files.

Views are told by ViewPosition (0018,5101) and the breast by ImageLaterality (0020,0062),
falling back to the series' Laterality (0020,0060); both are asked for in a QIDO-RS search of
the study's instances, and read from the study's WADO-RS metadata (every full header) when the
server's search index does not return them. Where a breast has several
images of one view, the latest (highest series, then instance number) is taken.
"""

from __future__ import annotations

from pathlib import Path

from medvl_engine.io.dicomweb._client import DEFAULT_TIMEOUT_SECONDS
from medvl_engine.io.dicomweb._errors import InvalidReferenceError, NoMammoPairError
from medvl_engine.io.dicomweb._query import InstanceEntry, search_instances, study_metadata
from medvl_engine.io.dicomweb._reference import DicomWebReference, parse_reference
from medvl_engine.io.dicomweb._retrieve import retrieve_instances

__all__ = ["mammo_study_pairs", "mammo_views", "resolve_mammo_study"]

_VIEWS = {"CC": "CC", "MLO": "MLO"}
_SIDES = ("R", "L")


def mammo_views(entries: list[InstanceEntry]) -> dict[str, dict[str, InstanceEntry]]:
    """``{laterality: {view: entry}}`` for the CC and MLO mammograms among ``entries``."""
    from medvl_engine.io.kind import MAMMOGRAM_MODALITIES

    chosen: dict[str, dict[str, InstanceEntry]] = {}
    ordered = sorted(entries, key=lambda e: (e.series, e.number or 0, e.uid))
    for entry in ordered:  # later series and instance numbers win
        view = _VIEWS.get(entry.view)
        if entry.modality in MAMMOGRAM_MODALITIES and view and entry.laterality in _SIDES:
            chosen.setdefault(entry.laterality, {})[view] = entry
    return chosen


def mammo_study_pairs(
    url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> dict[str, tuple[InstanceEntry, InstanceEntry]]:
    """``{laterality: (cc, mlo)}`` instance entries of each breast that has both views in the
    study at ``url`` (``dicomweb://HOST:PORT/ROOT/studies/UID``), right breast first; nothing is
    retrieved (give the entries to :func:`retrieve_instances`).

    Raises NoMammoPairError when no breast has both views, InvalidReferenceError when ``url``
    does not name a study, and the server errors of :mod:`._client`.
    """
    reference = parse_reference(url) if isinstance(url, str) else url
    if reference.study is None or reference.series is not None:
        raise InvalidReferenceError(
            f"{reference.text()} does not name a study; give .../studies/STUDY_UID for TopK."
        )
    entries = search_instances(reference, timeout)
    views = mammo_views(entries)
    if not any(len(by_view) == 2 for by_view in views.values()):
        # the server's search index may lack view and laterality: read the full headers
        entries = study_metadata(reference, timeout)
        views = mammo_views(entries)
    pairs = {
        side: (views[side]["CC"], views[side]["MLO"])
        for side in _SIDES
        if len(views.get(side, {})) == 2
    }
    if not pairs:
        found = sorted(f"{side} {view}" for side, by_view in views.items() for view in by_view)
        raise NoMammoPairError(
            f"study {reference.study} on {reference.server} has no CC and MLO view of the same "
            f"breast (found {', '.join(found) if found else 'no CC or MLO mammogram'} among "
            f"{len(entries)} instance(s)); give the two views as files instead."
        )
    return pairs


def resolve_mammo_study(
    url: str | DicomWebReference, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> list[tuple[Path, Path]]:
    """``[(cc_path, mlo_path)]``: the local files of each breast's CC and MLO view (right
    breast first) of the study at ``url`` (``dicomweb://HOST:PORT/ROOT/studies/UID``).

    Only those instances are retrieved (WADO-RS, into the cache). Raises as
    :func:`mammo_study_pairs` does.
    """
    reference = parse_reference(url) if isinstance(url, str) else url
    pairs = list(mammo_study_pairs(reference, timeout).values())
    paths = retrieve_instances(reference, [entry for pair in pairs for entry in pair], timeout)
    return [(paths[2 * i], paths[2 * i + 1]) for i in range(len(pairs))]
