"""The interpreter gaps real kernels hit (kgate.testrun.interp_gaps) and "cannot run on CPU" as ``unavailable``.

Real Triton (the pinned interpreter) in fresh processes: kernels that take a Python float and call ``.to`` on it,
use libdevice math, build bf16 constants; a test whose kernel needs what the interpreter cannot do at all
(``tl.inline_asm_elementwise``) is recorded ``unavailable`` by kgate's outcome recorder, and a gate of only such
tests is ``unavailable``, never a failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_interp import _pytest, _python, _results, needs_triton

from kgate.testrun import interp_gaps, judge, runner

GAPS = '''
import json
from kgate.testrun import interp
record = interp.install()
import torch, triton, triton.language as tl
from triton.language.extra.libdevice import rsqrt, tanh, pow as lpow


@triton.jit
def norm(x_ptr, y_ptr, eps, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N)).to(tl.float32)
    var = tl.sum(x * x, axis=0) / N
    y = x * rsqrt(var + eps.to(tl.float32)) + tanh(x) + lpow(x, 2.0)
    tl.store(y_ptr + tl.arange(0, N), y.to(y_ptr.dtype.element_ty))


@triton.jit
def const_bf16(y_ptr, N: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, N), tl.full((N,), 1.5, tl.bfloat16))


x = torch.linspace(-2, 2, 8)
y = torch.empty(8)
norm[(1,)](x, y, 1e-5, N=8)
ref = x * torch.rsqrt((x * x).mean() + 1e-5) + torch.tanh(x) + x ** 2
xb, yb = x.bfloat16(), torch.empty(8, dtype=torch.bfloat16)
norm[(1,)](xb, yb, 1e-5, N=8)
refb = xb.float() * torch.rsqrt((xb.float() ** 2).mean() + 1e-5) + torch.tanh(xb.float()) + xb.float() ** 2
c = torch.empty(4, dtype=torch.bfloat16)
const_bf16[(1,)](c, N=4)
print("RESULTS " + json.dumps({"fixes": record["fixes"], "fp32_err": float((y - ref).abs().max()),
      "bf16_err": float((yb.float() - refb).abs().max()), "const": c.float().tolist()}))
'''

UNAVAILABLE_TEST = '''
import torch, triton, triton.language as tl


@triton.jit
def asm(x_ptr, y_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + tl.arange(0, N), y)


@triton.jit
def twice(x_ptr, y_ptr, N: tl.constexpr):
    tl.store(y_ptr + tl.arange(0, N), tl.load(x_ptr + tl.arange(0, N)) * 2)


def test_needs_inline_asm():
    x = torch.ones(4)
    y = torch.empty(4)
    asm[(1,)](x, y, N=4)
    assert torch.equal(x, y)


def test_runs_here():
    x = torch.ones(4)
    y = torch.empty(4)
    twice[(1,)](x, y, N=4)
    assert torch.equal(y, x * 2)


def test_a_real_failure_stays_one():
    assert 1 + 1 == 3
'''


@needs_triton
def test_float_arguments_libdevice_and_bf16_constants_run_under_the_interpreter(tmp_path: Path) -> None:
    res = _results(_python(GAPS, cwd=tmp_path))
    assert {"float_scalar_args", "libdevice_math", "bf16_constant"} <= set(res["fixes"])
    assert res["fp32_err"] < 1e-5, "eps.to() on a float argument and libdevice rsqrt/tanh/pow compute in fp32"
    assert res["bf16_err"] < 0.05, "bf16 operands are computed in fp32 and rounded back"
    assert res["const"] == [1.5, 1.5, 1.5, 1.5]


@needs_triton
def test_a_test_the_interpreter_cannot_run_is_unavailable_not_failed(tmp_path: Path) -> None:
    (tmp_path / "test_gaps.py").write_text(UNAVAILABLE_TEST)
    out = tmp_path / "outcomes.json"
    proc = _pytest(tmp_path, "-p", "kgate.testrun.outcomes_plugin", "--kgate-outcomes", str(out), "test_gaps.py")
    tests = {k.split("::")[-1]: v for k, v in json.loads(out.read_text())["tests"].items()}
    assert tests["test_needs_inline_asm"]["outcome"] == "unavailable"
    assert interp_gaps.UNAVAILABLE in tests["test_needs_inline_asm"]["message"]
    assert "not supported in interpreter mode" in tests["test_needs_inline_asm"]["message"]
    assert tests["test_runs_here"]["outcome"] == "passed"
    assert tests["test_a_real_failure_stays_one"]["outcome"] == "failed", "an assertion is never 'cannot run here'"
    assert proc.returncode == 1


def gate_run(outcomes: dict[str, str]) -> runner.GateRun:
    tests = {i: {"nodeid": i, "outcome": o, "duration_s": 0.1,
                 "message": f"{interp_gaps.UNAVAILABLE} InterpreterError: x" if o == "unavailable" else None}
             for i, o in outcomes.items()}
    return runner.GateRun(command=["pytest"], exit_code=0, wall_s=1.0, timed_out=False, crashed=False,
                          collected=list(outcomes), deselected=[], tests=tests, collect_errors=[], running_at_end=None,
                          imports={}, env={}, log="l", outcomes_path="o", junit_path="j")


class TestJudge:
    def test_only_unavailable_tests_make_the_gate_unavailable(self) -> None:
        g = judge.judge(gate_run({"t::a": "unavailable", "t::b": "unavailable"}), {}, "e", "baseline_gate")
        assert g.status == "unavailable" and g.detail.startswith("cannot run on CPU (2 test(s)")

    def test_some_unavailable_tests_beside_passing_ones_pass_and_are_named(self) -> None:
        g = judge.judge(gate_run({"t::a": "unavailable", "t::b": "passed"}), {}, "e", "baseline_gate")
        assert g.status == "pass" and "t::a" in g.detail and "InterpreterError" in g.detail


def test_interpreter_failure_reads_the_exception_chain() -> None:
    class InterpreterError(Exception):
        pass

    InterpreterError.__module__ = "triton.runtime.errors"
    try:
        try:
            raise InterpreterError("AttributeError(\"'float' object has no attribute 'to'\")")
        except InterpreterError as inner:
            raise RuntimeError("row r fwd: wrapped") from inner
    except RuntimeError as outer:
        assert interp_gaps.interpreter_failure(outer).startswith("InterpreterError: AttributeError")
    assert interp_gaps.interpreter_failure(ValueError("a bug of ours")) is None
    assert interp_gaps.interpreter_failure(NotImplementedError("raised by the target itself")) is None


@pytest.mark.parametrize("missing", [True, False])
def test_get_bf16_is_added_only_where_the_builder_lacks_it(missing: bool) -> None:
    pytest.importorskip("triton")
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    saved = builder.__dict__.get("get_bf16")
    try:
        if missing and saved is not None:
            delattr(builder, "get_bf16")
        from kgate.testrun import interp

        interp_gaps._patch_bf16_constant(interp.bf16_encode)
        assert ("get_bf16" in builder.__dict__) and (builder.__dict__["get_bf16"] is not saved) == missing
        handle = interpreter.interpreter_builder.get_bf16(1.5)
        assert float(interp.bf16_decode(handle.data)[0]) == 1.5
    finally:
        if saved is not None:
            builder.get_bf16 = saved
