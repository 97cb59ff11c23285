

# kgate candidate "rwkv6_bwd_fused": one backward kernel for the RWKV6 intra and inter chunk dQ/dK work.
#
# This block is appended to fla/ops/rwkv6/chunk.py and only adds names. It reuses the module's own imports
# (torch, triton, tl, exp2, RCP_LN2, autotune_cache_kwargs, prepare_chunk_indices) and fla's unchanged host
# steps, then rebinds `chunk_rwkv6_bwd`, which `ChunkRWKV6Function.backward` looks up at call time.
# Shapes outside `KGATE_FUSED_CLASSES` run the saved original function, i.e. the unchanged two-kernel path.
# Design, schedule and evidence: kernels/rwkv6_bwd_fused/candidate/README.md in the kgate repository.

_kgate_unfused_chunk_rwkv6_bwd = chunk_rwkv6_bwd

# (chunk size BT, D class, layout) triples that take the fused path. The D class is the smallest of 64/128/256
# that holds K; K > 256 has no class. BT=16/32 stay on the original path: the registered benchmarks and the
# default chunk size are BT=64, and promoting them needs their own BF16 fixture cases (README: "Dispatch").
KGATE_FUSED_CLASSES = frozenset(
    (64, d, layout) for d in (64, 128, 256) for layout in ('dense', 'varlen')
)

# Exact compute capabilities for which every tiling below was compiled (ptxas) without a register spill.
# Any other GPU runs the original path. A CPU tensor can only reach a Triton kernel through Triton's
# interpreter, which has no register file, so the CPU takes the same classes (numerical smoke only).
KGATE_FUSED_CAPABILITIES = frozenset({(9, 0), (10, 0), (10, 3)})

# (BK, BV, num_warps) tilings the autotuner chooses from, all spill-free for D64/128/256 at BT=64 on the
# capabilities above. A [64, BK] FP32 tile costs 64*BK/(32*num_warps) registers per thread, so BK=64 needs
# 8 warps and BK=16 leaves room for two 8-warp programs per SM (README: "Schedule").
KGATE_FUSED_CONFIGS = (
    (32, 32, 4),
    (32, 64, 4),
    (64, 32, 8),
    (64, 64, 8),
    (32, 32, 8),
    (32, 64, 8),
    (16, 32, 8),
    (16, 64, 8),
)


def _kgate_prune_configs(configs, named_args, **kwargs):
    # FP32 inputs double the register share of the v/do tiles; only the 8-warp tilings with BK <= 32 stay
    # spill-free for every D class there (README: "Schedule")
    if named_args['q'].element_size() < 4:
        return configs
    return [c for c in configs if c.num_warps == 8 and c.kwargs['BK'] <= 32]


def kgate_d_class(K: int) -> int | None:
    """The D class (64, 128 or 256) that holds head dim ``K``; ``None`` above 256."""
    return next((d for d in (64, 128, 256) if d >= K), None)


def _kgate_capability(device: torch.device) -> tuple[int, int]:
    # fla's own device helper (cached per device index); imported here because this block sits below the
    # module's import section
    from fla.utils import get_device_capability
    return get_device_capability(device.index if device.index is not None else torch.cuda.current_device())


def kgate_fused_enabled(K: int, V: int, BT: int, varlen: bool, device) -> bool:
    """Whether a backward with head dims ``K``/``V``, chunk size ``BT`` and layout ``varlen`` on ``device``
    takes the fused kernel. ``V`` only loops inside a program, so it does not select a class."""
    device = torch.device(device)
    if device.type == 'cuda':
        if _kgate_capability(device) not in KGATE_FUSED_CAPABILITIES:
            return False
    elif device.type != 'cpu':
        return False
    return (BT, kgate_d_class(K), 'varlen' if varlen else 'dense') in KGATE_FUSED_CLASSES


