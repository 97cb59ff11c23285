"""Candidate against BENCH_BASE on the same inputs: every output and gradient compared.

Method: ``candidate_gate`` starts one worker per arm (BENCH_BASE's worktree
and the candidate's, the shared gate Triton cache: nothing is timed) and asks
each for one fwdbwd call of ``measure.callable`` on every row of
``dispatch.rows`` (``dispatch.cpu_rows`` on CPU: ``kgate.measure.rows.dispatch_rows``), inputs drawn from the row's
seed (their hashes must be equal across arms), pipelined: the candidate runs
row i while BENCH_BASE runs row i+1 (see :func:`_pipelined`). Each arm saves its tensors;
the stage loads both and reports, per row and tensor, whether the bytes are
identical (sha256) and the max absolute difference in float64. A row whose
``dispatch`` class the candidate does not enable runs the fallback: it must
be bit-identical, else the gate fails with the row and tensors.

Outside the frozen tests the candidate's numbers are judged against the
campaign's reference (``reference`` section, ``kgate.measure.reference``):
on every row and tensor, its error against the reference (computed in
float64 on the same inputs and output gradients) may be at most
``reference.error_ratio_max`` times BENCH_BASE's (``outputs_vs_bench_base``
fails otherwise, naming the row and tensor). So a candidate that is right
only under pytest, where the frozen tests look, fails here, where nothing
of pytest is loaded. Without a reference the differences on enabled classes
are reported, not judged (the frozen tests judge them against their
tolerances).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kgate.errors import ConfigError
from kgate.measure import reference
from kgate.measure.arms import Arm, Deadline, ask_all, compare_hashes, start_arms
from kgate.measure.rows import Row, load_spec
from kgate.records import Gate

#: The share of the stage time limit the output comparison's workers get (the rest is the gate run's).
OUTPUTS_SHARE = 0.3


def compare(ctx: Any, wt_base: Path, wt_cand: Path, rows: list[Row], enabled: tuple[str, ...]) -> dict[str, Any]:
    """Run both arms on ``rows``; return per-row results (see the module docstring)."""
    c, gpu = ctx.campaign, ctx.gpu
    spec = load_spec(c, gpu)
    if spec is None:
        raise ConfigError(f"campaign {c.name}: key 'dispatch.rows' needs a measure section (the callable)")
    cache = ctx.triton_cache
    deadline = Deadline(ctx.deadline_s(OUTPUTS_SHARE))
    out_dir = ctx.out_dir / "outputs"
    out_dir.mkdir(parents=True, exist_ok=True)
    ref = reference.load(c.data)
    arms = start_arms(ctx, spec, [("base", wt_base, cache), ("cand", wt_cand, cache)], deadline)
    results = []
    try:
        prepared = ask_all(arms, "prepare", rows=[row.values for row in rows])
        for row in rows:
            compare_hashes("input", row.name, {a: prepared[a][row.name]["tensors"] for a in prepared})
        evaluator = reference.Evaluator(ref, spec, _device(arms[0].info), wt_base) if ref is not None else None
        files = {(row.name, a.name): out_dir / f"{row.name}.{a.name}.pt" for row in rows for a in arms}
        for row, got in _pipelined(arms, rows, files):
            results.append(_compare_row(row, got, files, enabled, evaluator, prepared["base"][row.name]["tensors"]))
        ask_all(arms, "release", rows=[row.name for row in rows])
    finally:
        for a in arms:
            a.close()
    out: dict[str, Any] = {"rows": results, "workers": {a.name: a.info for a in arms}}
    if ref is not None:
        out["reference"] = {"callable": ref.spec, "error_ratio_max": ref.error_ratio_max,
                            "base_error_max": ref.base_error_max, "method": "relative RMS error in float64 "
                            "(kgate.measure.reference); candidate <= error_ratio_max x max(BENCH_BASE, unit roundoff)"}
    return out


def _device(info: dict[str, Any]) -> str:
    """The torch device the arms ran on, from a worker's init facts."""
    dev = info.get("device") or {}
    return f"cuda:{dev.get('index') or 0}" if dev.get("kind") == "cuda" else "cpu"


def _pipelined(arms: list[Arm], rows: list[Row], files: dict[tuple[str, str], Path]):
    """Yield ``(row, answers by arm)`` with the candidate on row i while BENCH_BASE runs row i+1.

    Compiling dominates a cold run and each arm compiles in its own process, so the two overlap. BENCH_BASE
    always reaches a row first: an autotuned kernel the two arms share is tuned (and its pick written to the
    shared cache) by BENCH_BASE before the candidate needs it, as in a sequential run.
    """
    base, cand = arms

    def ask(arm: Arm, row: Row) -> None:
        arm.send("outputs", row=row.name, path=str(files[(row.name, arm.name)].resolve()))

    if rows:
        ask(base, rows[0])
    for i, row in enumerate(rows):
        got = {"base": base.receive()}
        ask(cand, row)
        if i + 1 < len(rows):
            ask(base, rows[i + 1])
        got["cand"] = cand.receive()
        yield row, got


