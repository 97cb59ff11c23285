"""Offline register/spill/shared-memory census of the fused kernel (and fla's inter kernel) on a CPU host.

Usage::

    PYTHONPATH=<fla tree with the candidate appended> python kernels/rwkv6_bwd_fused/candidate/compile_resources.py \\
        [--cc 90 100 103] [--d 64 128 256] [--dtype bf16] [--varlen] [--inter] [--json OUT.json]

Method: Triton compiles each kernel specialization for an NVIDIA target without a GPU
(``triton.compile`` with a ``GPUTarget``), exactly as a launch would specialize it: the
dispatch-class constexprs (H=16, K=V=D, BT=64, BC=16, NC=4), pointer arguments marked
16-byte aligned (PyTorch allocations are), the tiling and ``num_warps`` of one autotune
config and Triton's default ``num_stages``. The PTX is then assembled by the ``ptxas``
that ships with Triton, with the flags Triton's own ``make_cubin`` uses, and ``ptxas -v``
gives registers per thread, spill bytes and the stack frame; shared memory comes from
Triton's metadata. Occupancy is derived from registers and shared memory only (65536
registers and ``--smem-per-sm`` bytes per SM, 64 warps max).

This measures the local Triton and ptxas, not the GPU host's: a host with another Triton
(the H200 runs 3.6) must rerun it there, or read the numbers from a real compile. It says
nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

FIELDS = ("regs", "spill_stores", "spill_loads", "stack", "smem", "warps_per_sm")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cc", type=int, nargs="+", default=[90, 100, 103], help="compute capabilities, e.g. 90 103")
    p.add_argument("--d", type=int, nargs="+", default=[64, 128, 256], help="head dims K = V")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"), help="q/k/v/do/g/u dtype")
    p.add_argument("--varlen", action="store_true", help="compile the packed-varlen specialization")
    p.add_argument("--inter", action="store_true", help="also compile fla's chunk_rwkv6_bwd_kernel_inter configs")
    p.add_argument("--smem-per-sm", type=int, default=233472, help="shared memory per SM in bytes (H200/B300: 228 KiB)")
    p.add_argument("--json", type=Path, help="write the rows here")
    return p.parse_args()


def _jit(kernel: Any) -> Any:
    import triton

    while not isinstance(kernel, triton.runtime.jit.JITFunction):
        kernel = kernel.fn
    return kernel


def _autotune_configs(kernel: Any, dtype: str) -> list[tuple[dict[str, int], int, int]]:
    """The configs the kernel's autotuner would time for q of ``dtype`` (its own early pruning applied)."""
    import torch
    from triton.runtime.autotuner import Autotuner

    while not isinstance(kernel, Autotuner):
        kernel = kernel.fn
    configs = kernel.configs
    if kernel.early_config_prune is not None:
        q = torch.empty(0, dtype={"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype])
        configs = kernel.early_config_prune(configs, {"q": q})
    return [(dict(c.kwargs), c.num_warps, c.num_stages) for c in configs]


def _ptxas(ptx: str, cc: int) -> dict[str, int]:
    import triton

    exe = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / ("ptxas" if cc < 90 else "ptxas-blackwell")
    arch = f"sm_{cc}a" if cc >= 90 else f"sm_{cc}"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        cmd = [str(exe), "-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={arch}", str(src),
               "-o", str(Path(d) / "k.cubin")]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    log = out.stdout + out.stderr

    def num(pattern: str) -> int:
        m = re.search(pattern, log)
        return int(m.group(1)) if m else 0
    return {"regs": num(r"Used (\d+) registers"), "spill_stores": num(r"(\d+) bytes spill stores"),
            "spill_loads": num(r"(\d+) bytes spill loads"), "stack": num(r"(\d+) bytes stack frame")}


def _compile(kernel: Any, types: dict[str, str], constexprs: dict[str, Any], num_warps: int, num_stages: int,
             cc: int, smem_per_sm: int) -> dict[str, int]:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _jit(kernel)
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = types[name]
            if types[name].startswith("*"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(ASTSource(fn, signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", cc, 32), options={"num_warps": num_warps, "num_stages": num_stages})
    row = _ptxas(compiled.asm["ptx"], cc)
    row["smem"] = int(compiled.metadata.shared)
    threads = 32 * num_warps
    by_regs = 65536 // (max(row["regs"], 1) * threads)
    by_smem = smem_per_sm // row["smem"] if row["smem"] else 64
    row["warps_per_sm"] = min(by_regs, by_smem, 64 // num_warps) * num_warps
    return row


def main() -> int:
    args = _parse()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("unset TRITON_INTERPRET: this script compiles for a GPU target")
    import fla.ops.rwkv6.chunk as C

    dt = args.dtype
    io = {n: f"*{dt}" for n in ("q", "k", "v", "u", "do", "dg")}
    f32 = {n: "*fp32" for n in ("h", "gi", "ge", "dh", "dA", "du")}
    fused_types = dict(io, **f32, dq=f"*{dt}", dk=f"*{dt}", cu_seqlens="*i64", chunk_indices="*i64", scale="fp32",
                       T="i32")
    inter_types = dict(io, **f32, dq="*fp32", dk="*fp32", dq2="*fp32", dk2="*fp32", cu_seqlens="*i64",
                       chunk_indices="*i64", scale="fp32", T="i32")
    kernels = [("fused", C.chunk_rwkv6_bwd_kernel_fused, fused_types, dict(BC=16, NC=4),
                _autotune_configs(C.chunk_rwkv6_bwd_kernel_fused, dt))]
    if args.inter:
        # fla's inter configs as a GPU host builds them: BK/BV in {32, 64} when check_shared_mem() passes
        # (H200, B200/B300); on this CPU host the module chose the small-memory list instead
        inter_configs = [({"BK": bk, "BV": bv}, w, 3) for bk in (32, 64) for bv in (32, 64) for w in (2, 4, 8)]
        kernels.append(("inter", C.chunk_rwkv6_bwd_kernel_inter, inter_types, {}, inter_configs))
    rows = []
    for cc in args.cc:
        for d in args.d:
            for name, kernel, types, extra, configs in kernels:
                for meta, num_warps, num_stages in configs:
                    ce = dict(H=16, K=d, V=d, BT=64, IS_VARLEN=args.varlen, **extra, **meta)
                    if not args.varlen:
                        ce.update(cu_seqlens=None, chunk_indices=None)
                    r = _compile(kernel, types, ce, num_warps, num_stages, cc, args.smem_per_sm)
                    row = dict(kernel=name, cc=cc, D=d, dtype=dt, varlen=args.varlen, num_warps=num_warps,
                               num_stages=num_stages, **meta, **r)
                    rows.append(row)
                    tiles = " ".join(f"{k}{v}" for k, v in meta.items())
                    print(f"{name:<5} sm_{cc} D{d:<3} {dt} {'varlen' if args.varlen else 'dense '} {tiles} w{num_warps}: "
                          + " ".join(f"{k}={row[k]}" for k in FIELDS), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"schema": "kgate.compile_resources/1", "rows": rows}, indent=1))
    spills = [r for r in rows if r["kernel"] == "fused" and (r["spill_stores"] or r["spill_loads"])]
    print(f"{len(rows)} compiles; fused configs with spills: {len(spills)}")
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
