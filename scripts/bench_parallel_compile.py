"""How much compiling side by side gains in one process: N distinct Triton kernels compiled one at a time,
then on T threads through the pool kgate's gate runs give Triton's AsyncCompileMode
(kgate.testrun.parallel_compile.SlotExecutor).

A benchmark, not a test. It needs no GPU: each kernel is compiled for a CUDA target (sm_90 by default) by
Triton's own compiler and ptxas, and nothing is launched. Each round uses a fresh TRITON_CACHE_DIR, so every
compile is a real one; serial and threaded rounds alternate. The record gives each round's wall time and the
median speedup. Limits: a small matmul-like kernel, not a target's; threads share the process's GIL for the
Python part of a compile (code generation), so the gain depends on that part's share, which this measures on
this kernel only.

    python scripts/bench_parallel_compile.py --kernels 16 --threads 2 --rounds 3 --out record.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def mm(x, y, n, BLOCK: tl.constexpr, STAGES: tl.constexpr):
        acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
        for i in tl.range(0, n, BLOCK, num_stages=STAGES):
            a = tl.load(x + tl.arange(0, BLOCK)[:, None] * n + i + tl.arange(0, BLOCK)[None, :])
            b = tl.load(y + tl.arange(0, BLOCK)[:, None] * n + i + tl.arange(0, BLOCK)[None, :])
            acc += tl.dot(a, b)
        tl.store(x + tl.arange(0, BLOCK)[:, None] * n + tl.arange(0, BLOCK)[None, :], acc.to(tl.float16))

    return mm


def _sources(n: int, capability: int) -> list[tuple[Any, Any, dict[str, Any]]]:
    """``n`` distinct compiles: block size, pipeline stages and warps varied."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, target, out = _kernel(), GPUTarget("cuda", capability, 32), []
    for i in range(n):
        sig = {"x": "*fp16", "y": "*fp16", "n": "i32", "BLOCK": "constexpr", "STAGES": "constexpr"}
        src = ASTSource(fn, sig, {"BLOCK": (32, 64)[i % 2], "STAGES": 2 + i // 2 % 3})
        out.append((src, target, {"num_warps": (4, 8)[i // 6 % 2], "debug": bool(i // 12 % 2)}))
    return out


def _round(n: int, threads: int, capability: int) -> float:
    import triton

    from kgate.testrun.parallel_compile import SlotExecutor

    with tempfile.TemporaryDirectory(prefix="kgate-bench-compile-") as tmp:
        os.environ["TRITON_CACHE_DIR"] = tmp
        jobs = _sources(n, capability)
        start = time.perf_counter()
        if threads <= 1:
            for src, target, options in jobs:
                triton.compile(src, target=target, options=options)
        else:
            with SlotExecutor(threads, Path(tmp) / "slots", threads) as pool:
                futures = [pool.submit(triton.compile, src, target=target, options=options)
                           for src, target, options in jobs]
                for future in futures:
                    future.result()
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--capability", type=int, default=90, help="CUDA compute capability to compile for")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    import triton

    _round(2, 1, a.capability)  # imports and one-time initialisation, not timed
    serial, threaded = [], []
    for _ in range(a.rounds):
        serial.append(round(_round(a.kernels, 1, a.capability), 3))
        threaded.append(round(_round(a.kernels, a.threads, a.capability), 3))
    record = {
        "schema": "kgate.bench-parallel-compile/1", "kernels": a.kernels, "threads": a.threads,
        "capability": a.capability, "cores": len(os.sched_getaffinity(0)), "triton": triton.__version__,
        "python": platform.python_version(), "serial_wall_s": serial, "threaded_wall_s": threaded,
        "speedup_median": round(statistics.median(s / t for s, t in zip(serial, threaded)), 3),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
