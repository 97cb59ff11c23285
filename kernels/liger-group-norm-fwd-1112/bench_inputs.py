"""Inputs of ``liger_kernel.transformers.functional.liger_group_norm`` for kgate's timed stages (campaign data of
liger-group-norm-fwd-1112).

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for
``liger_group_norm(X, W, B, num_channels, num_groups, eps)`` on a row ``{name, M, C, H, cpg}``: ``X`` is
``[M, C, H]`` (M samples, C channels of H elements each) drawn standard normal, ``W`` and ``B`` are ``[C]``
(W around 1, B around 0: a trained layer's affine, distinct per channel), ``num_groups = C // cpg`` (cpg channels
per group) and eps 1e-6, as Liger's benchmark builds ``LigerGroupNorm`` (M 128, H 512, 4 channels per group). X,
W and B require gradients, as the benchmark's input does (the forward records the graph). Every value comes from
one generator on ``device`` seeded with ``seed``, so both arms draw bit-identical tensors.
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    samples, channels, hidden, per_group = (int(row[k]) for k in ("M", "C", "H", "cpg"))
    if min(samples, channels, hidden, per_group) < 1 or channels % per_group:
        raise ValueError(f"row {row.get('name')}: M, C, H, cpg must be >= 1 and cpg must divide C, got "
                         f"M={samples}, C={channels}, H={hidden}, cpg={per_group}")
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(samples, channels, hidden, generator=gen, device=device, dtype=torch.float32).to(dtype)
    w = (1.0 + 0.1 * torch.randn(channels, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    b = (0.1 * torch.randn(channels, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    for t in (x, w, b):
        t.requires_grad_(True)
    return (x, w, b, channels, channels // per_group, 1e-6), {}
