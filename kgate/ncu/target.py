"""``python -m kgate.ncu.target``: the one-shot process the ncu stage runs under Nsight Compute.

Usage (started by ``kgate.stages.ncu``, never by hand)::

    cd <arm worktree> && PYTHONPATH=<worktree>:... TRITON_CACHE_DIR=<stack cache> \\
        ncu ... --profile-from-start off python -m kgate.ncu.target --arm base \\
        --request R.request.json --result R.result.json

Method: the arm's worker (:class:`kgate.measure.worker.Worker`, the same code as the
timed stages' arms) in this process: ``init`` (import the callable, the input
generator), ``prepare`` the row (seeded inputs, their sha256), ``warm`` it
``warm_calls`` times (compile and autotune happen here, outside any profiler
range), then ``profile_range``: one call between cudaProfilerStart and
cudaProfilerStop, the only launches ncu profiles. The result file holds each
step's answer, or the failure with ``kind`` ``target`` (the arm's own code
raised) or ``internal``. The target's prints go to stderr (the stage's log).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def run_request(arm: str, request: dict[str, Any]) -> dict[str, Any]:
    """Init, prepare, warm and one profiled call; every answer, or the failure."""
    from kgate.measure.worker import ArmTargetError, Worker

    worker = Worker(arm)
    row = request["row"]
    out: dict[str, Any] = {"ok": True}
    try:
        out["info"] = worker.init(**request["init"])
        out["inputs"] = worker.prepare([row])[row["name"]]
        out["warm"] = worker.warm(row["name"], request["mode"], int(request["warm_calls"]))
        out["range"] = worker.profile_range(row["name"], request["mode"])
    except ArmTargetError as exc:
        out = {**out, "ok": False, "kind": "target", "error": str(exc), "traceback": traceback.format_exc()}
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the stage, with its traceback
        out = {**out, "ok": False, "kind": "internal", "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kgate.ncu.target")
    p.add_argument("--arm", required=True)
    p.add_argument("--request", required=True, type=Path)
    p.add_argument("--result", required=True, type=Path)
    args = p.parse_args(argv)
    # the target's prints go to stderr; stdout stays free
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    result = run_request(args.arm, json.loads(args.request.read_text()))
    tmp = args.result.with_name(args.result.name + ".tmp")
    tmp.write_text(json.dumps(result, default=str, indent=1) + "\n")
    os.replace(tmp, args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
