

# --- kgate candidate liger-layer-norm-rows: row tiles (appended; the one-row kernels above are renamed *_one_row) ---
# A program of the one-row forward normalises one row with BLOCK_SIZE = next_pow2(n_cols) lanes, so a narrow row
# (n_cols <= 1024: 4 warps on 64..1024 elements) keeps a program too small to hide memory latency; the one-row
# backward runs one program per SM, looping over its rows one at a time with two block reductions each, far from
# the device's bandwidth. Here both kernels process a [BLOCK_ROW, BLOCK_SIZE] tile of rows at once (reductions
# along the row axis), and the backward runs two programs per SM over strided row tiles, each accumulating its
# dW/dB partial row in fp32. Numerics per row are those of the one-row kernels (fp32 statistics, the same
# formulas); only the summation order inside a row's reductions and of the dW/dB partials differs.


def _row_tile(n_cols):
    """(BLOCK_SIZE, BLOCK_ROW, num_warps): about 4096 elements per tile for rows up to 1024 wide, 4 rows of 2048,
    one row from 4096 on."""
    BLOCK_SIZE, _ = calculate_settings(n_cols)
    if BLOCK_SIZE <= 1024:
        return BLOCK_SIZE, max(1, 4096 // BLOCK_SIZE), 4
    if BLOCK_SIZE == 2048:
        return BLOCK_SIZE, 4, 8
    return BLOCK_SIZE, 1, 8


@triton.jit
def _layer_norm_forward_kernel(
    Y_ptr,
    Y_row_stride,
    X_ptr,
    X_row_stride,
    W_ptr,
    B_ptr,
    Mean_ptr,
    RSTD_ptr,
    n_rows,
    n_cols,
    eps,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_ROW + tl.arange(0, BLOCK_ROW)
    cols = tl.arange(0, BLOCK_SIZE)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]

    W = tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    B = tl.load(B_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    X = tl.load(X_ptr + rows[:, None] * X_row_stride + cols[None, :], mask=mask, other=0.0)
    X_f32 = X.to(tl.float32)

    mean = tl.sum(X_f32, axis=1) / n_cols
    X_centered = tl.where(mask, X_f32 - mean[:, None], 0.0)
    var = tl.sum(X_centered * X_centered, axis=1) / n_cols
    rstd = rsqrt(var + eps.to(tl.float32))
    tl.store(Mean_ptr + rows, mean, mask=row_mask)
    tl.store(RSTD_ptr + rows, rstd, mask=row_mask)

    Y = X_centered * rstd[:, None] * W[None, :] + B[None, :]
    tl.store(Y_ptr + rows[:, None] * Y_row_stride + cols[None, :], Y.to(X.dtype), mask=mask)


@triton.jit
def _layer_norm_backward_kernel(
    X_ptr,
    stride_x,
    W_ptr,
    Mean_ptr,
    RSTD_ptr,
    DX_ptr,
    stride_dx,
    DW_ptr,
    DB_ptr,
    DY_ptr,
    stride_dy,
    n_rows,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    COMPUTE_DB: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    col_mask = cols < n_cols
    w = tl.load(W_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    dW_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    dB_acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)

    for start in range(pid * BLOCK_ROW, n_rows, n_programs * BLOCK_ROW):
        rows = (start + tl.arange(0, BLOCK_ROW)).to(tl.int64)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(X_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY_ptr + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean_ptr + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD_ptr + rows, mask=row_mask, other=0.0)

        x_hat = (x - mean[:, None]) * rstd[:, None]
        wdy = w[None, :] * dy
        c1 = tl.sum(x_hat * wdy, axis=1) / n_cols
        c2 = tl.sum(wdy, axis=1) / n_cols
        dx = (wdy - (x_hat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(DX_ptr + rows[:, None] * stride_dx + cols[None, :], dx.to(DX_ptr.dtype.element_ty), mask=mask)
        if COMPUTE_DW:
            dW_acc += tl.sum(dy * x_hat, axis=0)
        if COMPUTE_DB:
            dB_acc += tl.sum(dy, axis=0)

    if COMPUTE_DW:
        tl.store(DW_ptr + pid * n_cols + cols, dW_acc, mask=col_mask)
    if COMPUTE_DB:
        tl.store(DB_ptr + pid * n_cols + cols, dB_acc, mask=col_mask)


def layer_norm_forward(X, W, B, eps):
    """LayerNorm forward over row tiles; returns (Y, X, Mean, RSTD, BLOCK_SIZE, num_warps) like the one-row one."""
    shape = X.shape
    dim = shape[-1]
    X = X.view(-1, dim)
    n_rows, n_cols = X.shape
    if X.shape[1] != W.shape[0]:
        raise ValueError(
            f"Incompatible dimensions: input feature size (X.shape[1]={X.shape[1]}) "
            f"must match weight size (W.shape[0]={W.shape[0]})"
        )
    BLOCK_SIZE, BLOCK_ROW, num_warps = _row_tile(n_cols)
    Y = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
    Mean = torch.empty(n_rows, dtype=torch.float32, device=X.device)
    RSTD = torch.empty(n_rows, dtype=torch.float32, device=X.device)
    _layer_norm_forward_kernel[(triton.cdiv(n_rows, BLOCK_ROW),)](
        Y,
        Y.stride(0),
        X,
        X.stride(0),
        W,
        B,
        Mean,
        RSTD,
        n_rows,
        n_cols,
        eps,
        BLOCK_SIZE=BLOCK_SIZE,
        BLOCK_ROW=BLOCK_ROW,
        num_warps=num_warps,
    )
    return Y.view(*shape), X, Mean, RSTD, BLOCK_SIZE, num_warps


def layer_norm_backward(dY, X, W, B, Mean, RSTD, needs_dw=None, needs_db=None):
    """LayerNorm backward over strided row tiles, two programs per SM; returns (DX, DW, DB)."""
    shape = dY.shape
    dim = shape[-1]
    dY = dY.view(-1, dim)
    n_rows, n_cols = dY.shape
    compute_dw = True if needs_dw is None else needs_dw
    compute_db = True if needs_db is None else needs_db
    BLOCK_SIZE, BLOCK_ROW, num_warps = _row_tile(n_cols)
    if X.device.type == "cuda":
        sm_count = torch.cuda.get_device_properties(X.device).multi_processor_count
        n_programs = min(2 * sm_count, triton.cdiv(n_rows, BLOCK_ROW))
    else:
        n_programs = min(4, triton.cdiv(n_rows, BLOCK_ROW))
    n_programs = max(1, n_programs)
    _DW = torch.empty((n_programs, n_cols), dtype=torch.float32, device=W.device) if compute_dw else None
    _DB = torch.empty((n_programs, n_cols), dtype=torch.float32, device=W.device) if compute_db else None
    DX = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
    _layer_norm_backward_kernel[(n_programs,)](
        X,
        X.stride(0),
        W,
        Mean,
        RSTD,
        DX,
        DX.stride(0),
        _DW,
        _DB,
        dY,
        dY.stride(0),
        n_rows,
        n_cols,
        BLOCK_SIZE=BLOCK_SIZE,
        BLOCK_ROW=BLOCK_ROW,
        COMPUTE_DW=compute_dw,
        COMPUTE_DB=compute_db,
        num_warps=num_warps,
    )
    DX = DX.view(*shape)
    DW = _DW.sum(dim=0).to(W.dtype) if compute_dw else None
    DB = _DB.sum(dim=0).to(B.dtype) if compute_db else None
    return DX, DW, DB
