"""How many gate tests fit side by side in the GPU's memory, from the peaks earlier runs of the same tests measured.

Used for the rerun of a gate run's sharing suspects (tests that ran out of GPU memory beside other workers, and
later failures of their workers: ``kgate.testrun.contention``, ``kgate.testrun.runner.recovery_fit``). Method:
W pytest-xdist workers share one GPU; rerun warm (kernels compiled, picks on disk), their tests start within a
second or two of each other, so the worst case is the W largest per-test peaks at once. The suspects rerun
together at the largest W with

    sum of the W largest peaks + W * PROCESS_OVERHEAD_BYTES <= HEADROOM * free bytes at the stage's start,

at most the first run's workers and one per suspect; at 1, they run alone as before. A peak is a test's
``gpu_peak_reserved_bytes`` (torch's caching allocator, from the outcomes plugin), the largest any earlier gate
run of the campaign measured for that test id: baseline_tests' run for fixture_freeze, and fixture_freeze's and
baseline_tests' for candidate_gate (a test settled by a later run carries that run's peak). The first run is not
bounded: cold, its tests spend their time compiling side by side.

Measured case (fla's attnres tests on an H100 80GB, 81559 MiB free): cold, baseline_tests passed 15 of 15 at 14
workers, each test taking 13-61 s of compiling, with peaks up to 21.7 GiB (8 tests above 12 GiB); warm,
fixture_freeze's first run at 14 workers ran them side by side (2.1-2.3 s each) and 11 failed, 8 with
torch.OutOfMemoryError (each passed alone) and 3 with cuBLAS's allocation failure (each passed in both reruns).
The 11 fit 3 at a time.

Limits: a suspect no earlier run measured (the fixture's new tests at fixture_freeze) sends every suspect alone,
and a test's peak on the candidate may exceed BENCH_BASE's (what runs out again goes alone); memory outside
torch's allocator (the CUDA context, library handles, Triton's launcher) is PROCESS_OVERHEAD_BYTES, a stated
margin, not a measurement; free memory is read once, at the stage's start, and another user of the GPU may take
more later.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: bytes a test process holds on the GPU outside torch's caching allocator (CUDA context, cuBLAS handle, the
#: Triton launcher): a stated margin, not a measurement (a CUDA context alone is commonly 0.3-0.6 GiB)
PROCESS_OVERHEAD_BYTES = 1 << 30
#: the share of the free memory the workers may plan to use (the rest: fragmentation, the driver, other users)
HEADROOM = 0.9


@dataclass(frozen=True, slots=True)
class Fit:
    """The memory bound on a gate run's workers and what it was computed from."""

    workers: int
    free_bytes: int
    budget_bytes: int
    overhead_bytes: int
    tests_measured: int
    #: the peaks that decided: the W largest, then the first left out (test id, bytes)
    deciding: tuple[tuple[str, int], ...]

    def as_data(self) -> dict[str, Any]:
        return {"workers": self.workers, "free_bytes": self.free_bytes, "budget_bytes": self.budget_bytes,
                "overhead_bytes_per_worker": self.overhead_bytes, "tests_measured": self.tests_measured,
                "deciding_peaks_reserved_bytes": [{"nodeid": i, "bytes": b} for i, b in self.deciding],
                "method": "kgate.testrun.memory_fit"}


def peaks(runs: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Each test id's largest ``gpu_peak_reserved_bytes`` over ``runs`` (gate runs as records keep them:
    ``GateRun.as_data()``, tests as a list); ids without a measured peak are left out."""
    out: dict[str, int] = {}
    for run in runs:
        for t in run.get("tests") or []:
            b = t.get("gpu_peak_reserved_bytes")
            if isinstance(b, int) and b >= 0:
                out[t["nodeid"]] = max(b, out.get(t["nodeid"], 0))
    return out


def fit(test_peaks: dict[str, int], free_bytes: int, *, most: int | None = None,
        overhead_bytes: int = PROCESS_OVERHEAD_BYTES, headroom: float = HEADROOM) -> Fit | None:
    """The largest worker count, at most ``most``, whose W largest peaks, with each worker's overhead, fit
    ``headroom`` of ``free_bytes`` (at least 1; never more than there are tests); None when no peak was
    measured (nothing to bound by)."""
    if not test_peaks:
        return None
    if free_bytes < 0 or overhead_bytes < 0 or not 0 < headroom <= 1:
        raise ValueError(f"memory fit: free {free_bytes}, overhead {overhead_bytes}, headroom {headroom}")
    budget = int(free_bytes * headroom)
    ordered = sorted(test_peaks.items(), key=lambda kv: (-kv[1], kv[0]))
    used, w = 0, 0
    for _, b in ordered:
        if (most is not None and w >= most) or used + b + overhead_bytes > budget:
            break
        used += b + overhead_bytes
        w += 1
    return Fit(workers=max(1, w), free_bytes=free_bytes, budget_bytes=budget, overhead_bytes=overhead_bytes,
               tests_measured=len(test_peaks), deciding=tuple(ordered[:w + 1]))


def beside(test_peaks: dict[str, int], free_bytes: int, workers: int, *,
           overhead_bytes: int = PROCESS_OVERHEAD_BYTES, headroom: float = HEADROOM) -> int | None:
    """The GPU bytes one more process may hold beside ``workers`` gate workers: ``headroom`` of ``free_bytes``
    less the ``workers`` largest peaks (the worst case of their tests at once, as in :func:`fit`), less one
    overhead per worker and one for the process itself; at least 0. None when no peak was measured (nothing to
    bound by). Used for candidate_gate's precompile worker (``kgate.measure.precompile``)."""
    if not test_peaks:
        return None
    if free_bytes < 0 or overhead_bytes < 0 or not 0 < headroom <= 1 or workers < 1:
        raise ValueError(f"memory beside: free {free_bytes}, overhead {overhead_bytes}, headroom {headroom}, "
                         f"workers {workers}")
    largest = sorted(test_peaks.values(), reverse=True)[:workers]
    return max(0, int(free_bytes * headroom) - sum(largest) - (len(largest) + 1) * overhead_bytes)
