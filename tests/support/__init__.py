"""Test code that another process imports by name, so it cannot be a pytest fixture.

Fixtures live in the conftest.py files; only what a separate interpreter must import lives here:

- ``toy_task``: the toy regression task and its gloo DDP rank (``torch.multiprocessing.spawn``
  pickles the rank function and the task by module name).
- ``loader_toy_task``: a task whose batches DataLoader worker processes load (the task is
  pickled into each worker) and its DDP rank.
- ``toy_task_module``: a task module that ``medvl-train`` imports by the name given in
  ``training.registry.TASK_MODULES``.
- ``sample_fuzz``: damaging sample files and reading the copies, in a child process whose
  address space is limited.
- ``gloo``: what a spawned rank calls to join the gloo group and to hand back its results.
"""
