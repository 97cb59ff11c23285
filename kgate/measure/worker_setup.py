"""The worker's ``init``: interpreter, callable, input generator, L2 flush buffer, device facts, recorders.

Method: on CPU the Triton interpreter shim is installed first (:mod:`kgate.testrun.interp`); the
callable is imported from the arm's worktree (a failure is the target's:
:class:`~kgate.measure.worker_state.ArmTargetError`); on a GPU the flush buffer is max(256 MiB,
2 x L2) bytes, zeroed by kgate's own ``kgate_l2_flush`` kernel. Every autotuner's key is completed by the
constexprs it runs with (:mod:`kgate.testrun.tuning`). ``Autotuner.run`` is wrapped to record,
per row and mode during warm-up, the config each autotuned kernel ran with; under the interpreter
every Triton launch is timed by wall clock. After init the imported objects are frozen out of the
cyclic garbage collector, so the per-call collections walk only what calls create.
"""

from __future__ import annotations

import fnmatch
import gc
import hashlib
import importlib
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any

from kgate.measure.census import kernel_name
from kgate.measure.worker_calls import Calls
from kgate.measure.worker_state import ArmTargetError, callable_
from kgate.testrun import tuning


class Setup(Calls):
    """``init`` and what it installs."""

    def init(self, callable: str, inputs_file: str, dtype: str, seed: int, differentiate: list[int], cpu: bool,
             cpu_setup: str | None, flush_bytes: int | None, env_record: list[str],
             writes_inputs: bool = False) -> dict[str, Any]:
        s = self.s
        t0 = time.monotonic()
        s.writes_inputs = bool(writes_inputs)
        interp_record = None
        setup_result = None
        if cpu:
            from kgate.testrun import interp

            interp_record = interp.install()
        import torch

        t_torch = time.monotonic()
        s.torch = torch
        tuning.install()
        self._install_recorders(cpu)
        mod_name, _, attr = callable.partition(":")
        try:
            if cpu_setup:
                # the campaign's CPU setup, as kgate.testrun.interp_plugin runs it under pytest
                ns = runpy.run_path(cpu_setup, run_name="kgate_target_setup")
                setup_result = ns["setup"]() if callable_(ns.get("setup")) else None
            module = importlib.import_module(mod_name)
            s.fn = getattr(module, attr)
        except Exception as exc:
            raise ArmTargetError(f"importing {callable}: {type(exc).__name__}: {exc}") from exc
        s.package = mod_name.split(".")[0]
        package = sys.modules[s.package]
        s.make_inputs = runpy.run_path(inputs_file, run_name="kgate_bench_inputs").get("make_inputs")
        if not callable_(s.make_inputs):
            raise ValueError(f"{inputs_file} defines no make_inputs(row, *, device, dtype, seed)")
        t_target = time.monotonic()
        s.dtype = getattr(torch, dtype)
        s.seed = int(seed)
        s.differentiate = tuple(differentiate)
        s.cuda = not cpu
        if s.cuda and not torch.cuda.is_available():
            raise RuntimeError("a GPU run but torch.cuda.is_available() is False in the worker")
        s.device = torch.device("cuda", torch.cuda.current_device()) if s.cuda else torch.device("cpu")
        device = self._device_info()
        if s.cuda:
            from kgate.measure import kernels as measure_kernels

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
        t_device = time.monotonic()
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
            # where a slow start went: torch imported (with the interpreter shim on CPU), the target's callable and
            # input generator imported (its CPU setup included), the device opened and the flush buffer made
            "init_phases_s": {"torch": round(t_torch - t0, 3), "target": round(t_target - t_torch, 3),
                              "device": round(t_device - t_target, 3), "total": round(time.monotonic() - t0, 3)},
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

