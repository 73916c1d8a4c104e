"""Deterministic synthetic data with ground truth: H&E slides, reports and mammograms.

Everything here is driven by a seed (numpy Generator), so the same arguments give the same
arrays and the same file bytes. Used by tests, benchmarks, training demos and the demo command.
"""

from medvl_engine.synthetic._cohort import (
    MAMMO_MANIFEST_COLUMNS,
    SLIDE_MANIFEST_COLUMNS,
    make_mammogram_cohort,
    make_synthetic_cohort,
)
from medvl_engine.synthetic._errors import SyntheticDataError
from medvl_engine.synthetic._mammo import (
    MAMMO_GENERATOR_VERSION,
    SyntheticMammoCase,
    make_mammogram_case,
)
from medvl_engine.synthetic._mammo_render import FINDING_TYPES
from medvl_engine.synthetic._mammo_report import (
    BIRADS_SENTENCES,
    CANCER_SENTENCES,
    DENSITY_SENTENCES,
    FINDING_SENTENCES,
    NEGATIVE_FINDINGS,
    birads_sentence,
)
from medvl_engine.synthetic._slides import SyntheticSlide, make_label_map, make_synthetic_slide
from medvl_engine.synthetic._tissue import (
    TISSUE_CLASSES,
    Stain,
    class_id,
    random_stain,
    render_tissue,
)
from medvl_engine.synthetic.reports import CLASS_SYNONYMS, NEGATION_PREFIXES, ORGANS, make_report

__all__ = [
    "BIRADS_SENTENCES",
    "CANCER_SENTENCES",
    "DENSITY_SENTENCES",
    "FINDING_SENTENCES",
    "FINDING_TYPES",
    "MAMMO_GENERATOR_VERSION",
    "MAMMO_MANIFEST_COLUMNS",
    "NEGATIVE_FINDINGS",
    "SyntheticDataError",
    "SyntheticMammoCase",
    "birads_sentence",
    "make_mammogram_case",
    "make_mammogram_cohort",
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
