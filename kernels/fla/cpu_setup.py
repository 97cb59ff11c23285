"""CPU setup for fla (flash-linear-attention) under kgate's interpreter shim.

Run by ``-p kgate.testrun.interp_plugin --kgate-setup <this file>`` after
``kgate.testrun.interp.install()`` and before any conftest or test module is imported.
The plugin executes the file, then calls ``setup()`` and records its result.

Why: with no GPU driver, fla detects ``device_platform == 'cpu'``, but for
torch >= 2.4 its device module then rewrites ``device`` to ``'cuda'`` and
``device_torch_lib`` to ``torch.cuda``. Tests that allocate with
``device=fla.utils.device`` would ask for CUDA tensors, and upstream's
``tests/conftest.py`` calls ``device_torch_lib.synchronize()`` after each test.
``setup()`` points both names back at the CPU in every already-imported
``fla.utils`` module that defines them (``fla.utils`` plus ``hardware`` in the
0.6.0 wheels, ``_device`` in the git tree), so later ``from fla.utils import
device`` sees ``'cpu'``. The ops themselves never read these names, except
through ``custom_device_ctx(index)``, which fla's ``input_guard`` enters around
every op: some fla trees (late 2025) define it as
``device_torch_lib.device(index)``, which ``torch.cpu`` lacks, so where a
module defines it, it becomes a no-op context (the CPU has one device).

Some fla trees (2025) alias Triton builtins at import (``fla/ops/utils/op.py``:
``exp = tl.exp``, ``exp2 = tl.math.exp2``, ``log``, ``log2``, ``gather``), and
every kernel calls them through the alias. Triton's interpreter makes builtins
callable by patching the attributes of ``triton.language`` while a kernel runs,
so an alias taken at import still holds the unpatched builtin ("Did you forget
to add @triton.jit ?"). ``setup()`` re-binds every global of an imported fla
module that *is* one of those builtin objects to a function that looks the
builtin up on ``triton.language`` at call time (the interpreter's version): the
computation is the builtin's own, only the lookup moves. Trees that define these
as ``@triton.jit`` wrappers (fla-core 0.6.0) have no such global: nothing
changes. Limit: a module imported after ``setup()`` keeps its aliases (fla's
``__init__`` imports its ops, so ``import fla.utils`` here loads them first).

It also sets ``torch.set_num_threads(1)``: the oracle's float64 reference
works on tiny tensors, and on a loaded 2-core machine PyTorch's OpenMP
threads spin against the interpreter and other jobs (measured: one
T=128/D=64 reference 0.2 s with 1 thread, 1.3-7.4 s with 2).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import torch
import triton.language as tl

#: Triton builtins fla trees alias at import, by their home module and name
_ALIASED = ((tl, "exp"), (tl.math, "exp2"), (tl, "log"), (tl, "log2"), (tl, "gather"))


def _at_call_time(module: object, name: str) -> Callable[..., Any]:
    """A function calling ``module.<name>`` as bound when it is called (the interpreter's patched builtin)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(module, name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    return call


def _rebind_aliases() -> dict[str, list[str]]:
    """Every imported fla module's globals that are aliased Triton builtins, re-bound (module docstring)."""
    builtins = {id(fn): (fn, module, name) for module, name in _ALIASED
                if (fn := getattr(module, name, None)) is not None}
    rebound: dict[str, list[str]] = {}
    for modname in sorted(sys.modules):
        module = sys.modules[modname]
        if module is None or not (modname == "fla" or modname.startswith("fla.")):
            continue
        for attr, value in list(vars(module).items()):
            hit = builtins.get(id(value))
            if hit is not None and hit[0] is value:
                setattr(module, attr, _at_call_time(hit[1], hit[2]))
                rebound.setdefault(modname, []).append(attr)
    return rebound


def _no_device_ctx(index: object = None) -> contextlib.AbstractContextManager[None]:
    """The CPU's device context: there is one device, nothing to enter."""
    return contextlib.nullcontext()


def setup() -> dict[str, object]:
    """Point fla's device names at the CPU; return what was changed."""
    import fla.utils

    platform = getattr(fla.utils, "device_platform", None)
    if platform != "cpu":
        msg = (f"fla detected device_platform={platform!r}; this CPU setup is only for runs without a GPU "
               "driver (TRITON_INTERPRET=1 on a CPU machine)")
        raise RuntimeError(msg)
    patched = {}
    for name in sorted(sys.modules):
        module = sys.modules[name]
        if (name == "fla.utils" or name.startswith("fla.utils.")) and hasattr(module, "device_torch_lib"):
            patched[name] = {"device": getattr(module, "device", None),
                             "device_torch_lib": getattr(module.device_torch_lib, "__name__", None)}
            module.device = "cpu"
            module.device_torch_lib = torch.cpu
            if hasattr(module, "custom_device_ctx"):
                module.custom_device_ctx = _no_device_ctx
                patched[name]["custom_device_ctx"] = "a no-op context"
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict[str, object] = {"device_platform": platform, "device": "cpu", "device_torch_lib": "torch.cpu",
                              "before": patched, "torch_threads": {"before": threads_before, "after": 1}}
    rebound = _rebind_aliases()
    if rebound:
        out["rebound_triton_aliases"] = rebound
    return out
