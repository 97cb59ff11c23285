"""The candidate's timed kernels compiled while its frozen gate runs: compilation overlapped with untimed work.

Method: beside candidate_gate's frozen gate run (tests, nothing timed), one measurement worker of the
candidate's worktree, started with ``--compile-only`` (``kgate.testrun.compile_only``), makes each timed row's
inputs with the campaign's generator and calls the op once per mode a later stage times: profile rows in the
profiled call, bench's gated rows in the gated mode and its controls in the control mode, ncu's rows in the
profiled call (``items``). Every Triton launch compiles its kernel into the stack's kernel cache and runs
nothing; every autotuner compiles the configs its pruning keeps and picks none. profile_candidate and bench
then find the compiled variants on disk and still tune on an idle GPU, so no pick is made beside a gate run.
Rows go one at a time in the campaign's order, each released before the next. On a GPU the worker shares
the gate run's compile slots (``kgate.testrun.parallel_compile``): an autotuner's configs compile side by
side, never more at once than the slots allow for the worker and the gate together (first come, first
served), and the worker runs at a lower CPU priority than the gate (``kgate.measure.worker``).

GPU memory: the worker shares the GPU with the gate's W test processes, and a test that runs out of memory
beside it is rerun alone (``kgate.testrun.contention``), which costs the time this worker should save. So a
row is compiled here only when what it holds fits its budget: one (W + 1)-th of the device's memory, or,
where an earlier gate run already reran tests for sharing the GPU, what the free memory leaves beside the W
largest measured test peaks (``kgate.testrun.memory_fit.beside``; candidate_gate decides and passes it,
``candidate_gate.precompile_budget``). What a row holds is its inputs plus
its call's peak beyond them, from profile_baseline's record (``input_bytes``, ``peak_bytes``) before the
inputs are made, and from the inputs as made (with the profiled peak, or the inputs' size again for a row
that was not profiled) before anything is compiled. A row over that budget is released and listed under
``skipped`` with both figures; its own stage compiles it later. The budget is a rule of thumb, not a
guarantee: the tests' own needs are unknown, and a candidate's host code may allocate otherwise than the
baseline's did.

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
from kgate.testrun import parallel_compile

#: the budget rule without a given budget: the device's total memory / the processes sharing it
SHARE_RULE = "device total / share"


@dataclass(frozen=True)
class Item:
    """One timed row (its ``make_inputs`` values, ``name`` included) and the modes a later stage calls it in."""

    row: dict[str, Any]
    modes: tuple[str, ...]
    #: the row's inputs and its call's peak beyond them, as profile_baseline measured them (None: not profiled)
    input_bytes: int | None = None
    peak_bytes: int | None = None

    def need_bytes(self, inputs: int | None = None) -> int | None:
        """GPU bytes the row holds while compiled: its inputs (``inputs`` as just made, else as profiled) and the
        call's peak beyond them (as profiled; unprofiled, taken equal to the inputs: outputs and gradients the
        size of the inputs). None when neither size is known."""
        size = inputs if inputs is not None else self.input_bytes
        if size is None:
            return None
        return size + (self.peak_bytes if self.peak_bytes is not None else size)


def items_for(spec: MeasureSpec, table: dict[str, Row], ncu_rows: list[str] | None, ncu_mode: str | None,
              sizes: dict[str, tuple[int | None, int | None]] | None = None) -> list[Item]:
    """The rows later stages time and the modes they call them in, in the order they come: profile's rows
    (the profiled call), bench's gated rows (the gated mode) and controls (the control mode), ncu's rows (its
    profiled call). A row two stages share is made once, with every mode either calls. ``sizes``: {row:
    (input bytes, peak bytes)} from profile_baseline's record."""
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
    sizes = sizes or {}
    return [Item(dict(rows[n].values), tuple(m), *sizes.get(n, (None, None))) for n, m in modes.items()]


@dataclass
class Precompile:
    """A running precompile worker (:func:`start`); :meth:`stop` ends it and returns its record."""

    arm: Arm
    items: tuple[Item, ...]
    #: the gate's test processes plus this worker: the GPU's memory is shared by that many processes
    share: int = 2
    #: the most GPU bytes a row may hold here; None: the device's total memory / ``share`` (no limit on CPU)
    budget_bytes: int | None = None
    #: what ``budget_bytes`` was computed from, for the record (None: given, or the share of the device's total)
    budget_from: str | None = None
    thread: threading.Thread | None = None
    record: dict[str, Any] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _started: float = field(default_factory=time.monotonic)

    def _work(self, init: dict[str, Any]) -> None:
        rec = self.record
        try:
            info = self.arm.request("init", **init)
            rec["worker"] = {"pid": info.get("pid"), "module_file": info.get("module_file")}
            total = (info.get("device") or {}).get("total_bytes")
            budget = self.budget_bytes if self.budget_bytes is not None else (
                total // self.share if total else None)
            rec.update(budget_bytes=budget, share=self.share, budget_from=self.budget_from or (
                "given" if self.budget_bytes is not None else SHARE_RULE if total else None))

            def over(name: str, need: int | None, why: str) -> bool:
                if budget is None or need is None or need <= budget:
                    return False
                rec["skipped"].append({"row": name, "need_bytes": need, "budget_bytes": budget, "why": why})
                return True

            for item in self.items:
                if self._stopping.is_set():
                    break
                name = item.row["name"]
                if over(name, item.need_bytes(), "profiled sizes"):
                    continue
                made = self.arm.request("prepare", rows=[item.row])[name]
                if over(name, item.need_bytes(made.get("bytes")), "inputs as made"):
                    self.arm.request("release", rows=[name])
                    continue
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
        self.record.update(parallel_compile.record(parallel_compile.summed(self.record["calls"])))
        return self.record


def start(worktree: Path, cache: Path, env: dict[str, str], log: Path, init: dict[str, Any],
          items: list[Item], deadline_s: float, *, share: int = 2, budget_bytes: int | None = None,
          compile_slots: str | None = None, budget_from: str | None = None) -> Precompile:
    """Start the candidate's compile-only worker in ``worktree`` (``env``: the measurement workers' own) and
    compile ``items`` in a background thread; the caller must :meth:`Precompile.stop` it. ``share``: the gate's
    test processes plus one; ``budget_bytes`` overrides the per-row budget (module doc; ``budget_from`` says from
    what, for the record); ``compile_slots``:
    the gate run's slots (``DIR:N``, ``kgate.testrun.parallel_compile.option``), within which an autotuner's
    configs compile side by side (None: one at a time)."""
    command = [sys.executable, "-m", "kgate.measure.worker", "--arm", "cand", "--compile-only"]
    if compile_slots:
        command.append(f"--compile-slots={compile_slots}")
    arm = Arm("precompile", worktree, cache, env, log, Deadline(deadline_s), command=command)
    pre = Precompile(arm=arm, items=tuple(items), share=share, budget_bytes=budget_bytes, budget_from=budget_from,
                     record={"ran": True, "rows": [i.row["name"] for i in items], "calls": [], "skipped": [],
                             "log": str(log), "compile_slots": compile_slots})
    pre.thread = threading.Thread(target=pre._work, args=(init,), daemon=True)
    pre.thread.start()
    return pre
