"""Compile without running: a process in which every Triton launch compiles its kernel and runs nothing.

Used by the precompile worker (``kgate.measure.precompile``, a measurement worker started with
``--compile-only``), which fills the stack's kernel cache with the kernels a later timed stage will launch
while an untimed stage (candidate_gate's frozen gate run) has the GPU, never beside a timed one.

Method: :func:`install` replaces two entry points of Triton's runtime in this process.
``KernelInterface.__getitem__`` (``kernel[grid](...)``) passes ``warmup=True``, so a JIT function binds and
specialises its arguments exactly as a launch does, compiles on a cache miss (into ``TRITON_CACHE_DIR``) and
returns without launching; a ``Heuristics`` wrapper computes its values as before. ``Autotuner.run``
compiles this process's share of the configs its pruning keeps (``configs[i]`` with ``i % ranks == rank``,
so ``ranks`` processes running the same calls compile every config once between them), each with
``warmup=True``, and benchmarks, picks and records none: no pick is filed in memory or on disk, so the
timed stages still tune every kernel themselves, on an idle GPU. Config ``pre_hook``s are not called
(they prepare buffers for a launch that does not happen). Given compile slots (``install``'s ``slots``, the
folder and count a gate run's workers share: ``kgate.testrun.parallel_compile``), an autotuner's share is
first compiled side by side on threads (``parallel_compile.compile_ahead``, hooks included, since no hook
runs here either way; a config whose launch raises before compiling is left to the loop, which raises as
before). The slots are first come, first served: the worker's compiles and the gate's own compiling ahead
never exceed them together, and neither side goes first (the worker's process runs at a lower CPU
priority, ``kgate.measure.worker``, so it yields cores to the gate's processes beyond the slots).

Limits: nothing is launched, so every kernel's outputs are whatever its allocation held: host code that
branches on kernel results (a ``.item()`` that sizes the next allocation, a data-dependent dispatch)
sees garbage and may compile other variants, fewer, or fail (a failure is the precompile's, recorded,
never a result); a kernel launched outside ``kernel[grid]`` (a direct ``.run``) is not covered; the
process's kernels are compiled, never run, so nothing here says that they run.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from kgate.testrun import parallel_compile

_MARK = "_kgate_compile_only"
#: what this process compiled: kernel name -> number of (config) compiles asked for
TALLY: dict[str, int] = {}


def _chain(obj: Any) -> list[Any]:
    """A launched object and the wrappers under it (autotuner, heuristics) down to the JIT function."""
    out = [obj]
    while not hasattr(obj, "params") and hasattr(obj, "fn") and len(out) < 8:
        obj = obj.fn
        out.append(obj)
    return out


def _name(obj: Any) -> str:
    last = _chain(obj)[-1]
    return str(getattr(last, "__name__", None) or getattr(getattr(last, "fn", None), "__name__", type(last).__name__))


def share(configs: list[Any], rank: int, ranks: int) -> list[Any]:
    """This process's configs: every ``ranks``-th one from ``rank`` (all of them for one rank)."""
    return [c for i, c in enumerate(configs) if i % ranks == rank]


def installed() -> bool:
    """Whether this process's Triton launches compile only."""
    if importlib.util.find_spec("triton") is None:
        return False
    from triton.runtime.jit import KernelInterface

    return getattr(KernelInterface.__getitem__, _MARK, None) is not None


def install(rank: int = 0, ranks: int = 1, slots: tuple[Path, int] | None = None) -> bool:
    """Make every Triton launch in this process a compile without a launch (module docstring); ``rank`` of
    ``ranks`` processes compiling the same calls; ``slots`` (folder, count): an autotuner's share compiled
    side by side within them. Idempotent for the same share and slots. False without Triton."""
    if not 0 <= rank < ranks:
        raise ValueError(f"compile-only rank {rank} of {ranks}")
    if importlib.util.find_spec("triton") is None:
        return False
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction, KernelInterface

    current = getattr(KernelInterface.__getitem__, _MARK, None)
    if current is not None:
        if current != (rank, ranks, slots):
            raise ValueError(f"compile-only already installed as rank {current[0]} of {current[1]}, "
                             f"slots {current[2]}")
        return True
    ahead = slots if parallel_compile.available() else None

    def getitem(self: Any, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            if not any(isinstance(o, Autotuner) for o in _chain(self)):
                TALLY[_name(self)] = TALLY.get(_name(self), 0) + 1
            return self.run(*args, grid=grid, warmup=True, **kwargs)
        return launch

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.nargs = dict(zip(self.arg_names, args))
        configs = self.prune_configs(kwargs) if len(self.configs) > 1 else list(self.configs)
        mine = share(list(configs), rank, ranks)
        # under the interpreter the chain ends in an InterpretedFunction: nothing compiles, nothing to go ahead
        if ahead is not None and isinstance(_chain(self)[-1], JITFunction):
            parallel_compile.compile_ahead(self, mine, args, kwargs, *ahead, hooks_run=False)
        for config in mine:  # after compiling ahead, each one found in the JIT function's cache
            self.fn.run(*args, **{**kwargs, "warmup": True, **config.all_kwargs()})
        TALLY[_name(self)] = TALLY.get(_name(self), 0) + len(mine)
        return None

    setattr(getitem, _MARK, (rank, ranks, slots))
    KernelInterface.__getitem__ = getitem  # type: ignore[method-assign]
    Autotuner.run = run  # type: ignore[method-assign]
    return True
