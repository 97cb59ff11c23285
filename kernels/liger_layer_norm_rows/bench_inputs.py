"""Inputs of ``liger_kernel.transformers.functional.liger_layer_norm`` for kgate's timed stages (campaign data).

Named by the campaign's ``measure.inputs``; loaded inside each arm's worker. ``make_inputs(row, *, device,
dtype, seed)`` returns ``(args, kwargs)`` for ``liger_layer_norm(X, W, B, eps)``: ``X`` ``[R, N]`` standard
normal scaled by 2 and shifted by 0.5 (statistics that are not already 0 and 1), ``W`` around 1 and ``B``
around 0, all in ``dtype`` with gradients, ``eps`` 1e-5. Values come from a generator on ``device`` seeded with
``seed``, so both arms draw bit-identical inputs (kgate hashes them).
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    rows, hidden = int(row["R"]), int(row["N"])
    gen = torch.Generator(device=device).manual_seed(seed)
    x = (torch.randn(rows, hidden, generator=gen, device=device) * 2 + 0.5).to(dtype)
    w = (1 + 0.1 * torch.randn(hidden, generator=gen, device=device)).to(dtype)
    b = (0.1 * torch.randn(hidden, generator=gen, device=device)).to(dtype)
    for t in (x, w, b):
        t.requires_grad_(True)
    return (x, w, b, 1e-5), {}
