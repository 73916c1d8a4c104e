"""The models of the two methods, one family per module.

- :mod:`medvl_engine.models.limit`: report-guided pooling, the LIMIT model, zero-shot classes.
- :mod:`medvl_engine.models.topk`: Gumbel-top-K selection and differentiable patch extraction.
- :mod:`medvl_engine.models.topksiglip`: the TopKSigLIP configuration and network;
  :mod:`~medvl_engine.models.topksiglip_folder` saves and loads its folders;
  :mod:`~medvl_engine.models.topksiglip_inference` runs it on one breast image.

Importing this package loads no torch: each model family is imported by its own module path.
"""

__all__: list[str] = []
