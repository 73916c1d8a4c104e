"""TopKSigLIP evaluation (paper Sec. 4.4): zero-shot AUROC, linear probe, localisation.

* Zero-shot: class scores are softmax probabilities over each task's prompts (Tables 9-12);
  AUROC for the four finding types and cancer (binary), BI-RADS 1-5 and density A-D
  (one-vs-rest per class, plus their mean).
* Zero-shot k sweep: the same readouts with the top ``k`` patches for each ``k`` of a sweep
  (15, 30, 45 in Tables 1-2; keys suffixed ``@k<k>``).
* Linear probe: one fully connected layer per task on frozen image embeddings, class-weighted
  cross entropy, AdamW (20,000 iterations, lr 4e-3, weight decay 0.01, batch size 32); fitted on
  the training split, the iteration kept is the one with the best validation AUROC (checked
  every ``eval_every`` iterations), and the test split's AUROC is reported (macro one-vs-rest).
* Missing labels: a breast without a label for a task is left out of that task's AUROC and
  probe (its BI-RADS is 0, its density -1, its cancer / findings ``*_known`` mask False).
* Localisation: the importance map ``w / sum w`` on the ``G x G`` grid against ROI boxes;
  pixel-level average precision (map painted on the breast image at ``ap_resolution`` px over its
  candidate cells, pixels pooled over all images with an ROI) and the Pointing Game (hit when the
  centre of the top-scoring candidate lies in a box grown by ``tolerance`` px). Each metric
  comes with its chance level (``*_chance``: ROI pixel share; share of candidates counted a hit).
* Per-breast readouts (:class:`ReadoutTable`): every readout above kept breast by breast, so
  that parts scored on different ranks concatenate into the metrics of all breasts, and a
  bootstrap can resample breasts (:func:`bootstrap_readouts`).

Modules: ``outputs`` (frozen model outputs of a set of breasts), ``localisation`` (one breast's
share of the localisation metrics), ``readouts`` (the per-breast table, its metrics and
bootstrap), ``metrics`` (whole-set metric dicts), ``probe`` (the linear probe); every name is
importable from this package.
"""

from __future__ import annotations

from medvl_engine.tasks.topksiglip.evaluation.localisation import (
    localisation_parts,
)
from medvl_engine.tasks.topksiglip.evaluation.metrics import (
    evaluate_mammography,
    localisation_metrics,
    zero_shot_k_sweep,
    zero_shot_metrics,
)
from medvl_engine.tasks.topksiglip.evaluation.outputs import (
    BreastSamples,
    MammoEvalOutputs,
    collect_outputs,
    outputs_of_samples,
)
from medvl_engine.tasks.topksiglip.evaluation.probe import (
    fit_linear_probe,
    linear_probe_auroc,
    linear_probe_metrics,
    probe_readouts,
)
from medvl_engine.tasks.topksiglip.evaluation.readouts import (
    ReadoutTable,
    bootstrap_readouts,
    label_columns,
    model_readouts,
    prompt_probabilities,
    readout_metrics,
    readout_table,
    zero_shot_columns,
)

__all__ = [
    "BreastSamples",
    "MammoEvalOutputs",
    "ReadoutTable",
    "bootstrap_readouts",
    "collect_outputs",
    "evaluate_mammography",
    "fit_linear_probe",
    "label_columns",
    "linear_probe_auroc",
    "linear_probe_metrics",
    "localisation_metrics",
    "localisation_parts",
    "model_readouts",
    "outputs_of_samples",
    "probe_readouts",
    "prompt_probabilities",
    "readout_metrics",
    "readout_table",
    "zero_shot_columns",
    "zero_shot_k_sweep",
    "zero_shot_metrics",
]
