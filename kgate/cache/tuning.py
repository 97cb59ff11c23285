"""Complete autotune keys: a config tuned at one kernel shape is never reused at another.

Method: Triton's autotuner files its picks, in the process and (with ``TRITON_CACHE_AUTOTUNING`` or
``cache_results``) on disk, under the values of the arguments its ``key=`` names plus every tensor
argument's dtype. A target whose key leaves out a constexpr that shapes the compiled kernel reuses a
pick tuned at one value for every other: fla's ``chunk_kda_bwd_kernel_inter`` keys on ``BT`` alone
while ``K`` and ``V`` are constexprs, and on an H200 a pick tuned at K = V <= 128 (every one of its 36
configs fitting) needed 245760 bytes of shared memory at K = V = 256, over the 232448 available:
``OutOfResources`` in fla's own ``test_chunk_varlen[...D256...]``. Within one process that depends on
which shape ran first; with the picks shared on disk (kgate's kernel cache, docs/cache.md) it depends on
which process wrote them, and a warm cache turned a test that passed cold into a deterministic failure
of the next gate.

:func:`install` therefore appends to every autotuner's key the constexpr parameters of its innermost
JIT function that the call passes (not the configs' meta-parameters; a value a Heuristics wrapper
outside the autotuner computes counts, being passed), in every process kgate starts that runs target
code: gate runs (``kgate.testrun.outcomes_plugin``), timing and ncu workers
(``kgate.measure.worker_setup``) and the model harness. Each pick is then tuned at the constexprs it
runs with, as a fresh process running only that shape would tune it; in a process that runs one shape
(a training run) nothing changes. Limits: the specialisation of non-constexpr integers (divisible by
16, equal to 1) is not added (it changes alignment, not tile sizes or shared memory), so a target whose
shape-dependent choices live only in such scalars still shares picks across them; a target that keys
on fewer constexprs on purpose is tuned more often here (one tuning per distinct set: the configs'
benchmark time, no extra compiles, since compiled variants are keyed by every constexpr already).
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

#: the attribute holding the names kgate added to one autotuner's key (set once, on its first run)
ADDED_ATTR = "_kgate_key_added"
_MARK = "_kgate_complete_key"


def _constexprs(tuner: Any) -> list[str]:
    """The constexpr parameters of the innermost function: a JIT function's own parameter list, or (under the
    interpreter, whose functions keep none) the Python function's ``tl.constexpr`` annotations."""
    obj = getattr(tuner, "fn", None)
    for _ in range(8):
        params = getattr(obj, "params", None)
        if params is not None and all(hasattr(p, "is_constexpr") for p in params):
            return [p.name for p in params if p.is_constexpr]
        inner = getattr(obj, "fn", None)
        if inspect.isfunction(inner):
            return [n for n, p in inspect.signature(inner).parameters.items() if "constexpr" in str(p.annotation)]
        if inner is None:
            break
        obj = inner
    return []


def missing_constexprs(tuner: Any) -> tuple[str, ...]:
    """The innermost function's constexpr parameters that ``tuner``'s key leaves out, less the configs'
    meta-parameters (which the autotuner chooses, so never arrive as call arguments)."""
    meta = {name for config in getattr(tuner, "configs", ()) for name in getattr(config, "kwargs", {})}
    keys = set(tuner.keys)
    return tuple(n for n in _constexprs(tuner) if n not in meta and n not in keys)


def complete(tuner: Any) -> tuple[str, ...]:
    """Append the missing constexprs to ``tuner.keys`` once; the names added (recorded on the tuner)."""
    added = getattr(tuner, ADDED_ATTR, None)
    if added is None:
        added = missing_constexprs(tuner)
        tuner.keys = [*tuner.keys, *added]
        setattr(tuner, ADDED_ATTR, added)
    return added


def install() -> bool:
    """Complete every autotuner's key on its first run in this process (autotuners built before the call
    included); idempotent. False when Triton is not installed (nothing to complete)."""
    if importlib.util.find_spec("triton") is None:
        return False
    from triton.runtime.autotuner import Autotuner

    if getattr(Autotuner.run, _MARK, False):
        return True
    original = Autotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        complete(self)
        return original(self, *args, **kwargs)

    setattr(run, _MARK, True)
    Autotuner.run = run  # type: ignore[method-assign]
    return True
