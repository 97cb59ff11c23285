"""The host-ahead hold of bench's GPU timer: time the device, not the host's launch rate.

Why: a timed call launches dozens of kernels. Where their device time is
short (2-3 ms steps of fla's registry rows on an H200), the host launching
them is slower than the GPU running them, so the span between the two CUDA
events is mostly host launch time, and the host's launch rate moves between
rounds (kgate_noop launch cost 11 or 20 us on the same node). A/A benchmarks
on an H200 left those rows AMBIGUOUS at 11-39 % interval widths, alone on
the host as much as beside another job (tests/data/bench/).

Method (nvbench's blocking kernel, with torch's spin kernel): before each
timed call the worker enqueues ``torch.cuda._sleep(cycles)`` after the L2
flush and before the start event. While the GPU spins, the host enqueues the
whole call and the end event; the GPU then runs the call back to back, so
the span is the device's time for it (kernels plus the device's own gaps
between them). Right after enqueueing the end event the worker asks whether
the start event has completed: if not, the host was ahead and the sample is
a device time; if it has, the hold ran out first (a slow host, or a call
that synchronises inside) and the sample holds host time too. The hold
starts at ``margin`` x the call's host enqueue time (measured once per row on
an idle GPU) and doubles after every sample that was not ahead, up to
``cap_ms``; the per-row counts of samples ahead are recorded.

Limits: the hold removes what the host adds, including a candidate's saving
of host launch work; that part is measured by profile_baseline's launch
cost, not here. A call that synchronises inside is never fully ahead; its
samples say so (``ahead`` below ``n``) rather than pretend. On CPU there is
no hold (``perf_counter`` around each call).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

#: the hold's defaults: margin over the host's enqueue time, floor and cap (ms), and the samples in a row
#: not ahead after which a row's hold is dropped (module docstring)
MARGIN, FLOOR_MS, CAP_MS, GIVE_UP = 1.5, 0.2, 100.0, 4
#: the policy in words: part of bench's run key, so rounds held one way are not resumed under another
POLICY = f"hold {MARGIN}x host enqueue, floor {FLOOR_MS} ms, cap {CAP_MS} ms, dropped after {GIVE_UP} behind in a row"


@dataclass(frozen=True, slots=True)
class Hold:
    """The hold before one row's timed calls, in milliseconds of GPU spin."""

    ms: float
    cap_ms: float = CAP_MS
    behind: int = 0
    give_up: int = GIVE_UP

    @property
    def on(self) -> bool:
        """False once ``give_up`` samples in a row were not ahead: the row is timed without a hold."""
        return self.behind < self.give_up

    @classmethod
    def first(cls, host_enqueue_ms: float, margin: float = MARGIN, floor_ms: float = FLOOR_MS,
              cap_ms: float = CAP_MS) -> Hold:
        """``margin`` x the call's host enqueue time, at least ``floor_ms``, at most ``cap_ms``."""
        if not host_enqueue_ms >= 0:
            raise ValueError(f"host enqueue time {host_enqueue_ms!r} ms")
        return cls(min(cap_ms, max(floor_ms, margin * host_enqueue_ms)), cap_ms)

    def after(self, ahead: bool) -> Hold:
        """The hold for the next sample: unchanged after a sample that was ahead, else doubled (capped)
        and one more sample behind in a row; a dropped hold stays dropped."""
        if not self.on:
            return self
        if ahead:
            return replace(self, behind=0)
        return replace(self, ms=min(self.cap_ms, 2.0 * self.ms), behind=self.behind + 1)

    def cycles(self, cycles_per_ms: float) -> int:
        """Spin cycles for ``torch.cuda._sleep`` at the calibrated rate."""
        if not cycles_per_ms > 0:
            raise ValueError(f"spin rate {cycles_per_ms!r} cycles/ms")
        return max(1, round(self.ms * cycles_per_ms))


def cycles_per_ms(cycles: int, elapsed_ms: list[float]) -> float:
    """The spin kernel's rate from timed spins of ``cycles`` cycles (median of the spans)."""
    good = [x for x in elapsed_ms if x > 0]
    if cycles <= 0 or not good:
        raise ValueError(f"spin calibration: {cycles} cycles over {elapsed_ms} ms")
    return cycles / statistics.median(good)
