"""A real Triton autotuner on a machine without a GPU, with and without kgate's compiling ahead.

Named fake: ``NoGpuDriver`` stands in for Triton's CUDA driver, because no GPU exists here. It answers the
questions a launch with ``warmup=True`` asks (device 0, stream 0, target sm_90) and nothing else, so every
kernel is really compiled for sm_90 (Triton's own compiler and ptxas) and none is launched. The timing
function is the autotuner's ``do_bench`` argument: it calls the config's launch (compile only) and returns a
time that depends on the config, so the pick is deterministic.

The autotuner files its pick on disk (``cache_results``); after the first call the script forgets the pick in
memory and calls again, which reads it back from disk: ``again`` lists what that second call benchmarked.

Usage: python autotune_ahead.py MODE [bad] [unbound] (MODE: plain | ahead), with TRITON_CACHE_DIR set. Prints one JSON line.
"""
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.runtime import driver


class NoGpuDriver:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty):
        from triton.backends.nvidia.driver import ty_to_cpp
        return ty_to_cpp(ty)


driver.set_active(NoGpuDriver())
mode, bad, unbound = sys.argv[1], "bad" in sys.argv[2:], "unbound" in sys.argv[2:]
if mode == "ahead":
    from kgate.testrun import parallel_compile
    assert parallel_compile.install(Path(tempfile.mkdtemp()), 2)

seen = []  # kernels compiled at each benchmark call


def bench(fn, quantiles=None):
    seen.append(len(kernel_cache()))
    fn()
    t = float(len(seen) % 3 + 1)
    return [t, t, t]


blocks = (16, 32, 3) if bad else (16, 32)
configs = [triton.Config({"BLOCK": b}, num_warps=w, num_stages=s) for b in blocks for w in (4, 8) for s in (2, 3)]
if unbound:  # a config naming a parameter the kernel does not have: its launch raises before any compile
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
    return [v for v in k.fn.device_caches[0][0].values() if getattr(v, "kernel", v) is not None
            and type(v).__name__ == "CompiledKernel"]


x = torch.zeros(64, 64, dtype=torch.float16)
out = {"mode": mode}
try:
    k.run(x, torch.zeros_like(x), 64, grid=(1,), warmup=True)
    out["pick"] = str(k.best_config)
except Exception as exc:  # the outcome is the data: reported, never swallowed
    out["error"] = type(exc).__name__
out["compiled_at_bench"] = list(seen)
out["compiled"] = len(kernel_cache())
if "pick" in out:
    seen.clear()
    k.cache.clear()
    k.run(x, torch.zeros_like(x), 64, grid=(1,), warmup=True)
    out["again"] = {"pick": str(k.best_config), "compiled_at_bench": seen}
if mode == "ahead":
    out["tally"] = parallel_compile.TALLY
print(json.dumps(out))
