"""``python -m kgate.worker``: one arm of a measurement, as a long-lived process.

Usage (started by ``kgate.measure.Arm``, never by hand)::

    cd <arm worktree> && PYTHONPATH=<worktree>:... TRITON_CACHE_DIR=<arm cache> \\
        python -m kgate.worker --arm base        # JSON lines in on stdin, out on stdout

Protocol
--------
One request per line: ``{"id": n, "cmd": "<command>", "args": {...}}``; one
answer per line: ``{"id": n, "ok": true, "result": {...}}`` or ``{"id": n,
"ok": false, "error": "...", "kind": "target"|"internal", "traceback": "..."}``.
``kind`` is ``target`` when the arm's own code raised (importing the target,
running the op): for a candidate that is a measured failure. The worker's
stdout carries only these lines; anything the target prints goes to stderr.
End of input (the coordinator died) ends the worker.

Commands: ``init`` (install the interpreter on CPU, import the callable and
the campaign's input generator, allocate the L2 flush buffer), ``registry``,
``prepare`` (generate a row's inputs from the fixed seed, return sha256 of
every tensor), ``outputs`` (one call, outputs and gradients saved for the
BENCH_BASE comparison), ``warm``, ``time``, ``profile``, ``autotune``, ``resources``,
``launch_cost``, ``bandwidth``, ``profile_range`` (one call inside a CUDA profiler
range, for Nsight Compute), ``release``, ``quit``.

Method
------
* A call is the op on the row's inputs; mode ``fwdbwd`` adds
  ``torch.autograd.backward`` on the outputs the campaign differentiates,
  with output gradients drawn once per row from the row's seed. Leaf
  gradients are set to None before every call (outside timing).
* ``time``: N calls, each preceded by an L2 flush (zeroing a buffer of
  max(256 MiB, 2 x L2) bytes with kgate's own ``kgate_l2_flush`` kernel),
  each timed with its own pair of CUDA events recorded after the flush; one
  synchronisation at the end. With ``hold`` (bench's default timer) a spin
  kernel sits between the flush and the start event so that the host has
  enqueued the whole call before the GPU starts it (kgate.host_ahead: the
  method, its check and its limits). On CPU, ``time.perf_counter`` around each call
  (meaningless under the interpreter, and labelled so).
* ``profile``: torch.profiler over ``iterations`` flushed calls. On CUDA the
  kernel table is every device kernel event except ``kgate_l2_flush``; peak
  memory is ``max_memory_allocated`` after ``reset_peak_memory_stats`` minus
  what was allocated before. On CPU the table is every Triton launch the
  interpreter ran (wall time) and the peak is the running sum of the
  profiler's memory events. Allocation sizes come from the profiler's
  memory events in both cases.
* Autotune picks: ``Autotuner.run`` is wrapped to record, per row and mode
  during warm-up, the config each autotuned kernel ran with.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import gc
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import runpy
import statistics
import sys
import time
import traceback
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate.host_ahead import Hold, Segments, around_syncs, count_syncs, cycles_per_ms

MAX_BLOCKS_PER_SM = 32
REG_ALLOC_UNIT = 256


class TargetError(Exception):
    """The arm's own code failed (import or op call)."""


@dataclass
class RowState:
    name: str
    values: dict[str, Any]
    seed: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    leaves: list[Any]
    grads: list[Any] | None = None
    grad_hashes: dict[str, str] | None = None


@dataclass
class State:
    torch: Any = None
    cuda: bool = False
    device: Any = None
    dtype: Any = None
    fn: Any = None
    package: str = ""
    make_inputs: Any = None
    seed: int = 0
    differentiate: tuple[int, ...] = ()
    flush_buf: Any = None
    flush_bytes: int = 0
    rows: dict[str, RowState] = field(default_factory=dict)
    launches: list[tuple[str, float]] | None = None
    autotune_bucket: dict[str, list[str]] | None = None
    row_picks: dict[str, dict[str, dict[str, list[str]]]] = field(default_factory=dict)
    compiled_by_row: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    launched_by_row: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    spin_cycles_per_ms: float | None = None
    holds: dict[str, Hold] = field(default_factory=dict)
    syncs: dict[str, dict[str, Any]] = field(default_factory=dict)


