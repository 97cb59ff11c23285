"""The Triton census of an arm: which kernels the target has, which compiled, which one call launched.

Method: the target package's imported modules are walked for Triton functions (through Heuristics and
Autotuner wrappers to the innermost JIT function) and Autotuners; compiled variants are read from
the JIT functions' caches; a launch-enter hook records the CUfunction handles one call launches;
each variant's record carries registers, spills, shared memory and a theoretical occupancy.
Limits: only kernels reachable from module globals of the target package are seen; the occupancy
ignores the per-block shared-memory reservation and warp-allocation granularity. Triton is imported
inside the functions, never at import time.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import sys
from typing import Any

MAX_BLOCKS_PER_SM = 32
REG_ALLOC_UNIT = 256


def _kernel_interface_chain(obj: Any) -> tuple[Any, list[Any]] | None:
    """Follow ``.fn`` from a Heuristics/Autotuner wrapper to the innermost Triton function."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import KernelInterface

    tuners = []
    chain = obj
    for _ in range(8):
        if not isinstance(chain, KernelInterface):
            return None
        if isinstance(chain, Autotuner):
            tuners.append(chain)
        inner = getattr(chain, "fn", None)
        if not isinstance(inner, KernelInterface):
            return chain, tuners
        chain = inner
    return None


def triton_objects(package: str) -> tuple[dict[int, Any], dict[int, Any]]:
    """Innermost Triton functions and Autotuners reachable from the target package's modules."""
    funcs: dict[int, Any] = {}
    tuners: dict[int, Any] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        for obj in list(vars(mod).values()):
            found = _kernel_interface_chain(obj)
            if found is None:
                continue
            inner, ts = found
            funcs[id(inner)] = inner
            for t in ts:
                tuners[id(t)] = t
    return funcs, tuners


def kernel_name(fn: Any) -> str:
    base = fn
    while hasattr(base, "fn") and not inspect.isfunction(base):
        base = base.fn
    return getattr(base, "__name__", repr(fn))


def triton_key(fn: Any) -> str | None:
    """Triton's own key of a kernel (``JITFunction.cache_key``: its source, the Triton functions it calls, the
    constexpr globals it reads and its first line's number), under which Triton caches its compiled variants
    and autotune timings; None under the interpreter (which compiles and caches nothing, and whose functions
    Triton's key cannot walk)."""
    from triton.runtime.jit import JITFunction

    if os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "on", "yes"):
        return None
    base = fn
    for _ in range(8):
        if isinstance(base, JITFunction):
            return str(base.cache_key)
        base = getattr(base, "fn", None)
        if base is None:
            return None
    return None


def source_sha(fn: Any) -> str | None:
    src = getattr(fn, "src", None)
    if src is None:
        base = fn
        while hasattr(base, "fn") and not inspect.isfunction(base):
            base = base.fn
        try:
            src = inspect.getsource(base)
        except (OSError, TypeError):
            return None
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def compiled_variants(funcs: dict[int, Any]) -> dict[tuple[int, str], Any]:
    """Every compiled kernel of the given JIT functions, by (function id, specialisation key).

    Triton >= 3.2 keeps them in ``device_caches[device][0]``; older releases in ``cache[device]``.
    """
    out: dict[tuple[int, str], Any] = {}
    for fid, fn in funcs.items():
        tables = [entry[0] for entry in list((getattr(fn, "device_caches", None) or {}).values())]
        if not tables:
            tables = list((getattr(fn, "cache", None) or {}).values())
        for table in tables:
            for key, kernel in list(table.items()):
                if hasattr(kernel, "metadata"):
                    out[(fid, str(key))] = kernel
    return out


