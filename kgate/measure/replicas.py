"""Worker pairs replicated during a benchmark: a fresh pair of worker processes every few rounds.

A worker process carries an offset of its own for its whole life, so one
pair timing every round leaves process-level variance out of the interval
(kgate.stats.pairs says why and how the interval takes it in). bench replaces
the pair every ``every`` rounds (campaign key ``bench.rounds_per_worker_pair``;
None: one pair for the whole run).

Method: :class:`WorkerPairs` holds the current pair. Before a round,
:meth:`WorkerPairs.before_round` replaces the pair when it has timed
``every`` rounds: the old workers are closed first (the GPU holds exactly two
workers at any time), then the stage's ``start`` starts a new pair and its
``ready`` prepares and warms it (same device, same input hashes, warm calls
per row: never inside a round). Each pair's history holds ``ready_s`` (start
to ready) and ``phases_s``: ``start`` (processes up, environment recorded),
each worker's own init phases within it (``start.<arm>.torch``, ``.target``,
``.device``, ``.total``: torch imported, the target imported, the device
opened; ``start`` less the larger total is the processes' own start-up) and
whatever phases ``ready`` returns (bench: ``prepare``, inputs made and
hashed; ``warm``, warm calls), so a slow start says where its time went.
Pairs are numbered over the whole checkpoint: a resumed run's first pair
takes the number after the last recorded one
(:meth:`WorkerPairs.number_from`), so rounds timed by the processes of a
killed run are never taken for the new ones'. Every pair's workers are closed
on the way out (:meth:`WorkerPairs.close`); a failure of the candidate's
worker while a fresh pair starts propagates like any other worker failure.
Limits: the first pair alone is profiled and asked for autotune picks; a
fresh pair's own picks are not read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kgate.errors import ConfigError
from kgate.measure.arms import Arm


class WorkerPairs:
    """The current pair of arms and the pairs before it (module docstring)."""

    def __init__(self, first: dict[str, Arm], every: int | None, start: Callable[[], dict[str, Arm]],
                 ready: Callable[[dict[str, Arm]], dict[str, float] | None]) -> None:
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ConfigError(f"rounds per worker pair: expected an integer >= 1 or null, got {every!r}")
        self.every = every
        self._start = start
        self._ready = ready
        self.arms = first
        self.pair = 0
        self.rounds_done = 0
        self.history: list[dict[str, Any]] = []
        self._note_current(0.0)

    def _note_current(self, ready_s: float, phases_s: dict[str, float] | None = None) -> None:
        self.history.append({"pair": self.pair, "pids": self.pids, "started": time.time(), "ready_s": round(ready_s, 3),
                             "phases_s": {k: round(v, 3) for k, v in (phases_s or {}).items()}, "rounds": []})

    @property
    def pids(self) -> dict[str, int]:
        return {name: arm.pid for name, arm in self.arms.items()}

    @property
    def ours(self) -> set[int]:
        """The processes this stage has on the device now (for the exclusivity check)."""
        return set(self.pids.values())

    def number_from(self, first: int) -> None:
        """Number the current pair ``first`` (a resumed run continues after the recorded pairs)."""
        self.pair = first
        self.history[-1]["pair"] = first

    def before_round(self) -> None:
        """Replace the pair when it has timed ``every`` rounds (never inside a round)."""
        if self.every is not None and self.rounds_done >= self.every:
            self.renew()

    def after_round(self, index: int) -> None:
        self.rounds_done += 1
        self.history[-1]["rounds"].append(index)

    def renew(self) -> None:
        """Close the current pair, start a fresh one and make it ready."""
        self._close_current()
        t0 = time.monotonic()
        self.arms = self._start()
        started = time.monotonic() - t0
        try:
            phases = self._ready(self.arms) or {}
        except BaseException:
            self._close_current()
            raise
        self.pair += 1
        self.rounds_done = 0
        init = {f"start.{name}.{k}": v for name, arm in self.arms.items()
                for k, v in ((arm.info or {}).get("init_phases_s") or {}).items()}
        self._note_current(time.monotonic() - t0, {"start": started, **init, **phases})

    def _close_current(self) -> None:
        for arm in self.arms.values():
            arm.close()

    def close(self) -> None:
        """Close the current pair (earlier pairs were closed when replaced)."""
        self._close_current()
