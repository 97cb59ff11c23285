"""Gate tests that ran out of GPU memory beside other pytest-xdist workers: their outcome is the one alone.

Method: a gate run with W > 1 workers runs W test processes on one GPU at once. A test that fails there with CUDA's
out-of-memory error (``torch.OutOfMemoryError``, "CUDA out of memory", "CUDA error: out of memory"), or a CUDA
library's failure to allocate its handle or workspace (cuBLAS's ``CUBLAS_STATUS_ALLOC_FAILED`` when calling
``cublasCreate``, and cuDNN's, cuSOLVER's, cuSPARSE's and cuFFT's counterparts), may have run out only because the
other W - 1 processes held theirs: that failure measured the sharing, not the code. So may every later failure of
the same worker process: after its first out-of-memory error a process is no longer a sound place to run CUDA (an
H100 gate run of Liger's TVD tests at 8 workers had two workers fail test after test once each had run out, 8 of
them with "CUDA error: unknown error"; the same tests of the same candidate passed in its H200 gate, 360 of 360).
``kgate.testrun.runner.run`` runs exactly those ids once more with one worker (``sharing_suspects``), and the run
alone decides each of them (``settle``): passed alone is passed, and a failure alone (out of memory too) is the
test's own. When every one of those ids has a memory peak measured by an earlier gate run of the campaign, they
first run together at the worker count those peaks fit (``kgate.testrun.memory_fit``; more than one): a pass there
is a pass, a failure there that is not the sharing is the test's own, and what runs out of memory there too (or
fails on a worker that did) goes alone. Every other failure stands as measured: a failure on a worker before its
first out-of-memory error (a wrong result, a crash, a timeout), or a Triton ``OutOfResources`` (shared memory or
registers, a compile-time fact of the kernel and its config, the same alone), is never blamed on the sharing. Which
worker ran a test and in what order comes from pytest-xdist's reports (``worker`` in the outcomes file); a record
without it gets the out-of-memory failures alone. Each settled test keeps what the shared run saw (``alone``: its
outcome there, the worker count, its worker and the end of its message), and the summary counts them.

Adversarial reading: a candidate that raises an out-of-memory error on purpose gains a run alone, which
then judges it like any serial run; nothing is skipped. Limits: alone means without the other workers of
this run, not without other users of the GPU; a test that fails beside others for a reason other than
memory (a shared file, a port) is not covered; one run alone cannot tell a flaky test from a sound one
(the baseline and fixture reruns, ``kgate.testrun.judge``, do that for every failure left).
"""

from __future__ import annotations

import re
from typing import Any

#: CUDA's out-of-memory errors as torch, the CUDA runtime and CUDA's libraries word them (an H100 fixture run of
#: fla's attnres tests at 14 workers had 3 tests fail with "CUBLAS_STATUS_ALLOC_FAILED when calling
#: `cublasCreate(handle)`" beside 8 torch.OutOfMemoryError; the 8 passed alone, the 3 in both reruns).
#: A Triton OutOfResources is not one.
PATTERN = re.compile(r"\bOutOfMemoryError\b|CUDA out of memory|CUDA error: out of memory"
                     r"|\bCU(?:BLAS|DNN|SOLVER|SPARSE)_STATUS_ALLOC_FAILED\b|\bCUFFT_ALLOC_FAILED\b")
#: characters of the shared run's message kept beside the settled outcome
_KEEP = 400


def sharing_suspects(tests: dict[str, dict[str, Any]], workers: int) -> list[str]:
    """Ids a run of ``workers`` > 1 processes cannot decide: each failure (or error) with CUDA's out-of-memory
    error, and each later failure on the same worker (``tests`` in the order they ended, as the outcomes file
    keeps them)."""
    if workers <= 1:
        return []
    tainted: set[str] = set()
    out = []
    for i, t in tests.items():
        if t.get("outcome") not in ("failed", "error"):
            continue
        worker = t.get("worker")
        if PATTERN.search(t.get("message") or ""):
            out.append(i)
            if worker:
                tainted.add(worker)
        elif worker and worker in tainted:
            out.append(i)
    return sorted(out)


def settle(tests: dict[str, dict[str, Any]], alone: dict[str, dict[str, Any]], ids: list[str],
           workers: int, decided_at: int = 1) -> dict[str, dict[str, Any]]:
    """``tests`` with each of ``ids`` replaced by its outcome in the later run (``alone``: a run alone, or at
    ``decided_at`` workers fitted to the ids' memory peaks, ``kgate.testrun.memory_fit``).

    An id the later run did not finish keeps its shared failure, marked as not finished alone. An id settled
    twice (fitted, then alone) keeps what the first shared run saw under ``before``."""
    out = dict(tests)
    for i in ids:
        shared = tests[i]
        seen = {"workers": workers, "outcome": shared["outcome"],
                "message_end": (shared.get("message") or "")[-_KEEP:], "decided_at_workers": decided_at}
        if shared.get("worker"):
            seen["worker"] = shared["worker"]
        if shared.get("alone"):
            seen["before"] = shared["alone"]
        if i in alone:
            out[i] = {**alone[i], "alone": seen}
        else:
            out[i] = {**shared, "alone": {**seen, "outcome_alone": "not finished"}}
    return out


def settled_ids(tests: dict[str, dict[str, Any]]) -> list[str]:
    """Ids whose outcome came from a run alone."""
    return sorted(i for i, t in tests.items() if "alone" in t)
