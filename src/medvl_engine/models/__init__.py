"""The models of the two methods, one family per module.

- :mod:`medvl_engine.models.limit`: report-guided pooling, the LIMIT model, zero-shot classes.
- :mod:`medvl_engine.models.topk`: Gumbel-top-K selection and differentiable patch extraction.
- :mod:`medvl_engine.models.topksiglip`: the TopKSigLIP model, its folders and inference.

The helpers below are for other packages (training, CLI, plugin); each is imported from its
private module on first use, so importing this package loads no torch.
"""

from medvl_engine._lazy import lazy_exports

__all__ = ["LORA_TARGETS", "add_lora", "merged_copy"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "LORA_TARGETS": "_lora",
        "add_lora": "_lora",
        "merged_copy": "_lora",
    },
)
