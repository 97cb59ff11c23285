"""Run real Triton kernels on a CPU through Triton's interpreter.

Usage::

    from kgate.testrun import interp

    record = interp.install()          # before anything imports triton
    import my_package.ops              # its @triton.jit kernels now run on CPU

or, under pytest, ``python -m pytest -p kgate.testrun.interp_plugin ...`` (see
``kgate.testrun.interp_plugin``), which calls ``install()`` before any conftest or test
module is imported.

Method
------
``install()`` sets ``TRITON_INTERPRET=1`` before Triton is imported, so every
``@triton.jit`` function becomes an interpreted one that runs its Python body
with NumPy arrays. Stock Triton (3.7, 3.8, 3.9) cannot run production kernels
that way without a GPU; ``install()`` patches these gaps in Triton's own
classes (and those of :mod:`kgate.testrun.interp_gaps`: float scalar arguments,
libdevice math, bf16 constants), and nothing else:

``autotune_single_config``
    ``Autotuner.run`` benchmarks every config through the active driver's
    benchmarker, which does not exist without a GPU ("0 active drivers").
    The patched ``Autotuner.prune_configs`` still applies the kernel's own
    ``early_config_prune`` (so the chosen config is one the kernel accepts for
    these arguments) and then keeps exactly one config, chosen by the policy:
    ``first`` (declaration order) or ``largest`` (the biggest product of the
    integer meta-parameters whose names start with ``B``, i.e. block sizes;
    ties go to the first). An autotuner with one config never benchmarks.
    Every autotuner is also given a do-nothing benchmarker and no on-disk
    tuning cache, so no path can reach a device timer. ``perf_model`` ranking
    is skipped: it only orders configs by predicted GPU speed.
``loop_var_tensor``
    In compiled Triton the variable of ``for i in range(n)`` and
    ``for i in tl.range(n)`` is a tensor, so kernels call ``i.to(tl.int64)``;
    the interpreter binds a Python ``int`` and fails. The interpreter's AST
    rewriter is taught to re-bind such a loop variable to a Triton scalar
    tensor at the top of the loop body. ``tl.static_range`` loops keep Python
    ints, as in compiled Triton (their variables are constexprs).
``bf16_decode``
    The interpreter stores bfloat16 as raw ``uint16`` bit patterns and lets
    NumPy compute on the bits, so bf16 ``+``, ``*``, ``tl.dot``, ``tl.sum``,
    ``tl.max``, negation and math functions return garbage, and fp32 to bf16
    casts truncate where a GPU rounds to nearest even. Element-wise ops, fma,
    dot, casts and the built-in reductions and scans are wrapped: bf16 operands
    are decoded to fp32 (exact), the original op runs in fp32, and a bf16
    result is re-encoded with round-to-nearest-even (any NaN becomes the
    quiet NaN 0x7FC0; payloads are not kept).

``install()`` returns a provenance dict; put it in the stage record::

    {"interpreter": True, "triton": "3.9.0", "numpy": "2.4.6",
     "fixes": ["autotune_single_config", "loop_var_tensor", "bf16_decode"],
     "autotune_policy": "first"}

Limits
------
- The interpreter is not a GPU. It checks numerical semantics only: shared
  memory limits, register pressure, races between programs, layouts, TF32,
  autotune choices and real speed are invisible. Programs run one at a time.
- A bf16 reduction or scan with a built-in combine function (sum, max, min,
  argmax, argmin, cumsum, cumprod) is computed in fp32 and rounded once, like
  PyTorch; a GPU that combines in bf16 may differ in the last bit. Custom
  combine functions keep the interpreter's element-by-element path, where
  each bf16 step rounds.
- Atomics, ``tl.dot_scaled`` and fp8 paths on bf16 data are not corrected.
- A ``range`` loop variable becomes int32 (int64 only past 2**31), whatever
  the type of the bounds; a GPU would use the bounds' type.
- Only Triton >=3.7,<3.10 is accepted (3.8.0 and 3.9.0 pass kgate's tests):
  outside that range the patched internals differ (3.5 fails the loop rewrite
  with NumPy >= 2.3, 3.3 fails at ``@triton.autotune`` decoration time, 3.6
  was not tried).
- The patches mutate Triton's classes for the life of the process and cannot
  be undone; a second ``install()`` returns the same record.
"""

from __future__ import annotations

import ast
import importlib.metadata
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kgate.errors import KgateError
from kgate.testrun import interp_gaps

AUTOTUNE_POLICIES: tuple[str, ...] = ("first", "largest")
FIXES: tuple[str, ...] = ("autotune_single_config", "loop_var_tensor", "bf16_decode")
# half-open range of (major, minor) Triton versions whose interpreter internals were tested
TRITON_TESTED = ((3, 7), (3, 10))
TRITON_TESTED_TEXT = ">=3.7,<3.10"

