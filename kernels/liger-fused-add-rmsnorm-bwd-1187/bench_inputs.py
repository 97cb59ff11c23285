"""Inputs of ``liger_kernel.transformers.functional.liger_fused_add_rms_norm`` for kgate's timed stages (campaign
data of liger-fused-add-rmsnorm-bwd-1187).

``make_inputs(row, *, device, dtype, seed)`` returns ``(args, kwargs)`` for
``liger_fused_add_rms_norm(X, R, W, eps, offset=0.0, casting_mode="llama", in_place=False)`` on a row
``{name, M, H}``: ``X`` and the residual ``R`` are ``[M, H]`` (M tokens, batch x sequence flattened, of hidden
size H) drawn standard normal, ``W`` is ``[H]`` drawn around 1 (a trained norm's weights), all three in
``dtype`` and requiring gradients (the claim's "full" pass differentiates X, R and the weight, as Liger's
benchmark does with the module). ``eps`` 1e-6 and the module's defaults otherwise: llama casting, out of place
(``LigerFusedAddRMSNorm`` passes ``in_place=False``; the functional's default would write dX into dY). Every value
comes from one generator on ``device`` seeded with ``seed``, so both arms draw bit-identical tensors.
"""

from __future__ import annotations

from typing import Any

import torch


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    tokens, hidden = int(row["M"]), int(row["H"])
    if tokens < 1 or hidden < 1:
        raise ValueError(f"row {row.get('name')}: M and H must be >= 1, got M={tokens}, H={hidden}")
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen, device=device, dtype=torch.float32).to(dtype)
    r = torch.randn(tokens, hidden, generator=gen, device=device, dtype=torch.float32).to(dtype)
    w = (1.0 + 0.1 * torch.randn(hidden, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    for t in (x, r, w):
        t.requires_grad_(True)
    return (x, r, w, 1e-6), {"offset": 0.0, "casting_mode": "llama", "in_place": False}
