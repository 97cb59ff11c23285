"""Numeric settings of a running process, read and watched at run time: torch's backend flags, Triton's
language knobs and the campaign's recorded environment variables.

A candidate's source is censused for numeric settings (``kgate.source.numerics``), but a setting reached
at run time (a variable set inside each call and restored after, a torch flag set through ``setattr`` and
``getattr`` of names built from strings) leaves no text to find. This module observes the process instead;
the gate test processes (``kgate.testrun.numerics_plugin``) and the timing workers
(``kgate.measure.worker_numerics``) use it, in both arms.

Method
------
* :func:`state` reads every setting through its getter: the torch flags of :data:`TORCH_FLAGS` (those that
  exist in the running torch), ``torch.get_default_dtype()`` and Triton's ``knobs.language`` (fp32 default,
  fp fusion). Values are strings (``unset`` for None).
* :class:`Watch` notes every *change* of a setting inside a *window* (a test's setup, call or teardown; one
  call of the op in a timing worker), even one undone before the window ends:

  - the environment: an audit hook (``sys.addaudithook``, which nothing can remove) sees every ``os.putenv``
    and ``os.unsetenv``, the route ``os.environ`` takes; a variable matching the watched globs that gets a
    value other than the one it had is noted with that value;
  - torch: the setters of ``torch._C`` that torch's own setters look up when called (``torch.backends.*``'s
    attributes, ``torch.set_float32_matmul_precision``, ``torch.use_deterministic_algorithms``, ...) and the
    setters the ``torch.backends`` property descriptors captured at import are wrapped; after each call the
    flags are read again and each that differs from the window's start is noted;
  - at the window's end the state is read once more: a change made without any of these routes is seen
    if it is still in place.

  A window's result maps each changed setting to ``{"start", "during", "end"}`` (the values it took inside
  the window other than its start value, in order of first appearance). A test window reads its start;
  a timing worker's window opens without reading anything (its start is the previous window's end), so a
  setting changed between two calls is seen by the next one, and a call costs a few microseconds more.

Limits: a change made through a setter captured before the watch was installed, or from C code, is seen
only when it is still in place at the window's end; ``ctypes`` calls of ``setenv`` are not audited; values
that are equal as strings are one value. Installing is once per process and cannot be undone.
"""

from __future__ import annotations

import fnmatch
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

UNSET = "unset"

#: reported name -> the ``torch._C`` getter that reads it (flags a torch build lacks are left out)
TORCH_FLAGS: dict[str, str] = {
    "torch.backends.cuda.matmul.allow_tf32": "_get_cublas_allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
        "_get_cublas_allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
        "_get_cublas_allow_bf16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_fp16_accumulation": "_get_cublas_allow_fp16_accumulation",
    "torch.backends.cuda.preferred_blas_library": "_get_blas_preferred_backend",
    "torch.backends.cuda.sm_carveout": "_get_sm_carveout_experimental",
    "torch.backends.cuda.math_sdp_allow_fp16_bf16_reduction": "_get_math_sdp_allow_fp16_bf16_reduction",
    "torch.backends.cuda.flash_sdp_enabled": "_get_flash_sdp_enabled",
    "torch.backends.cuda.mem_efficient_sdp_enabled": "_get_mem_efficient_sdp_enabled",
    "torch.backends.cuda.math_sdp_enabled": "_get_math_sdp_enabled",
    "torch.backends.cuda.cudnn_sdp_enabled": "_get_cudnn_sdp_enabled",
    "torch.backends.cudnn.enabled": "_get_cudnn_enabled",
    "torch.backends.cudnn.allow_tf32": "_get_cudnn_allow_tf32",
    "torch.backends.cudnn.deterministic": "_get_cudnn_deterministic",
    "torch.backends.cudnn.benchmark": "_get_cudnn_benchmark",
    "torch.backends.mkldnn.enabled": "_get_mkldnn_enabled",
    "torch.backends.mkldnn.deterministic": "_get_mkldnn_deterministic",
    "torch.backends.mkldnn.allow_tf32": "_get_onednn_allow_tf32",
    "torch.backends.cpu.allow_fp16_reduced_precision_reduction": "_get_cpu_allow_fp16_reduced_precision_reduction",
    "torch.get_float32_matmul_precision()": "_get_float32_matmul_precision",
    "torch.are_deterministic_algorithms_enabled()": "_get_deterministic_algorithms",
    "torch.is_deterministic_algorithms_warn_only_enabled()": "_get_deterministic_algorithms_warn_only",
    "torch.utils.deterministic.fill_uninitialized_memory": "_get_deterministic_fill_uninitialized_memory",
}
#: (backend, op) pairs of torch's per-backend fp32 precision (``torch.backends.<backend>.<op>.fp32_precision``)
FP32_PRECISION = (("generic", "all"), ("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn"),
                  ("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn"))
