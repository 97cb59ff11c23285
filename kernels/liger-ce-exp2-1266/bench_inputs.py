"""Inputs of ``liger_kernel.transformers.functional.liger_cross_entropy`` for kgate's timed stages (campaign data
of liger-ce-exp2-1266).

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for ``liger_cross_entropy(input, target)``
on a row ``{name, BT, V}``: ``input`` is ``[BT, V]`` logits (BT tokens, batch x sequence flattened, over a
vocabulary of V), drawn standard normal and scaled by 2 (an LM head's logits spread over a few units, so the
softmax is neither flat nor one-hot), cast to ``dtype`` and requiring gradients; ``target`` is ``[BT]`` int64
class indices drawn uniformly from ``[0, V)``. The op keeps its defaults (mean reduction, no weights, no label
smoothing, no z-loss, no softcap): the path the change's claim was measured on. Liger's kernel stores the
gradient into ``input`` in the forward (the campaign declares ``measure.writes_inputs``). Every value comes from
one generator on ``device`` seeded with ``seed``, so both arms draw bit-identical tensors (kgate hashes them).
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    tokens, vocab = int(row["BT"]), int(row["V"])
    if tokens < 1 or vocab < 2:
        raise ValueError(f"row {row.get('name')}: BT must be >= 1 and V >= 2, got BT={tokens}, V={vocab}")
    gen = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(tokens, vocab, generator=gen, device=device, dtype=torch.float32).mul_(2.0).to(dtype)
    logits.requires_grad_(True)
    target = torch.randint(0, vocab, (tokens,), generator=gen, device=device, dtype=torch.int64)
    return (logits, target), {}
