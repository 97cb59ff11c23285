"""A patch function inside the toy target package, named by module path (as a campaign names
``liger_kernel.transformers:apply_liger_kernel_to_llama``): it must be imported from the arm's worktree."""

import torch


def scale_head(model: torch.nn.Module, factor: float) -> None:
    with torch.no_grad():
        model.head.weight.mul_(factor)
