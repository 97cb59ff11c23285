"""More gaps of Triton's interpreter that real kernels hit, and how a failure of the interpreter itself is told apart.

Patches (installed by :func:`kgate.testrun.interp.install`, recorded in its ``fixes``):

``float_scalar_args``
    A Python ``float`` argument of a compiled kernel is an fp32 scalar tensor, so kernels call
    ``eps.to(tl.float32)``; the interpreter hands the kernel the Python float itself
    (``AttributeError: 'float' object has no attribute 'to'``). The interpreter's argument
    conversion is taught to wrap a float as an fp32 scalar, as it already does for ints.
``libdevice_math``
    Under the interpreter ``triton.language.extra.libdevice`` holds bodiless stubs that return
    None (``TypeError: cannot convert None ... to tensor`` at the next use). The common
    element-wise ones (:data:`LIBDEVICE`) are replaced by NumPy versions that compute in the
    operand's precision (bf16 operands in fp32, rounded back to nearest even), before any target
    module imports them by name.
``bf16_constant``
    Triton 3.8's interpreter builder has no ``get_bf16`` (a bf16 constant, e.g. ``tl.full(...,
    tl.bfloat16)``); it is added where missing (3.9 has its own).

Classification: :func:`interpreter_failure` says whether an exception comes from the interpreter
itself (Triton's ``InterpreterError`` anywhere in its chain, or a ``NotImplementedError`` raised
inside Triton's interpreter module): a test or a timed call that fails that way "cannot run on
CPU", which kgate records as ``unavailable``, never as the candidate's or the baseline's failure.
Limits: a kernel bug that the interpreter reports through the same error (an out-of-range shape, a
bad broadcast) is classified the same way; on CPU that is never a GO either way, and the fixture
and candidate runs must still agree test by test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: libdevice functions given NumPy bodies: name -> (numpy function, number of operands)
LIBDEVICE: dict[str, tuple[str, int]] = {
    "rsqrt": ("rsqrt", 1), "sqrt": ("sqrt", 1), "sqrt_rn": ("sqrt", 1), "exp": ("exp", 1), "exp2": ("exp2", 1),
    "exp10": ("exp10", 1), "log": ("log", 1), "log2": ("log2", 1), "log10": ("log10", 1), "log1p": ("log1p", 1),
    "expm1": ("expm1", 1), "tanh": ("tanh", 1), "sinh": ("sinh", 1), "cosh": ("cosh", 1), "sin": ("sin", 1),
    "cos": ("cos", 1), "tan": ("tan", 1), "asin": ("arcsin", 1), "acos": ("arccos", 1), "atan": ("arctan", 1),
    "erf": ("erf", 1), "floor": ("floor", 1), "ceil": ("ceil", 1), "trunc": ("trunc", 1), "rint": ("rint", 1),
    "fabs": ("fabs", 1), "fast_expf": ("exp", 1), "fast_logf": ("log", 1), "pow": ("power", 2),
    "fast_powf": ("power", 2), "div_rn": ("divide", 2), "fmod": ("fmod", 2), "fmax": ("fmax", 2),
    "fmin": ("fmin", 2), "atan2": ("arctan2", 2), "hypot": ("hypot", 2),
}
FIXES = ("float_scalar_args", "libdevice_math", "bf16_constant")
#: the start of a test report's reason when kgate's interpreter plugin turned an interpreter failure into a skip;
#: the outcome recorder (kgate.testrun.outcomes_plugin) records such a test as ``unavailable``
UNAVAILABLE = "kgate: cannot run on CPU:"


def _numpy(name: str) -> Callable[..., Any]:
    import numpy as np

    if name == "rsqrt":
        return lambda x: np.float32(1) / np.sqrt(x) if x.dtype == np.float32 else 1 / np.sqrt(x)
    if name == "exp10":
        return lambda x: np.power(x.dtype.type(10), x)
    if name == "erf":
        vec = np.vectorize(math.erf, otypes=[np.float64])
        return lambda x: vec(x).astype(x.dtype)
    return getattr(np, name)


def install(decode: Callable[[Any], Any], encode: Callable[[Any], Any]) -> None:
    """Apply the three patches; ``decode``/``encode`` convert bf16 bit patterns (kgate.testrun.interp's)."""
    _patch_float_args()
    _patch_libdevice(decode, encode)
    _patch_bf16_constant(encode)


def _patch_float_args() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._implicit_cvt

    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)

    interpreter._implicit_cvt = implicit_cvt


def _patch_libdevice(decode: Callable[[Any], Any], encode: Callable[[Any], Any]) -> None:
    import numpy as np
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
    from triton.runtime import interpreter

    handle_type = interpreter.TensorHandle

    def make(name: str, fn: Callable[..., Any], arity: int) -> Callable[..., Any]:
        def call(*args: Any, **_kwargs: Any) -> Any:
            if len(args) != arity:
                raise TypeError(f"libdevice.{name} takes {arity} operand(s), got {len(args)}")
            first = next((a for a in args if isinstance(a, tl.tensor)), None)
            if first is None:
                raise TypeError(f"libdevice.{name}: no tensor operand")
            bf16 = first.dtype == tl.bfloat16
            values = []
            for a in args:
                if isinstance(a, tl.tensor):
                    values.append(decode(a.handle.data) if a.dtype == tl.bfloat16 else a.handle.data)
                else:
                    values.append(np.asarray(a, dtype=np.float32 if bf16 else first.handle.data.dtype))
            with np.errstate(all="ignore"):
                out = np.asarray(fn(*values))
            if bf16:
                return tl.tensor(handle_type(encode(out.astype(np.float32)), tl.bfloat16), first.type)
            return tl.tensor(handle_type(out.astype(first.handle.data.dtype), first.dtype), first.type)

        call.__name__ = name
        call.__doc__ = f"libdevice.{name} under kgate's interpreter shim (NumPy {fn!r})"
        return call

    for name, (np_name, arity) in LIBDEVICE.items():
        if hasattr(libdevice, name):
            setattr(libdevice, name, make(name, _numpy(np_name), arity))


def _patch_bf16_constant(encode: Callable[[Any], Any]) -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if hasattr(builder, "get_bf16"):
        return

    def get_bf16(self: Any, value: float) -> Any:
        return interpreter.TensorHandle(encode(np.array([value], dtype=np.float32)), tl.bfloat16)

    builder.get_bf16 = get_bf16


def interpreter_failure(exc: BaseException | None) -> str | None:
    """One line naming the interpreter's own failure in ``exc``'s chain, or None when it is not one."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        kind = type(exc)
        if kind.__name__ == "InterpreterError" and kind.__module__.startswith("triton"):
            return f"{kind.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        if isinstance(exc, NotImplementedError) and _raised_in_triton_interpreter(exc):
            return f"NotImplementedError: {exc}"[:300]
        exc = exc.__cause__ or exc.__context__
    return None


def _raised_in_triton_interpreter(exc: BaseException) -> bool:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and "triton/runtime/interpreter" in last.tb_frame.f_code.co_filename.replace("\\", "/")
