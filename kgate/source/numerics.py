"""Numeric settings a candidate's diff introduces or removes (``candidate_build``).

Method: for every changed Python file, take a census of *explicit numeric
settings* in the BENCH_BASE version and in the candidate's version, and
compare the two as multisets of ``(rule, normalized text)``. A setting that
appears more often, or less often, in the candidate is flagged with its
rule, line and text. Removals count: deleting ``input_precision="ieee"``
from a ``tl.dot`` switches that dot to Triton's TF32 default, and deleting
an ``allow_tf32=False`` does the same in PyTorch.

The rules (``RULES``) are kgate's, generic over Triton and PyTorch code:
dot input precision and TF32 switches, process-wide float32 matmul
precision, fast-math and fused multiply-add switches, approximate math
functions, lower-precision accumulators and ``out_dtype``, imprecise
accumulation, and numeric tolerances written in code. Campaigns add their
own via ``candidate.forbid_patterns`` (added lines only).

A setting passed as a keyword argument of one call (``CALL_BOUND``:
``allow_tf32``, ``input_precision``, ``out_dtype``,
``max_num_imprecise_acc``) belongs to that call: when the candidate removes
the setting together with the call (the calls of that callee that carry it
and all calls of that callee both fall by at least as many, read
with Python's ``ast``), no call lost its setting and nothing is flagged; the
removal is reported as a note (e.g. a masked ``tl.dot`` replaced by
``tl.cumsum``). A call that stays and loses its keyword is flagged.

Limits: a text census, not a type analysis. A new ``tl.dot`` with no
explicit precision inherits the kernel's default and is not flagged by
itself (the frozen gate and the BENCH_BASE output comparison judge its
numbers); a setting hidden behind a variable or built from strings is not
seen here (the environment comparison of the gate stages catches the
environment variable route).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass

RULES: dict[str, str] = {
    "dot_precision": r"\b(input_precision|allow_tf32)\s*=\s*[^,)\n]+",
    "tf32_switch": r"\b(allow_tf32\s*=\s*\w+|set_float32_matmul_precision\s*\([^)\n]*\)|"
                   r"float32_matmul_precision\s*=\s*[^\n]+|TRITON_F32_DEFAULT[^\n]*)",
    "fast_math": r"\b(enable_fp_fusion\s*=\s*\w+|fast_?math\w*(\s*=\s*\w+)?|"
                 r"(tl|libdevice|math)\.\w*fast_\w+|(tl|libdevice|math)\.\w*approx\w*)",
    "low_precision_accumulator": r"\b(out_dtype\s*=\s*[\w.]+|max_num_imprecise_acc\s*=\s*[^,)\n]+|"
                                 r"tl\.zeros\([^)\n]*dtype\s*=\s*tl\.(float16|bfloat16|float8\w*)\))",
    # a number written as the value, also as an annotated default (``eps: float = 1e-6``); a name passed on
    # (``eps=eps``) is no setting: its value is set where it is written
    "tolerance": r"\b(atol|rtol|eps|tol)\s*(?::\s*[\w.]+(?:\[[^\]=\n]*\])?\s*)?=\s*"
                 r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])",
}
_COMPILED = {name: re.compile(rx) for name, rx in RULES.items()}
#: keyword arguments that set the numerics of the one call they are passed to
CALL_BOUND = ("allow_tf32", "input_precision", "out_dtype", "max_num_imprecise_acc")
_BOUND_TEXT = re.compile(rf"^({'|'.join(CALL_BOUND)})=(.+)$")


@dataclass(frozen=True, slots=True)
class Setting:
    """One explicit numeric setting found in a file."""

    rule: str
    text: str
    line: int


def census(source: str) -> list[Setting]:
    """Every explicit numeric setting in ``source`` (comments excluded)."""
    out = []
    for n, raw in enumerate(source.splitlines(), start=1):
        code = raw.split("#", 1)[0]
        for rule, rx in _COMPILED.items():
            for m in rx.finditer(code):
                out.append(Setting(rule, re.sub(r"\s+", "", m.group(0)), n))
    return out


@dataclass(frozen=True, slots=True)
class Calls:
    """Calls per callee, and calls per (callee, ``kw=value``) for the ``CALL_BOUND`` keywords (None: no parse)."""

    total: Counter[str]
    bound: Counter[tuple[str, str]]


def calls(source: str) -> Calls | None:
    """The calls of ``source`` and the call-bound settings they carry; None when it is not valid Python."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    total: Counter[str] = Counter()
    bound: Counter[tuple[str, str]] = Counter()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = ast.unparse(node.func)
        total[callee] += 1
        for kw in node.keywords:
            if kw.arg in CALL_BOUND:
                value = re.sub(r"\s+", "", ast.get_source_segment(source, kw.value) or ast.unparse(kw.value))
                bound[(callee, f"{kw.arg}={value}")] += 1
    return Calls(total, bound)


def gone_with_calls(text: str, removed: int, before: Calls | None, after: Calls | None) -> tuple[int, list[str]]:
    """How many of ``removed`` removals of the call-bound setting ``text`` left together with their calls."""
    if before is None or after is None or not _BOUND_TEXT.match(text):
        return 0, []
    left, callees = removed, []
    for (callee, t), n in sorted(before.bound.items()):
        if t != text or left == 0:
            continue
        k = min(left, n - after.bound[(callee, t)], before.total[callee] - after.total[callee])
        if k > 0:
            left -= k
            callees.append(f"{k} {callee} call(s)")
    return removed - left, callees


@dataclass(frozen=True, slots=True)
class NumericDiff:
    """``flagged``: settings added, or removed from code that stays; ``notes``: settings removed with their calls."""

    flagged: tuple[str, ...]
    notes: tuple[str, ...]


def diff(base: str | None, cand: str | None, path: str) -> NumericDiff:
    """Settings whose count differs between the two versions of ``path`` (module docstring), as messages."""
    before = census(base or "")
    after = census(cand or "")
    cb = Counter((s.rule, s.text) for s in before)
    ca = Counter((s.rule, s.text) for s in after)
    calls_b, calls_a = calls(base or ""), calls(cand or "")
    msgs, notes = [], []
    for key in sorted(set(cb) | set(ca)):
        delta = ca[key] - cb[key]
        if delta > 0:
            lines = [s.line for s in after if (s.rule, s.text) == key]
            msgs.append(f"{path}:{lines[-1]}: {key[0]} added ({key[1]}, {cb[key]} -> {ca[key]})")
        elif delta < 0:
            lines = [s.line for s in before if (s.rule, s.text) == key]
            gone, where = gone_with_calls(key[1], -delta, calls_b, calls_a)
            if gone:
                notes.append(f"{path}:{lines[-1]} (BENCH_BASE): {key[0]} {key[1]} removed with its call "
                             f"({', '.join(where)} fewer; no remaining call lost it)")
            if gone < -delta:
                msgs.append(f"{path}:{lines[-1]} (BENCH_BASE): {key[0]} removed ({key[1]}, {cb[key]} -> {ca[key]}"
                            + (f"; {gone} of them with their calls" if gone else "") + ")")
    return NumericDiff(tuple(msgs), tuple(notes))


def compare(base: str | None, cand: str | None, path: str) -> list[str]:
    """The flagged settings of ``diff`` (added, or removed from code that stays), as messages."""
    return list(diff(base, cand, path).flagged)
