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

Calls that synchronise inside: a host that waits on the GPU in the middle of
the call (fla's packed-varlen path reads a chunk count with ``.item()``)
waits out the hold too, so one hold before the call cannot put the rest of
it ahead; the H200 A/A held such a row at the 100 ms cap for all of its 300
samples per arm (60 s of spinning for nothing) and left it AMBIGUOUS.

Re-arming: once per row (untimed) the worker counts the call's host
synchronisations twice, with torch's sync debug mode (every synchronising
CUDA operation torch performs) and through ``SYNC_METHODS`` on CUDA tensors.
When both counts agree, every synchronisation passes through those methods,
and the timed calls re-arm the hold after each one: right after the method
returns (the host has just caught up with the GPU) the worker enqueues the
hold again between two events, so the host is ahead of the next segment too;
the sample is the span less those spins (``Segments``). The host's own
latency from the synchronisation's return to the next spin (microseconds)
stays in the sample, as does the device's copy to the host. Each segment is
checked like a whole call: its guard event (the start event, then each
spin's end) must not have completed when the host reaches the next
synchronisation or the end. When the counts differ (a synchronisation
elsewhere, e.g. an explicit one), nothing is re-armed.

Dropping the hold: after ``give_up`` samples in a row were not ahead (the
hold has then grown 2**give_up-fold), the row's hold is dropped: its later
samples are timed without it (``unheld``, counted per arm and named in the
record's reasons), which is what the span of such a call means then: kernels
plus the host's work after the synchronisation.

Limits: the hold removes what the host adds, including a candidate's saving
of host launch work; that part is measured by profile_baseline's launch
cost, not here. Samples that were not ahead are counted, not hidden. The
re-arming patches two Tensor methods in the worker process during held timed
calls only (restored after each call). On an H200 it re-armed fla's two
``.item()`` synchronisations per packed-varlen call, and the host was ahead
in every held sample (tests/data/bench/h200_identity_rearm/). On CPU
there is no hold (``perf_counter`` around each call).
"""

from __future__ import annotations

import contextlib
import statistics
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

#: the hold's defaults: margin over the host's enqueue time, floor and cap (ms), and the samples in a row
#: not ahead after which a row's hold is dropped (module docstring)
MARGIN, FLOOR_MS, CAP_MS, GIVE_UP = 1.5, 0.2, 100.0, 4
#: the policy in words: part of bench's run key, so rounds held one way are not resumed under another
POLICY = (f"hold {MARGIN}x host enqueue, floor {FLOOR_MS} ms, cap {CAP_MS} ms, re-armed after host synchronisations "
          f"through Tensor.item/tolist, dropped after {GIVE_UP} behind in a row")


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


#: Tensor methods that make the host wait for the device when called on a CUDA tensor (re-armed; see above)
SYNC_METHODS = ("item", "tolist")


@contextlib.contextmanager
def around_syncs(torch: Any, before: Callable[[], None], after: Callable[[], None]) -> Iterator[None]:
    """While active, ``before()`` runs as a SYNC_METHODS call on a CUDA tensor starts and ``after()`` once it
    has returned; the methods are restored on exit."""
    cls = torch.Tensor
    own = {name: cls.__dict__.get(name) for name in SYNC_METHODS}
    depth = [0]  # a method that re-enters one of them (a subclass's __torch_function__) is one synchronisation

    def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            outer = depth[0] == 0 and bool(getattr(self, "is_cuda", False))
            if outer:
                before()
            depth[0] += 1
            try:
                out = orig(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            if outer:
                after()
            return out
        return call

    for name in SYNC_METHODS:
        setattr(cls, name, wrap(getattr(cls, name)))
    try:
        yield
    finally:
        for name, orig in own.items():
            if orig is None:
                delattr(cls, name)
            else:
                setattr(cls, name, orig)


def count_syncs(torch: Any, call: Callable[[], Any]) -> dict[str, Any]:
    """One call's host synchronisations: all that torch's sync debug mode reports, those through SYNC_METHODS,
    and whether the hold can be re-armed after each (both counts equal and above zero)."""
    seen: list[None] = []
    with warnings.catch_warnings(record=True) as caught, around_syncs(torch, lambda: None, lambda: seen.append(None)):
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode(1)
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    reported = sum(1 for w in caught if "synchroniz" in str(w.message))
    return {"per_call": reported, "through_methods": len(seen), "rearmed": reported == len(seen) > 0}


@dataclass
class Segments:
    """One held call cut at its synchronisations: the spins re-armed after each, and whether the host kept
    ahead of every segment (its guard event not yet complete when the host reached the segment's end)."""

    torch: Any
    cycles: int
    guard: Any
    spins: list[tuple[Any, Any]] = field(default_factory=list)
    behind: int = 0

    def before(self) -> None:
        """The host is about to wait for the device: had the device already caught up with it?"""
        if self.guard.query():
            self.behind += 1

    def after(self) -> None:
        """The host has caught up: hold the device again, between two events, while it enqueues the rest."""
        cuda = self.torch.cuda
        a, b = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        a.record()
        cuda._sleep(self.cycles)
        b.record()
        self.spins.append((a, b))
        self.guard = b

    def ahead(self) -> bool:
        """After the end event: True when the host was ahead in every segment."""
        self.before()
        return self.behind == 0

    def spun_ms(self) -> float:
        """The re-armed spins' device time, taken out of the sample (call after the device has finished)."""
        return sum(a.elapsed_time(b) for a, b in self.spins)