def variant(fn: Any, key: str, kernel: Any, device: dict[str, Any]) -> dict[str, Any]:
    """One compiled variant's record: name, hashed key, source hash, registers, spills, shared memory,
    warps, stages, constexprs and its :func:`occupancy` on ``device``; a kernel that cannot load is
    reported with its error."""
    try:
        kernel._init_handles()
    except Exception as exc:  # noqa: BLE001 - a kernel that cannot load is reported, not hidden
        return {"kernel": kernel_name(fn), "key": hashlib.sha256(key.encode()).hexdigest()[:12],
                "error": f"{type(exc).__name__}: {exc}"}
    md = kernel.metadata
    src = getattr(kernel, "src", None)
    constexprs = getattr(src, "constexprs", None) or getattr(src, "constants", None)
    v = {"kernel": kernel_name(fn), "key": hashlib.sha256(key.encode()).hexdigest()[:12],
         "source_sha": source_sha(fn), "n_regs": getattr(kernel, "n_regs", None),
         "n_spills": getattr(kernel, "n_spills", None), "shared_bytes": getattr(md, "shared", None),
         "num_warps": getattr(md, "num_warps", None), "num_stages": getattr(md, "num_stages", None),
         "constexprs": str(constexprs)[:400] if constexprs is not None else None}
    v["occupancy"] = occupancy(v, device)
    return v


def record_launches(run: Any) -> set[int] | None:
    """Run ``run()`` with a Triton launch-enter hook; return the CUfunction handles launched
    (None when this Triton has no launch hook)."""
    try:
        from triton import knobs
    except ImportError:
        return None
    handles: set[int] = set()

    def hook(metadata: Any) -> None:
        data = getattr(metadata, "data", None)
        if isinstance(data, dict) and data.get("function") is not None:
            handles.add(data["function"])

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add") and hasattr(chain, "remove"):
        chain.add(hook)
        try:
            run()
        finally:
            chain.remove(hook)
        return handles
    previous = chain

    def both(metadata: Any) -> None:
        if previous is not None:
            previous(metadata)
        hook(metadata)

    knobs.runtime.launch_enter_hook = both
    try:
        run()
    finally:
        knobs.runtime.launch_enter_hook = previous
    return handles



def is_device_kernel(e: Any, device_type: Any) -> bool:
    """Whether a profiler event is a device kernel: a CUDA event that is not memory, memcpy or memset."""
    if e.device_type() != device_type.CUDA or e.name() == "[memory]":
        return False
    kind = getattr(e, "activity_type", None)
    if kind is not None:
        try:
            return "kernel" in str(kind()).lower()
        except Exception:  # noqa: BLE001 - older torch: fall back to the name test below
            pass
    name = e.name()
    return not name.startswith(("Memcpy", "Memset"))


def occupancy(v: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    """Theoretical occupancy estimate of one compiled variant (fraction of the SM's warps).

    blocks/SM = min(regs_per_sm // (ceil(n_regs*warp/256)*256 * num_warps),
                    smem_per_sm // shared, max_threads // (num_warps*warp), 32);
    occupancy = blocks * num_warps * warp / max_threads. Ignores the per-block
    shared-memory reservation and warp-allocation granularity.
    """
    need = ("regs_per_sm", "max_threads_per_sm", "smem_per_sm", "warp_size")
    missing = [k for k in need if not device.get(k)]
    if missing or not v.get("n_regs") or not v.get("num_warps"):
        return {"fraction": None, "reason": f"missing {', '.join(missing) or 'n_regs/num_warps'}"}
    warp = int(device["warp_size"])
    regs_per_warp = math.ceil(v["n_regs"] * warp / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    limits = {"registers": device["regs_per_sm"] // (regs_per_warp * v["num_warps"]),
              "threads": device["max_threads_per_sm"] // (v["num_warps"] * warp),
              "blocks": MAX_BLOCKS_PER_SM}
    if v.get("shared_bytes"):
        limits["shared_memory"] = device["smem_per_sm"] // v["shared_bytes"]
    blocks = min(limits.values())
    limiter = min(limits, key=lambda k: limits[k])
    return {"fraction": blocks * v["num_warps"] * warp / device["max_threads_per_sm"], "blocks_per_sm": blocks,
            "limited_by": limiter, "limits": limits}
