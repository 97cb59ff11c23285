"""``python -m kgate.measure.worker``: one arm of a measurement, as a long-lived process.

Usage (started by ``kgate.measure.arms.Arm``, never by hand)::

    cd <arm worktree> && PYTHONPATH=<worktree>:... TRITON_CACHE_DIR=<stack cache> \\
        python -m kgate.measure.worker --arm base        # JSON lines in on stdin, out on stdout

Protocol
--------
One request per line: ``{"id": n, "cmd": "<command>", "args": {...}}``; one
answer per line: ``{"id": n, "ok": true, "result": {...}}`` or ``{"id": n,
"ok": false, "error": "...", "kind": "target"|"internal", "traceback": "..."}``.
``kind`` is ``target`` when the arm's own code raised (importing the target,
running the op): for a candidate that is a measured failure. The worker's
stdout carries only these lines; anything the target prints goes to stderr.
End of input (the coordinator died) ends the worker.

Commands: ``init`` (install the interpreter on CPU, import the callable and
the campaign's input generator, allocate the L2 flush buffer), ``registry``,
``prepare`` (generate a row's inputs from the fixed seed, return sha256 of
every tensor), ``outputs`` (one call, outputs and gradients saved for the
BENCH_BASE comparison), ``warm``, ``time``, ``profile``, ``autotune``, ``resources``,
``launch_cost``, ``bandwidth``, ``profile_range`` (one call inside a CUDA profiler
range, for Nsight Compute), ``compile`` (one call of a worker started with
``--compile-only``: Triton compiles, nothing runs; ``kgate.measure.precompile``),
``release``, ``quit``.

The worker is assembled from one module per concern: :mod:`kgate.measure.worker_state` (state,
:class:`~kgate.measure.worker_state.ArmTargetError`), :mod:`kgate.measure.worker_calls` (rows and
calls), :mod:`kgate.measure.worker_setup` (``init``), :mod:`kgate.measure.worker_timing` (``warm``,
``time``, ``profile``, ``profile_range``: the timing method), :mod:`kgate.measure.worker_facts`
(the arm's facts), with the helpers :mod:`kgate.measure.tensors` and :mod:`kgate.measure.census`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from kgate.measure.census import occupancy
from kgate.measure.worker_facts import Facts
from kgate.measure.worker_setup import Setup
from kgate.measure.worker_state import ArmTargetError, RowState, State, no_gc
from kgate.measure.worker_timing import Timing
from kgate.testrun.interp_gaps import interpreter_failure

#: the CPU priority a ``--compile-only`` worker lowers itself by (``os.nice``): its compiles are opportunistic,
#: beside a gate run that is judged, so the gate's processes get the cores first when both want more than exist
COMPILE_ONLY_NICE = 10

__all__ = ["ArmTargetError", "RowState", "State", "Worker", "main", "no_gc", "occupancy", "serve"]


class Worker(Setup, Timing, Facts):
    """One arm: ``init``, rows and calls, timing and profiling, facts (see the module docstring)."""


def serve(dispatch: Callable[[str, dict[str, Any]], dict[str, Any]]) -> int:
    """The JSON-lines protocol (module docstring) on stdin/stdout until ``quit`` or end of input.

    ``dispatch(cmd, args)`` answers one request. The protocol owns the real stdout; anything the
    target prints goes to stderr. An ``ArmTargetError`` is answered with kind ``target`` (the arm's own
    code failed: data for a candidate), or kind ``unavailable`` when the failure is the Triton interpreter's own
    (``kgate.testrun.interp_gaps.interpreter_failure``: the op cannot run on CPU); any other exception with kind
    ``internal``; all carry the traceback back to the coordinator.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req["cmd"] == "quit":
            proto.write(json.dumps({"id": req["id"], "ok": True, "result": {}}) + "\n")
            break
        try:
            resp = {"id": req["id"], "ok": True, "result": dispatch(req["cmd"], req.get("args", {}))}
        except ArmTargetError as exc:
            # the Triton interpreter's own failure (CPU): the op cannot run here, whichever arm
            na = interpreter_failure(exc)
            resp = {"id": req["id"], "ok": False, "kind": "unavailable" if na else "target",
                    "error": f"cannot run on CPU: {na} ({exc})" if na else str(exc), "traceback": traceback.format_exc()}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the coordinator, with its traceback
            resp = {"id": req["id"], "ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()}
        proto.write(json.dumps(resp, default=str) + "\n")
        proto.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kgate.measure.worker")
    p.add_argument("--arm", required=True)
    p.add_argument("--compile-only", action="store_true",
                   help="every Triton launch compiles its kernel and runs nothing (kgate.testrun.compile_only); "
                        "for kgate.measure.precompile, never a timed stage")
    p.add_argument("--compile-slots", metavar="DIR:N",
                   help="with --compile-only: an autotuner's configs compile side by side within the N slots of "
                        "DIR, shared with a gate run's workers (kgate.testrun.parallel_compile)")
    args = p.parse_args(argv)
    if args.compile_slots and not args.compile_only:
        p.error("--compile-slots needs --compile-only")
    if args.compile_only:
        from kgate.testrun import compile_only, parallel_compile

        # opportunistic work beside a gate run that is judged: it yields the CPU to the gate's processes
        os.nice(COMPILE_ONLY_NICE)
        compile_only.install(slots=parallel_compile.parse(args.compile_slots, "--compile-slots")
                             if args.compile_slots else None)
    worker = Worker(args.arm)
    handlers = {"init": worker.init, "prepare": worker.prepare, "warm": worker.warm, "time": worker.time,
                "profile": worker.profile, "autotune": worker.autotune, "resources": worker.resources,
                "sources": worker.sources, "launch_cost": worker.launch_cost, "bandwidth": worker.bandwidth,
                "flops": worker.flops, "registry": worker.registry, "refresh": worker.refresh,
                "sample_outputs": worker.sample_outputs, "release": worker.release, "outputs": worker.outputs,
                "profile_range": worker.profile_range, "compile": worker.compile}

    def dispatch(cmd: str, req_args: dict[str, Any]) -> dict[str, Any]:
        if cmd not in handlers:
            raise ValueError(f"unknown command {cmd!r}")
        return handlers[cmd](**req_args)

    return serve(dispatch)


if __name__ == "__main__":
    sys.exit(main())
