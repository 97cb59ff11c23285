"""An autotuner's configs compiled side by side before it benchmarks them, in gate runs on a GPU.

Why: on a cache miss Triton's autotuner benchmarks its configs one after another, and each config's first
launch compiles it, so a cold gate test spends most of its time compiling one kernel at a time (the
default campaign's cold baseline_tests on an H100: 5575 kernels for 220 picks, 185-698 s a test, the
busiest of 14 workers 938 s while the compile work summed to 8504 s: docs/cache.md). Threads let one test
use the cores that workers which have finished leave idle.

Method: :func:`install` wraps two methods of Triton's ``Autotuner``. ``prune_configs``, which ``run``
calls only when it holds no pick for the call's key, notes the configs it keeps. ``_bench``, called only
when those configs are really benchmarked (a pick read from the disk cache benchmarks none), first
compiles every noted config: each as a launch with ``warmup=True`` (arguments bound and specialised exactly
as the benchmark's launch will be, compiled on a miss, nothing launched) under Triton's
``AsyncCompileMode``, whose executor here is a thread pool; leaving that mode files each compiled kernel in
the JIT function's cache, where the benchmark then finds it. Every compile holds one of ``slots`` lock
files (``fcntl.flock``) in a folder shared by the run's workers, so one gate run never compiles more than
``slots`` configs this way at once (beside each worker's own one-at-a-time compiles); ``slots`` is the
run's usable cores.

What does not change, within the process: which configs are benchmarked, in which order, how, and the
pick; the compiled kernels (same source, options and specialisation, so the same cache entries). Across
processes the compile threads take cores that other workers' tests would use, as their own compiles do.
A tuner with a pre-hook of its own, and a config with a ``pre_hook``, are left to compile at their
benchmark (a hook may change the specialisation: a TMA descriptor's block shape). A config whose compile
fails in a thread is left uncompiled (``ignore_errors``) and fails again at its own benchmark launch,
where the autotuner handles it as it always did; so does a config whose launch raises before compiling
(binding its arguments, a heuristic): it is left to its benchmark launch, which raises the same.

Limits: threads of one process take turns for the Python parts of a compile (code generation from the
kernel's AST), so one process gains less than its thread count (measured on 2 CPU cores compiling for
sm_90 without a GPU: ``scripts/bench_parallel_compile.py``); Triton without ``AsyncCompileMode`` gets
nothing (:func:`install` returns False); under the interpreter nothing is compiled, so it is never
installed there; a launch's user callbacks (a Heuristics wrapper's value functions, a JIT function's
pre-run hooks) run once more per config compiled ahead, which matters only to callbacks with side effects;
a per-test timeout that falls during compiling ahead abandons it (:func:`compile_ahead`).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kgate.errors import KgateError

_MARK = "_kgate_parallel_compile"
#: the configs ``prune_configs`` kept for the benchmark that follows (an attribute of the autotuner)
_PENDING = "_kgate_pending_configs"
#: the slots' order (never the process's shared generator, which a test may have seeded)
_RANDOM = random.Random()
#: what this process did: autotuner misses compiled ahead, configs submitted to compile, configs whose launch
#: raised before compiling (left to their benchmark), compile-aheads cut by an interruption (a per-test
#: timeout), seconds spent (an interrupted one's included)
TALLY: dict[str, float] = {"misses": 0, "configs": 0, "deferred": 0, "abandoned": 0, "wall_s": 0.0}


#: the prefix of the keys a test's outcome entry and a stage row carry a tally under (:func:`record`)
RECORD_PREFIX = "compile_ahead_"


def record(tally: dict[str, float]) -> dict[str, int | float]:
    """A tally (or what it grew by during one test) as record keys: ``compile_ahead_<key>``, counts as
    integers, seconds to the millisecond."""
    return {f"{RECORD_PREFIX}{k}": round(v, 3) if k == "wall_s" else int(v) for k, v in tally.items()}


def since(before: dict[str, float]) -> dict[str, float]:
    """What :data:`TALLY` grew by since ``before`` (a copy taken earlier; missing keys count as 0)."""
    return {k: v - before.get(k, 0) for k, v in TALLY.items()}


def summed(entries: list[dict[str, Any]]) -> dict[str, float]:
    """The tallies recorded in ``entries`` (each with :func:`record`'s keys, or none of them) added up, by
    tally key: a stage's tests, a precompile worker's calls."""
    return {k: sum(e.get(f"{RECORD_PREFIX}{k}", 0) for e in entries) for k in TALLY}


def option(folder: Path | str, slots: int) -> str:
    """The plugin option's value ``DIR:N`` (:func:`parse` reads it back)."""
    return f"{folder}:{slots}"


def parse(value: str, option: str = "--kgate-compile-slots") -> tuple[Path, int]:
    """``DIR:N`` (the plugin option, or ``option``) as (folder, slots); a bad value is one line naming the
    option."""
    folder, _, n = value.rpartition(":")
    try:
        slots = int(n)
    except ValueError:
        slots = 0
    if not folder or slots < 1:
        raise KgateError(f"{option}: {value!r} is not DIR:N with N >= 1")
    return Path(folder), slots


@contextlib.contextmanager
def slot(folder: Path, slots: int) -> Iterator[int]:
    """Hold one of ``slots`` lock files in ``folder`` (shared by processes) until the block ends. Tries each
    once without waiting, in random order; when all are held, waits in the kernel on one picked at random
    (no polling: many threads of many workers wait at once, spread over the slots; a thread may wait on a
    slot while another frees up, which costs throughput, never the bound). Yields its number. The order
    comes from a generator of this module's own, so a test's seeded ``random`` is never advanced."""
    folder.mkdir(parents=True, exist_ok=True)
    order = list(range(slots))
    _RANDOM.shuffle(order)
    held, fd = -1, -1
    for i in order:
        fd = _locked(folder / f"slot-{i}", wait=False)
        if fd >= 0:
            held = i
            break
    if held < 0:
        held = _RANDOM.choice(order)
        fd = _locked(folder / f"slot-{held}", wait=True)
    try:
        yield held
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _locked(path: Path, *, wait: bool) -> int:
    """An open descriptor of ``path`` holding its exclusive lock; -1 when ``wait`` is off and another holds
    it. Any other failure (a filesystem without ``flock``) raises, the descriptor closed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if wait:
            raise
        return -1
    except BaseException:
        os.close(fd)
        raise
    return fd


class SlotExecutor(ThreadPoolExecutor):
    """A thread pool whose every task runs while holding a slot (:func:`slot`)."""

    def __init__(self, threads: int, folder: Path, slots: int) -> None:
        super().__init__(max_workers=threads, thread_name_prefix="kgate-compile")
        self._folder, self._slots = folder, slots

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def held() -> Any:
            with slot(self._folder, self._slots):
                return fn(*args, **kwargs)
        return super().submit(held)


def compile_ahead(tuner: Any, configs: list[Any], args: tuple[Any, ...], meta: dict[str, Any],
                  folder: Path, slots: int, *, hooks_run: bool = True) -> int:
    """Compile ``configs`` of ``tuner`` for the call ``(args, meta)`` on up to ``slots`` threads, without
    launching (module docstring); the number of configs submitted. Nothing when another
    ``AsyncCompileMode`` is active (a target's own), fewer than two configs are given, or the tuner has a
    pre-hook of its own (it may change the arguments' specialisation, e.g. a TMA descriptor's block shape,
    so compiling before it would compile other kernels); configs with a ``pre_hook`` are skipped for the
    same reason. ``hooks_run=False``: the caller's own compiles never run the hooks either
    (``kgate.testrun.compile_only``), so compiling ahead without them compiles the same kernels, and
    neither kind is skipped.

    Interrupted (a per-test timeout raised in this thread, a KeyboardInterrupt): the compiles not started
    are cancelled, running ones are left to finish in their threads without being waited for, the JIT
    functions keep no placeholder of an unfinished compile, and Triton's async mode is off again, so the
    next test of this process compiles as usual; :data:`TALLY` counts it (``abandoned``) with the time it
    took."""
    from triton.runtime import _async_compile

    if len(configs) < 2 or _async_compile.active_mode.get() is not None \
            or (hooks_run and getattr(tuner, "user_defined_pre_hook", False)):
        return 0
    start = time.monotonic()
    call = {k: v for k, v in meta.items() if k != "warmup"}
    pool = SlotExecutor(min(slots, len(configs)), folder, slots)
    mode = _async_compile.AsyncCompileMode(pool, ignore_errors=True)
    submitted, deferred, futures, finished = 0, 0, {}, False
    mode.__enter__()
    try:
        for config in configs:
            if (hooks_run and config.pre_hook is not None) or meta.keys() & config.kwargs.keys():
                continue  # a hook may change what compiles; a conflict the benchmark refuses with its message
            try:
                tuner.fn.run(*args, warmup=True, **call, **config.all_kwargs())
                submitted += 1
            except Exception:  # noqa: BLE001 - deferred, not swallowed: see below
                # raised before any compile (binding, a heuristic): the same call raises it again at this
                # config's benchmark launch, where the autotuner decides what it means, as without this
                deferred += 1
        futures = dict(mode.future_kernels)
        mode.__exit__(None, None, None)  # waits for every compile and files each kernel in its JIT cache
        finished = True
    finally:
        if not finished:
            _abandon(mode, futures or dict(mode.future_kernels))
        if _async_compile.active_mode.get() is mode:
            _async_compile.active_mode.set(None)
        pool.shutdown(wait=finished, cancel_futures=not finished)
        # counted either way: an interrupted compile-ahead's time was spent too
        TALLY["misses"] += 1 if submitted else 0
        TALLY["configs"] += submitted
        TALLY["deferred"] += deferred
        TALLY["abandoned"] += 0 if finished else 1
        TALLY["wall_s"] += time.monotonic() - start
    return submitted


def _abandon(mode: Any, futures: dict[Any, Any]) -> None:
    """Drop what an interrupted compile-ahead left in the JIT functions' caches: Triton 3.9 files a
    placeholder per compile on submission (its ``cleanup_compile`` removes it if it is still there);
    3.6 files nothing before a compile finishes, so there is nothing to drop."""
    for future_kernel in futures.values():
        cleanup = getattr(future_kernel, "cleanup_compile", None)
        if cleanup is not None:
            cleanup(future_kernel)
    mode.raw_futures, mode.future_kernels = [], {}


def available() -> bool:
    """Whether this process's Triton can compile asynchronously (``triton.runtime._async_compile``)."""
    return importlib.util.find_spec("triton") is not None and \
        importlib.util.find_spec("triton.runtime._async_compile") is not None


def installed() -> tuple[Path, int] | None:
    """The (folder, slots) this process's autotuners compile ahead with; None when not installed."""
    if importlib.util.find_spec("triton") is None:
        return None
    from triton.runtime.autotuner import Autotuner

    return getattr(Autotuner._bench, _MARK, None)


def install(folder: Path, slots: int) -> bool:
    """Make every autotuner of this process compile its configs ahead of a benchmark (module docstring).
    Idempotent for the same (folder, slots); another pair is refused. False when Triton cannot compile
    asynchronously (nothing installed)."""
    if slots < 1:
        raise KgateError(f"parallel compile: {slots} slots")
    if not available():
        return False
    from triton.runtime.autotuner import Autotuner

    current = installed()
    if current is not None:
        if current != (folder, slots):
            raise KgateError(f"parallel compile already installed with {current}, not {(folder, slots)}")
        return True
    prune, bench = Autotuner.prune_configs, Autotuner._bench

    def prune_configs(self: Any, kwargs: dict[str, Any]) -> Any:
        kept = prune(self, kwargs)
        setattr(self, _PENDING, list(kept))
        return kept

    def _bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
        pending = getattr(self, _PENDING, None)
        if pending:
            setattr(self, _PENDING, None)
            compile_ahead(self, pending, args, meta, folder, slots)
        return bench(self, *args, config=config, **meta)

    setattr(_bench, _MARK, (folder, slots))
    Autotuner.prune_configs = prune_configs  # type: ignore[method-assign]
    Autotuner._bench = _bench  # type: ignore[method-assign]
    return True