@triton.heuristics({
    'IS_VARLEN': lambda args: args['cu_seqlens'] is not None,
})
@triton.autotune(
    configs=[
        triton.Config({'BK': BK, 'BV': BV}, num_warps=num_warps)
        for BK, BV, num_warps in KGATE_FUSED_CONFIGS
    ],
    key=['BT', 'K', 'V'],
    prune_configs_by={'early_config_prune': _kgate_prune_configs},
    **autotune_cache_kwargs,
)
@triton.jit(do_not_specialize=['T'])
def chunk_rwkv6_bwd_kernel_fused(
    q,
    k,
    v,
    h,
    gi,
    ge,
    u,
    do,
    dh,
    dA,
    dq,
    dk,
    dg,
    du,
    cu_seqlens,
    chunk_indices,
    scale,
    T,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BT: tl.constexpr,
    BC: tl.constexpr,
    NC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):
    # One program owns one [BT, BK] tile of one chunk. The grid is flattened (K tile fastest) so that the
    # programs of one chunk run back to back and share its v/do/dA in L2, and so that no grid dimension
    # grows with the token count.
    i_kt = tl.program_id(0).to(tl.int64)
    i_bh = tl.program_id(1).to(tl.int64)
    NKT = tl.cdiv(K, BK)
    i_k, i_t = i_kt % NKT, i_kt // NKT
    i_b, i_h = i_bh // H, i_bh % H
    if IS_VARLEN:
        i_tg = i_t
        i_n = tl.load(chunk_indices + i_t * 2).to(tl.int64)
        i_t = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int64)
        bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64), tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        i_tg = i_b * tl.cdiv(T, BT) + i_t
        bos, eos = i_b * T, i_b * T + T
    T = eos - bos
    # sub-chunks of this chunk that hold at least one valid row
    NCV = min(NC, tl.cdiv(T - i_t * BT, BC))

    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    # local row, its sub-chunk and its position inside the sub-chunk
    o_i = tl.arange(0, BT)
    o_c = o_i // BC
    o_w = o_i % BC
    o_t = i_t * BT + o_i
    m_t = o_t < T
    m_tk = m_t[:, None] & m_k[None, :]
    # int64 row offsets of the token, of the first row of its sub-chunk, and the head's column base
    r_t = (bos + o_t) * H
    r_c = (bos + i_t * BT + o_c * BC) * H
    b_hk = i_h * K + o_k
    b_ht = i_h * BT

    # 1) inter/state dQ/dK in FP32, and the state part of dG, as in chunk_rwkv6_bwd_kernel_inter
    p_gn = gi + (bos + tl.minimum(T, i_t * BT + BT) - 1) * H*K + b_hk
    b_gn = tl.load(p_gn, mask=m_k, other=0)
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_dgk = tl.zeros([BK], dtype=tl.float32)
    for i_v in range(tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v[None, :] < V)
        m_h = (o_v[:, None] < V) & m_k[None, :]
        p_v = v + r_t[:, None] * V + i_h * V + o_v[None, :]
        p_do = do + r_t[:, None] * V + i_h * V + o_v[None, :]
        p_h = h + (i_tg * H + i_h) * K*V + o_v[:, None] + o_k[None, :] * V
        p_dh = dh + (i_tg * H + i_h) * K*V + o_v[:, None] + o_k[None, :] * V
        # [BT, BV]
        b_v = tl.load(p_v, mask=m_tv, other=0.0)
        b_do = tl.load(p_do, mask=m_tv, other=0.0)
        # [BV, BK]
        b_h = tl.load(p_h, mask=m_h, other=0.0)
        b_dh = tl.load(p_dh, mask=m_h, other=0.0)
        b_dgk += tl.sum(b_h * b_dh, axis=0)
        b_dq = tl.dot(b_do, b_h.to(b_do.dtype), b_dq)
        b_dk = tl.dot(b_v, b_dh.to(b_v.dtype), b_dk)
    b_dgk *= exp2(b_gn)
    b_dq *= scale
    # [BT, BK] inclusive in-chunk gate cumsum of the tile's rows; dQ's 2^ge follows after the dK side
    b_gi = tl.load(gi + r_t[:, None] * K + b_hk[None, :], mask=m_tk, other=0.0)
    b_dk = b_dk * exp2(b_gn[None, :] - b_gi)

    # 2) the state-derived dG term takes the inter dK alone, before any intra dK is added
    b_k = tl.load(k + r_t[:, None] * K + b_hk[None, :], mask=m_tk, other=0.0)
    b_dgk += tl.sum(b_dk * b_k, axis=0)

    # 3) the intra-chunk terms except the true diagonal, each side in its own FP32 tile built exactly as
    # chunk_rwkv6_bwd_kernel_intra builds it, then added to the inter accumulator (inter + intra, as before).
    # Off-diagonal sub-chunks: one [BT, BC] x [BC, BK] dot per (target i, source j) pair with the BC=16
    # block-local gate center of sub-chunk i; the dA rows outside sub-chunk i are zeroed, so every other row of
    # the tile gains an exact 0 and each [BC, BK] result lands in its own rows. Pairs accumulate in increasing j.
    # Inside a sub-chunk: a row loop with the strict mask. The dK side runs first so that only one of gi/ge
    # is live at a time (independent element-wise steps; the order does not change any value).

    # 3a) intra dK: target sub-chunk i takes sub-chunks j > i through dA^T, qg = q_j * 2^(ge_j - gn_i) with
    # gn_i = gi at the last valid row of sub-chunk i, then the tile is scaled by 2^(gn_i - gi)
    b_dki = tl.zeros([BT, BK], dtype=tl.float32)
    for i_j in tl.range(1, NCV, num_stages=1):
        o_sk = i_t * BT + i_j * BC + tl.arange(0, BC)
        m_sk = o_sk < T
        m_skk = m_sk[:, None] & m_k[None, :]
        # [BC, BK]
        b_qs = tl.load(q + (bos + o_sk[:, None]) * H*K + b_hk[None, :], mask=m_skk, other=0.0)
        b_gqs = tl.load(ge + (bos + o_sk[:, None]) * H*K + b_hk[None, :], mask=m_skk, other=0.0)
        b_gqs = tl.where(m_skk, b_gqs, float('-inf'))
        # [BT, BC]: dA[j-block, t] for every row t of the chunk
        b_dAs2 = tl.load(dA + (bos + o_sk[None, :]) * H*BT + b_ht + o_i[:, None], mask=m_sk[None, :], other=0.0)
        for i_i in tl.range(0, i_j, num_stages=1):
            b_gnk_i = tl.load(gi + (bos + min(i_t * BT + i_i * BC + BC, T) - 1) * H*K + b_hk, mask=m_k, other=0)
            b_qg = b_qs * exp2(b_gqs - b_gnk_i[None, :])
            b_dki = tl.dot(tl.where(o_c[:, None] == i_i, b_dAs2, 0.), b_qg, b_dki)
    # the last valid sub-chunk has no source sub-chunk and keeps its zeros
    m_ck = m_t & (o_c < NCV - 1)
    p_gnk = gi + (bos + tl.minimum(i_t * BT + o_c * BC + BC, T) - 1)[:, None] * H*K + b_hk[None, :]
    b_gnk = tl.load(p_gnk, mask=m_ck[:, None] & m_k[None, :], other=0.0)
    b_dki = tl.where(m_ck[:, None], b_dki * exp2(b_gnk - b_gi), 0.)
    # within a sub-chunk: rows strictly before source row j
    for j2 in range(BC):
        m_rk = m_t & (o_w < j2) & (i_t * BT + o_c * BC + j2 < T)
        m_rkk = m_rk[:, None] & m_k[None, :]
        # [BT]: dA[first row of t's sub-chunk + j, t]
        b_dAr2 = tl.load(dA + (r_c + j2 * H) * BT + b_ht + o_i, mask=m_rk, other=0)
        # [BT, BK]: q and ge of source row j of each row's own sub-chunk
        b_qr = tl.load(q + (r_c + j2 * H)[:, None] * K + b_hk[None, :], mask=m_rkk, other=0).to(tl.float32)
        b_gqr = tl.load(ge + (r_c + j2 * H)[:, None] * K + b_hk[None, :], mask=m_rkk, other=0).to(tl.float32)
        b_dki += tl.where(m_rk[:, None], b_dAr2[:, None] * b_qr * exp2(b_gqr - b_gi), 0.)
    b_dk += b_dki

    # the inter dQ scaling, deferred to here so that ge is loaded once gi is dead
    b_ge = tl.load(ge + r_t[:, None] * K + b_hk[None, :], mask=m_tk, other=0.0)
    b_dq = b_dq * exp2(b_ge)

    # 3b) intra dQ: target sub-chunk i takes sub-chunks j < i, kg = k_j * 2^(gn_i - gi_j) with gn_i = gi at
    # the row before sub-chunk i, then the tile is scaled by 2^(ge - gn_i)
    b_dqi = tl.zeros([BT, BK], dtype=tl.float32)
    for i_j in tl.range(0, NCV - 1, num_stages=1):
        o_sq = i_t * BT + i_j * BC + tl.arange(0, BC)
        m_sq = (o_sq[:, None] < T) & m_k[None, :]
        # [BC, BK]
        b_ks = tl.load(k + (bos + o_sq[:, None]) * H*K + b_hk[None, :], mask=m_sq, other=0.0)
        b_gks = tl.load(gi + (bos + o_sq[:, None]) * H*K + b_hk[None, :], mask=m_sq, other=0.0)
        # [BT, BC]: dA[t, j-block] for every row t of the chunk
        b_dAs = tl.load(dA + r_t[:, None] * BT + b_ht + i_j * BC + tl.arange(0, BC)[None, :], mask=m_t[:, None], other=0.0)
        for i_i in tl.range(i_j + 1, NCV, num_stages=1):
            b_gnq_i = tl.load(gi + (bos + i_t * BT + i_i * BC - 1) * H*K + b_hk, mask=m_k, other=0)
            b_kg = b_ks * exp2(b_gnq_i[None, :] - b_gks)
            b_dqi = tl.dot(tl.where(o_c[:, None] == i_i, b_dAs, 0.), b_kg, b_dqi)
    # sub-chunk 0 has no source sub-chunk and keeps its zeros, as in the intra kernel
    m_cq = m_t & (o_c > 0)
    p_gnq = gi + (r_c - H)[:, None] * K + b_hk[None, :]
    b_gnq = tl.load(p_gnq, mask=m_cq[:, None] & m_k[None, :], other=0.0)
    b_dqi = tl.where(m_cq[:, None], b_dqi * exp2(b_ge - b_gnq), 0.)
    # within a sub-chunk: rows strictly after source row j, one source row per step, FP32 products
    p_dAq = dA + r_t * BT + b_ht + o_c * BC
    for j in range(BC):
        m_rq = m_t & (o_w > j)
        m_rqk = m_rq[:, None] & m_k[None, :]
        # [BT]: dA[t, first row of t's sub-chunk + j]
        b_dAr = tl.load(p_dAq + j, mask=m_t, other=0)
        # [BT, BK]: k and gi of source row j of each row's own sub-chunk
        b_kr = tl.load(k + (r_c + j * H)[:, None] * K + b_hk[None, :], mask=m_rqk, other=0).to(tl.float32)
        b_gkr = tl.load(gi + (r_c + j * H)[:, None] * K + b_hk[None, :], mask=m_rqk, other=0).to(tl.float32)
        b_dqi += tl.where(m_rq[:, None], b_dAr[:, None] * b_kr * exp2(b_ge - b_gkr), 0.)
    b_dq += b_dqi

    # 4) dG from the combined inter + intra dQ/dK: in-chunk reverse cumsum plus the state term
    b_q = tl.load(q + r_t[:, None] * K + b_hk[None, :], mask=m_tk, other=0.0)
    b_k = tl.load(k + r_t[:, None] * K + b_hk[None, :], mask=m_tk, other=0.0)
    b_dg = b_q * b_dq - b_k * b_dk
    b_dg = b_dg - tl.cumsum(b_dg, axis=0) + tl.sum(b_dg, axis=0)[None, :] + b_dgk[None, :] - b_q * b_dq

    # 5) the true-diagonal u bonus goes into the final dQ/dK after dG; dA[t, t] already holds the scale
    b_dA_dig = tl.load(dA + r_t * BT + b_ht + o_i, mask=m_t, other=0)
    b_u = tl.load(u + b_hk, mask=m_k, other=0.0)
    b_dq += (b_dA_dig[:, None] * b_u[None, :] * b_k)
    b_dk += (b_dA_dig[:, None] * b_u[None, :] * b_q)
    b_du = tl.sum(b_dA_dig[:, None] * b_q * b_k, axis=0)
    tl.store(du + (i_tg * H + i_h) * K + o_k, b_du, mask=m_k)

    # the final gradients in their own dtypes (one round-to-nearest-even from the FP32 accumulators)
    tl.store(dq + r_t[:, None] * K + b_hk[None, :], b_dq.to(dq.dtype.element_ty), mask=m_tk)
    tl.store(dk + r_t[:, None] * K + b_hk[None, :], b_dk.to(dk.dtype.element_ty), mask=m_tk)
    tl.store(dg + r_t[:, None] * K + b_hk[None, :], b_dg.to(dg.dtype.element_ty), mask=m_tk)


