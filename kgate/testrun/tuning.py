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

Gate runs also keep their picks apart (``install(namespace="gate")``, :func:`_separate`): tuned while up
to 16 test processes share the GPU, they are reused by later gate runs but never by a timed stage, whose
workers tune each shape themselves. Both arms' timed workers share one namespace, so an unchanged kernel
still runs with one pick in both arms.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

from kgate.errors import KgateError

#: the attribute holding the names kgate added to one autotuner's key (set once, on its first run)
ADDED_ATTR = "_kgate_key_added"
_MARK = "_kgate_complete_key"
_NAMESPACE = "_kgate_pick_namespace"


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


def install(namespace: str | None = None) -> bool:
    """Complete every autotuner's key on its first run in this process (autotuners built before the call
    included); with ``namespace``, also file this process's picks on disk apart from every other
    namespace's (:func:`_separate`). Idempotent; a second namespace in one process is refused. False when
    Triton is not installed (nothing to complete)."""
    if importlib.util.find_spec("triton") is None:
        return False
    from triton.runtime.autotuner import Autotuner

    if not getattr(Autotuner.run, _MARK, False):
        original = Autotuner.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            complete(self)
            return original(self, *args, **kwargs)

        setattr(run, _MARK, True)
        Autotuner.run = run  # type: ignore[method-assign]
    if namespace is not None:
        _separate(Autotuner, namespace)
    return True


def _separate(autotuner: Any, namespace: str) -> None:
    """Salt the on-disk key of every pick this process reads or writes with ``namespace``.

    Method: Triton's ``Autotuner.check_disk_cache(tuning_key, configs, bench_fn)`` hashes ``str(tuning_key)``
    into the file's location; the wrapper passes ``(*tuning_key, "kgate:<namespace>")`` and files the pick
    it read back under the unsalted key the caller looks up. Gate runs use the namespace ``gate``: their
    picks are tuned with up to 16 test processes sharing the GPU, so they serve later gate runs (which then
    tune nothing) but never a timed stage, whose workers tune each shape on an otherwise idle GPU."""
    current = getattr(autotuner.check_disk_cache, _NAMESPACE, None)
    if current is not None:
        if current != namespace:
            raise KgateError(f"autotune picks already filed under namespace {current!r}, not {namespace!r}")
        return
    original = autotuner.check_disk_cache
    salt = f"kgate:{namespace}"

    def check_disk_cache(self: Any, tuning_key: Any, configs: Any, bench_fn: Any) -> bool:
        if not tuning_key:  # Triton caches nothing for an empty key: keep it so
            return original(self, tuning_key, configs, bench_fn)
        salted = (*tuning_key, salt)
        used = original(self, salted, configs, bench_fn)
        if salted in self.cache:
            self.cache[tuning_key] = self.cache.pop(salted)
        return used

    setattr(check_disk_cache, _NAMESPACE, namespace)
    autotuner.check_disk_cache = check_disk_cache
