"""A real Triton autotuner on a machine without a GPU, with and without kgate's compiling ahead.

The CUDA driver is the named fake of ``nogpu.py`` (no GPU exists here): every kernel is really compiled for
sm_90 and every launch is only counted. The timing function is the autotuner's ``do_bench`` argument: it
calls the config's launch and returns a time that depends on the config, so the pick is deterministic. The
autotuner files its pick on disk (``cache_results``); after the first call the script forgets the pick in
memory and calls again, which reads it back from disk: ``again`` lists what that second call benchmarked.

In the compile-only modes (``kgate.testrun.compile_only``, the precompile worker's), the one call compiles
the configs and benchmarks, launches and picks nothing; ``compile-only-slots`` gives it two compile slots.

Usage: python autotune_ahead.py MODE [bad] [unbound] [prehook] [nested] (MODE: plain | ahead | compile-only |
compile-only-slots), with TRITON_CACHE_DIR set. Prints one JSON line.
  bad      four more configs that cannot compile (BLOCK=3)
  unbound  one more config naming a parameter the kernel lacks (its launch raises before compiling)
  prehook  every config has a pre_hook
  nested   the calls run inside a target's own AsyncCompileMode
"""
import contextlib
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nogpu
import torch
import triton
import triton.language as tl

nogpu.install()
mode, flags = sys.argv[1], set(sys.argv[2:])
from kgate.testrun import compile_only, parallel_compile  # noqa: E402

if mode == "ahead":
    assert parallel_compile.install(Path(tempfile.mkdtemp()), 2)
elif mode.startswith("compile-only"):
    assert compile_only.install(slots=(Path(tempfile.mkdtemp()), 2) if mode.endswith("slots") else None)

seen = []  # kernels compiled at each benchmark call


def bench(fn, quantiles=None):
    seen.append(len(kernel_cache()))
    fn()
    t = float(len(seen) % 3 + 1)
    return [t, t, t]


hook = (lambda nargs: None) if "prehook" in flags else None
blocks = (16, 32, 3) if "bad" in flags else (16, 32)
configs = [triton.Config({"BLOCK": b}, num_warps=w, num_stages=s, pre_hook=hook)
           for b in blocks for w in (4, 8) for s in (2, 3)]
if "unbound" in flags:
    configs.append(triton.Config({"BLOCK": 16, "NOPE": 1}))


@triton.autotune(configs=configs, key=["n"], do_bench=bench, cache_results=True)
@triton.jit
def k(x, y, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    for i in tl.range(0, n, BLOCK):
        a = tl.load(x + tl.arange(0, BLOCK)[:, None] * n + i + tl.arange(0, BLOCK)[None, :])
        b = tl.load(y + tl.arange(0, BLOCK)[:, None] * n + i + tl.arange(0, BLOCK)[None, :])
        acc += tl.dot(a, b)
    tl.store(x + tl.arange(0, BLOCK)[:, None] * n + tl.arange(0, BLOCK)[None, :], acc.to(tl.float16))


def kernel_cache():
    return [v for v in k.fn.device_caches[0][0].values() if type(v).__name__ == "CompiledKernel"]


# the most compiles that ran at once (each held a little longer, so that overlapping ones do overlap)
# and every compile asked for (a kernel compiled twice counts twice; the JIT cache would hold it once)
running, most, calls, lock, compile_one = [0], [0], [0], threading.Lock(), triton.compiler.compile


def counted(*args, **kwargs):
    with lock:
        calls[0] += 1
        running[0] += 1
        most[0] = max(most[0], running[0])
    try:
        time.sleep(0.05)
        return compile_one(*args, **kwargs)
    finally:
        with lock:
            running[0] -= 1


triton.compiler.compile = counted  # what a JIT function's first launch takes as its compiler
outer = contextlib.nullcontext()
if "nested" in flags:
    from triton.runtime._async_compile import AsyncCompileMode
    outer = AsyncCompileMode(ThreadPoolExecutor(1))
x = torch.zeros(64, 64, dtype=torch.float16)
out = {"mode": mode}
with outer:
    try:
        k[(1,)](x, torch.zeros_like(x), 64)
        out["pick"] = str(k.best_config) if k.cache else None
    except Exception as exc:  # the outcome is the data: reported, never swallowed
        out["error"] = type(exc).__name__
out["compiled_at_bench"] = list(seen)
out["compiled"] = len(kernel_cache())
out["launches"] = len(nogpu.LAUNCHES)
out["most_compiles_at_once"] = most[0]
out["compile_calls"] = calls[0]
if out.get("pick"):
    seen.clear()
    k.cache.clear()
    k[(1,)](x, torch.zeros_like(x), 64)
    out["again"] = {"pick": str(k.best_config), "compiled_at_bench": seen}
if mode != "plain":
    out["tally"] = parallel_compile.TALLY
if mode.startswith("compile-only"):
    out["compile_only"] = compile_only.TALLY
print(json.dumps(out))