_record: dict[str, Any] | None = None
_policy: str = "first"


def install(autotune_policy: str = "first") -> dict[str, Any]:
    """Make Triton's interpreter run real kernels on CPU; return a provenance dict.

    Idempotent: a second call with the same policy returns the same record.

    Args:
        autotune_policy (str):
            Which config an autotuned kernel keeps: ``"first"`` (declaration
            order, after the kernel's own pruning) or ``"largest"`` (the
            biggest product of block sizes).
            Default: ``"first"``.

    Returns:
        dict: ``interpreter``, ``triton``, ``numpy``, ``fixes`` and
        ``autotune_policy``, all JSON-serialisable.

    Raises:
        KgateError: the policy is unknown, differs from an earlier install,
            Triton is missing or outside the tested range, or Triton was
            already imported without the interpreter.
    """
    global _record, _policy
    if autotune_policy not in AUTOTUNE_POLICIES:
        msg = f"autotune_policy must be one of {', '.join(AUTOTUNE_POLICIES)}, got {autotune_policy!r}"
        raise KgateError(msg)
    if _record is not None:
        if _record["autotune_policy"] != autotune_policy:
            msg = (f"the interpreter shim is already installed with autotune_policy={_record['autotune_policy']!r}; "
                   f"it cannot switch to {autotune_policy!r} in the same process")
            raise KgateError(msg)
        return _copy(_record)

    version = _triton_version()
    if not (TRITON_TESTED[0] <= _major_minor(version) < TRITON_TESTED[1]):
        msg = (f"triton {version} is outside the range the interpreter shim was tested with "
               f"({TRITON_TESTED_TEXT}); install a tested version")
        raise KgateError(msg)
    if "triton" in sys.modules:
        _require_interpreted_import()
    else:
        # jit decorators, including Triton's own standard library, pick the
        # interpreter at decoration time, so this must precede `import triton`
        os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np

    _require_interpreted_import()
    _policy = autotune_policy
    _patch_autotuner()
    _patch_loop_variables()
    _patch_bf16()
    interp_gaps.install(bf16_decode, bf16_encode)
    _record = {
        "interpreter": True,
        "triton": version,
        "numpy": np.__version__,
        "fixes": list(FIXES) + list(interp_gaps.FIXES),
        "autotune_policy": autotune_policy,
    }
    return _copy(_record)


def installed() -> dict[str, Any] | None:
    """Return the provenance dict of the install in this process, or None."""
    return None if _record is None else _copy(_record)


def choose_config(configs: Sequence[Any], policy: str) -> Any:
    """Pick the one autotune config a policy keeps.

    Args:
        configs (Sequence[triton.Config]):
            The candidate configs, in declaration order; not empty.
        policy (str):
            ``"first"`` or ``"largest"``.

    Returns:
        triton.Config: the kept config.
    """
    if not configs:
        msg = "no autotune config to choose from"
        raise KgateError(msg)
    if policy == "first":
        return configs[0]
    return max(configs, key=_block_volume)


def _block_volume(config: Any) -> int:
    sizes = [v for k, v in config.kwargs.items() if k.startswith("B") and isinstance(v, int) and not isinstance(v, bool)]
    return math.prod(sizes) if sizes else 1


def _copy(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "fixes": list(record["fixes"])}


def _triton_version() -> str:
    module = sys.modules.get("triton")
    if module is not None:
        return str(module.__version__)
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        msg = "triton is not installed; the interpreter shim needs triton " + TRITON_TESTED_TEXT
        raise KgateError(msg) from None


