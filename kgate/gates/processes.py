"""Whether a benchmarked row's speed is set per worker process.

Method: bench times each round with a pair of worker processes (a fresh pair every round by default,
kgate.measure.replicas); this module groups a row's samples by the process that timed them and compares the
processes' medians with the spread inside one process. Limits: it needs the rounds' pids and at least two
processes per arm; it describes, it decides nothing (the intervals already carry the spread when pairs are
replicated).
"""

from __future__ import annotations

import math
from typing import Any

from kgate import stats

#: a row's processes differ "per process" when their medians' log-spread exceeds this many times the largest
#: log-spread (p90 / p10) of one process's own samples
PROCESS_SPREAD_FACTOR = 3.0


def process_speeds(recorded: list[dict[str, Any]], key: str, resolution: float) -> dict[str, Any] | None:
    """Per arm, whether the row's speed is set per worker process: each process's median over all its samples of
    the row (rounds grouped by the arm's pid), the ratio of the slowest to the fastest process (``between``) and the
    largest p90 / p10 of one process's samples (``within``). ``per_process`` when ``between`` exceeds 1 +
    ``resolution`` and its log exceeds ``PROCESS_SPREAD_FACTOR`` times the log of ``within``: processes of the same
    code differ while each one is steady (seen on an H200 with atomic accumulation: one speed per process for its
    life). Fresh worker pairs put such a spread into the interval as round-to-round variance; more rounds narrow it
    only as the square root of their count. Limits: None when the rounds name no pids (records before
    replication), one process timed every round (one pair for the run: the spread cannot be seen, and it is
    then an unmeasured offset) or a p10 is not positive; a drift within one long-lived process counts as its own
    spread."""
    out: dict[str, Any] = {}
    for arm in ("base", "cand"):
        by_pid: dict[Any, list[float]] = {}
        for r in recorded:
            pid = (r.get("pids") or {}).get(arm)
            if pid is None:
                return None
            by_pid.setdefault(pid, []).extend(r["rows"][key][arm]["samples_ms"])
        if len(by_pid) < 2:
            return None
        summaries = [stats.summarize(v) for v in by_pid.values()]
        if any(x.p10_ms <= 0 for x in summaries):
            return None
        medians = [x.median_ms for x in summaries]
        within = max(x.p90_ms / x.p10_ms for x in summaries)
        between = max(medians) / min(medians)
        out[arm] = {"processes": len(by_pid), "fastest_ms": min(medians), "slowest_ms": max(medians),
                    "between": between, "within": within,
                    "per_process": between > 1.0 + resolution and math.log(between) > PROCESS_SPREAD_FACTOR * math.log(within)}
    return out
