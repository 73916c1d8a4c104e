"""Data for training: manifests, patch-feature bags, the organ-stratified sampler, reports.

Nothing here reads a file at import time.
"""

from medvl_engine.data.bags import BagCache, collate_bags, read_bag_features
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
    "read_bag_features",
    "collate_bags",
    "BagCache",
    "OrganStratifiedSampler",
    "ReportFilter",
    "filter_report",
    "llm_report_filter",
    "preprocess_reports",
    "LLM_PROMPT",
]
