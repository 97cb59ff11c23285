"""Inputs of ``fla.ops.gated_delta_rule:chunk_gated_delta_rule`` for kgate's timed stages (campaign data, not kgate code).

Named by the campaign's ``measure.inputs``. kgate calls ``make_inputs(row, *, device, dtype, seed)`` inside each
arm's worker and, for the reference comparison of candidate_gate, again in the stage's own process (whose working
folder is the kgate checkout, not a worktree of the target): so this file reads nothing of the target. It draws
the inputs by the law of the target's benchmark registry entry ``chunk_gdn`` (``benchmarks/ops/registry.py`` at
the base, ``generate_inputs``), in its order and with the same torch calls, so the tensors equal the registry's
bit for bit (checked once on CPU when the campaign was written): under a forked torch RNG seeded with ``seed``,
q, k, v = randn ``[B, T, H, D]``, g = logsigmoid(randn ``[B, T, H]``), beta = sigmoid(randn ``[B, T, H]``), all in
``dtype`` and leaves that need gradients; the registry's constant keyword ``use_qk_l2norm_in_kernel=True``; no
initial or final state. Both arms draw bit-identical tensors (kgate hashes them).

``kgate init`` wrote a version that loads the registry module from the working folder; it fails where the
reference comparison calls it (kgate's stage process runs from the kgate checkout), hence this self-contained one.

A row with ``cu_seqlens`` is a packed variable-length batch (fla's convention: B = 1, T the total, offsets from 0
to T); the offsets are passed as ``cu_seqlens`` (int64).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

SHAPE_KEYS = ("B", "T", "H", "D")


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    B, T, H, D = (int(row[k]) for k in SHAPE_KEYS)
    kwargs: dict[str, Any] = {"use_qk_l2norm_in_kernel": True}
    if row.get("cu_seqlens") is not None:
        cu = [int(x) for x in row["cu_seqlens"]]
        if B != 1 or cu[0] != 0 or cu[-1] != T or any(b <= a for a, b in zip(cu, cu[1:])):
            msg = f"row {row['name']}: packed rows need B=1 and increasing cu_seqlens from 0 to T={T}, got {cu}"
            raise ValueError(msg)
        kwargs["cu_seqlens"] = torch.tensor(cu, dtype=torch.long, device=device)
    forked = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(seed)
        q = torch.randn((B, T, H, D), dtype=dtype, device=device)
        k = torch.randn((B, T, H, D), dtype=dtype, device=device)
        v = torch.randn((B, T, H, D), dtype=dtype, device=device)
        g = F.logsigmoid(torch.randn((B, T, H), dtype=dtype, device=device))
        beta = torch.randn((B, T, H), dtype=dtype, device=device).sigmoid()
    inputs = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    return (), {**{name: t.requires_grad_(True) for name, t in inputs.items()}, **kwargs}