#: ``torch._C`` setters that change a numeric setting (wrapped where they exist)
TORCH_SETTERS = tuple(sorted({g.replace("_get_", "_set_", 1) for g in TORCH_FLAGS.values()}
                             | {"_set_fp32_precision_setter", "_set_default_dtype", "_set_sdp_use_flash",
                                "_set_sdp_use_mem_efficient", "_set_sdp_use_math", "_set_sdp_use_cudnn"}))
TRITON_KNOBS = ("fp32_default", "default_fp_fusion", "force_disable_fp_fusion")


def _text(value: Any) -> str:
    return UNSET if value is None else str(value)


def _readers() -> list[tuple[str, Callable[[], Any]]]:
    """(name, getter) for every setting the imported torch and Triton have (none when neither is imported)."""
    out: list[tuple[str, Callable[[], Any]]] = []
    torch = sys.modules.get("torch")
    C = getattr(torch, "_C", None) if torch is not None else None
    if C is not None:
        for name, getter in TORCH_FLAGS.items():
            fn = getattr(C, getter, None)
            if callable(fn) and _readable(fn):
                out.append((name, fn))
        fp32 = getattr(C, "_get_fp32_precision_getter", None)
        if callable(fp32):
            for backend, op in FP32_PRECISION:
                if _readable(lambda b=backend, o=op: fp32(b, o)):
                    out.append((f"torch.backends.{backend}.{op}.fp32_precision",
                                lambda b=backend, o=op: fp32(b, o)))
        if callable(getattr(torch, "get_default_dtype", None)):
            out.append(("torch.get_default_dtype()", torch.get_default_dtype))
    triton = sys.modules.get("triton")
    language = getattr(getattr(triton, "knobs", None), "language", None) if triton is not None else None
    if language is not None:
        for knob in TRITON_KNOBS:
            if hasattr(type(language), knob):
                out.append((f"triton.knobs.language.{knob}", lambda k=knob: getattr(language, k)))
    return out


