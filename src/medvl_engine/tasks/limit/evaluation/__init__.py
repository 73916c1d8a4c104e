"""Pathology zero-shot evaluation: TCGA-OT-style slide classification and patch classification.

Slide level (LIMIT Sec. 3.3, Eq. 5; App. A.2): the choices of a slide are the classes of its
organ, each written as the prompt ``"<tissue> <class>"``; every prompt ``c_k`` pools the
slide's patches with report-guided attention and ``y = argmax_k cos(h_W(c_k), c_k)``.
Organs with a single diagnostic label are grouped into one category whose choices are all
of their (organ, class) pairs. Balanced accuracy is reported per category; the overall
score is the mean of the table rows (the paper's "average balanced accuracy across all
organs"; with ``report_organs`` the largest organs are rows and the rest one "other" row,
as in Table 2, whose TCGA-OT overall is the mean of its 8 rows), each with a 1,000-trial
bootstrap std. The random pooling baseline is the mean
over 10 seeded trials of randomly selected patches (Sec. 4.5). A template/synonym report
scores every (template, cancer synonym) pair (Fig. 3, Table A4).
Patch level: ``y = argmax_k cos(v, c_k)``; balanced accuracy and one-vs-rest AUROC.

The protocol in four modules: :mod:`.slides` (slide-level zero-shot), :mod:`.scoring` (the
balanced-accuracy tables and bootstrap), :mod:`.robustness` (template x synonym reports) and
:mod:`.patches` (patch-level zero-shot). What a reviewer checks beside it: :mod:`.baselines`
(nearest centroid and a linear probe on the patch features, no text), :mod:`.units` (intervals
and paired margins bootstrapping diagnoses, the independent unit) and :mod:`.suite` (one table
of the model, every baseline and the margin over the best).
"""

from medvl_engine.tasks.limit.evaluation.patches import zero_shot_patches
from medvl_engine.tasks.limit.evaluation.robustness import (
    patch_template_synonym_robustness,
    synonym_class_names,
    template_synonym_robustness,
)
from medvl_engine.tasks.limit.evaluation.scoring import (
    OTHER_ROW,
    SINGLE_LABEL_GROUP,
    choice_categories,
    organ_mean_bootstrap,
    score_zero_shot,
    table_weights,
)
from medvl_engine.tasks.limit.evaluation.slides import (
    DEFAULT_TEMPLATE,
    SlideExample,
    random_patch_pool,
    slide_class_scores,
    zero_shot_predictions,
    zero_shot_slides,
)

__all__ = [
    "SlideExample",
    "choice_categories",
    "organ_mean_bootstrap",
    "random_patch_pool",
    "score_zero_shot",
    "slide_class_scores",
    "synonym_class_names",
    "patch_template_synonym_robustness",
    "template_synonym_robustness",
    "zero_shot_predictions",
    "zero_shot_slides",
    "zero_shot_patches",
    "DEFAULT_TEMPLATE",
    "SINGLE_LABEL_GROUP",
    "OTHER_ROW",
    "table_weights",
]