def _compare_row(row: Row, got: dict[str, Any], files: dict[tuple[str, str], Path], enabled: tuple[str, ...],
                 evaluator: reference.Evaluator | None, input_hashes: dict[str, str]) -> dict[str, Any]:
    """One row's tensors, both arms, compared byte for byte and in float64, and each arm against the reference
    when the campaign has one; the saved files are removed."""
    import torch

    base_t = torch.load(files[(row.name, "base")])
    cand_t = torch.load(files[(row.name, "cand")])
    tensors = []
    for name in sorted(set(base_t) | set(cand_t)):
        a, b = base_t.get(name), cand_t.get(name)
        same = got["base"]["sha256"].get(name) == got["cand"]["sha256"].get(name)
        if a is None or b is None or a.shape != b.shape:
            tensors.append({"tensor": name, "identical": False, "max_abs_diff": None,
                            "note": "missing or different shape in one arm"})
            continue
        diff = (a.double() - b.double()).abs()
        finite = torch.isfinite(diff)
        max_abs = float(diff[finite].max()) if bool(finite.any()) else 0.0
        tensors.append({"tensor": name, "identical": same, "max_abs_diff": max_abs,
                        "nonfinite_mismatch": int((~finite).sum()), "dtype": str(a.dtype)})
    judged: dict[str, Any] | None = None
    if evaluator is not None:
        judged = evaluator.errors(row, input_hashes, {"base": base_t, "cand": cand_t})
        judged["failures"] = reference.judge(evaluator.ref, row.name, judged)
        judged["tensors"] = {n: {k: (v if math.isfinite(v) else "inf") for k, v in e.items()}
                             for n, e in judged["tensors"].items()}
    for arm in ("base", "cand"):
        files[(row.name, arm)].unlink(missing_ok=True)
    cls = row.values["dispatch"]
    return {"row": row.name, "dispatch": cls, "path": "optimized" if cls in enabled else "fallback",
            "identical": all(t["identical"] for t in tensors), "tensors": tensors, "reference": judged}


def gates(result: dict[str, Any] | None, reason: str | None, evidence: str) -> list[Gate]:
    """``outputs_vs_bench_base`` (judged against the campaign's reference, reported without one) and
    ``fallback_bit_identical`` (judged)."""
    if result is None:
        return [Gate("outputs_vs_bench_base", "max |candidate - BENCH_BASE| per output and gradient", reason, "skip"),
                Gate("fallback_bit_identical", "rows of classes the candidate does not enable are bit-identical",
                     reason, "skip")]
    rows = result["rows"]
    ref = result.get("reference")
    worst = []
    for r in rows:
        text = f"{r['row']} ({r['path']}): max {max((t['max_abs_diff'] or 0.0) for t in r['tensors']):.3g}"
        ratios = [e.get("ratio") for e in ((r.get("reference") or {}).get("tensors") or {}).values()]
        if ratios:
            text += f", error vs reference {max(_num(x) for x in ratios):.3g}x BENCH_BASE's"
        worst.append(text)
    fallback = [r for r in rows if r["path"] == "fallback"]
    bad = [f"{r['row']} ({r['dispatch']}): " + ", ".join(
        f"{t['tensor']} max |diff| {t['max_abs_diff']}" for t in r["tensors"] if not t["identical"])
        for r in fallback if not r["identical"]]
    if ref is None:
        outputs = Gate("outputs_vs_bench_base", "max |candidate - BENCH_BASE| per output and gradient (reported: the "
                       "campaign names no reference)", "; ".join(worst) or "no rows", "pass", evidence=evidence)
    else:
        fails = [f for r in rows for f in ((r.get("reference") or {}).get("failures") or [])]
        outputs = Gate("outputs_vs_bench_base", f"on every row and output/gradient, the candidate's error against "
                       f"{ref['callable']} <= {ref['error_ratio_max']:g}x BENCH_BASE's",
                       "; ".join(worst) or "no rows", "fail" if fails else "pass", evidence=evidence,
                       detail="; ".join(fails[:10]) if fails else None)
    return [outputs,
            Gate("fallback_bit_identical", "rows of classes the candidate does not enable are bit-identical",
                 f"{len(fallback) - len(bad)}/{len(fallback)} fallback row(s) identical",
                 "fail" if bad else ("pass" if fallback else "skip"), evidence=evidence,
                 detail="; ".join(bad) if bad else (None if fallback else "no fallback row in dispatch rows"))]


def _num(x: Any) -> float:
    return math.inf if x == "inf" or x is None else float(x)
