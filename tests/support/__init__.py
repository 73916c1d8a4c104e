"""Test code that is not a pytest fixture: what another process imports by name, and what
several test files or benches share (benches put the repository root on ``sys.path``).

Fixtures live in the conftest.py files. Imported by name in another process:

- ``toy_task``: the toy regression task and its gloo DDP rank (``torch.multiprocessing.spawn``
  pickles the rank function and the task by module name).
- ``loader_toy_task``: a task whose batches DataLoader worker processes load (the task is
  pickled into each worker) and its DDP rank.
- ``toy_task_module``: a task module that ``medvl-train`` imports by the name given in
  ``training.registry.TASK_MODULES``.
- ``sample_fuzz``: damaging sample files and reading the copies, in a child process whose
  address space is limited.
- ``gloo``: what a spawned rank calls to join the gloo group and to hand back its results.

Shared:

- ``dicom_wsi``, ``slide_results``, ``highdicom_results``: a DICOM slide, medvl's own results
  of it, and other tools' results built with highdicom.
- ``aperio_pyramid``: a JPEG 2000 SVS pyramid (the stall test and bench).
- ``model_process``: a napari session run in a fresh interpreter with the model process on.
- ``limit_cohort``, ``tiny_bert``: a tiny LIMIT manifest and a tiny BERT model folder.
- ``orthanc``, ``write_faults``: a real PACS, and writes that fail as a full disk's do.
"""
