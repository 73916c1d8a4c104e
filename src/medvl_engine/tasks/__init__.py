"""Each paper in one place: its training task, evaluation, baselines, recipe and pretraining
(``limit``, ``topksiglip``), and the rebuild of the shipped demo models.
"""

__all__: list[str] = []
