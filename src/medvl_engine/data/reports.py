"""Report pre-processing: drop identifying and non-histological lines before training.

The paper normalised reports with a locally hosted LLM; here the default is a
rule-based filter (:func:`filter_report`) and :func:`llm_report_filter` turns any
``text -> text`` callable (a local LLM client) into a filter with the same signature.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

__all__ = [
    "ReportFilter",
    "filter_report",
    "llm_report_filter",
    "preprocess_reports",
    "LLM_PROMPT",
]

ReportFilter = Callable[[str], str]

# Lines carrying identifiers or administrative content: dropped whole.
_DROP_LINE = [
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(accession|case\s*(no|number|#)|specimen\s*(no|number|#))\b",
        r"\b(mrn|medical\s+record|patient\s+(name|id)|name\s*:|dob|date\s+of\s+birth)\b",
        r"\b(phone|tel\.?|fax|pager)\b",
        r"\b(electronically\s+signed|signed\s+out|attending|pathologist\s*:|resident\s*:)",
        r"\b(notified|called|communicated)\b.*\b(phone|dr\.?|by)\b",
        r"\b(date\s+(received|collected|reported|of\s+service))\b",
        r"\b(received\s+in\s+formalin|labell?ed\s+with|cassette|gross(ly)?\s+description)\b",
        r"\b(cpt|icd-?10|billing|disclaimer|page\s+\d+\s+of\s+\d+)\b",
        r"\b(this\s+test\s+was\s+developed|not\s+been\s+cleared\s+or\s+approved)\b",
    )
]
# Identifiers inside otherwise useful lines: replaced.
_SCRUB = [
    (re.compile(r"\b(dr\.?|doctor)\s+[A-Z][a-zA-Z'-]+(,?\s*(md|do|phd))?", re.IGNORECASE), ""),
    (re.compile(r"\b[A-Z][a-zA-Z'-]+,?\s+(md|do)\b"), ""),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b"), ""),
    (re.compile(r"\b\d{3}[-. ]\d{3}[-. ]\d{4}\b|\b\d{3}[-. ]\d{4}\b"), ""),
    (re.compile(r"\b[A-Z]{1,3}\d{2}-\d{3,}\b"), ""),
]
_HEADING_ONLY = re.compile(r"^\s*[A-Z][A-Z /]+:\s*$")

LLM_PROMPT = (
    "Rewrite the following pathology report. Remove all identifying information (names, "
    "dates, accession and record numbers, phone numbers, institutions) and every sentence "
    "that does not describe histology, diagnosis or the specimen. Keep the medical content "
    "verbatim where possible. Answer with the cleaned report only.\n\nReport:\n{report}"
)


def filter_report(text: str) -> str:
    """Rule-based default filter: drop PHI/administrative lines, scrub inline identifiers.

    Drops lines with accession/MRN/name/DOB/phone/signature/date-received/gross-handling
    or billing content and lines that are only a heading; removes doctor names, dates,
    phone and accession-like numbers left inside kept lines; collapses whitespace.
    Returns the kept lines joined by single spaces ("" when nothing medical is left).
    """
    kept = []
    for line in text.splitlines():
        if not line.strip() or _HEADING_ONLY.match(line):
            continue
        if any(pattern.search(line) for pattern in _DROP_LINE):
            continue
        for pattern, replacement in _SCRUB:
            line = pattern.sub(replacement, line)
        line = re.sub(r"\s+", " ", line).strip(" ,;")
        line = re.sub(r"\s+([.,;:])", r"\1", line)
        if re.search(r"[A-Za-z]{3,}", line):
            kept.append(line)
    return " ".join(kept)


def llm_report_filter(
    generate: Callable[[str], str], prompt: str = LLM_PROMPT, fallback: ReportFilter | None = None
) -> ReportFilter:
    """Wrap a ``prompt -> completion`` callable (e.g. a local LLM) as a report filter.

    The report is inserted into ``prompt`` at ``{report}``. When the completion is empty
    the ``fallback`` filter (default :func:`filter_report`) is applied instead.
    """
    fallback = fallback or filter_report

    def run(text: str) -> str:
        answer = (generate(prompt.format(report=text)) or "").strip()
        return answer if answer else fallback(text)

    return run


def preprocess_reports(
    texts: Iterable[str], report_filter: ReportFilter | None = None
) -> list[str]:
    """Apply a report filter (default :func:`filter_report`) to every text."""
    chosen = report_filter or filter_report
    return [chosen(text) for text in texts]
