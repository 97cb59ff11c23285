"""Inputs of ``fla.ops.utils.cumsum.chunk_local_cumsum`` on vector gates, for kgate's timed stages (campaign
data).

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for ``chunk_local_cumsum(g,
chunk_size, reverse=..., cu_seqlens=..., output_dtype=torch.float)``: ``g`` is ``[B, T, H, K]`` (``[1, T, H,
K]`` packed when the row gives ``N`` sequences), drawn as gated linear attention's log-decay gates are
(``logsigmoid`` of standard normals, all negative), in ``dtype`` when the row's ``IB`` (input bytes per value)
is 2, in ``float32`` when it is 4 (the fp32 gate gradients of GLA's and KDA's backward). ``reverse`` is the
row's ``rev`` (0/1): the forward pass uses ``reverse=False``, the backward's gate gradients ``reverse=True``.
Varlen rows split ``T`` into ``N`` sequences of pseudo-random lengths from the same generator. No gradients:
the op has no backward of its own (the campaign times it in ``fwd`` mode). Values come from a generator on
``device`` seeded with ``seed``, so both arms draw bit-identical inputs (kgate hashes them).
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    b, t, h, k = (int(row[x]) for x in ("B", "T", "H", "K"))
    n = int(row.get("N", 0))
    in_dtype = {2: dtype, 4: torch.float32}[int(row["IB"])]
    gen = torch.Generator(device=device).manual_seed(seed)
    g = torch.nn.functional.logsigmoid(torch.randn(b, t, h, k, generator=gen, device=device)).to(in_dtype)
    kwargs: dict[str, Any] = {"reverse": bool(row.get("rev", 0)), "output_dtype": torch.float}
    if n:
        if b != 1:
            raise ValueError(f"row {row['name']}: a packed row (N sequences) has B=1, got B={b}")
        cuts = torch.randperm(t - 1, generator=gen, device=device)[: n - 1] + 1
        bounds = torch.cat([torch.zeros(1, device=device), cuts.sort().values.to(torch.float32),
                            torch.full((1,), t, device=device)])
        kwargs["cu_seqlens"] = bounds.to(torch.int32)
    return (g, int(row.get("C", 64))), kwargs
