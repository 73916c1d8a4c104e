"""LIMIT (Conch-Z): the training task, the zero-shot evaluation, the embedding bridge, synthetic
cohorts and the demo recipe.
"""

__all__: list[str] = []