# helpers


def tensor_sha(torch: Any, t: Any) -> str:
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    data = t.detach().contiguous().reshape(-1)
    if data.numel():
        h.update(data.cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def hash_tree(torch: Any, obj: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(obj, torch.Tensor):
        out[prefix] = tensor_sha(torch, obj)
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            hash_tree(torch, x, f"{prefix}[{i}]", out)
    elif isinstance(obj, dict):
        for k in sorted(obj):
            hash_tree(torch, obj[k], f"{prefix}.{k}", out)
    else:
        out[prefix] = hashlib.sha256(repr(obj).encode()).hexdigest()


def combined(hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def leaves_of(torch: Any, obj: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.requires_grad and obj.is_leaf else []
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in leaves_of(torch, x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in leaves_of(torch, x)]
    return []


def row_seed(seed: int, name: str) -> int:
    """Each row's own seed: the campaign seed plus the CRC32 of the row name."""
    return (seed + zlib.crc32(name.encode())) % 2**63


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


# the worker


class Worker:
    def __init__(self, arm: str) -> None:
        self.arm = arm
        self.s = State()

    # init -------------------------------------------------------------------

    def init(self, callable: str, inputs_file: str, dtype: str, seed: int, differentiate: list[int], cpu: bool,
             cpu_setup: str | None, flush_bytes: int | None, env_record: list[str]) -> dict[str, Any]:
        s = self.s
        interp_record = None
        setup_result = None
        if cpu:
            from kgate import interp

            interp_record = interp.install()
        import torch

        s.torch = torch
        self._install_recorders(cpu)
        mod_name, _, attr = callable.partition(":")
        try:
            if cpu_setup:
                # the campaign's CPU setup, as kgate.interp_plugin runs it under pytest
                ns = runpy.run_path(cpu_setup, run_name="kgate_target_setup")
                setup_result = ns["setup"]() if callable_(ns.get("setup")) else None
            module = importlib.import_module(mod_name)
            s.fn = getattr(module, attr)
        except Exception as exc:
            raise TargetError(f"importing {callable}: {type(exc).__name__}: {exc}") from exc
        s.package = mod_name.split(".")[0]
        package = sys.modules[s.package]
        s.make_inputs = runpy.run_path(inputs_file, run_name="kgate_bench_inputs").get("make_inputs")
        if not callable_(s.make_inputs):
            raise ValueError(f"{inputs_file} defines no make_inputs(row, *, device, dtype, seed)")
        s.dtype = getattr(torch, dtype)
        s.seed = int(seed)
        s.differentiate = tuple(differentiate)
        s.cuda = not cpu
        if s.cuda and not torch.cuda.is_available():
            raise RuntimeError("a GPU run but torch.cuda.is_available() is False in the worker")
        s.device = torch.device("cuda", torch.cuda.current_device()) if s.cuda else torch.device("cpu")
        device = self._device_info()
        if s.cuda:
            from kgate import measure_kernels

            l2 = int(device.get("l2_bytes") or 0)
            s.flush_bytes = max(256 * 2**20, 2 * l2)
            s.flush_buf = torch.empty(s.flush_bytes // 4, dtype=torch.int32, device=s.device)
            measure_kernels.flush(s.flush_buf)
            torch.cuda.synchronize()
            flush_method = f"Triton kernel {measure_kernels.FLUSH_KERNEL} zeroes {s.flush_bytes} bytes (2 x L2, >= 256 MiB)"
        else:
            s.flush_bytes = int(flush_bytes or 8 * 2**20)
            s.flush_buf = torch.empty(s.flush_bytes // 4, dtype=torch.int32)
            flush_method = f"torch zero_() of {s.flush_bytes} bytes (CPU: no L2 semantics)"
        env = {k: v for k, v in sorted(os.environ.items())
               if any(fnmatch.fnmatchcase(k, p) for p in env_record) or k in ("PYTHONPATH", "TRITON_CACHE_DIR")}
        import triton

        s.info = {
            "arm": self.arm, "pid": os.getpid(), "python": sys.version.split()[0],
            "versions": {"torch": torch.__version__, "triton": triton.__version__,
                         s.package: getattr(package, "__version__", None)},
            "module_file": getattr(module, "__file__", None), "package_file": getattr(package, "__file__", None),
            "inputs_file": inputs_file, "inputs_sha256": hashlib.sha256(Path(inputs_file).read_bytes()).hexdigest(),
            "device": device, "interpreter": interp_record, "cpu_setup": setup_result, "env": env,
            "flush": {"bytes": s.flush_bytes, "method": flush_method},
            "timer": "cuda events" if s.cuda else "time.perf_counter (CPU interpreter: not meaningful)",
            "cwd": os.getcwd(),
        }
        # everything imported so far is permanent: the per-call collections only walk what calls create
        gc.collect()
        gc.freeze()
        return s.info

    def _device_info(self) -> dict[str, Any]:
        torch = self.s.torch
        if not self.s.cuda:
            return {"kind": "cpu", "name": "cpu", "uuid": None, "l2_bytes": None}
        p = torch.cuda.get_device_properties(self.s.device)
        info = {"kind": "cuda", "name": p.name, "uuid": str(getattr(p, "uuid", "")) or None,
                "index": self.s.device.index, "capability": f"{p.major}.{p.minor}",
                "sm_count": p.multi_processor_count, "total_bytes": p.total_memory,
                "l2_bytes": getattr(p, "L2_cache_size", None),
                "regs_per_sm": getattr(p, "regs_per_multiprocessor", None),
                "max_threads_per_sm": getattr(p, "max_threads_per_multi_processor", None),
                "smem_per_sm": getattr(p, "shared_memory_per_multiprocessor", None),
                "warp_size": getattr(p, "warp_size", None),
                "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "limits_source": "torch"}
        if not (info["regs_per_sm"] and info["smem_per_sm"] and info["max_threads_per_sm"]):
            # older torch: Triton's driver reports per-block limits (equal to the per-SM ones on Hopper)
            from triton.runtime import driver

            tp = driver.active.utils.get_device_properties(self.s.device.index)
            info["regs_per_sm"] = info["regs_per_sm"] or tp.get("max_num_regs")
            info["smem_per_sm"] = info["smem_per_sm"] or tp.get("max_shared_mem")
            info["warp_size"] = info["warp_size"] or tp.get("warpSize")
            info["limits_source"] = "torch + triton driver (per-block limits)"
        return info

    def _install_recorders(self, cpu: bool) -> None:
        from triton.runtime.autotuner import Autotuner

        state = self.s
        original_run = Autotuner.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original_run(self, *args, **kwargs)
            bucket = state.autotune_bucket
            if bucket is not None:
                bucket.setdefault(kernel_name(self), [])
                cfg = str(getattr(self, "best_config", None))
                if cfg not in bucket[kernel_name(self)]:
                    bucket[kernel_name(self)].append(cfg)
            return out

        Autotuner.run = run
        if cpu:
            from triton.runtime import interpreter

            original_call = interpreter.GridExecutor.__call__

            def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
                rec = state.launches
                if rec is None:
                    return original_call(self, *args, **kwargs)
                t0 = time.perf_counter()
                try:
                    return original_call(self, *args, **kwargs)
                finally:
                    rec.append((self.fn.__name__, time.perf_counter() - t0))

            interpreter.GridExecutor.__call__ = __call__

    # rows -------------------------------------------------------------------

    def prepare(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        s, torch = self.s, self.s.torch
        out = {}
        for values in rows:
            name = values["name"]
            seed = row_seed(s.seed, name)
            torch.manual_seed(seed)
            made = s.make_inputs(dict(values), device=s.device, dtype=s.dtype, seed=seed)
            if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict)):
                raise ValueError(f"make_inputs({name}) must return (args, kwargs), got {type(made).__name__}")
            args, kwargs = tuple(made[0]), made[1]
            hashes: dict[str, str] = {}
            hash_tree(torch, list(args), "args", hashes)
            hash_tree(torch, kwargs, "kwargs", hashes)
            s.rows[name] = RowState(name=name, values=dict(values), seed=seed, args=args, kwargs=kwargs,
                                    leaves=leaves_of(torch, [args, kwargs]))
            out[name] = {"seed": seed, "tensors": hashes, "sha256": combined(hashes)}
        self._sync()
        return out

    def release(self, rows: list[str]) -> dict[str, Any]:
        for name in rows:
            self.s.rows.pop(name, None)
        if self.s.cuda:
            self.s.torch.cuda.empty_cache()
        return {"released": rows}

    def _sync(self) -> None:
        if self.s.cuda:
            self.s.torch.cuda.synchronize()

    def _flush(self) -> None:
        if self.s.cuda:
            from kgate import measure_kernels

            measure_kernels.flush(self.s.flush_buf)
        else:
            self.s.flush_buf.zero_()

    def _zero_grads(self, rs: RowState) -> None:
        for t in rs.leaves:
            t.grad = None

    def _prep(self, rs: RowState) -> None:
        """Before every call, untimed: drop leaf gradients, collect the previous call's cyclic garbage
        (the interpreter and some host code build reference cycles that hold tensors)."""
        self._zero_grads(rs)
        gc.collect()

    def _grads_for(self, rs: RowState, outs: list[Any]) -> list[Any]:
        torch = self.s.torch
        grads = []
        hashes: dict[str, str] = {}
        for i, o in zip(self.s.differentiate, outs):
            if o is None or not getattr(o, "requires_grad", False):
                raise ValueError(f"row {rs.name}: output {i} is {'None' if o is None else 'not differentiable'}; "
                                 "fix measure.differentiate")
            gen = torch.Generator(device=o.device).manual_seed(rs.seed + 1 + i)
            g = torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32).to(o.dtype)
            grads.append(g)
            hashes[f"grad_outputs[{i}]"] = tensor_sha(torch, g)
        rs.grad_hashes = hashes
        return grads

    def _call(self, rs: RowState, mode: str) -> None:
        torch = self.s.torch
        try:
            out = self.s.fn(*rs.args, **rs.kwargs)
            if mode == "fwdbwd":
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                try:
                    sel = [outs[i] for i in self.s.differentiate]
                except IndexError as exc:
                    raise ValueError(f"measure.differentiate {list(self.s.differentiate)}: the op returned "
                                     f"{len(outs)} output(s)") from exc
                if rs.grads is None:
                    rs.grads = self._grads_for(rs, sel)
                torch.autograd.backward(sel, rs.grads)
            elif mode != "fwd":
                raise ValueError(f"unknown mode {mode!r} (fwd or fwdbwd)")
            del out
        except ValueError:
            raise
        except Exception as exc:
            raise TargetError(f"row {rs.name} {mode}: {type(exc).__name__}: {exc}") from exc

    def outputs(self, row: str, path: str) -> dict[str, Any]:
        """One fwdbwd call on the row's inputs; every tensor output and every leaf gradient is saved
        (CPU copies, ``torch.save``) to ``path`` for kgate's BENCH_BASE comparison. Returns their sha256."""
        torch = self.s.torch
        rs = self._row(row)
        self._prep(rs)
        try:
            out = self.s.fn(*rs.args, **rs.kwargs)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            sel = [outs[i] for i in self.s.differentiate]
            if rs.grads is None:
                rs.grads = self._grads_for(rs, sel)
            torch.autograd.backward(sel, rs.grads)
        except ValueError:
            raise
        except Exception as exc:
            raise TargetError(f"row {rs.name} outputs: {type(exc).__name__}: {exc}") from exc
        tensors = {f"output[{i}]": o.detach() for i, o in enumerate(outs) if isinstance(o, torch.Tensor)}
        tensors.update({f"grad[{j}]": t.grad for j, t in enumerate(rs.leaves)
                        if isinstance(t, torch.Tensor) and t.grad is not None})
        self._sync()
        torch.save({k: v.cpu() for k, v in tensors.items()}, path)
        return {"sha256": {k: tensor_sha(torch, v) for k, v in tensors.items()},
                "shapes": {k: list(v.shape) for k, v in tensors.items()},
                "dtypes": {k: str(v.dtype) for k, v in tensors.items()}}

    def _row(self, row: str) -> RowState:
        if row not in self.s.rows:
            raise ValueError(f"row {row} was not prepared")
        return self.s.rows[row]

    def warm(self, row: str, mode: str, calls: int = 1) -> dict[str, Any]:
        """Untimed calls: compile, autotune, allocator warm-up. Records autotune picks and new kernels."""
        s = self.s
        rs = self._row(row)
        funcs_before = compiled_variants(triton_objects(s.package)[0]) if s.cuda else {}
        bucket: dict[str, list[str]] = {}
        s.autotune_bucket = bucket
        walls = []
        try:
            for _ in range(calls):
                self._zero_grads(rs)
                t0 = time.perf_counter()
                self._call(rs, mode)
                self._sync()
                walls.append(time.perf_counter() - t0)
        finally:
            s.autotune_bucket = None
        s.row_picks.setdefault(row, {})[mode] = bucket
        new: list[dict[str, Any]] = []
        launched: list[dict[str, Any]] | None = None
        if s.cuda:
            # one more untimed call, after autotuning, with a launch hook: the variants this row runs
            self._zero_grads(rs)
            handles = record_launches(lambda: (self._call(rs, mode), self._sync()))
            funcs = triton_objects(s.package)[0]
            after = compiled_variants(funcs)
            for (fid, key), kernel in after.items():
                if (fid, key) not in funcs_before:
                    new.append(self._variant(funcs[fid], key, kernel))
            s.compiled_by_row.setdefault(f"{row}:{mode}", []).extend(new)
            if handles is not None:
                launched = [self._variant(funcs[fid], key, k) for (fid, key), k in after.items()
                            if getattr(k, "function", None) in handles]
                s.launched_by_row[f"{row}:{mode}"] = launched
        return {"wall_s": walls, "grad_hashes": rs.grad_hashes, "autotune": bucket,
                "compiled": [v["kernel"] for v in new],
                "launched": None if launched is None else sorted({v["kernel"] for v in launched})}

    def time(self, row: str, mode: str, n: int, hold: bool = False) -> dict[str, Any]:
        s, torch = self.s, self.s.torch
        rs = self._row(row)
        samples: list[float] = []
        ahead: list[bool] = []
        held: list[float] = []
        t_start = time.time()
        with no_gc():
            if s.cuda:
                key = f"{row}:{mode}"
                if hold and key not in s.holds:
                    s.holds[key] = Hold.first(self._host_enqueue_ms(rs, mode))
                    s.syncs[key] = count_syncs(torch, lambda: (self._prep(rs), self._call(rs, mode)))
                rate = self._spin_rate() if hold else None
                starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
                ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
                segs: list[Segments | None] = [None] * n
                for i in range(n):
                    self._prep(rs)
                    self._flush()
                    holding = rate is not None and s.holds[key].on
                    if holding:
                        torch.cuda._sleep(s.holds[key].cycles(rate))
                    starts[i].record()
                    if holding:
                        # kgate.host_ahead: one segment, or one per synchronisation inside the call (re-armed)
                        segs[i] = seg = Segments(torch, s.holds[key].cycles(rate), starts[i])
                    with (around_syncs(torch, seg.before, seg.after) if holding and s.syncs[key]["rearmed"]
                          else contextlib.nullcontext()):
                        self._call(rs, mode)
                    ends[i].record()
                    if holding:
                        ahead.append(seg.ahead())
                        held.append(s.holds[key].ms)
                        s.holds[key] = s.holds[key].after(ahead[-1])
                torch.cuda.synchronize()
                samples = [a.elapsed_time(b) - (g.spun_ms() if g else 0.0) for a, b, g in zip(starts, ends, segs)]
            else:
                for _ in range(n):
                    self._prep(rs)
                    self._flush()
                    t0 = time.perf_counter()
                    self._call(rs, mode)
                    samples.append((time.perf_counter() - t0) * 1e3)
        if any(not (x > 0 and math.isfinite(x)) for x in samples):
            raise RuntimeError(f"row {row}: a timed call measured {min(samples)} ms; the timer is too coarse")
        out: dict[str, Any] = {"samples_ms": samples, "t_start": t_start, "t_end": time.time()}
        if hold and s.cuda:
            # unheld: samples after the row's hold was dropped (kgate.host_ahead: calls that synchronise inside)
            out.update(ahead=sum(ahead), hold_ms=[min(held), max(held)] if held else [], unheld=n - len(held),
                       syncs=s.syncs[f"{row}:{mode}"])
        return out

    def _host_enqueue_ms(self, rs: RowState, mode: str) -> float:
        """The host's time to enqueue one call with the GPU idle before it (median of 3, untimed on the device)."""
        torch = self.s.torch
        spans = []
        for _ in range(3):
            self._prep(rs)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            self._call(rs, mode)
            spans.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
        return statistics.median(spans)

    def _spin_rate(self) -> float:
        """Cycles per millisecond of ``torch.cuda._sleep``, from three timed 1 M-cycle spins (once per worker)."""
        s, torch = self.s, self.s.torch
        if s.spin_cycles_per_ms is None:
            cycles, spans = 1_000_000, []
            for _ in range(3):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                torch.cuda._sleep(cycles)
                b.record()
                torch.cuda.synchronize()
                spans.append(a.elapsed_time(b))
            s.spin_cycles_per_ms = cycles_per_ms(cycles, spans)
        return s.spin_cycles_per_ms

    def profile(self, row: str, mode: str, iterations: int) -> dict[str, Any]:
        s, torch = self.s, self.s.torch
        rs = self._row(row)
        from torch.profiler import ProfilerActivity, profile

        # the previous call's gradients and garbage go first: the window starts from the same state every time
        self._prep(rs)
        self._sync()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if s.cuda else [])
        s.launches = [] if not s.cuda else None
        try:
            with no_gc():
                before = torch.cuda.memory_allocated() if s.cuda else 0
                if s.cuda:
                    torch.cuda.reset_peak_memory_stats()
                with profile(activities=activities, profile_memory=True) as prof:
                    for _ in range(iterations):
                        self._prep(rs)
                        self._flush()
                        self._call(rs, mode)
                    self._sync()
        finally:
            launches, s.launches = s.launches, None
        events = prof.profiler.kineto_results.events()
        from torch.autograd import DeviceType

        mem_device = DeviceType.CUDA if s.cuda else DeviceType.CPU
        mem = sorted(((e.start_ns(), e.nbytes()) for e in events
                      if e.name() == "[memory]" and e.device_type() == mem_device), key=lambda x: x[0])
        sizes = Counter(str(n) for _, n in mem if n > 0)
        if s.cuda:
            peak = torch.cuda.max_memory_allocated() - before
            peak_method = "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus allocated before"
            kernels: dict[str, dict[str, float]] = {}
            flush: dict[str, dict[str, float]] = {}
            from kgate.measure_kernels import FLUSH_KERNEL

            for e in events:
                if not _is_device_kernel(e, DeviceType):
                    continue
                name = e.name()
                table = flush if name == FLUSH_KERNEL else kernels
                row_ = table.setdefault(name, {"launches": 0, "device_us": 0.0})
                row_["launches"] += 1
                row_["device_us"] += (e.end_ns() - e.start_ns()) / 1e3
            timer = "CUPTI device time (torch.profiler)"
        else:
            running = peak = 0
            for _, n in mem:
                running += n
                peak = max(peak, running)
            peak_method = "running sum of the profiler's CPU memory events (interpreter: includes host copies)"
            kernels = {}
            for name, dt in launches or []:
                row_ = kernels.setdefault(name, {"launches": 0, "device_us": 0.0})
                row_["launches"] += 1
                row_["device_us"] += dt * 1e6
            flush = {}
            timer = "Triton interpreter wall time (not meaningful)"
        return {"iterations": iterations, "kernels": kernels, "flush_kernels": flush, "timer": timer,
                "alloc_sizes": dict(sizes), "peak_bytes": int(peak), "peak_method": peak_method,
                "allocated_before": int(before)}

    def profile_range(self, row: str, mode: str) -> dict[str, Any]:
        """One call inside a CUDA profiler range (cudaProfilerStart ... cudaProfilerStop): the only
        launches a profiler started with ``--profile-from-start off`` sees (kgate's ncu stage). Leaf
        gradients are dropped, garbage collected and L2 flushed first, outside the range; the range
        ends after a synchronisation, so every launch of the call is inside it."""
        s = self.s
        if not s.cuda:
            raise ValueError("profile_range needs a GPU (a profiler range has no meaning under the interpreter)")
        rs = self._row(row)
        self._prep(rs)
        self._flush()
        self._sync()
        s.torch.cuda.profiler.start()
        try:
            self._call(rs, mode)
            self._sync()
        finally:
            s.torch.cuda.profiler.stop()
        return {"row": row, "mode": mode, "calls": 1, "range": "cudaProfilerStart/cudaProfilerStop"}

    # facts about the arm -------------------------------------------------------

    def autotune(self) -> dict[str, Any]:
        _funcs, tuners = triton_objects(self.s.package)
        out = []
        for t in tuners.values():
            out.append({"kernel": kernel_name(t), "source_sha": source_sha(t.fn),
                        "configs": len(getattr(t, "configs", []) or []),
                        "picks": {str(k): str(v) for k, v in getattr(t, "cache", {}).items()}})
        return {"tuners": sorted(out, key=lambda x: x["kernel"]), "row_picks": self.s.row_picks}

    def sources(self) -> dict[str, Any]:
        funcs, _ = triton_objects(self.s.package)
        return {kernel_name(f): source_sha(f) for f in funcs.values()}

    def resources(self) -> dict[str, Any]:
        if not self.s.cuda:
            return {"available": False,
                    "reason": "Triton interpreter (CPU): nothing is compiled, no registers, spills or shared memory"}
        funcs, _ = triton_objects(self.s.package)
        variants = [self._variant(funcs[fid], key, k) for (fid, key), k in compiled_variants(funcs).items()]
        return {"available": True, "variants": variants, "compiled_by_row": self.s.compiled_by_row,
                "launched_by_row": self.s.launched_by_row,
                "attribution": ("variants launched in a hooked call after warm-up" if self.s.launched_by_row
                                else "variants compiled during each row's warm-up (no Triton launch hook)"),
                "device": self.s.info.get("device")}

    def _variant(self, fn: Any, key: str, kernel: Any) -> dict[str, Any]:
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
        v["occupancy"] = occupancy(v, self.s.info.get("device") or {})
        return v

    def launch_cost(self, launches: int, repeats: int = 5) -> dict[str, Any]:
        """Per-launch cost of kgate's one-store kernel launched back to back (max of CPU submit and GPU cost)."""
        s, torch = self.s, self.s.torch
        from kgate import measure_kernels

        buf = torch.zeros(1, dtype=torch.int32, device=s.device)
        for _ in range(10):
            measure_kernels.noop(buf)
        self._sync()
        per = []
        for _ in range(repeats):
            if s.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(launches):
                    measure_kernels.noop(buf)
                b.record()
                torch.cuda.synchronize()
                per.append(a.elapsed_time(b) * 1e3 / launches)
            else:
                t0 = time.perf_counter()
                for _ in range(launches):
                    measure_kernels.noop(buf)
                per.append((time.perf_counter() - t0) * 1e6 / launches)
        return {"per_launch_us": statistics.median(per), "samples_us": per, "launches": launches,
                "method": f"{launches} launches of {measure_kernels.NOOP_KERNEL} back to back, "
                          f"{'CUDA events' if s.cuda else 'perf_counter under the interpreter'}, median of {repeats}"}

    def bandwidth(self, nbytes: int, repeats: int = 10) -> dict[str, Any]:
        """Device copy bandwidth: bytes read + written per second by ``dst.copy_(src)``."""
        s, torch = self.s, self.s.torch
        if s.cuda:
            free, _total = torch.cuda.mem_get_info()
            nbytes = int(min(nbytes, free // 4))
        n = nbytes // 4
        src = torch.ones(n, dtype=torch.float32, device=s.device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        self._sync()
        times = []
        for _ in range(repeats):
            if s.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                dst.copy_(src)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) / 1e3)
            else:
                t0 = time.perf_counter()
                dst.copy_(src)
                times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        del src, dst
        if s.cuda:
            torch.cuda.empty_cache()
        return {"bytes_per_s": 2 * n * 4 / med, "buffer_bytes": n * 4, "median_s": med, "samples_s": times,
                "method": f"copy_ of {n * 4} bytes (read + write = {2 * n * 4} bytes), median of {repeats}"}

    def registry(self, spec: str) -> dict[str, Any]:
        """Rows of an fla-style benchmark registry: ``get_op(name)``, ``SHAPE_CONFIGS``, ``dim_constraints``."""
        mod_path, _, op_name = spec.partition(":")
        path = Path.cwd() / (mod_path.replace(".", os.sep) + ".py")
        if not path.is_file():
            raise ValueError(f"measure.registry: {path} does not exist in this worktree")
        mspec = importlib.util.spec_from_file_location(mod_path, path)
        assert mspec is not None and mspec.loader is not None
        mod = importlib.util.module_from_spec(mspec)
        sys.modules[mod_path] = mod
        mspec.loader.exec_module(mod)
        op = mod.get_op(op_name)
        shapes = getattr(op, "default_shapes", None) or mod.SHAPE_CONFIGS
        constraints = getattr(op, "dim_constraints", None) or {}
        rows, skipped = [], []
        for name, values in shapes.items():
            bad = {d: values.get(d) for d, allowed in constraints.items()
                   if values.get(d) is not None and values.get(d) not in allowed}
            (skipped if bad else rows).append({"name": name, **values})
        inputs = {n: {"shape_fn": getattr(t.shape_fn, "__name__", None), "requires_grad": t.requires_grad,
                      "dtype": t.dtype, "transform": getattr(t.transform, "__name__", None)}
                  for n, t in getattr(op, "inputs", {}).items()}
        return {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "rows": rows,
                "skipped": skipped, "op": {"name": op.name, "import_path": op.import_path,
                                           "func_name": getattr(op, "func_name", None), "inputs": inputs,
                                           "extra_kwargs": repr(getattr(op, "extra_kwargs", {})),
                                           "skip_backward": getattr(op, "skip_backward", None)}}


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


@contextlib.contextmanager
def no_gc() -> Any:
    """Keep Python's cyclic garbage collector off for a block of calls; callers collect between
    calls (``Worker._prep``), so no collection lands inside a call, cyclic garbage of one call is
    freed before the next, and peak memory is reproducible."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def callable_(x: Any) -> bool:
    return callable(x)


def _is_device_kernel(e: Any, device_type: Any) -> bool:
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


def serve(dispatch: Callable[[str, dict[str, Any]], dict[str, Any]]) -> int:
    """The JSON-lines protocol (module docstring) on stdin/stdout until ``quit`` or end of input.

    ``dispatch(cmd, args)`` answers one request. The protocol owns the real stdout; anything the
    target prints goes to stderr. A ``TargetError`` is answered with kind ``target`` (the arm's own
    code failed: data for a candidate), any other exception with kind ``internal``; both carry the
    traceback back to the coordinator.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req["cmd"] == "quit":
            proto.write(json.dumps({"id": req["id"], "ok": True, "result": {}}) + "\n")
            break
        try:
            resp = {"id": req["id"], "ok": True, "result": dispatch(req["cmd"], req.get("args", {}))}
        except TargetError as exc:
            resp = {"id": req["id"], "ok": False, "kind": "target", "error": str(exc),
                    "traceback": traceback.format_exc()}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the coordinator, with its traceback
            resp = {"id": req["id"], "ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()}
        proto.write(json.dumps(resp, default=str) + "\n")
        proto.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kgate.worker")
    p.add_argument("--arm", required=True)
    args = p.parse_args(argv)
    worker = Worker(args.arm)
    handlers = {"init": worker.init, "prepare": worker.prepare, "warm": worker.warm, "time": worker.time,
                "profile": worker.profile, "autotune": worker.autotune, "resources": worker.resources,
                "sources": worker.sources, "launch_cost": worker.launch_cost, "bandwidth": worker.bandwidth,
                "registry": worker.registry, "release": worker.release, "outputs": worker.outputs,
                "profile_range": worker.profile_range}

    def dispatch(cmd: str, req_args: dict[str, Any]) -> dict[str, Any]:
        if cmd not in handlers:
            raise ValueError(f"unknown command {cmd!r}")
        return handlers[cmd](**req_args)

    return serve(dispatch)


if __name__ == "__main__":
    sys.exit(main())
