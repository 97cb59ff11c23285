"""Inputs of ``liger_kernel.transformers.functional.liger_layer_norm`` for kgate's timed stages (campaign data of
liger-layer-norm-bwd-945).

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for ``liger_layer_norm(X, W, B, eps)`` on a
row ``{name, R, N}``: ``X`` is ``[R, N]`` (R tokens, i.e. batch x sequence flattened, of hidden size N), drawn
standard normal, scaled by 1.5 and shifted by -0.25 so that the row statistics the kernel computes are not already
0 and 1; ``W`` is drawn around 1 and ``B`` around 0 (a trained LayerNorm's affine parameters), all three cast to
``dtype`` and requiring gradients (the backward under test produces dX, dW and dB; dW and dB are the reductions
over the R rows that the change moves from atomics to per-program partial sums). ``eps`` is 1e-6, as Liger's own
tests use. Every value comes from one generator on ``device`` seeded with ``seed``, so both arms draw
bit-identical tensors (kgate hashes them).
"""

from __future__ import annotations

from typing import Any

import torch

EPS = 1e-6


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    n_rows, hidden = int(row["R"]), int(row["N"])
    if n_rows < 1 or hidden < 1:
        raise ValueError(f"row {row.get('name')}: R and N must be positive, got R={n_rows}, N={hidden}")
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n_rows, hidden, generator=gen, device=device, dtype=torch.float32).mul_(1.5).add_(-0.25)
    w = torch.randn(hidden, generator=gen, device=device, dtype=torch.float32).mul_(0.2).add_(1.0)
    b = torch.randn(hidden, generator=gen, device=device, dtype=torch.float32).mul_(0.2)
    args = []
    for t in (x, w, b):
        leaf = t.to(dtype)
        leaf.requires_grad_(True)
        args.append(leaf)
    return (*args, EPS), {}
