"""kgate's own Triton kernels for the measurement workers (imported inside a worker only).

``kgate_l2_flush`` zeroes an int32 buffer larger than the L2 cache before every
timed or profiled call (Triton ``do_bench`` semantics: "zero a 256 MB
buffer"). It is a kernel of its own so that its launches carry a name no
target can launch, and profiler attribution can drop them by name.
``kgate_noop`` is the launch-cost probe: one program that stores one zero.
"""

from __future__ import annotations

import triton
import triton.language as tl

FLUSH_KERNEL = "kgate_l2_flush"
NOOP_KERNEL = "kgate_noop"
FLUSH_BLOCK = 4096


@triton.jit
def kgate_l2_flush(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros([BLOCK], dtype=tl.int32), mask=offs < n)


@triton.jit
def kgate_noop(ptr):
    tl.store(ptr, 0)


def flush(buf) -> None:  # noqa: ANN001 - a torch int32 tensor; torch is not imported here
    n = buf.numel()
    kgate_l2_flush[(triton.cdiv(n, FLUSH_BLOCK),)](buf, n, BLOCK=FLUSH_BLOCK)


def noop(buf) -> None:  # noqa: ANN001
    kgate_noop[(1,)](buf)
