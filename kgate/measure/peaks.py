"""The device's measured peaks: copy bandwidth and matrix-product FLOP rates per precision.

Method: ``copy_bandwidth`` times ``dst.copy_(src)`` of a large buffer (bytes read + written per
second, the median of ``repeats``); ``flop_rates`` times a square matrix product per precision
(bf16, fp16; tf32 as an fp32 product with TF32 allowed; fp32 with TF32 off; fp64), 2 n^3
operations over the median time, after warm-up. CUDA events on a GPU; on CPU ``time.perf_counter``
on tiny sizes, recorded and never meaningful. These are the ceilings kgate's roofline bounds use
(``kgate.measure.mechanism``): what the device reached, not its datasheet, so a kernel that moves
its bytes faster than a plain copy (or multiplies faster than the library's product) can beat its
floor by that margin. The global TF32 setting is restored after the tf32 probe.

``python -m kgate.measure.peaks`` prints both as one JSON document (the preflight runs it on the
node, kgate.site.node.check_peaks); the profile worker asks for the same functions when no
preflight record has them (kgate.measure.worker_facts).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

#: bytes of the copy buffer and the matrix size per device kind (the GPU sizes run well past launch overhead)
COPY_BYTES = {"gpu": 2**30, "cpu": 32 * 2**20}
MATMUL_N = {"gpu": {"bf16": 8192, "fp16": 8192, "tf32": 8192, "fp32": 8192, "fp64": 4096},
            "cpu": {"bf16": 128, "fp16": 128, "tf32": 128, "fp32": 128, "fp64": 128}}


def _timer(torch: Any, cuda: bool, fn: Any, repeats: int) -> list[float]:
    """Seconds per call of ``fn`` (CUDA events on a GPU, perf_counter on CPU)."""
    out = []
    for _ in range(repeats):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def copy_bandwidth(torch: Any, device: Any, cuda: bool, nbytes: int, repeats: int = 10) -> dict[str, Any]:
    """Device copy bandwidth: bytes read + written per second by ``dst.copy_(src)``."""
    if cuda:
        free, _total = torch.cuda.mem_get_info()
        nbytes = int(min(nbytes, free // 4))
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if cuda:
        torch.cuda.synchronize()
    times = _timer(torch, cuda, lambda: dst.copy_(src), repeats)
    med = statistics.median(times)
    src = dst = None
    if cuda:
        torch.cuda.empty_cache()
    return {"bytes_per_s": 2 * n * 4 / med, "buffer_bytes": n * 4, "median_s": med, "samples_s": times,
            "method": f"copy_ of {n * 4} bytes (read + write = {2 * n * 4} bytes), median of {repeats}"}


def flop_rates(torch: Any, device: Any, cuda: bool, repeats: int = 5) -> dict[str, Any]:
    """FLOP/s of a square matrix product per precision (2 n^3 per product), the median of ``repeats``."""
    sizes = MATMUL_N["gpu" if cuda else "cpu"]
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32,
              "fp64": torch.float64}
    rates: dict[str, float] = {}
    notes: dict[str, str] = {}
    was = torch.backends.cuda.matmul.allow_tf32
    try:
        for prec, n in sizes.items():
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            gen = torch.Generator(device="cpu").manual_seed(0)
            a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtypes[prec])
            b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtypes[prec])
            try:
                for _ in range(2):
                    torch.mm(a, b)
                if cuda:
                    torch.cuda.synchronize()
                med = statistics.median(_timer(torch, cuda, lambda a=a, b=b: torch.mm(a, b), repeats))
            except RuntimeError as exc:  # a precision this device or build cannot multiply in: recorded, no rate
                notes[prec] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                continue
            finally:
                del a, b
            rates[prec] = 2.0 * n ** 3 / med
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was
    if cuda:
        torch.cuda.empty_cache()
    return {"flops_per_s": rates, "sizes": dict(sizes), "failed": notes,
            "method": f"torch.mm of n x n random matrices per precision (tf32: fp32 with TF32 allowed), "
                      f"2 n^3 / median of {repeats} after 2 warm-up products"}


def measure(torch: Any) -> dict[str, Any]:
    """Both probes on this process's current device (CUDA when available)."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    kind = "gpu" if cuda else "cpu"
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    return {"device": name, "cuda": cuda, "bandwidth": copy_bandwidth(torch, device, cuda, COPY_BYTES[kind]),
            "flops": flop_rates(torch, device, cuda), "meaningful": cuda}


def main() -> int:
    import torch

    json.dump(measure(torch), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
