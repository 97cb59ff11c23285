"""The candidate's timed kernels compiled while its frozen gate runs: compilation overlapped with untimed work.

Method: beside candidate_gate's frozen gate run (tests, nothing timed), one measurement worker of the
candidate's worktree, started with ``--compile-only`` (``kgate.testrun.compile_only``), makes each timed row's
inputs with the campaign's generator and calls the op once per mode a later stage times: profile rows in the
profiled call, bench's gated rows in the gated mode and its controls in the control mode, ncu's rows in the
profiled call (``items``). Every Triton launch compiles its kernel into the stack's kernel cache and runs
nothing; every autotuner compiles the configs its pruning keeps and picks none. profile_candidate and bench
then find the compiled variants on disk and still tune on an idle GPU, so no pick is made beside a gate run.
Rows go one at a time in the campaign's order, each released before the next.

The work is opportunistic and decides nothing. :meth:`Precompile.stop` ends it when the gate's first run
ends: before any test runs alone (``kgate.testrun.contention``) and before anything else of the stage uses
the GPU; what was compiled stays in the cache. Its record (``data.precompile`` of candidate_gate) lists, by
row and mode, the compiles asked for per kernel and the wall time, then how it ended: ``done``, ``stopped``
(the gate ended first) or ``failed`` with the error (the target's host code on uncomputed outputs, out of
memory, an import). Limits: outputs are never computed, so host code that branches on them may compile other
variants, fewer, or fail; the rows' inputs hold GPU memory beside the gate's test processes (a test that
runs out of memory there is decided by its run alone, after this worker has ended); on CPU nothing compiles
(the interpreter runs kernels from source), so candidate_gate does not start it there.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate.errors import KgateError
from kgate.measure.arms import Arm, Deadline
from kgate.measure.rows import MeasureSpec, Row


@dataclass(frozen=True)
class Item:
    """One timed row (its ``make_inputs`` values, ``name`` included) and the modes a later stage calls it in."""

    row: dict[str, Any]
    modes: tuple[str, ...]


def items_for(spec: MeasureSpec, table: dict[str, Row], ncu_rows: list[str] | None, ncu_mode: str | None
              ) -> list[Item]:
    """The rows later stages time and the modes they call them in, in the order they come: profile's rows
    (the profiled call), bench's gated rows (the gated mode) and controls (the control mode), ncu's rows (its
    profiled call). A row two stages share is made once, with every mode either calls."""
    modes: dict[str, list[str]] = {}
    rows: dict[str, Row] = {}
    plan = [(spec.profile_rows(table), spec.profile_mode), (spec.gated_rows(table), spec.gated_mode),
            (spec.control_rows(table), spec.control_mode),
            (spec.select(table, ncu_rows, "ncu.rows") if ncu_rows else [], spec.profiled_call(ncu_mode))]
    for chosen, mode in plan:
        for r in chosen:
            rows.setdefault(r.name, r)
            if mode not in modes.setdefault(r.name, []):
                modes[r.name].append(mode)
    return [Item(row=dict(rows[n].values), modes=tuple(m)) for n, m in modes.items()]


@dataclass
class Precompile:
    """A running precompile worker (:func:`start`); :meth:`stop` ends it and returns its record."""

    arm: Arm
    items: tuple[Item, ...]
    thread: threading.Thread | None = None
    record: dict[str, Any] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _started: float = field(default_factory=time.monotonic)

    def _work(self, init: dict[str, Any]) -> None:
        rec = self.record
        try:
            info = self.arm.request("init", **init)
            rec["worker"] = {"pid": info.get("pid"), "module_file": info.get("module_file")}
            for item in self.items:
                if self._stopping.is_set():
                    break
                name = item.row["name"]
                self.arm.request("prepare", rows=[item.row])
                for mode in item.modes:
                    rec["calls"].append(self.arm.request("compile", row=name, mode=mode))
                self.arm.request("release", rows=[name])
            rec["ended"] = "stopped" if self._stopping.is_set() else "done"
        except KgateError as exc:
            # a kill by stop() ends the pending request: that is a stop, not a failure
            if self._stopping.is_set():
                rec["ended"] = "stopped"
            else:
                rec.update(ended="failed", error=str(exc))

    def stop(self) -> dict[str, Any]:
        """End the worker now (idempotent); whatever it compiled stays in the cache. Returns the record."""
        if "wall_s" in self.record:
            return self.record
        self._stopping.set()
        self.arm.kill()
        if self.thread is not None:
            self.thread.join(timeout=60)
        self.arm.close()
        self.record.setdefault("ended", "stopped")
        self.record["wall_s"] = round(time.monotonic() - self._started, 3)
        kernels: dict[str, int] = {}
        for call in self.record["calls"]:
            for k, n in call["compiles"].items():
                kernels[k] = kernels.get(k, 0) + n
        self.record["compiles_by_kernel"] = kernels
        return self.record


def start(worktree: Path, cache: Path, env: dict[str, str], log: Path, init: dict[str, Any],
          items: list[Item], deadline_s: float) -> Precompile:
    """Start the candidate's compile-only worker in ``worktree`` (``env``: the measurement workers' own) and
    compile ``items`` in a background thread; the caller must :meth:`Precompile.stop` it."""
    arm = Arm("precompile", worktree, cache, env, log, Deadline(deadline_s),
              command=[sys.executable, "-m", "kgate.measure.worker", "--arm", "cand", "--compile-only"])
    pre = Precompile(arm=arm, items=tuple(items),
                     record={"ran": True, "rows": [i.row["name"] for i in items], "calls": [], "log": str(log)})
    pre.thread = threading.Thread(target=pre._work, args=(init,), daemon=True)
    pre.thread.start()
    return pre
