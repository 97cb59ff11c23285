"""Facts about the arm that no row owns: autotuners, kernel sources, compiled resources, launch cost,
copy bandwidth, and the rows of an fla-style benchmark registry.

Method: ``launch_cost`` is the median over repeats of kgate's one-store kernel launched back to back
(CUDA events; the max of host submit and device cost); ``bandwidth`` the median time of one
``dst.copy_(src)`` and ``flops`` the matrix-product rates per precision (both kgate.measure.peaks). On CPU
all use ``time.perf_counter`` under the interpreter and are not meaningful.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kgate.measure import peaks
from kgate.measure.census import compiled_variants, kernel_name, source_sha, triton_key, triton_objects
from kgate.measure.worker_calls import Calls
from kgate.testrun import tuning


class Facts(Calls):
    """Commands about the arm as a whole."""

    def autotune(self) -> dict[str, Any]:
        _funcs, tuners = triton_objects(self.s.package)
        out = []
        for t in tuners.values():
            # the key of a tuner that ran is already computed (its compile needed it); one that never ran has none
            key = triton_key(t.fn) if getattr(t, "cache", None) else None
            out.append({"kernel": kernel_name(t), "source_sha": source_sha(t.fn), "triton_key": key,
                        "configs": len(getattr(t, "configs", []) or []),
                        "key": [str(k) for k in getattr(t, "keys", [])],
                        "key_added": list(getattr(t, tuning.ADDED_ATTR, ())),
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

    def launch_cost(self, launches: int, repeats: int = 5) -> dict[str, Any]:
        """Per-launch cost of kgate's one-store kernel launched back to back (max of CPU submit and GPU cost)."""
        s, torch = self.s, self.s.torch
        from kgate.measure import kernels as measure_kernels

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
        """Device copy bandwidth: bytes read + written per second by ``dst.copy_(src)`` (kgate.measure.peaks)."""
        return peaks.copy_bandwidth(self.s.torch, self.s.device, self.s.cuda, nbytes, repeats)

    def flops(self, repeats: int = 5) -> dict[str, Any]:
        """Matrix-product FLOP/s per precision (kgate.measure.peaks)."""
        return peaks.flop_rates(self.s.torch, self.s.device, self.s.cuda, repeats)

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

