"""The toy causal LM (an extension module of the toylm package, appended to its __path__ by the harness)."""

from types import SimpleNamespace

import torch
from torch import nn

from toylm import ToyConfig, mix  # noqa: F401 - the kernel comes from the arm's worktree


class ToyForCausalLM(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(nn.Linear(config.hidden_size, config.hidden_size)
                                    for _ in range(config.num_hidden_layers))
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, labels=None, cu_seqlens=None):
        limit = self.config.oom_above_layers
        if limit is not None and self.config.num_hidden_layers > limit:
            raise torch.OutOfMemoryError(f"simulated: {self.config.num_hidden_layers} layers do not fit")
        h = self.embed(input_ids)
        for layer in self.layers:
            h = h + torch.tanh(layer(mix(h, None if self.config.ignore_boundaries else cu_seqlens)))
        logits = self.head(h)
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                           labels[:, 1:].reshape(-1))
        return SimpleNamespace(loss=loss, logits=logits)