def _major_minor(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        msg = f"cannot parse the triton version {version!r}"
        raise KgateError(msg)
    return int(match.group(1)), int(match.group(2))


def _require_interpreted_import() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    # Triton's own @jit library functions record the mode they were decorated in
    if not isinstance(tl.standard.cdiv, interpreter.InterpretedFunction):
        msg = ("triton was imported before the interpreter shim and without TRITON_INTERPRET=1; "
               "call kgate.testrun.interp.install() (or load `-p kgate.testrun.interp_plugin`) before anything imports triton")
        raise KgateError(msg)
    from triton.runtime.autotuner import Autotuner

    for owner, names in ((Autotuner, ("prune_configs",)),
                         (interpreter, ("ASTTransformer", "InterpreterBuilder", "ReduceScanOpInterface",
                                        "TensorHandle", "interpreter_semantic")),
                         (interpreter.InterpreterBuilder, ("binary_op", "unary_op", "ternary_op", "create_fma",
                                                           "create_dot", "cast_impl", "create_fp_to_fp"))):
        missing = [name for name in names if not hasattr(owner, name)]
        if missing:
            msg = f"triton's interpreter lacks {', '.join(missing)}; this triton is not one the shim supports"
            raise KgateError(msg)


def _no_benchmark(kernel_call: Callable[[], Any], quantiles: Any = None, **kwargs: Any) -> list[float]:
    # never runs the kernel: there is no device timer under the interpreter
    return [0.0, 0.0, 0.0]


def _patch_autotuner() -> None:
    from triton.runtime.autotuner import Autotuner

    original_init = Autotuner.__init__
    original_prune = Autotuner.prune_configs

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        # the on-disk tuning cache is keyed by the active driver's target
        self.cache_results = False
        self._do_bench = _no_benchmark
        # `do_bench` is a cached_property on 3.7-3.9; drop any cached driver benchmarker
        self.__dict__.pop("do_bench", None)
        self.perf_model = None

    def prune_configs(self: Any, kwargs: dict[str, Any]) -> list[Any]:
        return [choose_config(original_prune(self, kwargs), _policy)]

    Autotuner.__init__ = __init__
    Autotuner.prune_configs = prune_configs


def _is_range_call(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    # `range(...)` and `tl.range(...)`; `tl.static_range` keeps constexpr ints
    return (isinstance(func, ast.Name) and func.id == "range") or (isinstance(func, ast.Attribute)
                                                                    and func.attr == "range")


def _patch_loop_variables() -> None:
    from triton.runtime.interpreter import ASTTransformer

    previous = ASTTransformer.__dict__.get("visit_For")

    def visit_For(self: Any, node: ast.For) -> ast.AST:
        node = previous(self, node) if previous is not None else self.generic_visit(node)
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and _is_range_call(node.iter):
            name = node.target.id
            # `name = interpreter_semantic.to_tensor(name, False)`; the rewritten
            # function's globals already hold `interpreter_semantic`
            to_tensor = ast.Attribute(value=ast.Name(id="interpreter_semantic", ctx=ast.Load()), attr="to_tensor",
                                      ctx=ast.Load())
            rebind = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())],
                                value=ast.Call(func=to_tensor, args=[ast.Name(id=name, ctx=ast.Load()),
                                                                     ast.Constant(value=False)], keywords=[]))
            node.body.insert(0, ast.copy_location(rebind, node))
        return node

    ASTTransformer.visit_For = visit_For


def bf16_decode(bits: Any) -> Any:
    """bf16 bit patterns (uint16) to fp32: bf16 is the upper half of an fp32, so widening is exact."""
    import numpy as np

    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def bf16_encode(values: Any) -> Any:
    """fp32 values to bf16 bit patterns, rounded to nearest, ties to even (NaN: the quiet NaN 0x7FC0)."""
    import numpy as np

    x = np.asarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    # round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then drop 16 bits
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded.astype(np.uint16))


