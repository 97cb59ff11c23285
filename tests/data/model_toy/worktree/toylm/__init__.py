"""A toy target package for the training-throughput harness's tests: the "kernels" live here (the arm's
worktree), the causal LM in an extension folder (``ext/toylm/lm.py``), as fla-core and flash-linear-attention."""

import torch

__version__ = "0.0.1"


class ToyConfig:
    """A config class in the style of transformers': keyword arguments in, attributes and to_dict out."""

    def __init__(self, hidden_size: int = 8, num_hidden_layers: int = 2, vocab_size: int = 32,
                 oom_above_layers: int | None = None, ignore_boundaries: bool = False) -> None:
        self.hidden_size = hidden_size
        self.ignore_boundaries = ignore_boundaries
        self.num_hidden_layers = num_hidden_layers
        self.vocab_size = vocab_size
        self.oom_above_layers = oom_above_layers

    def to_dict(self) -> dict:
        return dict(vars(self))


def mix(x: torch.Tensor, cu_seqlens: torch.Tensor | None) -> torch.Tensor:
    """The target's op: a causal running mean, restarted at every packed sequence boundary."""
    if cu_seqlens is None:
        return x.cumsum(1) / torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)[None, :, None]
    parts = []
    for a, b in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        seg = x[:, a:b]
        parts.append(seg.cumsum(1) / torch.arange(1, b - a + 1, device=x.device, dtype=x.dtype)[None, :, None])
    return torch.cat(parts, 1)
