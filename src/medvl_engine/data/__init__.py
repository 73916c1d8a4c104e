"""Data for training: manifests, the organ-stratified sampler, reports.

Patch-feature bags (read from a feature store or an .h5) are in :mod:`medvl_engine.features.bags`.

Nothing here reads a file at import time.
"""

from medvl_engine.data.manifest import REQUIRED_COLUMNS, SPLITS, SlideRecord, read_manifest
from medvl_engine.data.reports import (
    LLM_PROMPT,
    ReportFilter,
    filter_report,
    llm_report_filter,
    preprocess_reports,
)
from medvl_engine.data.sampler import OrganStratifiedSampler

__all__ = [
    "SlideRecord",
    "read_manifest",
    "REQUIRED_COLUMNS",
    "SPLITS",
    "OrganStratifiedSampler",
    "ReportFilter",
    "filter_report",
    "llm_report_filter",
    "preprocess_reports",
    "LLM_PROMPT",
]
