"""The worker's timed and profiled calls: ``warm``, ``time``, ``profile``, ``profile_range``.

Method
------
* ``time``: N calls, each preceded by an L2 flush (zeroing a buffer of
  max(256 MiB, 2 x L2) bytes with kgate's own ``kgate_l2_flush`` kernel),
  each timed with its own pair of CUDA events recorded after the flush; one
  synchronisation at the end. With ``hold`` (bench's default timer) a spin
  kernel sits between the flush and the start event so that the host has
  enqueued the whole call before the GPU starts it (kgate.measure.host_ahead: the
  method, its check and its limits). On CPU, ``time.perf_counter`` around each call
  (meaningless under the interpreter, and labelled so).
* ``profile``: torch.profiler over ``iterations`` flushed calls. On CUDA the
  kernel table is every device kernel event except ``kgate_l2_flush``; peak
  memory is ``max_memory_allocated`` after ``reset_peak_memory_stats`` minus
  what was allocated before. On CPU the table is every Triton launch the
  interpreter ran (wall time) and the peak is the running sum of the
  profiler's memory events. Allocation sizes come from the profiler's
  memory events in both cases.
* ``warm``: untimed calls (compile, autotune, allocator warm-up), then on a GPU one more hooked call
  whose launched variants are the row's (:mod:`kgate.measure.census`).
* ``profile_range``: one call between cudaProfilerStart and cudaProfilerStop (the ncu stage).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections import Counter
from typing import Any

from kgate.measure.census import compiled_variants, is_device_kernel, record_launches, triton_objects
from kgate.measure.host_ahead import Hold, Segments, around_syncs, count_syncs, cycles_per_ms
from kgate.measure.worker_calls import Calls
from kgate.measure.worker_state import RowState, no_gc


class Timing(Calls):
    """Warm-up, timing and profiling of one prepared row."""

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
        self.check_inputs(rs, f"{calls} warm-up call(s)")
        s.row_picks.setdefault(row, {})[mode] = bucket
        new: list[dict[str, Any]] = []
        launched: list[dict[str, Any]] | None = None
        if s.cuda:
            # one more untimed call, after autotuning, with a launch hook: the variants this row runs
            self._prep(rs)
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
                        # kgate.measure.host_ahead: one segment, or one per synchronisation inside the call (re-armed)
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
        self.check_inputs(rs, f"{n} timed call(s)")
        out: dict[str, Any] = {"samples_ms": samples, "t_start": t_start, "t_end": time.time()}
        if hold and s.cuda:
            # unheld: samples after the row's hold was dropped (kgate.measure.host_ahead: calls that synchronise inside)
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
            from kgate.measure.kernels import FLUSH_KERNEL

            for e in events:
                if not is_device_kernel(e, DeviceType):
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
            # the torch ops the region ran: a removed torch op shows here on CPU (kgate.measure.profile.removal_table)
            host_ops: dict[str, dict[str, float]] = {}
            for e in events:
                if e.device_type() == DeviceType.CPU and e.name().startswith("aten::"):
                    row_ = host_ops.setdefault(e.name(), {"launches": 0, "device_us": 0.0})
                    row_["launches"] += 1
                    row_["device_us"] += (e.end_ns() - e.start_ns()) / 1e3
        out = {"iterations": iterations, "kernels": kernels, "flush_kernels": flush, "timer": timer,
               "alloc_sizes": dict(sizes), "peak_bytes": int(peak), "peak_method": peak_method,
               "allocated_before": int(before)}
        return out if s.cuda else out | {"host_ops": host_ops}

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

