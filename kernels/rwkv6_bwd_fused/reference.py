"""The float64 reference of ``fla.ops.rwkv6.chunk_rwkv6`` for kgate's outputs check (campaign data).

Named by the fla RWKV6 campaigns' ``reference.callable``. kgate calls it like ``chunk_rwkv6`` (the
campaign's ``measure.callable``), with float64 copies of a row's floating-point inputs, and compares
every output and gradient of BENCH_BASE and of the candidate with it (``kgate.measure.reference``).

The recurrence is the oracle suite's (``oracle/tests/test_chunk_rwkv6_oracle.py``: ``rwkv6_recurrence``
and ``reference_rwkv6``, the same equations in fla's ``[B, T, H, K]`` layout with packed
variable-length sequences); tests/test_reference.py checks that the two agree. It is kept here because
the oracle file is part of the frozen gate and imports fla::

    o_t = (scale * r_t) . (S + (u * k_t) v_t^T)
    S   = diag(exp(w_t)) S + k_t v_t^T           (S starts at the initial state, or 0)
"""

from __future__ import annotations

from typing import Any

import torch


def rwkv6_recurrence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, u: torch.Tensor,
                     scale: float, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence over equal-length sequences: ``q, k, w [N, T, H, K]``, ``v [N, T, H, V]``, ``u [H, K]``,
    ``state [N, H, K, V]``; returns ``o [N, T, H, V]`` and the final state."""
    outputs = []
    for t in range(q.shape[1]):
        kv = k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("nhk,nhkv->nhv", q[:, t] * scale, state + u[None, :, :, None] * kv))
        state = state * w[:, t, :, :, None].exp() + kv
    return torch.stack(outputs, dim=1), state


def chunk_rwkv6(r: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor, u: torch.Tensor,
                scale: float | None = None, initial_state: torch.Tensor | None = None,
                output_final_state: bool = False, cu_seqlens: torch.Tensor | None = None,
                **_: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``chunk_rwkv6``'s semantics (the chunk size changes how it computes, not what): ``(o, final_state)``."""
    B, T, H, K = r.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    if cu_seqlens is None:
        state = initial_state if initial_state is not None else r.new_zeros(B, H, K, V)
        o, ht = rwkv6_recurrence(r, k, v, w, u, scale, state)
    else:
        bounds = [int(x) for x in cu_seqlens.tolist()]
        outputs, finals = [], []
        for n, (bos, eos) in enumerate(zip(bounds[:-1], bounds[1:])):
            state = initial_state[n:n + 1] if initial_state is not None else r.new_zeros(1, H, K, V)
            o_n, ht_n = rwkv6_recurrence(r[:, bos:eos], k[:, bos:eos], v[:, bos:eos], w[:, bos:eos], u, scale, state)
            outputs.append(o_n)
            finals.append(ht_n)
        o, ht = torch.cat(outputs, dim=1), torch.cat(finals, dim=0)
    return o, (ht if output_final_state else None)