def _readable(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001 - a getter this torch build cannot answer (no CUDA, no cuDNN) is left out
        return False
    return True


def state() -> dict[str, str]:
    """Every numeric setting of torch and Triton as they stand now (empty when neither is imported)."""
    return {name: _text(fn()) for name, fn in _readers()}


class Watch:
    """Changes of numeric settings inside windows (module docstring); one per process (:func:`install`)."""

    def __init__(self, env_patterns: tuple[str, ...]) -> None:
        self.env_patterns = env_patterns
        self._lock = threading.Lock()
        self._active = False
        self._readers: list[tuple[str, Callable[[], Any]]] = []
        self._torch_done = False
        self._env = {k: v for k, v in os.environ.items() if self._watched(k)}
        self._last: dict[str, str] = {}
        self._start: dict[str, str] = {}
        self._during: dict[str, list[str]] = {}

    def _watched(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.env_patterns)

    # -- installation ------------------------------------------------------------------------------------
    def hook_torch(self) -> None:
        """Wrap torch's setters and start reading torch's and Triton's settings, once both can be read (a
        no-op until torch is imported; called at every window's start until it took effect)."""
        if self._torch_done or "torch" not in sys.modules:
            return
        torch = sys.modules["torch"]
        C = getattr(torch, "_C", None)
        if C is None:
            return
        self._torch_done = True
        for name in TORCH_SETTERS:
            fn = getattr(C, name, None)
            if callable(fn) and not getattr(fn, "_kgate_watched", False):
                setattr(C, name, self._wrap(fn))
        for mod_name, mod in list(sys.modules.items()):
            if not mod_name.startswith("torch.backends") or mod is None:
                continue
            for prop in vars(type(mod)).values():
                setter = getattr(prop, "setter", None)
                if type(prop).__name__ == "ContextProp" and callable(setter) \
                        and not getattr(setter, "_kgate_watched", False):
                    prop.setter = self._wrap(setter)
        self._readers = _readers()
        if self._last:
            self._last = {**self._last, **self._read()}

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        def setter(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if watch._active:
                watch._note(watch._read())
            return out

        setter._kgate_watched = True  # type: ignore[attr-defined]
        setter.__name__ = getattr(fn, "__name__", "setter")
        setter.__doc__ = getattr(fn, "__doc__", None)
        return setter

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """The audit hook: ``os.putenv`` / ``os.unsetenv`` of a watched variable."""
        if event != "os.putenv" and event != "os.unsetenv":
            return
        name = os.fsdecode(args[0]) if isinstance(args[0], (bytes, str)) else str(args[0])
        if not self._watched(name):
            return
        value = os.fsdecode(args[1]) if event == "os.putenv" else None
        with self._lock:
            env = dict(self._env)  # replaced, never changed in place: a window's start may be this dict
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
            self._env = env
        if self._active:
            self._note({name: _text(value)})

    # -- windows -----------------------------------------------------------------------------------------
    def _read(self) -> dict[str, str]:
        return {name: _text(fn()) for name, fn in self._readers}

    def _current(self) -> dict[str, str]:
        now = self._read()
        with self._lock:
            now.update(self._env)
        return now

    def _note(self, values: dict[str, str]) -> None:
        with self._lock:
            for name, value in values.items():
                if value != self._start.get(name, UNSET):
                    seen = self._during.setdefault(name, [])
                    if value not in seen:
                        seen.append(value)

    def begin(self, fresh: bool = False) -> None:
        """Open a window. Its start is the state read now (``fresh``: what the gate's test processes use), or
        else the state at the previous window's end (a timing worker: nothing is read as a call starts, and a
        change made between two calls is seen by the next)."""
        if not self._torch_done:
            self.hook_torch()
        start = self._current() if fresh or not self._last else self._last
        with self._lock:
            self._start = start
            self._during = {}
        self._active = True

    def end(self) -> dict[str, dict[str, Any]]:
        """Close the window: ``{setting: {"start", "during", "end"}}`` for every setting that changed in it."""
        self._active = False
        now = self._current()
        with self._lock:
            start, during = self._start, self._during
            self._last = now
        if not during and now == start:
            return {}
        names = set(during) | {n for n in set(start) | set(now) if start.get(n, UNSET) != now.get(n, UNSET)}
        return {n: {"start": start.get(n, UNSET), "during": during.get(n, []), "end": now.get(n, UNSET)}
                for n in sorted(names)}


_WATCH: Watch | None = None


def install(env_patterns: tuple[str, ...] | list[str]) -> Watch:
    """The process's watch (created and its audit hook added on the first call; later calls return it)."""
    global _WATCH
    if _WATCH is None:
        _WATCH = Watch(tuple(env_patterns))
        sys.addaudithook(_WATCH.audit)
        _WATCH.hook_torch()
    return _WATCH


def installed() -> Watch | None:
    return _WATCH


def describe(changes: dict[str, dict[str, Any]]) -> str:
    """One clause per changed setting: ``X 'a' -> 'b' (restored)`` or ``X 'a' -> 'b' (kept)``."""
    parts = []
    for name, c in changes.items():
        values = [v for v in [*c["during"], c["end"]] if v != c["start"]]
        seen = list(dict.fromkeys(values))
        kept = "kept" if c["end"] != c["start"] else "restored after"
        parts.append(f"{name} {c['start']!r} -> {' -> '.join(repr(v) for v in seen)} ({kept})")
    return "; ".join(parts)
