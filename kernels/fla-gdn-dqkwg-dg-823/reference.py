"""The float64 reference of ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (campaign data, not kgate code).

Named by the fla-gdn-dqkwg-dg-823 campaign's ``reference.callable``. kgate calls it like the op (the
campaign's ``measure.callable``, keyword arguments from ``bench_inputs.make_inputs``), with float64 copies
of a dispatch row's floating-point inputs, and compares every output and gradient of BENCH_BASE and of the
candidate with it (``kgate.measure.reference``). The gated delta rule, per head, written from its
definition (fla's ``[B, T, H, K]`` layout; GVA: value head ``h`` reads query/key head ``h // (HV // H)``;
packed variable-length sequences when ``cu_seqlens`` is given, each from its own initial state)::

    q_t, k_t <- q_t / |q_t|, k_t / |k_t|          (use_qk_l2norm_in_kernel)
    S   <- exp(g_t) S                              (S [K, V] starts at the initial state, or 0)
    u_t  = beta_t (v_t - S^T k_t)
    S   <- S + k_t u_t^T
    o_t  = scale S^T q_t                           (scale defaults to K ** -0.5)

Limits: one Python step per token (seconds on the GPU rows, which are small for that reason); the
in-kernel gate (``use_gate_in_kernel``), context parallelism and the transposed state layout are not
modelled: a call that asks for one is an error.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def _recurrence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                scale: float, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: ``q, k [T, HV, K]``, ``v [T, HV, V]``, ``g, beta [T, HV]``, ``state [HV, K, V]``."""
    outputs = []
    for t in range(q.shape[0]):
        state = state * g[t].exp()[:, None, None]
        u = beta[t][:, None] * (v[t] - torch.einsum("hk,hkv->hv", k[t], state))
        state = state + k[t][:, :, None] * u[:, None, :]
        outputs.append(torch.einsum("hk,hkv->hv", q[t] * scale, state))
    return torch.stack(outputs, dim=0), state


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                           beta: torch.Tensor, scale: float | None = None,
                           initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                           use_qk_l2norm_in_kernel: bool = False, cu_seqlens: torch.Tensor | None = None,
                           **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The op's semantics: ``(o [B, T, HV, V], final_state [N, HV, K, V] or None)``."""
    unsupported = [key for key in ("use_gate_in_kernel", "cp_context", "transpose_state_layout") if kwargs.get(key)]
    if unsupported:
        raise ValueError(f"the reference does not model {', '.join(unsupported)}")
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    scale = K ** -0.5 if scale is None else scale
    if use_qk_l2norm_in_kernel:
        q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
    q, k = q.repeat_interleave(HV // H, dim=2), k.repeat_interleave(HV // H, dim=2)
    if cu_seqlens is None:
        spans = [(b, 0, T) for b in range(B)]
    else:
        bounds = [int(x) for x in cu_seqlens.tolist()]
        spans = [(0, bos, eos) for bos, eos in zip(bounds[:-1], bounds[1:])]
    outputs, finals = [], []
    for n, (b, bos, eos) in enumerate(spans):
        state = initial_state[n] if initial_state is not None else q.new_zeros(HV, K, V)
        o_n, ht_n = _recurrence(q[b, bos:eos], k[b, bos:eos], v[b, bos:eos], g[b, bos:eos], beta[b, bos:eos],
                                scale, state)
        outputs.append(o_n)
        finals.append(ht_n)
    o = torch.stack(outputs, dim=0) if cu_seqlens is None else torch.cat(outputs, dim=0)[None]
    return o, (torch.stack(finals, dim=0) if output_final_state else None)
