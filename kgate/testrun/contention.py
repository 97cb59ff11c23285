"""Gate tests that ran out of GPU memory beside other pytest-xdist workers: their outcome is the one alone.

Method: a gate run with W > 1 workers runs W test processes on one GPU at once. A test that fails there
with CUDA's out-of-memory error (``torch.OutOfMemoryError``, "CUDA out of memory", "CUDA error: out of
memory") may have run out only because the other W - 1 processes held theirs: that failure measured the
sharing, not the code. ``kgate.testrun.runner.run`` runs exactly those ids once more with one worker, and
the run alone decides each of them (``settle``): passed alone is passed, and a failure alone (out of
memory too) is the test's own. Every other failure stands as measured: a wrong result, a crash, a timeout
or a Triton ``OutOfResources`` (shared memory or registers, a compile-time fact of the kernel and its
config, the same alone) is never blamed on the sharing. Each settled test keeps what the shared run saw
(``alone``: its outcome there, the worker count and the end of its message), and the summary counts them.

Adversarial reading: a candidate that raises an out-of-memory error on purpose gains a run alone, which
then judges it like any serial run; nothing is skipped. Limits: alone means without the other workers of
this run, not without other users of the GPU; a test that fails beside others for a reason other than
memory (a shared file, a port) is not covered; one run alone cannot tell a flaky test from a sound one
(the baseline and fixture reruns, ``kgate.testrun.judge``, do that for every failure left).
"""

from __future__ import annotations

import re
from typing import Any

#: CUDA's out-of-memory errors as torch and the CUDA runtime word them (a Triton OutOfResources is not one)
PATTERN = re.compile(r"\bOutOfMemoryError\b|CUDA out of memory|CUDA error: out of memory")
#: characters of the shared run's message kept beside the settled outcome
_KEEP = 400


def shared_oom_ids(tests: dict[str, dict[str, Any]], workers: int) -> list[str]:
    """Ids that failed (or errored) with CUDA's out-of-memory error in a run of ``workers`` > 1 processes."""
    if workers <= 1:
        return []
    return sorted(i for i, t in tests.items()
                  if t.get("outcome") in ("failed", "error") and PATTERN.search(t.get("message") or ""))


def settle(tests: dict[str, dict[str, Any]], alone: dict[str, dict[str, Any]], ids: list[str],
           workers: int) -> dict[str, dict[str, Any]]:
    """``tests`` with each of ``ids`` replaced by its outcome in the run alone (``alone``).

    An id the run alone did not finish keeps its shared failure, marked as not finished alone."""
    out = dict(tests)
    for i in ids:
        shared = tests[i]
        seen = {"workers": workers, "outcome": shared["outcome"],
                "message_end": (shared.get("message") or "")[-_KEEP:]}
        if i in alone:
            out[i] = {**alone[i], "alone": seen}
        else:
            out[i] = {**shared, "alone": {**seen, "outcome_alone": "not finished"}}
    return out


def settled_ids(tests: dict[str, dict[str, Any]]) -> list[str]:
    """Ids whose outcome came from a run alone."""
    return sorted(i for i, t in tests.items() if "alone" in t)
