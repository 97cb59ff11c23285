"""Time to verdict, read from the stage records the report shows.

Method: every stage record's provenance holds its own wall clock (``wall_s``),
its start and finish (``started_utc``, ``finished_utc``) and, for stages that
ran target code, how its kernel cache started (``kernel_cache.state_at_start``:
cold, seeded or warm). :func:`time_to_verdict` sums the stages' own walls
(the time the verdict cost in stage work), takes the span from the earliest
start to the latest finish (the clock a user waited, scheduling and gaps
included), names the kernel cache's state at the earliest stage that
records one, and adds up the compiled kernels the stages added to it
(``kernel_cache.added.kernels``: a cache that is "warm" with another
campaign's kernels can still cost a cold compile of this one's).

Limits: only completed stages have records, so a stage attempt that was cut
(a timeout, a killed job) and then resumed counts with its resumed attempt's
wall only; its lost time shows in the span when the resumed run follows it,
not in the sum. When a report mixes records of different runs (baseline
stages from an earlier day, candidate stages of a rerun), the span covers the
gap between them; the sum does not. Neither includes the report stage itself
or the time before the first stage (installing, building the DAG).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgate.records import StageTimes, stage_times


@dataclass(frozen=True, slots=True)
class TimeToVerdict:
    """The records' stage walls, their span and the kernel cache's state at the first stage."""

    stages_s: tuple[tuple[str, float], ...]
    span_s: float | None
    cache_at_start: str | None
    kernels_added: int | None = None

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.stages_s)

    def line(self, top: int = 3) -> str:
        """One sentence: the sum of the stages' walls with the longest ``top`` stages, the span, the cache."""
        longest = sorted(self.stages_s, key=lambda x: -x[1])[:top]
        parts = [f"{duration(self.total_s)} of stage work ({len(self.stages_s)} stage record(s); "
                 + ", ".join(f"{name} {duration(s)}" for name, s in longest)
                 + (", ..." if len(self.stages_s) > top else "") + ")"]
        if self.span_s is not None:
            parts.append(f"{duration(self.span_s)} from the first stage's start to the last stage's finish")
        if self.cache_at_start:
            added = (f", {self.kernels_added} compiled kernel(s) added by the stages"
                     if self.kernels_added is not None else "")
            parts.append(f"kernel cache {self.cache_at_start} at the first stage{added}")
        return "; ".join(parts)


def duration(seconds: float) -> str:
    """``4 min 12 s`` (``38.2 s`` under a minute, ``1 h 03 min`` over an hour)."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def time_to_verdict(records: Sequence[Mapping[str, Any]]) -> TimeToVerdict | None:
    """The records' time to verdict (module docstring); None when no record states its wall clock."""
    stages: list[tuple[str, float]] = []
    timed: list[tuple[StageTimes, Mapping[str, Any]]] = []
    for record in records:
        times = stage_times(record)
        if times.wall_s is not None:
            stages.append((str(record.get("stage")), times.wall_s))
        timed.append((times, record.get("provenance") or {}))
    if not stages:
        return None
    starts = [t.started for t, _ in timed if t.started is not None]
    finishes = [t.finished for t, _ in timed if t.finished is not None]
    span = max(0.0, max(finishes) - min(starts)) if starts and finishes else None
    added = [((p.get("kernel_cache") or {}).get("added") or {}).get("kernels") for t, p in timed if t.started is not None]
    counted = [a for a in added if isinstance(a, int) and not isinstance(a, bool)]
    cache = None
    for _, prov in sorted(((t, p) for t, p in timed if t.started is not None), key=lambda x: x[0].started or 0.0):
        state = (prov.get("kernel_cache") or {}).get("state_at_start")
        if isinstance(state, str) and state:
            cache = state
            break
    return TimeToVerdict(stages_s=tuple(stages), span_s=span, cache_at_start=cache,
                         kernels_added=sum(counted) if counted else None)
