"""Inputs of ``liger_kernel.transformers.functional.liger_tvd`` for kgate's timed stages (campaign data of
liger-tvd-fused-scale-1127).

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for
``liger_tvd(P, Q, None, reduction="batchmean")`` on a row ``{name, M, V}``: P and Q are ``[M, V]`` distributions
(M rows, batch x sequence flattened, over a vocabulary of V), each the softmax of standard normal draws, as
Liger's TVD benchmark makes them (B 8 x T 2048 rows, batchmean, no labels); P requires gradients (the forward
computes and saves its gradient either way). Every value comes from one generator on ``device`` seeded with
``seed``, so both arms draw bit-identical tensors.
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    rows, vocab = int(row["M"]), int(row["V"])
    if rows < 1 or vocab < 1:
        raise ValueError(f"row {row.get('name')}: M and V must be >= 1, got M={rows}, V={vocab}")
    gen = torch.Generator(device=device).manual_seed(seed)
    p = torch.randn(rows, vocab, generator=gen, device=device, dtype=torch.float32).softmax(-1).to(dtype)
    q = torch.randn(rows, vocab, generator=gen, device=device, dtype=torch.float32).softmax(-1).to(dtype)
    p.requires_grad_(True)
    return (p, q, None), {"reduction": "batchmean"}
