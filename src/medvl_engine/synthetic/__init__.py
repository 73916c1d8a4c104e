"""Deterministic synthetic data with ground truth: H&E slides, reports and mammograms.

Everything here is driven by a seed (numpy Generator), so the same arguments give the same
arrays and the same file bytes. Used by tests, benchmarks, training demos and the demo command.
"""

from medvl_engine.synthetic._cohort import SLIDE_MANIFEST_COLUMNS, make_synthetic_cohort
from medvl_engine.synthetic._reports import CLASS_SYNONYMS, NEGATION_PREFIXES, ORGANS, make_report
from medvl_engine.synthetic._slides import SyntheticSlide, make_label_map, make_synthetic_slide
from medvl_engine.synthetic._tissue import (
    TISSUE_CLASSES,
    Stain,
    class_id,
    random_stain,
    render_tissue,
)

__all__ = [
    "TISSUE_CLASSES",
    "ORGANS",
    "SLIDE_MANIFEST_COLUMNS",
    "CLASS_SYNONYMS",
    "NEGATION_PREFIXES",
    "Stain",
    "SyntheticSlide",
    "class_id",
    "make_label_map",
    "make_report",
    "make_synthetic_cohort",
    "make_synthetic_slide",
    "random_stain",
    "render_tissue",
]