def kgate_chunk_rwkv6_bwd_dqkgu_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    h: torch.Tensor,
    g: torch.Tensor,
    gi: torch.Tensor,
    ge: torch.Tensor,
    u: torch.Tensor,
    do: torch.Tensor,
    dh: torch.Tensor,
    dA: torch.Tensor,
    scale: float,
    cu_seqlens: torch.LongTensor | None = None,
    chunk_size: int = 64,
    chunk_indices: torch.LongTensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Final dq, dk (input dtypes), dg (g's dtype) and du (FP32 ``[H, K]``) in one launch: the work of
    ``chunk_rwkv6_bwd_dqk_intra`` followed by ``chunk_rwkv6_bwd_dqkgu`` and the casts, with no FP32
    ``[B, T, H, K]`` temporaries."""
    B, T, H, K, V = *k.shape, v.shape[-1]
    BT = chunk_size
    BC = min(16, BT)
    if chunk_indices is None and cu_seqlens is not None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, chunk_size)
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)

    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dg = torch.empty_like(g)
    du = u.new_empty(B * NT, H, K, dtype=torch.float)

    def grid(meta):
        return (triton.cdiv(K, meta['BK']) * NT, B * H)
    chunk_rwkv6_bwd_kernel_fused[grid](
        q,
        k,
        v,
        h,
        gi,
        ge,
        u,
        do,
        dh,
        dA,
        dq,
        dk,
        dg,
        du,
        cu_seqlens,
        chunk_indices,
        scale,
        T=T,
        H=H,
        K=K,
        V=V,
        BT=BT,
        BC=BC,
        NC=triton.cdiv(BT, BC),
    )
    return dq, dk, dg, du.sum(0)


def kgate_fused_chunk_rwkv6_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    u: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor,
    A: torch.Tensor,
    do: torch.Tensor,
    dht: torch.Tensor,
    cu_seqlens: torch.LongTensor | None = None,
    chunk_size: int = 64,
    chunk_indices: torch.LongTensor | None = None,
):
    """The backward with the fused dq/dk/dg/du kernel, whatever the dispatch class says (tests call it
    directly). The steps before it are fla's own, called with the arguments the original passes."""
    if chunk_indices is None and cu_seqlens is not None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, chunk_size)
    gi, ge = chunk_rwkv6_fwd_cumsum(
        g,
        chunk_size=chunk_size,
        scale=RCP_LN2,
        cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
    )
    h, _ = chunk_fwd_h(
        k=k,
        v=v,
        g=None,
        gk=gi,
        gv=None,
        h0=initial_state,
        output_final_state=False,
        cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
        states_in_fp32=True,
    )
    dh, dh0 = chunk_rwkv6_bwd_dh(
        q=q,
        k=k,
        v=v,
        gi=gi,
        ge=ge,
        do=do,
        h0=initial_state,
        dht=dht,
        scale=scale,
        cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
        states_in_fp32=True,
        chunk_indices=chunk_indices,
    )
    dA = chunk_gla_bwd_dA(
        v=v,
        do=do,
        scale=scale,
        cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
        chunk_indices=chunk_indices,
    )
    dv = chunk_gla_bwd_dv(
        k=k,
        g=gi,
        A=A,
        do=do,
        dh=dh,
        cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
    )
    dq, dk, dg, du = kgate_chunk_rwkv6_bwd_dqkgu_fused(
        q=q,
        k=k,
        v=v,
        h=h,
        g=g,
        gi=gi,
        ge=ge,
        u=u,
        do=do,
        dh=dh,
        dA=dA,
        scale=scale,
        cu_seqlens=cu_seqlens,
        chunk_size=chunk_size,
        chunk_indices=chunk_indices,
    )
    return dq, dk, dv, dg, du, dh0


def kgate_chunk_rwkv6_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    u: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor,
    A: torch.Tensor,
    do: torch.Tensor,
    dht: torch.Tensor,
    cu_seqlens: torch.LongTensor | None = None,
    chunk_size: int = 64,
    chunk_indices: torch.LongTensor | None = None,
):
    """``chunk_rwkv6_bwd`` with class dispatch: the fused path for enabled classes, else the original."""
    args = {"q": q, "k": k, "v": v, "g": g, "u": u, "scale": scale, "initial_state": initial_state, "A": A,
            "do": do, "dht": dht, "cu_seqlens": cu_seqlens, "chunk_size": chunk_size, "chunk_indices": chunk_indices}
    if kgate_fused_enabled(q.shape[-1], v.shape[-1], chunk_size, cu_seqlens is not None, q.device):
        return kgate_fused_chunk_rwkv6_bwd(**args)
    return _kgate_unfused_chunk_rwkv6_bwd(**args)


chunk_rwkv6_bwd = kgate_chunk_rwkv6_bwd
