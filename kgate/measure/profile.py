"""What the profiling stages and the benchmark share: one row measured on one arm, kernels per call, no section.

Method: ``measure_row`` asks a worker (``kgate.measure.arms.Arm``) to prepare
the row's seeded inputs, warm the op (``profile.warm_calls``, 1 on CPU: compile
and autotune), time ``endpoint_samples`` flushed calls with the benchmark's
timer (``bench.timer``: with the default host-ahead hold the endpoint is the
device's time for a call, as bench measures it, not the host's launch rate)
and profile
``iterations`` calls under torch.profiler; the row's inputs stay prepared.
``per_call`` sums the launches and device time of the profiled kernels a
regex matches, divided by the profiled iterations. ``not_measured`` is the
record of a stage whose campaign has no ``measure`` section. Used by
``profile_baseline``, ``profile_candidate`` and ``bench``.
"""

from __future__ import annotations

from typing import Any

from kgate.measure.arms import Arm
from kgate.measure.rows import MeasureSpec, Row, matching
from kgate.records import Gate, StageResult


def removal_table(profile: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The launches a ``removes`` mechanism's kernels are looked up in: the profiled kernels and, on CPU, the
    torch ops the profiled region ran (``host_ops``, each aten op with its count and host time). Under the
    interpreter the census sees Triton kernels only, so a fusion that removes a torch op (a division after the
    kernel) is observed through its aten op there; on a GPU ``host_ops`` is absent, CUPTI lists torch's kernels
    among the device kernels. Limit: on CPU the region includes the call's input preparation, whose aten ops
    count too."""
    return {**profile.get("host_ops", {}), **profile["kernels"]}


def per_call(kernels: dict[str, dict[str, float]], iterations: int, rx: Any) -> tuple[float, float]:
    """(launches, device microseconds) per call of the kernels matching ``rx``."""
    hit = matching(kernels, rx)
    return (sum(k["launches"] for k in hit.values()) / iterations,
            sum(k["device_us"] for k in hit.values()) / iterations)


def measure_row(arm: Arm, row: Row, spec: MeasureSpec, mode: str) -> dict[str, Any]:
    """Prepare, warm, time and profile ``row`` on ``arm``; the row's inputs stay prepared."""
    prep = arm.request("prepare", rows=[row.values])[row.name]
    warm_calls = 1 if spec.cpu else int(spec.profile.get("warm_calls", 2))
    warm = arm.request("warm", row=row.name, mode=mode, calls=warm_calls)
    timed = arm.request("time", row=row.name, mode=mode, n=spec.endpoint_samples(), hold=spec.hold)
    prof = arm.request("profile", row=row.name, mode=mode, iterations=spec.iterations())
    return {"inputs": prep, "warm": warm, "samples_ms": timed["samples_ms"], "profile": prof}


def not_measured(ctx: Any, stage: str) -> StageResult:
    """A campaign without a measure section: nothing to time (skip on CPU, unavailable on a GPU).

    ``ctx`` is the stage's context; only its ``gpu`` is read."""
    status = "skip" if ctx.gpu == "cpu" else "unavailable"
    return StageResult(gates=[Gate(f"{stage}_measured", "the campaign defines a measure section", "no measure section",
                                   status, detail="the campaign has no 'measure' section: nothing is timed")],
                       data={"measured": False})
