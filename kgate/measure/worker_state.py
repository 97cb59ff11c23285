"""What one arm's worker process holds between requests, and the failure that is the target's own.

:class:`State` is the worker's mutable state (torch, the device, the callable, the prepared rows, the
census gathered during warm-up, the host-ahead holds); :class:`RowState` one prepared row.
:class:`ArmTargetError` marks a failure of the arm's own code (answered with kind ``target``).
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from typing import Any

from kgate.errors import KgateError
from kgate.measure.host_ahead import Hold


class ArmTargetError(KgateError):
    """The arm's own code failed in the worker process: importing the target callable (or running the
    campaign's CPU setup), or calling the op. For a candidate that is a measured failure: the protocol
    answers it with kind ``target``, any other exception with kind ``internal``."""


@dataclass
class RowState:
    name: str
    values: dict[str, Any]
    seed: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    leaves: list[Any]
    grads: list[Any] | None = None
    grad_hashes: dict[str, str] | None = None
    #: the row's input tensors by path name, their fingerprints after preparing, and (``writes_inputs``) pristine
    #: copies they are restored from before every call
    tensors: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, list[int]] = field(default_factory=dict)
    pristine: dict[str, Any] | None = None


@dataclass
class State:
    torch: Any = None
    cuda: bool = False
    device: Any = None
    dtype: Any = None
    fn: Any = None
    package: str = ""
    make_inputs: Any = None
    seed: int = 0
    differentiate: tuple[int, ...] = ()
    flush_buf: Any = None
    flush_bytes: int = 0
    rows: dict[str, RowState] = field(default_factory=dict)
    launches: list[tuple[str, float]] | None = None
    autotune_bucket: dict[str, list[str]] | None = None
    row_picks: dict[str, dict[str, dict[str, list[str]]]] = field(default_factory=dict)
    compiled_by_row: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    launched_by_row: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    spin_cycles_per_ms: float | None = None
    holds: dict[str, Hold] = field(default_factory=dict)
    syncs: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes_inputs: bool = False


@contextlib.contextmanager
def no_gc() -> Any:
    """Keep Python's cyclic garbage collector off for a block of calls; callers collect between
    calls (``Worker._prep``), so no collection lands inside a call, cyclic garbage of one call is
    freed before the next, and peak memory is reproducible."""
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def callable_(x: Any) -> bool:
    return callable(x)

