"""The end-to-end workload's patch (campaign data): every ``torch.nn.LayerNorm`` of a model becomes Liger's.

``swap_layer_norms(model=model, impl=...)`` replaces each ``nn.LayerNorm`` module (with its affine weight and bias
copied, its eps kept) by ``liger_kernel.transformers.layer_norm.LigerLayerNorm`` pinned to ``impl`` (the campaign
pins Liger's Triton implementation, the code under test, so that no other implementation Liger might auto-select
on a node runs instead). It is applied in both arms, after the model is built from the seed and before it moves
to the device; it returns the number of modules swapped (kgate records the harness's answer, not this value).
"""

from __future__ import annotations

import torch


def swap_layer_norms(model: torch.nn.Module, impl: str = "nvidia-triton") -> None:
    from liger_kernel.transformers.layer_norm import LigerLayerNorm

    targets = [(name, mod) for name, mod in model.named_modules() if type(mod) is torch.nn.LayerNorm]
    if not targets:
        raise ValueError("the model has no torch.nn.LayerNorm to swap")
    for name, mod in targets:
        if len(mod.normalized_shape) != 1 or mod.weight is None or mod.bias is None:
            raise ValueError(f"{name}: only affine LayerNorms over the last dimension can be swapped")
        liger = LigerLayerNorm(mod.normalized_shape[0], eps=mod.eps, impl=impl)
        with torch.no_grad():
            liger.weight.copy_(mod.weight)
            liger.bias.copy_(mod.bias)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, liger)
