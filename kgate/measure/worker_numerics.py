"""The timing worker's watch on numeric settings around every call of the op.

Method: :func:`around_call` wraps ``kgate.measure.worker_calls.Calls._call`` (every warm-up, timed,
profiled and profiler-range call goes through it). The first call installs the process's
:class:`kgate.testrun.numeric_state.Watch` (the environment globs come from ``KGATE_ENV_RECORD``, which
``kgate.measure.arms.worker_env`` sets to the campaign's ``env.record``; torch's and Triton's settings are
always watched), and every call is one window whose start is the previous call's end. A numeric setting
that changes inside a call, even one restored before the call returns, or between two calls, fails the
call: an :class:`~kgate.measure.worker_state.ArmTargetError` whose message starts with :data:`MARK` and
names the setting and its values. For the candidate's arm the timed stages report it as the gate
``numeric_state`` (``kgate.stages.common.timed_arms``); in BENCH_BASE's arm it is an error of the run.
Settings as they stand after import are compared between the arms by the environment gate
(``kgate.gates.env``: the recorded variables).

Cost: a window reads the settings once, at its end (about 8 microseconds on a CPU host: after the call
has enqueued its work, before the caller's end event).
Limits: those of ``kgate.testrun.numeric_state``; torch flags set at import are not compared between the
arms here (the test processes' ``numeric_state`` gate compares them with the fixture run).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from kgate.measure.worker_state import ArmTargetError
from kgate.testrun import numeric_state

#: the start of the message of a call that changed a numeric setting (``timed_arms`` names its gate by it)
MARK = "numeric setting changed during the call"
#: the worker's environment variable that holds the campaign's env.record globs (comma-separated)
ENV_PATTERNS = "KGATE_ENV_RECORD"


@contextlib.contextmanager
def around_call(row: str, mode: str) -> Iterator[None]:
    """One window around one call of the op on ``row`` in ``mode`` (module docstring)."""
    watch = numeric_state.installed() or numeric_state.install(
        tuple(p for p in os.environ.get(ENV_PATTERNS, "").split(",") if p))
    watch.begin()
    try:
        yield
    finally:
        changes = watch.end()
    if changes:
        raise ArmTargetError(f"row {row} {mode}: {MARK}: {numeric_state.describe(changes)}")