def _patch_bf16() -> None:
    import numpy as np
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    handle_type = interpreter.TensorHandle
    bf16 = tl.bfloat16

    def is_bf16(value: Any) -> bool:
        return isinstance(value, handle_type) and getattr(value.dtype, "scalar", value.dtype) == bf16

    decode, encode = bf16_decode, bf16_encode

    def truncate(values: Any) -> Any:
        x = np.asarray(values, dtype=np.float32)
        return np.where(np.isnan(x), np.uint16(0x7FC0), (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16))

    def to_f32_exact_for_bf16(data: Any) -> Any:
        # float64 and wide ints: round to fp32 "to odd" so the final bf16 rounding is not a double rounding
        if data.dtype == np.float32:
            return data
        wide = np.asarray(data, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            narrow = wide.astype(np.float32)
            inexact = narrow.astype(np.float64) != wide
            toward_zero = np.where(inexact & (np.abs(narrow.astype(np.float64)) > np.abs(wide)),
                                   np.nextafter(narrow, np.float32(0)), narrow)
        odd = np.where(inexact, toward_zero.view(np.uint32) | np.uint32(1), toward_zero.view(np.uint32))
        return odd.astype(np.uint32).view(np.float32)

    def as_f32(value: Any) -> Any:
        return handle_type(decode(value.data), tl.float32) if is_bf16(value) else value

    def as_bf16(result: Any) -> Any:
        if not isinstance(result, handle_type):
            return result
        if result.data.dtype == np.float32:
            return handle_type(encode(result.data), bf16)
        if result.data.dtype == np.bool_:
            return handle_type(result.data, tl.int1)
        return result

    def elementwise(original: Callable[..., Any], skip: Callable[..., bool] | None = None) -> Callable[..., Any]:
        def wrapped(self: Any, *args: Any) -> Any:
            if not any(is_bf16(a) for a in args) or (skip is not None and skip(*args)):
                return original(self, *args)
            return as_bf16(original(self, *(as_f32(a) for a in args)))

        wrapped.__name__ = getattr(original, "__name__", "wrapped")
        return wrapped

    builder.binary_op = elementwise(builder.binary_op)
    builder.unary_op = elementwise(builder.unary_op)
    # tl.where only moves bits; decoding it would cost time for nothing
    builder.ternary_op = elementwise(builder.ternary_op, skip=lambda lhs, rhs, other, op: op is np.where)
    builder.create_fma = elementwise(builder.create_fma)
    for name in ("create_rsqrt", "create_erf"):
        if hasattr(builder, name):
            setattr(builder, name, elementwise(getattr(builder, name)))

    original_dot = builder.create_dot

    def create_dot(self: Any, a: Any, b: Any, d: Any, *rest: Any) -> Any:
        if not (is_bf16(a) or is_bf16(b) or is_bf16(d)):
            return original_dot(self, a, b, d, *rest)
        out = original_dot(self, as_f32(a), as_f32(b), as_f32(d), *rest)
        # the accumulator's type is the result's type
        return as_bf16(out) if is_bf16(d) else out

    builder.create_dot = create_dot

    original_cast = builder.cast_impl

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        src_bf16, dst_bf16 = is_bf16(src), dst_type.scalar == bf16
        if src_bf16 == dst_bf16:
            return original_cast(self, src, dst_type)
        if src_bf16:
            return original_cast(self, as_f32(src), dst_type)
        return handle_type(encode(to_f32_exact_for_bf16(src.data)), bf16)

    builder.cast_impl = cast_impl

    original_fp_to_fp = builder.create_fp_to_fp
    standard_floats = (tl.float16, tl.float32, tl.float64)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        src_bf16, dst_bf16 = is_bf16(src), dst_type.scalar == bf16
        if src_bf16 == dst_bf16:
            return original_fp_to_fp(self, src, dst_type, rounding_mode)
        if src_bf16:
            if dst_type.scalar in standard_floats and rounding_mode != ir.ROUNDING_MODE.RTZ:
                return cast_impl(self, src, dst_type)
            return original_fp_to_fp(self, as_f32(src), dst_type, rounding_mode)
        if src.dtype.scalar in standard_floats:
            data = to_f32_exact_for_bf16(src.data)
        else:
            # fp8 sources: widen with Triton's own converter first (exact)
            data = original_fp_to_fp(self, src, tl.float32, None).data
        bits = truncate(data) if rounding_mode == ir.ROUNDING_MODE.RTZ else encode(data)
        return handle_type(bits, bf16)

    builder.create_fp_to_fp = create_fp_to_fp

    _patch_bf16_reductions(np, tl, interpreter, decode, encode)


def _patch_bf16_reductions(np: Any, tl: Any, interpreter: Any, decode: Callable[[Any], Any],
                           encode: Callable[[Any], Any]) -> None:
    handle_type = interpreter.TensorHandle
    bf16 = tl.bfloat16
    # the combine functions for which the interpreter calls a NumPy fast path on raw data
    fast_names = ("_sum_combine", "_prod_combine", "_elementwise_max", "_elementwise_min",
                  "_argmax_combine_tie_break_left", "_argmax_combine_tie_break_fast",
                  "_argmin_combine_tie_break_left", "_argmin_combine_tie_break_fast")
    fast = [getattr(tl.standard, name) for name in fast_names if hasattr(tl.standard, name)]
    interface = interpreter.ReduceScanOpInterface
    original_apply = interface.apply

    def retyped(t: Any, data: Any, dtype: Any) -> Any:
        ty = t.type.with_element_ty(dtype) if t.type.is_block() else dtype
        return tl.core.tensor(handle_type(data, dtype), ty)

    def apply(self: Any, input: Any) -> Any:
        if not isinstance(input, tuple):
            return apply(self, (input,))[0]
        flags = [isinstance(t, tl.core.tensor) and t.dtype.scalar == bf16 for t in input]
        if not any(flags) or not any(self.combine_fn is f for f in fast):
            return original_apply(self, input)
        widened = tuple(retyped(t, decode(t.handle.data), tl.float32) if f else t for t, f in zip(input, flags))
        out = original_apply(self, widened)
        return tuple(
            retyped(o, encode(o.handle.data), bf16) if i < len(flags) and flags[i] and o.dtype.scalar == tl.float32
            else o for i, o in enumerate(out))

    interface.apply = apply
