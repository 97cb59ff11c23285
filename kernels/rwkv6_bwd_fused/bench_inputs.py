"""Inputs of ``fla.ops.rwkv6.chunk_rwkv6`` for kgate's timed stages (campaign data, not kgate code).

Named by the campaigns' ``measure.inputs``; loaded inside each arm's worker.
``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for
``chunk_rwkv6(r, k, v, w, u, **kwargs)`` with the semantics of fla's
benchmark registry entry for ``chunk_rwkv6`` (benchmarks/ops/registry.py at
27967b97): ``r``, ``k``, ``v`` standard normal in ``dtype`` with gradients,
``w`` = logsigmoid of a standard normal (not clamped) with gradients, ``u``
``[H, D]`` without gradient; no initial state; the default chunk size unless
the row sets ``chunk_size`` (kgate's BENCH_BASE comparison rows). A row with
``cu_seqlens`` is a packed variable-length batch (B must be 1, T the total).

Values come from a generator on ``device`` seeded with ``seed`` (kgate passes
each row its own), so two workers on the same device draw bit-identical
inputs; kgate checks that by hashing every tensor.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    B, T, H, D = (int(row[k]) for k in ("B", "T", "H", "D"))
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dtype)

    r, k, v = randn(B, T, H, D), randn(B, T, H, D), randn(B, T, H, D)
    w = F.logsigmoid(randn(B, T, H, D))
    u = randn(H, D)
    for t in (r, k, v, w):
        t.requires_grad_(True)
    kwargs: dict[str, Any] = {}
    if row.get("chunk_size") is not None:
        kwargs["chunk_size"] = int(row["chunk_size"])
    if row.get("cu_seqlens") is not None:
        cu = [int(x) for x in row["cu_seqlens"]]
        if B != 1 or cu[0] != 0 or cu[-1] != T:
            msg = f"row {row['name']}: packed rows need B=1 and cu_seqlens from 0 to T={T}, got B={B}, {cu}"
            raise ValueError(msg)
        kwargs["cu_seqlens"] = torch.tensor(cu, dtype=torch.long, device=device)
    return (r, k, v, w, u), kwargs
