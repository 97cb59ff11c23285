"""Kernels for gate-run tests behind the no-GPU driver (``nogpu.py``): an autotuned one with three configs,
timed by a ``do_bench`` that launches the config once (a launch is only counted) and calls every config
equal, and an untuned one."""
import triton
import triton.language as tl


def bench(fn, quantiles=None):
    fn()
    return [1.0, 1.0, 1.0]


@triton.autotune(configs=[triton.Config({"B": b}) for b in (16, 32, 64)], key=["n"], do_bench=bench)
@triton.jit
def tuned(x, n, B: tl.constexpr):
    tl.store(x + tl.arange(0, B), tl.arange(0, B).to(tl.float32))


@triton.jit
def other(x, B: tl.constexpr):
    tl.store(x + tl.arange(0, B), tl.zeros([B], tl.float32))
