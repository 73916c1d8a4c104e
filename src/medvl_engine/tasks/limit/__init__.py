"""LIMIT (Conch-Z): the training task, the zero-shot evaluation, the embedding bridge, synthetic
cohorts and the demo recipe.

``task`` is what ``medvl-train limit`` loads (config class, task, report, actions); the task
is put together from ``config`` (settings by section), ``records`` (reports, splits),
``tower`` (the trainable text tower and its projection), ``training_task`` (bags and loss)
and ``validation`` (validation and zero-shot metrics); ``report`` prints the validation
report, ``run_eval`` scores the test split, ``evaluation`` holds the zero-shot protocol.
"""

__all__: list[str] = []
