"""TopKSigLIP: the training task, lesion pretraining, evaluation with its baselines and subgroups,
and the demo recipe.
"""

__all__: list[str] = []
